"""Scenario `prefix`: what automatic prefix caching buys, and what breaks it.

Chat requests share a long system prompt (an instruction plus few-shot examples, about
--prefix-tokens long, as in the reference lab; with --preset, the lab's own: presets.py) and
differ only in a short user question.
Sent one at a time, so TTFT is the server's prefill and nothing else:
- cold: the shared prefix is not cached. With POST /reset_prefix_cache (vLLM with
  VLLM_SERVER_DEV_MODE=1) the cache is reset before each request ("reset"); otherwise each
  request's system prompt starts with never-seen words ("unseen-prefix").
- warm: after one warm-up request, the same system prompt: its blocks are cache hits.
- reordered: the same instruction and examples in another order (rotated); token blocks are
  hashed as a chain from the start, so a different first block means no hits at all. This is
  why shared prompt parts must be canonical (same content, same order, byte for byte).
vllm:prefix_cache_hits and vllm:prefix_cache_queries (tokens) are read around each phase.

With --preset lab1, first the lab's own step (phases lab-cold, lab-warm): a prefix-cache reset,
then its one prompt twice, cold then warm (figures by the lab's definitions in `lab`); the
phases above then send that same completion-style prompt (the reordered one with its
paragraphs rotated). A lab without a prefix step gets the synthetic workload.
"""

from __future__ import annotations

from collections.abc import Callable

from vllm_bench.client import BenchError, Request
from vllm_bench.metrics import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES, counter_delta
from vllm_bench.presets import PrefixStep
from vllm_bench.scenarios.base import (
    Context,
    LabFigures,
    PhaseResult,
    ScenarioResult,
    empty_counts,
    rounded,
    run_requests,
)

OUTPUT_TOKENS = 8  # TTFT is the point; a few tokens keep the requests cheap
TAIL_TOKENS = 16


def _request(ctx: Context, system: str, i: int) -> Request:
    """The i-th request of a phase. With a preset whose lab has a prefix step: the lab's
    request (its completion-style prompt: `system` then the lab's user turn, its sampling);
    otherwise a chat request: `system`, then a question of random words."""
    preset = ctx.preset
    step = preset.prefix if preset else None
    if step is not None:
        return ctx.preset_request(system + step.question, step.sampling)
    question = f"Question: {ctx.prompts.words(TAIL_TOKENS)}?"
    messages = ({"role": "system", "content": system}, {"role": "user", "content": question})
    return ctx.request(messages=messages, max_tokens=OUTPUT_TOKENS)


async def _lab_procedure(
    ctx: Context, result: ScenarioResult, lab: LabFigures, step: PrefixStep
) -> None:
    """Lab 1's prefix step as it runs it: reset the prefix cache (where the server offers it
    and --prefix-cold-method allows it), then its one prompt twice, cold then warm."""
    reset = False
    if ctx.config.prefix_cold_method != "unseen-prefix":
        reset = await ctx.client.reset_prefix_cache()
    request = ctx.preset_request(step.prompt, step.sampling)
    cold = await run_requests(ctx, [request], 1, result, "lab-cold")
    warm = await run_requests(ctx, [request], 1, result, "lab-warm")
    lab.add("coldAfterReset", reset, "the prefix cache was reset before the cold request")
    lab.add(
        "coldSeconds",
        rounded(cold.wall_seconds),
        f"the lab's prompt ({step.source}) right after the reset: its wall time",
        beside="coldTtftP50Seconds",
    )
    lab.add(
        "warmSeconds",
        rounded(warm.wall_seconds),
        "the same prompt again, right after: its wall time",
        beside="warmTtftP50Seconds",
    )
    lab.add(
        "speedup",
        rounded(cold.wall_seconds / warm.wall_seconds, 3) if warm.wall_seconds > 0 else None,
        "cold / warm wall time",
        beside="ttftSpeedup",
    )
    lab.add(
        "sharedPrefixTokens",
        step.estimated_prefix_tokens,
        "len(shared_prefix) // 4, the lab's estimate",
        beside="promptTokens",
    )


async def _cold_method(ctx: Context) -> str:
    wanted = ctx.config.prefix_cold_method
    if wanted == "unseen-prefix":
        return wanted
    if await ctx.client.reset_prefix_cache():
        return "reset"
    if wanted == "reset":
        raise BenchError(
            "unsupported",
            "--prefix-cold-method reset: the server does not offer POST /reset_prefix_cache "
            "(vLLM serves it only with VLLM_SERVER_DEV_MODE=1); use auto or unseen-prefix",
        )
    return "unseen-prefix"


