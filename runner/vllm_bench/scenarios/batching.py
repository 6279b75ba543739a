"""Scenario `batching`: what continuous batching buys.

Three phases of requests with the same shape (input about --input-tokens, exactly
--output-tokens out: ignore_eos) and fresh prompts each (so the prefix cache never helps):
a serial baseline (one request after another), the same number of requests submitted at
once, and a concurrency ladder 1, 2, 4, ... up to --max-concurrency (ladder_requests per
level). Reported: output tokens/s, requests/s, latency percentiles, the speed-up of concurrent
over serial, the knee of the ladder (stats.knee) and the throughput there (the run's
headline: where the ladder says throughput saturates, not a fixed number of requests), and
from /metrics the preemptions during the scenario and the peak queue depth, polled while the
ladder runs (its top level is meant to go past the server's --max-num-seqs).
"""

from __future__ import annotations

from typing import Any

from vllm_bench.client import BenchError, Request
from vllm_bench.metrics import POLLED, PREEMPTIONS, MetricsPoller, counter_delta
from vllm_bench.scenarios.base import (
    Context,
    PhaseResult,
    ScenarioResult,
    empty_counts,
    rounded,
    run_requests,
)
from vllm_bench.stats import knee


def ladder_levels(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... and max_concurrency itself."""
    levels, c = [], 1
    while c < max_concurrency:
        levels.append(c)
        c *= 2
    return [*levels, max(1, max_concurrency)]


def ladder_requests(concurrency: int) -> int:
    """Requests sent at one level of the ladder: twice the concurrency, so that the level
    runs full for a while, and at least 8 for a stable median."""
    return max(8, 2 * concurrency)


def _requests(ctx: Context, n: int) -> list[Request]:
    return [ctx.request(prompt=prompt) for prompt in ctx.completion_prompts(n)]


def _point(phase: PhaseResult, concurrency: int) -> dict[str, float | int | None]:
    return {
        "concurrency": concurrency,
        "requests": len(phase.completions),
        "peakInFlight": phase.peak_in_flight,
        "outputTokensPerSecond": rounded(phase.output_tokens_per_second, 3),
        "requestsPerSecond": rounded(phase.requests_per_second, 4),
        "latencyP50Seconds": rounded(phase.latency(50)),
        "latencyP95Seconds": rounded(phase.latency(95)),
    }


def saturation_point(ladder: list[dict[str, Any]]) -> dict[str, Any]:
    """The ladder point the headline throughput is taken at: its knee (stats.knee), the
    throughput measured there, and whether the ladder saturated at all (False: throughput
    still grew as fast as latency at the top level, so the knee is the top of the ladder and
    a longer ladder would report more)."""
    points = [
        (p["concurrency"], p["outputTokensPerSecond"], p["latencyP50Seconds"])
        for p in ladder
        if p["outputTokensPerSecond"] is not None and p["latencyP50Seconds"]
    ]
    at = knee(points)
    tokens = next((thr for c, thr, _ in points if c == at), None)
    return {
        "kneeConcurrency": at,
        "kneeOutputTokensPerSecond": tokens,
        "kneeSaturated": None if at is None else at != points[-1][0],
    }


async def run(ctx: Context, result: ScenarioResult) -> None:
    cfg = ctx.config
    s = result.summary
    before = await ctx.client.metrics()
    poller = MetricsPoller(lambda: ctx.client.metrics(only=POLLED), cfg.metrics_interval_seconds)
    try:
        serial = await run_requests(ctx, _requests(ctx, cfg.requests), 1, result, "serial")
        s["serialOutputTokensPerSecond"] = rounded(serial.output_tokens_per_second, 3)
        s["serialLatencyP50Seconds"] = rounded(serial.latency(50))

        concurrent = await run_requests(
            ctx, _requests(ctx, cfg.requests), cfg.requests, result, "concurrent"
        )
        s["concurrentOutputTokensPerSecond"] = rounded(concurrent.output_tokens_per_second, 3)
        s["speedupOverSerial"] = (
            rounded(concurrent.output_tokens_per_second / serial.output_tokens_per_second, 3)
            if serial.output_tokens_per_second > 0
            else None
        )
        s["requestsPerSecond"] = rounded(concurrent.requests_per_second, 4)
        s["concurrentPeakInFlight"] = concurrent.peak_in_flight
        for q in (50, 95, 99):
            s[f"latencyP{q}Seconds"] = rounded(concurrent.latency(q))
        s["ttftP50Seconds"] = rounded(concurrent.ttft(50))

        # polled only here: scrapes cost the server's API process CPU (about 5 ms each), which
        # would lower the serial/concurrent numbers above a few percent on a small server
        async with poller.running():
            s["ladder"] = []
            for c in ladder_levels(cfg.max_concurrency):
                phase = await run_requests(
                    ctx,
                    _requests(ctx, ladder_requests(c)),
                    c,
                    result,
                    f"ladder-{c}",
                    concurrency=c,
                )
                s["ladder"].append(_point(phase, c))
        s.update(saturation_point(s["ladder"]))
    finally:
        result.samples.sort(key=lambda r: (r["phase"], r["index"]))
        result.extra["serverTimeline"] = poller.timeline
        s["peakQueueDepth"] = poller.peak_waiting
        s["peakRunning"] = poller.peak_running
        s.update(empty_counts(result.samples))
        try:
            after = await ctx.client.metrics()
        except BenchError:
            pass  # the failure that ended the phase is what gets reported
        else:
            preempted = counter_delta(before, after, PREEMPTIONS)
            s["preemptions"] = None if preempted is None else int(preempted)
