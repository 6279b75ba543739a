"""A revision's capacity against the service's latency objective, from its benchmark run's
batching ladder (pure).

The runner's ladder sends the workload at concurrency 1, 2, 4, ... and reports, per level, the
time to first token and the time per output token at p50/p90/p95/p99 (runner/vllm_bench
scenarios/batching.py). A level meets the objective when both latencies at the objective's
percentile are within it. The capacity per pod is the highest concurrency at which it still
holds: between the last level that meets it and the first that does not, where the latency
that binds (the larger ratio of measured to objective) crosses 1, interpolated linearly in the
concurrency (latency grows about linearly with the batch between two levels of a continuous
batcher). The rate, tokens/s and prompt tokens there are interpolated the same way.

What the capacity drives:
  * the autoscaler (render/autoscaling.py): while a revision serves, its HPA targets the
    requests in flight per pod (running + waiting) at `hpa_target`, the capacity less the
    objective's headroom: a revision half as fast gets about twice the replicas;
  * the gate (`failures`): a revision that meets the objective not even one request at a
    time, or whose measured rate per pod cannot reach objective.peakRequestsPerSecond within
    autoscaling.maxReplicas, fails its benchmark (BenchmarkPassed=False; a canary stops).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import Any

from vllm_operator.api.records import Capacity, Run
from vllm_operator.api.spec import ObjectiveSpec, Service


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _ladder(result: dict[str, Any]) -> list[dict[str, Any]]:
    batching = (result.get("scenarios") or {}).get("batching") or {}
    ladder = (batching.get("summary") or {}).get("ladder") or []
    points = [p for p in ladder if isinstance(p, dict) and _num(p.get("concurrency"))]
    return sorted(points, key=lambda p: float(p["concurrency"]))


def _ratio(point: dict[str, Any], o: ObjectiveSpec) -> tuple[float, str] | None:
    """The binding latency's measured / objective at this level, and which it is; None when
    the level lacks a latency the objective names (a run of an earlier runner)."""
    ratios: list[tuple[float, str]] = []
    for name, target in (("ttft", o.ttft_seconds), ("tpot", o.tpot_seconds)):
        if target is None:
            continue
        value = _num(point.get(f"{name}P{o.percentile}Seconds"))
        if value is None:
            return None
        ratios.append((value / target, name))
    return max(ratios) if ratios else None


def _between(a: dict[str, Any], b: dict[str, Any], key: str, f: float) -> float | None:
    va, vb = _num(a.get(key)), _num(b.get(key))
    if va is None or vb is None:
        return va if f <= 0.5 else vb
    return va + f * (vb - va)


def derive(o: ObjectiveSpec, run: Run, kv_cache_tokens: int | None = None) -> Capacity | str | None:
    """The capacity `run` (Complete, with a result) measured against `o`; a string says why
    there is none (no ladder, no per-level latencies)."""
    result = run.result or {}
    ladder = _ladder(result)
    if not ladder:
        return (
            "its result has no batching ladder (a run summarized by an operator older than "
            "the objective: re-run the benchmark with the rerun-benchmark annotation)"
        )
    judged = [(p, _ratio(p, o)) for p in ladder]
    if any(r is None for _, r in judged):
        return (
            f"its ladder has no p{o.percentile} TTFT/TPOT per level (a runner older than "
            "the objective: re-run the benchmark)"
        )
    config = result.get("config") or {}
    output_tokens = config.get("outputTokens") if isinstance(config, dict) else None
    source = (
        "liveTraffic"
        if run.live_workload is not None
        else "objective"
        if o.input_tokens is not None or o.output_tokens is not None
        else "runnerDefault"
    )
    levels = tuple(
        (
            int(p["concurrency"]),
            _num(p.get(f"ttftP{o.percentile}Seconds")),
            _num(p.get(f"tpotP{o.percentile}Seconds")),
        )
        for p in ladder
    )
    first = ladder[0]
    ttft1, prompt1 = _num(first.get("ttftP50Seconds")), _num(first.get("promptTokensMean"))
    prefill = prompt1 / ttft1 if ttft1 and prompt1 and int(first["concurrency"]) == 1 else None

    def capacity(
        concurrency: float, a: dict[str, Any], b: dict[str, Any], f: float, bound: str
    ) -> Capacity:
        return Capacity(
            revision=run.revision,
            run=run.name,
            measured_at=run.created,
            concurrency_per_pod=round(concurrency, 2),
            requests_per_second=_r(_between(a, b, "requestsPerSecond", f)),
            output_tokens_per_second=_r(_between(a, b, "outputTokensPerSecond", f)),
            prefill_tokens_per_second=_r(prefill),
            kv_cache_tokens=kv_cache_tokens,
            bound_by=bound,
            input_tokens=_r(_between(a, b, "promptTokensMean", f)),
            output_tokens=output_tokens if isinstance(output_tokens, int) else None,
            workload_source=source,
            levels=levels,
            workload_from=run.live_workload.describe() if run.live_workload else "",
        )

    (p0, r0) = judged[0]
    assert r0 is not None
    if r0[0] > 1:
        # not even the first level: below it, assume latency falls in proportion (never
        # below one request at a time's): the capacity is a fraction of a request, i.e. 0
        return capacity(0.0, p0, p0, 0.0, r0[1])
    for (a, ra), (b, rb) in itertools.pairwise(judged):
        assert ra is not None
        assert rb is not None
        if rb[0] <= 1:
            continue
        ca, cb = float(a["concurrency"]), float(b["concurrency"])
        f = (1 - ra[0]) / (rb[0] - ra[0]) if rb[0] > ra[0] else 0.0
        return capacity(ca + f * (cb - ca), a, b, f, rb[1])
    top = judged[-1][0]
    return capacity(float(top["concurrency"]), top, top, 0.0, "ladderTop")


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def newest_measured(runs: Iterable[Run], revision: str) -> Run | None:
    """The revision's newest completed run with a result."""
    theirs = [r for r in runs if r.revision == revision and r.state == "Complete" and r.result]
    return max(theirs, key=lambda r: r.created) if theirs else None


