"""Scenario `streaming`: what a user of a streamed answer feels.

--streaming-requests completions requests at --streaming-concurrency (1: one at a time), each
streaming --output-tokens tokens. Per request: TTFT (send to first text chunk), the
inter-token latencies (gaps between chunk arrivals) and TPOT ((latency - TTFT) / (tokens -
1)); the arrival time of every chunk is kept for the timeline plot.
"""

from __future__ import annotations

from vllm_bench.scenarios.base import Context, ScenarioResult, empty_counts, rounded, run_requests
from vllm_bench.stats import distribution, percentile


async def run(ctx: Context, result: ScenarioResult) -> None:
    cfg = ctx.config
    requests = [ctx.request(prompt=p) for p in ctx.completion_prompts(cfg.streaming_requests)]
    try:
        phase = await run_requests(
            ctx, requests, cfg.streaming_concurrency, result, "stream", token_times=True
        )
    finally:
        result.samples.sort(key=lambda r: r["index"])
        result.summary.update(empty_counts(result.samples))
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
