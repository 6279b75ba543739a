"""A revision's capacity against the latency objective (issue 33): derived from its run's
batching ladder, shown in status.capacity, the autoscaler's target while it serves (re-derived
at each promotion), and a gate (not met one at a time; the peak does not fit)."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import math
from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, applied, rolled_out, template_revision
from vllm_operator import API_VERSION
from vllm_operator.api.records import Capacity, LiveWorkload, Run
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide import capacity
from vllm_operator.decide.policy import confirming
from vllm_operator.observe.benchresult import read_job_report, read_summary, summarize
from vllm_operator.observe.live import MIN_LIVE_REQUESTS, duration, shape, workload_queries
from vllm_operator.observe.read import _workload_window
from vllm_operator.observe.state import Observed
from vllm_operator.reconcile import reconcile
from vllm_operator.render.autoscaling import quantity, render_hpa, seconds
from vllm_operator.render.benchmark import (
    LIVE_WORKLOAD_KEY,
    record_name,
    revision,
    run_name,
    runner_args,
)
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.render.monitoring import (
    BAND_METRIC,
    IN_FLIGHT_METRIC,
    LIVE_TPOT_METRIC,
    LIVE_TTFT_METRIC,
    render_prometheus_rule,
)
from vllm_operator.status.autoscaling import _autoscaling
from vllm_operator.status.capacity import _capacity
from vllm_operator.write.apply import _path

SETTINGS = OperatorSettings()
OBJECTIVE = {"ttftSeconds": 0.5, "tpotSeconds": 0.05, "percentile": 95}
AUTOSCALING = {"enabled": True, "minReplicas": 1, "maxReplicas": 16}
PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP = _path("apps/v1", "Deployment", "ns", "minimal")
HPA = _path("autoscaling/v2", "HorizontalPodAutoscaler", "ns", "minimal")


def ladder(slowness: float = 1.0, top: int = 32, tpot: bool = True) -> list[dict[str, Any]]:
    """A continuous batcher's ladder: TTFT p95 0.05 + 0.05 c s and TPOT p95 0.01 + 0.002 c s
    at concurrency c, their batch-dependent part `slowness` times as large (a revision half as
    fast at batching: its latency at c is the other's at 2c; TTFT meets 0.5 s up to c = 9 at
    1x, 4.5 at 2x)."""
    out = []
    c = 1
    while c <= top:
        point: dict[str, Any] = {
            "concurrency": c,
            "requests": max(8, 2 * c),
            "outputTokensPerSecond": 30.0 * c,
            "requestsPerSecond": float(c),
            "latencyP50Seconds": 0.5,
            "latencyP95Seconds": 0.6,
            "promptTokensMean": 128.0,
        }
        for q in (50, 90, 95, 99):
            point[f"ttftP{q}Seconds"] = (0.05 + 0.05 * c * slowness) * (q / 95)
            if tpot:
                point[f"tpotP{q}Seconds"] = (0.01 + 0.002 * c * slowness) * (q / 95)
        out.append(point)
        c *= 2
    return out


def result(points: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "status": "ok",
        "config": {"outputTokens": 32, "inputTokens": 128},
        "headline": {"outputTokensPerSecond": 100.0, "kvCacheTokens": 50_000},
        "scenarios": {"batching": {"summary": {"ladder": points}}},
    }


def a_run(points: list[dict[str, Any]], rev: str = "abc123") -> Run:
    return Run(
        rev, f"minimal-bench-{rev}", "2030-01-01T00:00:00Z", "Complete", "{}", result(points)
    )


def svc(objective: dict[str, Any] | None = None, **extra: Any) -> Service:
    spec: dict[str, Any] = {"objective": {**OBJECTIVE, **(objective or {})}, **extra}
    return Service.from_body(body("minimal", spec))


def derived(points: list[dict[str, Any]], objective: dict[str, Any] | None = None) -> Capacity:
    c = capacity.derive(svc(objective).spec.objective, a_run(points), 50_000)  # type: ignore[arg-type]
    assert isinstance(c, Capacity), c
    return c


# ---- derivation (pure) ----------------------------------------------------------------------


def test_the_capacity_is_where_the_binding_latency_crosses_the_objective() -> None:
    c = derived(ladder())
    # TTFT p95 0.45 s at 8 (ratio 0.9), 0.85 s at 16 (1.7): it crosses 0.5 s at 8 + 8 x 0.1/0.8
    assert c.concurrency_per_pod == pytest.approx(9.0)
    assert c.bound_by == "ttft"
    assert not c.at_least
    assert c.requests_per_second == pytest.approx(9.0)  # interpolated the same way
    assert c.output_tokens_per_second == pytest.approx(270.0)
    assert c.prefill_tokens_per_second == pytest.approx(128 / (0.1 * 50 / 95), rel=1e-3)
    assert c.kv_cache_tokens == 50_000
    assert (c.output_tokens, c.workload_source) == (32, "runnerDefault")
    assert [lvl[0] for lvl in c.levels] == [1, 2, 4, 8, 16, 32]


def test_tpot_binds_when_it_is_the_tighter_objective() -> None:
    # TPOT 0.02 s: 0.01 + 0.002 c meets it up to c = 5: between 4 (0.9) and 8 (1.3)
    c = derived(ladder(), {"ttftSeconds": 10, "tpotSeconds": 0.02})
    assert c.bound_by == "tpot"
    assert c.concurrency_per_pod == pytest.approx(4 + 4 * 0.1 / 0.4)


def test_the_percentile_chosen_is_the_one_judged() -> None:
    # at p50 every latency is 50/95 of p95's: the objective holds further up the ladder
    p95, p50 = derived(ladder()), derived(ladder(), {"percentile": 50})
    assert p50.concurrency_per_pod > p95.concurrency_per_pod


def test_a_ladder_that_never_breaks_the_objective_says_at_least() -> None:
    c = derived(ladder(top=4))
    assert (c.concurrency_per_pod, c.bound_by, c.at_least) == (4.0, "ladderTop", True)


def test_half_as_fast_is_half_the_capacity_and_twice_the_replicas() -> None:
    fast, slow = derived(ladder(1.0)), derived(ladder(2.0))
    assert slow.concurrency_per_pod == pytest.approx(fast.concurrency_per_pod / 2)
    s = svc()
    t_fast, t_slow = capacity.hpa_target(s, fast), capacity.hpa_target(s, slow)
    assert t_fast == pytest.approx(9.0 * 0.8)
    assert t_slow == pytest.approx(4.5 * 0.8)
    assert t_fast is not None
    assert t_slow is not None
    # the HPA's proportional rule at the same 72 requests in flight
    assert math.ceil(72 / t_fast) == 10
    assert math.ceil(72 / t_slow) == 20


def test_a_run_of_an_earlier_runner_gives_no_capacity_and_says_why() -> None:
    o = svc().spec.objective
    assert o is not None
    why = capacity.derive(o, a_run(ladder(tpot=False)))
    assert isinstance(why, str)
    assert "p95 TTFT/TPOT per level" in why
    assert str(capacity.derive(o, a_run([]))).startswith("its result has no batching ladder")
    assert capacity.failures(svc(), a_run(ladder(tpot=False)))[0].startswith(
        "objective: not measured"
    )


# ---- the gate --------------------------------------------------------------------------------


def test_an_objective_not_met_one_at_a_time_fails_the_gate() -> None:
    c = derived(ladder(20.0))  # TTFT p95 1.05 s at concurrency 1
    assert c.concurrency_per_pod == 0
    (failure,) = capacity.failures(svc(), a_run(ladder(20.0)))
    assert failure.startswith("objective: not met even at concurrency 1")
    assert capacity.hpa_target(svc(), c) is None  # nothing to target: the band stays


def test_a_peak_that_does_not_fit_in_max_replicas_fails_the_gate() -> None:
    # 9 requests/s per pod at capacity, 80% of it used: 7.2/s; 100/s needs 14 pods; a
    # revision half as fast: 4.5/s, 3.6/s used, 28 pods
    fits = svc({"peakRequestsPerSecond": 100}, autoscaling=AUTOSCALING)
    assert capacity.failures(fits, a_run(ladder())) == []
    assert capacity.replicas_for(fits, derived(ladder()), 100) == 14
    (failure,) = capacity.failures(fits, a_run(ladder(2.0)))
    assert "needs 28 pods" in failure
    assert "autoscaling.maxReplicas 16" in failure


# ---- the API ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"objective": {"percentile": 95}}, "objective needs ttftSeconds, tpotSeconds or both"),
        ({"objective": {"ttftSeconds": 0.5, "percentile": 97}}, "percentile"),
        ({"objective": {"ttftSeconds": 0}}, "ttftSeconds"),
        (
            {"objective": {"ttftSeconds": 0.5}, "benchmark": {"enabled": False}},
            "objective needs benchmark.enabled and the batching scenario",
        ),
        (
            {"objective": {"ttftSeconds": 0.5}, "benchmark": {"scenarios": ["capacity"]}},
            "objective needs benchmark.enabled and the batching scenario",
        ),
        (
            {
                "objective": {"ttftSeconds": 0.5, "inputTokens": 512},
                "benchmark": {"args": ["--input-tokens", "256"]},
            },
            "benchmark.args must not set --input-tokens or --output-tokens",
        ),
    ],
)
def test_an_objective_that_cannot_be_measured_is_refused_naming_the_field(
    spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as exc:
        Service.from_body(body("minimal", spec))
    assert message in str(exc.value)


def test_the_objectives_workload_is_what_the_benchmark_sends() -> None:
    s = svc({"inputTokens": 512, "outputTokens": 200}, benchmark={"args": ["--requests", "8"]})
    args = runner_args(s, SETTINGS)
    assert args[args.index("--input-tokens") + 1] == "512"
    assert args[args.index("--output-tokens") + 1] == "200"
    assert "--input-tokens" not in runner_args(svc(), SETTINGS)  # the runner's default


def test_the_benchmark_is_told_the_objective_and_a_user_cannot_override_it() -> None:
    s = svc({"tpotSeconds": 0.05, "percentile": 99})
    args = runner_args(s, SETTINGS)
    # last, after the user's args: argparse keeps the last value
    assert args[-6:] == [
        "--objective-ttft", str(s.spec.objective.ttft_seconds),  # type: ignore[union-attr]
        "--objective-tpot", "0.05",
        "--objective-percentile", "99",
    ]  # fmt: skip
    assert "--objective-ttft" not in runner_args(Service.from_body(body("minimal", {})), SETTINGS)
    with pytest.raises(ValidationError) as exc:
        Service.from_body(body("minimal", {"benchmark": {"args": ["--objective-ttft", "9"]}}))
    assert "--objective-ttft" in str(exc.value)


def test_the_hpa_targets_requests_in_flight_at_the_capacity_less_the_headroom() -> None:
    s = svc(autoscaling=AUTOSCALING)
    band = render_hpa(s, SETTINGS)
    assert band is not None
    assert band["spec"]["metrics"][0]["pods"]["metric"]["name"] == BAND_METRIC
    hpa = render_hpa(s, SETTINGS, capacity.hpa_target(s, derived(ladder())))
    assert hpa is not None
    metric = hpa["spec"]["metrics"][0]["pods"]
    assert metric["metric"]["name"] == IN_FLIGHT_METRIC
    assert metric["target"] == {"type": "AverageValue", "averageValue": "7200m"}
    # the scale-down keeps the band's stabilization window
    assert hpa["spec"]["behavior"]["scaleDown"] == band["spec"]["behavior"]["scaleDown"]
    assert (quantity(8), quantity(0.25), quantity(7.2)) == ("8", "250m", "7200m")


def test_the_live_latency_guard_targets_each_named_latency_at_the_objective() -> None:
    """Beside the main metric (band or capacity), one Pods metric per latency the objective
    names, at its percentile (the metric's quantile label) and value; the HPA takes the largest
    recommendation, so the guard only adds replicas."""
    s = svc(autoscaling=AUTOSCALING)
    for target in (None, 7.2):
        hpa = render_hpa(s, SETTINGS, target)
        assert hpa is not None
        guard = [m["pods"] for m in hpa["spec"]["metrics"][1:]]
        assert guard == [
            {
                "metric": {
                    "name": LIVE_TTFT_METRIC,
                    "selector": {"matchLabels": {"quantile": "0.95"}},
                },
                "target": {"type": "AverageValue", "averageValue": "500m"},
            },
            {
                "metric": {
                    "name": LIVE_TPOT_METRIC,
                    "selector": {"matchLabels": {"quantile": "0.95"}},
                },
                "target": {"type": "AverageValue", "averageValue": "50m"},
            },
        ]
    # only the latencies named; off with latencyGuard: false (and its rules are not rendered)
    ttft_only = svc({"tpotSeconds": None, "percentile": 99}, autoscaling=AUTOSCALING)
    hpa = render_hpa(ttft_only, SETTINGS)
    assert hpa is not None
    assert [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]] == [
        BAND_METRIC,
        LIVE_TTFT_METRIC,
    ]
    assert hpa["spec"]["metrics"][1]["pods"]["metric"]["selector"]["matchLabels"] == {
        "quantile": "0.99"
    }
    off = svc({"latencyGuard": False}, autoscaling=AUTOSCALING)
    hpa = render_hpa(off, SETTINGS)
    assert hpa is not None
    assert len(hpa["spec"]["metrics"]) == 1
    rule = render_prometheus_rule(off, SETTINGS)
    assert rule is not None
    assert "vllm-latency-guard" not in [g["name"] for g in rule["spec"]["groups"]]
    # latencies finer than a millisecond stay exact (micro), whole ones plain
    assert (seconds(0.0005), seconds(0.007), seconds(2)) == ("500u", "7m", "2")


def test_status_shows_the_guard_beside_the_main_metric() -> None:
    s = svc(autoscaling=AUTOSCALING)
    hpa = render_hpa(s, SETTINGS, 7.2)
    assert hpa is not None
    hpa["status"] = {
        "currentReplicas": 3,
        "desiredReplicas": 5,
        "currentMetrics": [
            {"type": "Pods", "pods": {"metric": {"name": IN_FLIGHT_METRIC},
                                      "current": {"averageValue": "4"}}},
            {"type": "Pods", "pods": {"metric": {"name": LIVE_TTFT_METRIC},
                                      "current": {"averageValue": "737m"}}},
        ],
    }  # fmt: skip
    obs = Observed(deployment=None, hpa=hpa)
    out, _conds = _autoscaling(s, obs, SETTINGS, derived(ladder()))
    assert out is not None
    assert out["metric"] == IN_FLIGHT_METRIC
    assert out["currentAverageValue"] == "4"
    assert out["latencyGuard"] == [
        {
            "metric": LIVE_TTFT_METRIC,
            "quantile": "0.95",
            "targetAverageValue": "500m",
            "currentAverageValue": "737m",
        },
        {"metric": LIVE_TPOT_METRIC, "quantile": "0.95", "targetAverageValue": "50m"},
    ]


# ---- through the reconcile: measured, shown, targeted, re-derived at promotion --------------


def spec_of(seqs: int, **objective: Any) -> dict[str, Any]:
    return {
        "engine": {"maxNumSeqs": seqs},
        "objective": {**OBJECTIVE, **objective},
        "autoscaling": AUTOSCALING,
        "benchmark": {"onFailure": "Rollback"},  # a failed gate stops the canary
    }


def rev(seqs: int, **objective: Any) -> str:
    s = Service.from_body(body("minimal", spec_of(seqs, **objective)))
    return revision(render_pod_template(s, SETTINGS))


def apply(api: FakeApi, seqs: int, **objective: Any) -> None:
    generation = api.objects[PATH]["metadata"]["generation"] + 1 if PATH in api.objects else 1
    obj = body("minimal", spec_of(seqs, **objective), generation=generation)
    if PATH in api.objects:
        obj["status"] = api.objects[PATH].get("status") or {}
    api.put(PATH, obj)
    reconciled(api)


def reconciled(api: FakeApi) -> None:
    reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)


def publish(api: FakeApi, run: str, points: list[dict[str, Any]]) -> None:
    cm = api.objects[_path("v1", "ConfigMap", "ns", run)]
    cm["data"]["result.json"] = json.dumps(result(points))
    api.objects[_path("batch/v1", "Job", "ns", run)]["status"] = {"succeeded": 1}


def the_run(seqs: int) -> str:
    return run_name(Service.from_body(body("minimal", spec_of(seqs))), rev(seqs))


def target(api: FakeApi) -> tuple[str, str]:
    m = applied(api, HPA)["spec"]["metrics"][0]["pods"]
    return m["metric"]["name"], m["target"]["averageValue"]


def status(api: FakeApi) -> dict[str, Any]:
    return dict(api.objects[PATH]["status"])


def test_the_serving_revisions_capacity_sets_the_hpa_and_the_status() -> None:
    api = FakeApi(SETTINGS)
    apply(api, 8)
    rolled_out(api)
    reconciled(api)
    # not measured yet: the band, and the status says so
    assert target(api) == (BAND_METRIC, "20")
    assert "is not measured yet" in status(api)["capacity"]["message"]
    publish(api, the_run(8), ladder())
    reconciled(api)
    assert target(api) == (IN_FLIGHT_METRIC, "7200m")
    shown = status(api)["capacity"]
    assert shown["revision"] == rev(8)
    assert shown["run"] == the_run(8)
    assert shown["concurrencyPerPod"] == pytest.approx(9.0)
    assert shown["boundBy"] == "ttft"
    assert shown["kvCacheTokens"] == 50_000
    assert "up to 9 requests at once per pod" in shown["message"]
    assert status(api)["autoscaling"]["policy"] == "Capacity"
    assert rev(8) in status(api)["autoscaling"]["targetFrom"]
    cond = next(c for c in status(api)["conditions"] if c["type"] == "BenchmarkPassed")
    assert cond["status"] == "True"


def test_a_promotion_re_derives_the_target_from_the_new_revision() -> None:
    api = FakeApi(SETTINGS)
    apply(api, 8)
    rolled_out(api)
    reconciled(api)
    publish(api, the_run(8), ladder())
    reconciled(api)
    assert target(api) == (IN_FLIGHT_METRIC, "7200m")
    # a revision half as fast: measured on its canary (an objective is a gate) while the
    # serving revision's target stays
    apply(api, 4)
    assert template_revision(api.objects[DEP]) == rev(8)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    assert target(api) == (IN_FLIGHT_METRIC, "7200m")
    assert "candidate" not in status(api)["capacity"]  # not measured yet
    # it passes (no bake configured): Promoting, the serving pods roll to it, and the target
    # is re-derived from its capacity: half, so twice the replicas for the same load
    publish(api, the_run(4), ladder(2.0))
    reconciled(api)
    assert status(api)["rollout"]["phase"] == "Promoting"
    assert template_revision(api.objects[DEP]) == rev(4)
    assert target(api) == (IN_FLIGHT_METRIC, "3600m")
    assert status(api)["capacity"]["revision"] == rev(4)
    assert status(api)["capacity"]["concurrencyPerPod"] == pytest.approx(4.5)
    assert "candidate" not in status(api)["capacity"]


def test_a_candidate_measured_beside_the_serving_revision_is_shown_beside_it() -> None:
    s = svc()
    serving = derived(ladder())
    candidate = dataclasses.replace(derived(ladder(2.0)), revision="new", run="minimal-bench-new")
    shown = _capacity(s, serving, candidate, serving.revision)
    assert shown is not None
    assert shown["concurrencyPerPod"] == pytest.approx(9.0)
    assert shown["candidate"]["revision"] == "new"
    assert shown["candidate"]["concurrencyPerPod"] == pytest.approx(4.5)
    assert (
        _capacity(
            svc().model_copy(update={"spec": s.spec.model_copy(update={"objective": None})}),
            serving,
            None,
            "x",
        )
        is None
    )


def test_a_revision_whose_peak_does_not_fit_stops_at_its_canary() -> None:
    api = FakeApi(SETTINGS)
    apply(api, 8, peakRequestsPerSecond=100)
    rolled_out(api)
    reconciled(api)
    publish(api, run_name(svc_of(8, 100), rev(8, peakRequestsPerSecond=100)), ladder())
    reconciled(api)
    apply(api, 4, peakRequestsPerSecond=100)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    publish(api, run_name(svc_of(4, 100), rev(4, peakRequestsPerSecond=100)), ladder(2.0))
    reconciled(api)
    # a failure is confirmed by a second run of the revision (onFailure: Rollback)
    again = run_name(confirming(svc_of(4, 100)), rev(4, peakRequestsPerSecond=100))
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    publish(api, again, ladder(2.0))
    reconciled(api)
    passed = next(c for c in status(api)["conditions"] if c["type"] == "BenchmarkPassed")
    assert passed["status"] == "False"
    assert "needs 28 pods" in passed["message"]
    assert status(api)["rollout"]["phase"] == "Aborted"
    # the revision that fits serves on, with its own target
    assert template_revision(api.objects[DEP]) == rev(8, peakRequestsPerSecond=100)
    assert target(api) == (IN_FLIGHT_METRIC, "7200m")


def svc_of(seqs: int, peak: float) -> Service:
    return Service.from_body(body("minimal", spec_of(seqs, peakRequestsPerSecond=peak)))


def test_the_ladder_survives_the_runs_summary_and_gives_the_same_capacity() -> None:
    # a run is summarized once into its record (only the keys decisions read): the ladder and
    # the workload are among them, so the capacity is derived from the summary ever after
    doc = result(ladder())
    doc["scenarios"]["batching"]["samples"] = [{"ttftSeconds": 0.1}] * 100  # not kept
    text = summarize(read_job_report({"state": "Complete", "result.json": json.dumps(doc)}), "t")
    read = read_summary(text)
    assert read is not None
    report, _ = read
    assert report.result is not None
    assert "samples" not in report.result["scenarios"]["batching"]
    run = dataclasses.replace(a_run([]), result=report.result)
    assert capacity.derive(svc().spec.objective, run, 50_000) == derived(ladder())  # type: ignore[arg-type]


# ---- the workload shape from live traffic ---------------------------------------------------


class LiveShape:
    """Prometheus as the test sets it: the service's live workload shape (observe/live.py)."""

    min_window_seconds = 8

    def __init__(self, shape: LiveWorkload | None) -> None:
        self.shape = shape
        self.reads: list[tuple[str, str]] = []

    def figures(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("no bake here")

    def workload(
        self, namespace: str, service: str, window_seconds: int, deadline: float | None = None
    ) -> LiveWorkload | None:
        self.reads.append((namespace, service))
        self.window = window_seconds
        return self.shape


def job_args(api: FakeApi, run: str) -> list[str]:
    job = api.objects[_path("batch/v1", "Job", "ns", run)]
    return list(job["spec"]["template"]["spec"]["containers"][0]["args"])


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


LIVE = LiveWorkload(input_tokens=512, output_tokens=96, requests=400, window="1h")


def test_without_lengths_in_the_objective_the_run_sends_the_live_traffics_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = LiveShape(LIVE)
    monkeypatch.setattr("vllm_operator.reconcile.live_reader", lambda url, interval: reader)
    api = FakeApi(SETTINGS)
    apply(api, 8)
    rolled_out(api)
    reconciled(api)
    run = the_run(8)
    args = job_args(api, run)
    assert (flag(args, "--input-tokens"), flag(args, "--output-tokens")) == ("512", "96")
    record = api.objects[_path("v1", "ConfigMap", "ns", record_name(run))]["data"]
    assert LiveWorkload.load(record[LIVE_WORKLOAD_KEY]) == LIVE
    assert reader.reads == [("ns", "minimal")] * len(reader.reads)
    assert reader.reads  # positive control: the read ran
    assert reader.window == 3600  # no run of the service yet: the last hour
    read_before = len(reader.reads)
    publish(api, run, ladder())
    reconciled(api)
    reconciled(api)
    # read once per revision: the revision has its run now, later reconciles read nothing
    assert len(reader.reads) == read_before
    shown = status(api)["capacity"]
    assert shown["workloadSource"] == "liveTraffic"
    assert shown["workloadFrom"] == (
        "live traffic: 512 prompt / 96 output tokens, the mean of about 400 requests over 1h"
    )


def test_the_objectives_lengths_win_and_too_little_traffic_leaves_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = LiveShape(LIVE)
    monkeypatch.setattr("vllm_operator.reconcile.live_reader", lambda url, interval: reader)
    api = FakeApi(SETTINGS)
    apply(api, 8, inputTokens=2048)
    rolled_out(api)
    reconciled(api)
    args = job_args(api, the_run(8))
    # the input length the objective names, the output length the live traffic's
    assert (flag(args, "--input-tokens"), flag(args, "--output-tokens")) == ("2048", "96")
    # both named: nothing is read
    reads = len(reader.reads)
    assert reads > 0
    apply(api, 16, inputTokens=2048, outputTokens=32)
    assert len(reader.reads) == reads
    # too little traffic (the reader's None): the runner's default lengths
    none = LiveShape(None)
    monkeypatch.setattr("vllm_operator.reconcile.live_reader", lambda url, interval: none)
    api = FakeApi(SETTINGS)
    apply(api, 8)
    rolled_out(api)
    reconciled(api)
    args = job_args(api, the_run(8))
    assert none.reads
    assert "--input-tokens" not in args
    assert "--output-tokens" not in args


def test_the_live_shape_is_the_mean_of_enough_requests() -> None:
    got = {"requests": 400.0, "prompt": 400 * 511.6, "generated": 398.0, "generation": 398 * 96.2}
    assert shape(got, "1h") == LiveWorkload(512, 96, 400, "1h")
    assert shape({**got, "requests": MIN_LIVE_REQUESTS - 1.0}, "1h") is None
    assert shape({**got, "generated": None}, "1h") is None
    assert shape({}, "1h") is None
    # the serving pods' series only (a canary's are service <name>-canary)
    assert all(
        'service="llama"}[25m]' in q for q in workload_queries("ns", "llama", "25m").values()
    )
    assert (duration(3600), duration(1500), duration(290)) == ("1h", "25m", "290s")


def test_the_live_window_leaves_out_the_services_own_benchmark_runs() -> None:
    now = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)

    def run(state: str, ended_minutes_ago: float) -> Run:
        at = (now - dt.timedelta(minutes=ended_minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return Run("r", "n", at, state, "{}", {"finishedAt": at} if state != "Running" else None)

    assert _workload_window((), now) == 3600
    assert _workload_window((run("Complete", 90),), now) == 3600
    assert _workload_window((run("Complete", 90), run("Complete", 20)), now) == 1200
    # under 5 minutes since a run ended, or a run going: not read
    assert _workload_window((run("Complete", 4),), now) == 0
    assert _workload_window((run("Running", 30),), now) == 0
    # a record is input: anything but what dump() writes reads as none
    assert LiveWorkload.load(LIVE.dump()) == LIVE
    for bad in ("", "[]", "{}", '{"inputTokens": -1, "outputTokens": 1, "requests": 1}', "x"):
        assert LiveWorkload.load(bad) is None
