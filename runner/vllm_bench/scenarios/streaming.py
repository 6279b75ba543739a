"""Scenario `streaming`: what a user of a streamed answer feels.

--streaming-requests completions requests at --streaming-concurrency (1: one at a time), each
streaming --output-tokens tokens. Per request: TTFT (send to first text chunk), the
inter-token latencies (gaps between chunk arrivals) and TPOT ((latency - TTFT) / (tokens -
1)); the arrival time of every chunk is kept for the timeline plot. With --preset lab2 the
requests are the lab's streaming prompt, and `lab` holds its figures of the first (TTFT,
total, tokens, tokens / total).
"""

from __future__ import annotations

from vllm_bench.client import Completion, Request
from vllm_bench.scenarios.base import (
    Context,
    LabFigures,
    ScenarioResult,
    empty_counts,
    rounded,
    run_requests,
)
from vllm_bench.stats import distribution, percentile


def _requests(ctx: Context, n: int) -> list[Request]:
    """n requests: the preset's lab's streaming prompt (each request the same), the lab's
    batching prompts where it has no streaming step, or random words."""
    preset = ctx.preset
    if preset is None:
        return [ctx.request(prompt=p) for p in ctx.completion_prompts(n)]
    if preset.streaming is None:
        return [ctx.preset_request(p, preset.batching.sampling) for p in preset.cycled(n)]
    step = preset.streaming
    return [
        ctx.preset_request(step.prompts[i % len(step.prompts)], step.sampling) for i in range(n)
    ]


def _lab_figures(ctx: Context, result: ScenarioResult, first: Completion | None) -> None:
    """The lab's figures of its one streamed request (the phase's first)."""
    preset = ctx.preset
    if preset is None:
        return
    if preset.streaming is None:
        LabFigures(
            preset,
            result,
            f"{preset.lab} has no streaming step: the runner's own, on the lab's batching prompts",
        )
        return
    lab = LabFigures(preset, result)
    if first is None:
        return
    source = preset.streaming.source
    lab.add(
        "ttftMs",
        None if first.ttft is None else round(first.ttft * 1000, 3),
        f"the lab's streamed request ({source}): send to the first chunk with text, in ms",
        beside="ttftP50Seconds",
    )
    lab.add("totalSeconds", rounded(first.latency), "send to the last chunk")
    lab.add("tokens", first.output_tokens, "its output tokens")
    lab.add(
        "tokensPerSecond",
        rounded(first.output_tokens / first.latency, 3) if first.latency > 0 else None,
        "tokens / total time",
        beside="outputTokensPerSecond",
    )


async def run(ctx: Context, result: ScenarioResult) -> None:
    cfg = ctx.config
    requests = _requests(ctx, cfg.streaming_requests)
    try:
        phase = await run_requests(
            ctx, requests, cfg.streaming_concurrency, result, "stream", token_times=True
        )
    finally:
        result.samples.sort(key=lambda r: r["index"])
        result.summary.update(empty_counts(result.samples))
    _lab_figures(ctx, result, phase.completions[0] if phase.completions else None)
    ttfts = [c.ttft for c in phase.completions if c.ttft is not None]
    itls = [gap for c in phase.completions for gap in c.itls]
    tpots = [t for c in phase.completions if (t := c.tpot) is not None]
    for name, values in (("ttft", ttfts), ("itl", itls), ("tpot", tpots)):
        result.summary[f"{name}P50Seconds"] = rounded(percentile(values, 50))
        result.summary[f"{name}P95Seconds"] = rounded(percentile(values, 95))
        result.summary[f"{name}P99Seconds"] = rounded(percentile(values, 99))
    result.summary["outputTokensPerSecond"] = rounded(phase.output_tokens_per_second, 3)
    result.extra["distributions"] = {
        "ttftSeconds": distribution(ttfts),
        "itlSeconds": distribution(itls),
        "tpotSeconds": distribution(tpots),
    }
