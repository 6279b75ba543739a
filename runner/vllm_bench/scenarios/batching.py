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

With --preset, the phases send the lab's prompts (presets.py) as the lab sends them, and
first the lab's own steps (phases lab-*): lab 1's baseline (its first 4 prompts in one
request) and batch (its 32 in one request), lab 2's sequential run; their figures, and lab
2's of its concurrent step (the concurrent phase), by the lab's definitions, go to `lab`.
"""

from __future__ import annotations

from typing import Any

from vllm_bench.client import BenchError, Request
from vllm_bench.metrics import POLLED, PREEMPTIONS, MetricsPoller, counter_delta
from vllm_bench.presets import Step
from vllm_bench.scenarios.base import (
    BenchConfig,
    Context,
    LabFigures,
    PhaseResult,
    ScenarioResult,
    empty_counts,
    rounded,
    run_requests,
)
from vllm_bench.stats import knee

# the percentiles of TTFT and TPOT each ladder level reports (an objective's choice of 50,
# 90, 95 or 99 is read from them)
LADDER_PERCENTILES = (50, 90, 95, 99)


def ladder_levels(max_concurrency: int) -> list[int]:
    """1, 2, 4, ... and max_concurrency itself."""
    levels, c = [], 1
    while c < max_concurrency:
        levels.append(c)
        c *= 2
    return [*levels, max(1, max_concurrency)]


def ladder_requests(concurrency: int) -> int:
    """Requests sent at one level of the ladder: three times the concurrency, so that the
    level runs full for a while after its first wave (the latencies an objective is judged on
    are the steady ones: `_point`), and at least 8 for a stable median."""
    return max(8, 3 * concurrency)


def _requests(ctx: Context, n: int) -> list[Request]:
    """n requests of the runner's phases: the preset's batching prompts (in order, cycled)
    as its lab sends them, or fresh random words."""
    preset = ctx.preset
    if preset is not None:
        return [ctx.preset_request(p, preset.batching.sampling) for p in preset.cycled(n)]
    return [ctx.request(prompt=prompt) for prompt in ctx.completion_prompts(n)]


def _step_requests(ctx: Context, step: Step) -> list[Request]:
    if step.one_request:
        return [ctx.preset_request(step.prompts, step.sampling)]
    return [ctx.preset_request(p, step.sampling) for p in step.prompts]


async def _lab_step(
    ctx: Context, result: ScenarioResult, lab: LabFigures, name: str, step: Step
) -> PhaseResult:
    """A lab's step as the lab sends it (phase lab-NAME): all its prompts in one request,
    or one request after another; its figures by the lab's definitions."""
    phase = await run_requests(ctx, _step_requests(ctx, step), 1, result, f"lab-{name}")
    if step.one_request:
        lab.add(
            f"{name}Seconds",
            rounded(phase.wall_seconds),
            f"{len(step.prompts)} prompts ({step.source}) in one completions request: its "
            "wall time",
        )
        lab.add(f"{name}OutputTokens", phase.output_tokens, "their output tokens")
        lab.add(
            f"{name}OutputTokensPerSecond",
            rounded(phase.output_tokens_per_second, 3),
            "their output tokens / the wall time",
            beside="serialOutputTokensPerSecond"
            if name == "baseline"
            else "concurrentOutputTokensPerSecond",
        )
        return phase
    latencies = [c.latency for c in phase.completions]
    lab.add(
        f"{name}LatencySeconds",
        [rounded(x) for x in latencies],
        f"the {len(step.prompts)} prompts ({step.source}) one at a time: each request's "
        "send to last token",
    )
    lab.add(
        f"{name}OutputTokens", [c.output_tokens for c in phase.completions], "each's output tokens"
    )
    lab.add(
        f"{name}AvgSeconds",
        rounded(sum(latencies) / len(latencies)) if latencies else None,
        "the mean of those latencies",
        beside="serialLatencyP50Seconds",
    )
    return phase


def _lab_concurrent(ctx: Context, lab: LabFigures, phase: PhaseResult) -> None:
    """Lab 2's figures of its concurrent step, taken from the runner's concurrent phase
    (the same requests: the lab's prompts, all at once)."""
    preset = ctx.preset
    if preset is None:
        return
    if ctx.config.requests != len(preset.batching.prompts):
        lab.document["note"] = (
            f"--requests {ctx.config.requests}: the concurrent phase did not send the lab's "
            f"{len(preset.batching.prompts)} prompts, so the lab's concurrent figures are not given"
        )
        return
    latencies = [c.latency for c in phase.completions]
    source = preset.batching.source
    lab.add(
        "concurrentLatencySeconds",
        [rounded(x) for x in latencies],
        f"the {len(latencies)} prompts ({source}) sent at once: each request's send to last token",
    )
    lab.add(
        "concurrentOutputTokens",
        [c.output_tokens for c in phase.completions],
        "each's output tokens",
    )
    lab.add(
        "concurrentWallSeconds",
        rounded(phase.wall_seconds),
        "first send to last completion",
    )
    lab.add(
        "concurrentAvgSeconds",
        rounded(sum(latencies) / len(latencies)) if latencies else None,
        "the mean of the requests' latencies",
        beside="latencyP50Seconds",
    )
    lab.add("concurrentTotalTokens", phase.output_tokens, "their output tokens, summed")
    lab.add(
        "concurrentOutputTokensPerSecond",
        rounded(phase.output_tokens_per_second, 3),
        "total tokens / wall time",
        beside="concurrentOutputTokensPerSecond",
    )
    lab.add(
        "concurrentSerialSumSeconds",
        rounded(sum(latencies)),
        "the sum of the latencies (what one at a time would take, by the lab's estimate)",
    )