async def _counted(
    ctx: Context, result: ScenarioResult, phase: str, requests: list[Request], *, reset: bool
) -> tuple[PhaseResult | None, float | None, float | None]:
    """Sends the requests one by one (resetting the prefix cache before each if asked) and
    returns the phase with the growth of prefix_cache_hits and _queries across it."""
    before = await ctx.client.metrics()
    phases: list[PhaseResult] = []
    for request in requests:
        if reset and not await ctx.client.reset_prefix_cache():
            raise BenchError("protocol", "POST /reset_prefix_cache stopped succeeding mid-run")
        phases.append(await run_requests(ctx, [request], 1, result, phase))
    for i, record in enumerate(r for r in result.samples if r["phase"] == phase):
        record["index"] = i
    after = await ctx.client.metrics()
    merged = (
        PhaseResult(
            [c for p in phases for c in p.completions],
            sum(p.wall_seconds for p in phases),
            phases[0].started,
        )
        if phases
        else None
    )
    return (
        merged,
        counter_delta(before, after, PREFIX_CACHE_HITS),
        counter_delta(before, after, PREFIX_CACHE_QUERIES),
    )


async def run(ctx: Context, result: ScenarioResult) -> None:
    cfg = ctx.config
    s = result.summary
    preset = ctx.preset
    step = preset.prefix if preset else None
    join: Callable[[list[str]], str]
    if step is not None:
        segments = step.segments()
        join = step.join
    else:
        segments = ctx.prompts.shared_prefix(cfg.prefix_tokens)
        join = "\n".join
    canonical = join(segments)
    s["prefixCachingEnabled"] = ctx.cache_config.get("enable_prefix_caching") == "True"
    if preset is not None:
        lab = LabFigures(
            preset,
            result,
            None
            if step
            else f"{preset.lab} has no prefix-caching step: the runner's synthetic workload",
        )
        if step is not None:
            await _lab_procedure(ctx, result, lab, step)

    method = await _cold_method(ctx)
    s["coldMethod"] = method
    cold_requests = [
        _request(
            ctx, canonical if method == "reset" else f"{ctx.prompts.words(24)}\n{canonical}", i
        )
        for i in range(cfg.prefix_requests)
    ]
    cold, cold_hits, _ = await _counted(ctx, result, "cold", cold_requests, reset=method == "reset")
    s["coldTtftP50Seconds"] = rounded(cold.ttft(50) if cold else None)
    s["coldHitsDelta"] = cold_hits

    await run_requests(ctx, [_request(ctx, canonical, 0)], 1, result, "warm-up")
    warm_requests = [_request(ctx, canonical, i) for i in range(cfg.prefix_requests)]
    warm, hits, queries = await _counted(ctx, result, "warm", warm_requests, reset=False)
    s["warmTtftP50Seconds"] = rounded(warm.ttft(50) if warm else None)
    cold_p50, warm_p50 = s["coldTtftP50Seconds"], s["warmTtftP50Seconds"]
    s["ttftSpeedup"] = rounded(cold_p50 / warm_p50, 3) if cold_p50 and warm_p50 else None
    s["prefixCacheHitsDelta"] = hits
    s["prefixCacheQueriesDelta"] = queries
    s["hitRate"] = rounded(hits / queries, 4) if hits is not None and queries else None
    if warm and warm.completions:
        s["promptTokens"] = warm.completions[0].prompt_tokens

    # rotations 1..n-1 of the segments: each starts with a different example, none canonical
    rotations = [segments[i:] + segments[:i] for i in range(1, len(segments))]
    reordered_requests = [
        _request(ctx, join(rotations[i % len(rotations)]), i)
        for i in range(min(cfg.prefix_requests, len(rotations)))
    ]
    reordered, reordered_hits, _ = await _counted(
        ctx, result, "reordered", reordered_requests, reset=False
    )
    s["reorderedTtftP50Seconds"] = rounded(reordered.ttft(50) if reordered else None)
    s["reorderedHitsDelta"] = reordered_hits
    s.update(empty_counts(result.samples))
