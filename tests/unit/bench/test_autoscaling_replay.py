"""benchmarks/autoscaling_replay.py: the HPA model against hand-computed cases, the server
model's interpolation, a seed's determinism, and the static peak policy."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "benchmarks" / "autoscaling_replay.py"
SWEEP = ROOT / "benchmarks" / "results" / "capacity" / "cpu-tiny-ttft0.07-refined.json"


@pytest.fixture(scope="module")
def replay() -> ModuleType:
    spec = importlib.util.spec_from_file_location("autoscaling_replay", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["autoscaling_replay"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def in_flight_hpa(replay: ModuleType, target: float = 10.0, max_replicas: int = 100):
    policy = replay.Policy(
        "derived", metrics=((replay.IN_FLIGHT_METRIC, target),), max_replicas=max_replicas
    )
    return replay.Hpa(policy)


def test_within_the_tolerance_the_replicas_hold(replay: ModuleType) -> None:
    # average 10.9 against 10: ratio 1.09 <= 1 + 0.1
    assert replay.metric_replicas([10.9] * 4, 0, 4, 10.0, 0.1) == 4
    assert replay.metric_replicas([9.1] * 4, 0, 4, 10.0, 0.1) == 4
    hpa = in_flight_hpa(replay)
    assert hpa.desired(0.0, 4, {replay.IN_FLIGHT_METRIC: [10.9] * 4}, 0) == 4


def test_scale_up_is_proportional(replay: ModuleType) -> None:
    # 3 pods at 15 in flight against 10: ceil(1.5 x 3) = 5
    hpa = in_flight_hpa(replay)
    assert hpa.desired(0.0, 3, {replay.IN_FLIGHT_METRIC: [15.0] * 3}, 0) == 5


def test_pods_without_a_metric_count_as_zero_on_a_scale_up(replay: ModuleType) -> None:
    # 2 pods at 30, 2 starting: (60 + 0) / 4 / 10 = 1.5 -> ceil(1.5 x 4) = 6
    assert replay.metric_replicas([30.0, 30.0], 2, 4, 10.0, 0.1) == 6
    # on a scale-down they count as the target: (2 + 20) / 4 / 10 = 0.55 -> 3
    assert replay.metric_replicas([1.0, 1.0], 2, 4, 10.0, 0.1) == 3


def test_scale_up_is_limited_to_4_pods_or_100_percent_a_minute(replay: ModuleType) -> None:
    hpa = in_flight_hpa(replay)
    # 2 pods at 100 in flight want 20; max(2 + 4, 2 x 2) = 6
    assert hpa.desired(0.0, 2, {replay.IN_FLIGHT_METRIC: [100.0] * 2}, 0) == 6
    # 30 s later, still in the same minute: the period started at 2, so still 6
    assert hpa.desired(30.0, 6, {replay.IN_FLIGHT_METRIC: [100.0] * 6}, 0) == 6
    # a minute after the first step: from 6, max(6 + 4, 12) = 12
    assert hpa.desired(60.5, 6, {replay.IN_FLIGHT_METRIC: [100.0] * 6}, 0) == 12
    # and never above maxReplicas
    capped = in_flight_hpa(replay, max_replicas=5)
    assert capped.desired(0.0, 2, {replay.IN_FLIGHT_METRIC: [100.0] * 2}, 0) == 5


def test_the_stabilisation_window_delays_a_scale_down(replay: ModuleType) -> None:
    hpa = in_flight_hpa(replay)
    busy, idle = {replay.IN_FLIGHT_METRIC: [10.0] * 4}, {replay.IN_FLIGHT_METRIC: [1.0] * 4}
    assert hpa.desired(0.0, 4, busy, 0) == 4  # recommends 4
    # idle from t=15: the window's highest recommendation (4, at t=0) holds for 300 s
    t = 15.0
    while t < 300.0:
        assert hpa.desired(t, 4, idle, 0) == 4
        t += 15.0
    # t=300: the 4 left the window; down by the larger of 1 pod and 50% a minute: to 2
    assert hpa.desired(300.0, 4, idle, 0) == 2
    # the same minute: the period started at 4, 50% of it is spent
    assert hpa.desired(315.0, 2, {replay.IN_FLIGHT_METRIC: [1.0] * 2}, 0) == 2
    assert hpa.desired(360.5, 2, {replay.IN_FLIGHT_METRIC: [1.0] * 2}, 0) == 1


def test_scale_in_past_the_window_is_half_the_pods_a_minute(replay: ModuleType) -> None:
    hpa = in_flight_hpa(replay)
    hpa.recommendations = [(0.0, 30)]
    idle = {replay.IN_FLIGHT_METRIC: [0.5] * 30}
    assert hpa.desired(301.0, 30, idle, 0) == 15  # int(30 x 0.5)
    assert hpa.desired(362.0, 15, {replay.IN_FLIGHT_METRIC: [0.5] * 15}, 0) == 7
    assert hpa.desired(423.0, 7, {replay.IN_FLIGHT_METRIC: [0.5] * 7}, 0) == 3


def test_the_max_over_metrics_decides(replay: ModuleType) -> None:
    policy = replay.Policy(
        "derived",
        metrics=((replay.IN_FLIGHT_METRIC, 10.0), (replay.LIVE_TTFT_METRIC, 0.07)),
        max_replicas=100,
    )
    hpa = replay.Hpa(policy)
    # in flight says 2 -> 1 pod; the guard at 0.14 s against 0.07 s says 2 x 2 = 4
    readings = {replay.IN_FLIGHT_METRIC: [5.0, 5.0], replay.LIVE_TTFT_METRIC: [0.14, 0.14]}
    assert hpa.desired(0.0, 2, readings, 0) == 4


def test_histogram_quantile_interpolates_in_the_bucket(replay: ModuleType) -> None:
    # 10 observations, 5 in (0.04, 0.06], 5 in (0.06, 0.08]: p95 at rank 9.5, 4.5/5 of the way
    counts = [0] * (len(replay.TTFT_BUCKETS) + 1)
    counts[5], counts[6] = 5, 5
    assert replay.histogram_quantile(0.95, replay.TTFT_BUCKETS, counts) == pytest.approx(0.078)
    assert replay.histogram_quantile(0.95, replay.TTFT_BUCKETS, [0] * len(counts)) == 0.0


def levels(replay: ModuleType) -> list:
    return [replay.Level(1, 0.01, 0.02, 0.003, 0.004), replay.Level(4, 0.04, 0.08, 0.006, 0.01)]


def test_the_server_model_interpolates_between_concurrencies(replay: ModuleType) -> None:
    server = replay.ServerModel(levels(replay), max_num_seqs=8, output_tokens=16)
    mid = server.at(2.5)
    assert mid.ttft_p50 == pytest.approx(0.025)
    assert mid.ttft_p95 == pytest.approx(0.05)
    assert mid.tpot_p95 == pytest.approx(0.007)
    assert server.at(8).ttft_p95 == pytest.approx(0.08)  # flat beyond the top
    # the lognormal's median is the p50: half of many draws at 4 in flight fall below 0.04
    rng = random.Random(3)
    draws = [server.sample(4, rng)[0] for _ in range(4000)]
    assert 0.46 < sum(d < 0.04 for d in draws) / len(draws) < 0.54
    assert 0.93 < sum(d < 0.08 for d in draws) / len(draws) < 0.97


def test_the_sweep_curve_reads_the_measured_points(replay: ModuleType) -> None:
    doc = json.loads(SWEEP.read_text())
    curve = replay.levels_from_sweep(doc, "sweep")
    by_c = {lv.concurrency: lv for lv in curve}
    first = doc["sweep"][0]
    assert by_c[1].ttft_p95 == first["ttft"]
    assert by_c[16].ttft_p95 == doc["ladder"][-1]["ttftP95Seconds"]  # above the sweep's top


def small_run(replay: ModuleType, seed: int, policy_name: str) -> dict:
    doc = json.loads(SWEEP.read_text())
    o = replay.ObjectiveSpec.model_validate(doc["objective"])
    cap = replay.ladder_capacity(doc, o)
    trace = replay.staged_ramp(1, cap.requests_per_second, time_scale=0.05)
    reqs = replay.arrivals(trace, seed)
    server = replay.ServerModel(replay.levels_from_sweep(doc), 16, doc["workload"]["outputTokens"])
    cluster = replay.Cluster(startup_seconds=10.0)
    if policy_name == "peak":
        return replay.static_peak(
            trace, reqs, server, objective=o, cluster=cluster, seed=seed, max_r=4
        )
    chosen = next(
        p
        for p in replay.policies(doc["objective"], cap, trace.rate(0), server, min_r=1, max_r=4)
        if p.name == policy_name
    )
    return replay.simulate(trace, reqs, server, chosen, objective=o, cluster=cluster, seed=seed)


def test_a_seed_gives_the_same_replay(replay: ModuleType) -> None:
    a, b = small_run(replay, 5, "derived"), small_run(replay, 5, "derived")
    assert a == b
    assert small_run(replay, 6, "derived")["requests"] != a["requests"]


def test_the_peak_policy_is_the_fewest_static_replicas_that_hold_the_peak(
    replay: ModuleType,
) -> None:
    r = small_run(replay, 5, "peak")
    # 1.5 pods' capacity: 2 at the measured rate miss the objective at the peak (each pod at
    # 75% of its rate falls over the cliff at random); 3 hold it
    tried = r["sizing"]
    assert [t["replicas"] for t in tried] == [2, 3]
    assert tried[0]["peakStageAttainment"] < 0.95 <= tried[1]["peakStageAttainment"]
    assert {n for _, _, n in r["replicaChanges"]} == {3}
    assert r["timeline"] == []  # no HPA


def test_the_derived_policy_is_what_the_operator_renders(replay: ModuleType) -> None:
    doc = json.loads(SWEEP.read_text())
    o = replay.ObjectiveSpec.model_validate(doc["objective"])
    cap = replay.ladder_capacity(doc, o)
    server = replay.ServerModel(replay.levels_from_sweep(doc), 16, doc["workload"]["outputTokens"])
    derived, band = replay.policies(doc["objective"], cap, 100.0, server, min_r=1, max_r=8)
    assert cap.concurrency_per_pod == pytest.approx(11.12)
    assert dict(derived.metrics) == {
        replay.IN_FLIGHT_METRIC: pytest.approx(8.9),  # 11.12 x 80%, rounded as rendered
        replay.LIVE_TTFT_METRIC: pytest.approx(0.07),
    }
    assert derived.down_window == 300
    assert derived.down_rules == (("Pods", 1, 60.0), ("Percent", 50, 60.0))
    # both HPAs start where the derived target holds the first stage: 100 req/s over one
    # pod's rate at 8.9 in flight
    assert derived.initial == band.initial == math.ceil(100.0 / server.rate_at(8.9))
    assert dict(band.metrics) == {replay.BAND_METRIC: 20.0}
    assert band.band == (20, 2)