def _point(phase: PhaseResult, concurrency: int) -> dict[str, float | int | None]:
    after_first_wave = phase.completions[concurrency:] or phase.completions
    steady = PhaseResult(after_first_wave, phase.wall_seconds, phase.started)
    return {
        "concurrency": concurrency,
        "requests": len(phase.completions),
        "peakInFlight": phase.peak_in_flight,
        "outputTokensPerSecond": rounded(phase.output_tokens_per_second, 3),
        "requestsPerSecond": rounded(phase.requests_per_second, 4),
        "latencyP50Seconds": rounded(phase.latency(50)),
        "latencyP95Seconds": rounded(phase.latency(95)),
        # what a latency objective is judged on (the operator's capacity, decide/capacity.py):
        # time to first token and time per output token at the objective's percentiles, of the
        # requests after the first wave. The first `concurrency` requests start together and
        # prefill as one batch, which steady traffic never does: counted, they made a CPU
        # server's TTFT p95 at 4 at once 0.066 s against 0.090 s in steady state, and the
        # capacity derived from the ladder 77% above a full sweep's
        **{
            f"{name}P{q}Seconds": rounded(value(q))
            for name, value in (("ttft", steady.ttft), ("tpot", steady.tpot))
            for q in LADDER_PERCENTILES
        },
        "promptTokensMean": rounded(
            sum(c.prompt_tokens for c in phase.completions) / len(phase.completions), 1
        )
        if phase.completions
        else None,
    }


def objective_set(cfg: BenchConfig) -> bool:
    return cfg.objective_ttft_seconds is not None or cfg.objective_tpot_seconds is not None


def meets(point: dict[str, Any], cfg: BenchConfig) -> bool:
    """Whether a ladder level meets the run's objective: TTFT and TPOT at its percentile
    within it (a latency the level lacks does not meet it)."""
    for name, target in (
        ("ttft", cfg.objective_ttft_seconds),
        ("tpot", cfg.objective_tpot_seconds),
    ):
        if target is None:
            continue
        value = point.get(f"{name}P{cfg.objective_percentile}Seconds")
        if not isinstance(value, int | float) or value > target:
            return False
    return True


def bracket(ladder: list[dict[str, Any]], cfg: BenchConfig) -> tuple[int, int] | None:
    """The concurrencies still to measure between: the last level that meets the objective
    and the first after it that does not, when integers lie between them (None: nothing to
    refine — the first level fails, every level holds, or they are neighbours)."""
    points = sorted(ladder, key=lambda p: int(p["concurrency"]))
    last_held: int | None = None
    for p in points:
        c = int(p["concurrency"])
        if meets(p, cfg):
            last_held = c
        elif last_held is not None:
            return (last_held, c) if c - last_held > 1 else None
        else:
            return None
    return None


async def refine(ctx: Context, result: ScenarioResult, ladder: list[dict[str, Any]]) -> None:
    """Bisect the concurrencies between the ladder's last level that meets the objective and
    the first that does not, one level each (ladder_requests), so that the capacity is read
    where latency crosses the objective and not off a straight line between two powers of
    two: on 2 CPU cores TTFT jumped between 8 and 9 in flight, and the line from 8 to 16 put
    the capacity at 13 where a full sweep found 8. The points go into the ladder in order,
    marked `refine` (the knee is the powers of two's alone: saturation_point)."""
    span = bracket(ladder, ctx.config)
    if span is None:
        return
    lo, hi = span
    while hi - lo > 1:
        c = (lo + hi) // 2
        phase = await run_requests(
            ctx, _requests(ctx, ladder_requests(c)), c, result, f"ladder-{c}", concurrency=c
        )
        point = {**_point(phase, c), "refine": True}
        ladder.append(point)
        lo, hi = (c, hi) if meets(point, ctx.config) else (lo, c)
    ladder.sort(key=lambda p: int(p["concurrency"]))


def saturation_point(ladder: list[dict[str, Any]]) -> dict[str, Any]:
    """The ladder point the headline throughput is taken at: its knee (stats.knee), the
    throughput measured there, and whether the ladder saturated at all (False: throughput
    still grew as fast as latency at the top level, so the knee is the top of the ladder and
    a longer ladder would report more)."""
    points = [
        (p["concurrency"], p["outputTokensPerSecond"], p["latencyP50Seconds"])
        for p in ladder
        if p["outputTokensPerSecond"] is not None and p["latencyP50Seconds"] and not p.get("refine")
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
    preset = ctx.preset
    lab = LabFigures(preset, result) if preset else None
    try:
        lab_phases: dict[str, PhaseResult] = {}
        if preset is not None and lab is not None:
            for name, step in (("baseline", preset.baseline), ("batch", preset.batch)):
                if step is not None:
                    # lab 1's baseline is one request of 4; lab 2's, 5 one at a time
                    name = name if step.one_request else "sequential"  # noqa: PLW2901
                    lab_phases[name] = await _lab_step(ctx, result, lab, name, step)
        if lab is not None and {"baseline", "batch"} <= lab_phases.keys():
            base, batch = lab_phases["baseline"], lab_phases["batch"]
            lab.add(
                "speedup",
                rounded(batch.output_tokens_per_second / base.output_tokens_per_second, 3)
                if base.output_tokens_per_second > 0
                else None,
                "the batch's output tokens/s over the baseline's",
                beside="speedupOverSerial",
            )
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
        if preset is not None and lab is not None and preset.concurrent_is_lab:
            _lab_concurrent(ctx, lab, concurrent)

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
            if objective_set(cfg):
                await refine(ctx, result, s["ladder"])
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