def of_revision(svc: Service, runs: Iterable[Run], revision: str) -> Capacity | str | None:
    """The capacity of `revision` for the service's objective (None: no objective, or no
    completed run of it yet; a string: why its run gives none)."""
    o = svc.spec.objective
    if o is None or not revision:
        return None
    run = newest_measured(runs, revision)
    if run is None:
        return None
    return derive(o, run, run.headline.kv_cache_tokens)


def hpa_target(svc: Service, c: Capacity) -> float | None:
    """The requests in flight per pod the autoscaler targets: the capacity less the headroom
    (None: no objective, or a capacity of 0, which the gate fails)."""
    o = svc.spec.objective
    if o is None or c.concurrency_per_pod <= 0:
        return None
    return max(0.1, round(c.concurrency_per_pod * (100 - o.headroom_percent) / 100, 2))


def replicas_for(svc: Service, c: Capacity, requests_per_second: float) -> int | None:
    """The pods `requests_per_second` needs within the objective at the headroom's share of
    each pod's measured rate (None: the rate per pod was not measured)."""
    o = svc.spec.objective
    rate = c.requests_per_second
    if o is None or not rate or c.concurrency_per_pod <= 0:
        return None
    return math.ceil(requests_per_second / (rate * (100 - o.headroom_percent) / 100) - 1e-9)


def failures(svc: Service, run: Run) -> list[str]:
    """The objective's gate on `run`: met one request at a time, and the peak fits."""
    o = svc.spec.objective
    if o is None:
        return []
    c = derive(o, run, run.headline.kv_cache_tokens)
    if isinstance(c, str):
        return [f"objective: not measured: {c}"]
    assert c is not None
    out: list[str] = []
    if c.concurrency_per_pod <= 0:
        lat = c.levels[0] if c.levels else (1, None, None)
        out.append(
            f"objective: not met even at concurrency {lat[0]} (p{o.percentile} TTFT "
            f"{_s(lat[1])} vs {_s(o.ttft_seconds)}, TPOT {_s(lat[2])} vs {_s(o.tpot_seconds)})"
        )
        return out
    peak = o.peak_requests_per_second
    if peak is not None:
        needed = replicas_for(svc, c, peak)
        if needed is None:
            out.append("objective: the rate per pod at capacity was not measured (peak unknown)")
        elif needed > svc.spec.autoscaling.max_replicas:
            out.append(
                f"objective: peakRequestsPerSecond {peak:g} needs {needed} pods at "
                f"{c.requests_per_second:g} requests/s each within the objective "
                f"({o.headroom_percent}% headroom) > autoscaling.maxReplicas "
                f"{svc.spec.autoscaling.max_replicas}"
            )
    return out


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}s"
