"""A canary's bake on live traffic (issue 21, item 2): after its benchmark passes, the canary
joins the Service's endpoints (an EndpointSlice of the operator's), its live figures are
compared with the stable pods' (Prometheus, read through observe/live.py), and it is aborted
at once when worse, or promoted at the window's end. The verdict (decide/bake.py) exactly, then
the whole flow through reconcile() against the in-memory API server, Prometheus replaced by
figures the test sets (the real one is read on the real node: tests/node/test_canary_node.py).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.chart_support import argocd_health
from tests.unit.decide.test_canary import (
    CANARY,
    PATH,
    SETTINGS,
    apply_spec,
    cond,
    events,
    reconciled,
    rev,
    rollout,
    serving_revision,
    stable,
    svc,
)
from tests.unit.fake_api import FakeApi, publish, rolled_out
from vllm_operator.api.spec import BakeSpec
from vllm_operator.decide.bake import FAILED, INCONCLUSIVE, PASSED, judge
from vllm_operator.observe.live import queries
from vllm_operator.observe.state import Bake, LiveFigures
from vllm_operator.render.benchmark import run_name
from vllm_operator.render.canary import BAKE_ANNOTATION
from vllm_operator.write.apply import _path

SLICE = _path("discovery.k8s.io/v1", "EndpointSlice", "ns", "minimal-canary-bake")
LIMITS = BakeSpec(seconds=60, min_requests=20)
GOOD = LiveFigures(requests=40, http_requests=40, http_errors=0, ttft_p99=0.2, itl_p99=0.02)


def figures(**changes: Any) -> LiveFigures:
    return LiveFigures(**{**GOOD.__dict__, **changes})


# ---- the verdict, exactly -----------------------------------------------------------------


def test_a_canary_as_good_as_the_stable_pods_bakes_until_the_window_ends_then_passes() -> None:
    during = judge(LIMITS, Bake("t", 30, canary=GOOD, stable=GOOD))
    assert during.verdict is None
    assert "30 s left" in during.message
    assert "canary 40 requests, TTFT p99 200 ms" in during.message
    after = judge(LIMITS, Bake("t", 60, canary=GOOD, stable=GOOD))
    assert after.verdict == PASSED


@pytest.mark.parametrize(
    ("canary", "why"),
    [
        (figures(ttft_p99=0.31), "TTFT p99 310 ms > 1.5 x the stable pods' 200 ms"),
        (figures(itl_p99=0.031), "inter-token latency p99 31 ms > 1.5 x the stable pods' 20 ms"),
        (figures(http_errors=1), "5xx share 2.5% against the stable pods' 0.0%"),
    ],
)
def test_a_worse_canary_fails_as_soon_as_it_answered_enough(canary: LiveFigures, why: str) -> None:
    verdict = judge(LIMITS, Bake("t", 10, canary=canary, stable=GOOD))
    assert verdict.verdict == FAILED
    assert why in verdict.message
    # at the limit exactly, or with fewer requests than minRequests, it is not (yet) failed
    at_limit = figures(ttft_p99=0.3, itl_p99=0.03, http_errors=0.4)
    assert judge(LIMITS, Bake("t", 10, canary=at_limit, stable=GOOD)).verdict is None
    few = LiveFigures(**{**canary.__dict__, "requests": 19})
    assert judge(LIMITS, Bake("t", 10, canary=few, stable=GOOD)).verdict is None


def test_a_window_without_enough_traffic_is_inconclusive_and_a_read_failure_no_verdict() -> None:
    quiet = figures(requests=3)
    verdict = judge(LIMITS, Bake("t", 61, canary=quiet, stable=GOOD))
    assert verdict.verdict == INCONCLUSIVE
    assert "3 requests to the canary (fewer than minRequests 20)" in verdict.message
    failed_read = judge(LIMITS, Bake("t", 600, error="reading Prometheus failed: timeout"))
    assert failed_read.verdict is None
    assert "no figures: reading Prometheus failed: timeout" in failed_read.message


def test_the_queries_select_the_canary_pod_and_the_stable_service_over_the_window() -> None:
    q = queries("ns", 'pod="minimal-canary-abc"', 10)
    assert q["ttft_p99"] == (
        "histogram_quantile(0.99, sum by (le) (increase(vllm:time_to_first_token_seconds_bucket"
        '{namespace="ns",pod="minimal-canary-abc"}[60s])))'
    )
    assert q["http_errors"] == (
        'sum(increase(http_requests_total{namespace="ns",pod="minimal-canary-abc",'
        'handler=~"/v1/.*",status="5xx"}[60s]))'
    )
    assert queries("ns", 'service="minimal"', 300)["requests"] == (
        'sum(increase(vllm:e2e_request_latency_seconds_count{namespace="ns",service="minimal"}'
        "[300s]))"
    )


# ---- the flow, through reconcile() ----------------------------------------------------------


class Live:
    """Prometheus as the test sets it: figures for the canary's pod and the stable pods."""

    def __init__(self) -> None:
        self.canary = GOOD
        self.stable = GOOD
        self.reads: list[str] = []

    def figures(self, namespace: str, selector: str, window_seconds: int) -> LiveFigures:
        self.reads.append(selector)
        return self.canary if selector.startswith("pod=") else self.stable


BAKE = {"canary": {"bake": {"seconds": 60, "minRequests": 20}}}


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> Live:
    reader = Live()
    monkeypatch.setattr("vllm_operator.reconcile.live_reader", lambda url: reader)
    return reader


def _baking(api: FakeApi, bench: dict[str, Any] | None = None) -> str:
    """Revision 8 serves; 16 passed its benchmark on the canary and starts baking."""
    stable(api, 8)
    apply_spec(api, 16, bench, rollout=BAKE)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    run = run_name(svc(16), rev(16))
    publish(api, run, 70)
    return run


def _age(api: FakeApi, seconds: float) -> None:
    """The bake began `seconds` ago (its EndpointSlice's creation)."""
    then = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    api.objects[SLICE]["metadata"]["creationTimestamp"] = then.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_passing_canary_joins_the_endpoints_bakes_and_is_promoted(live: Live) -> None:
    api = FakeApi(SETTINGS)
    _baking(api)
    outcome = reconciled(api)
    # baking: the serving pods still run 8; the canary's pod is one more endpoint of the Service
    assert serving_revision(api) == rev(8)
    assert api.objects[CANARY]["spec"]["replicas"] == 1
    endpoints = api.objects[SLICE]
    assert endpoints["metadata"]["labels"]["kubernetes.io/service-name"] == "minimal"
    assert endpoints["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] != (
        "endpointslice-controller.k8s.io"
    )
    (endpoint,) = endpoints["endpoints"]
    assert endpoint["addresses"] == ["10.0.0.9"]
    assert endpoint["targetRef"]["name"].startswith("minimal-canary-")
    assert endpoints["ports"] == [
        {"name": "http", "port": 8000, "protocol": "TCP", "appProtocol": "http"}
    ]
    assert rollout(api)["phase"] == "Baking"
    assert rollout(api)["canary"] == "minimal-canary"
    progressing = cond(api, "Progressing")
    assert (progressing["status"], progressing["reason"]) == ("True", "Baking")
    assert ("Normal", "RolloutBaking") in events(outcome)
    assert argocd_health(api.objects[PATH])[0] == "Progressing"
    # halfway: still baking, the figures in the status
    _age(api, 30)
    reconciled(api)
    assert rollout(api)["phase"] == "Baking"
    assert rollout(api)["bake"]["canaryRequests"] == 40
    assert rollout(api)["bake"]["stableTtftP99Seconds"] == 0.2
    assert "s left" in rollout(api)["message"]
    assert serving_revision(api) == rev(8)
    # the window ends: promoted, the canary out of the endpoints
    _age(api, 61)
    outcome = reconciled(api)
    assert serving_revision(api) == rev(16)
    assert SLICE not in api.objects
    assert api.objects[CANARY]["spec"]["replicas"] == 0
    assert rollout(api)["phase"] == "Promoting"
    assert rollout(api)["bake"]["verdict"] == "Passed"
    assert "passed its bake" in rollout(api)["message"]
    assert api.objects[CANARY]["metadata"]["annotations"][BAKE_ANNOTATION].startswith(
        f"{rev(16)} Passed "
    )
    # it is not baked again
    reads = len(live.reads)
    rolled_out(api)
    reconciled(api)
    assert rollout(api)["phase"] == "Promoted"
    assert rollout(api)["bake"] == {"verdict": "Passed"}  # kept with the revision
    assert "passed its bake" in rollout(api)["message"]
    assert api.objects[CANARY]["metadata"]["annotations"][BAKE_ANNOTATION].startswith(rev(16))
    assert SLICE not in api.objects
    assert len(live.reads) == reads


def test_a_canary_worse_on_live_traffic_is_aborted_at_once_and_stays_aborted(live: Live) -> None:
    api = FakeApi(SETTINGS)
    _baking(api)
    reconciled(api)
    assert SLICE in api.objects
    _age(api, 20)
    live.canary = figures(ttft_p99=0.9)  # 4.5 x the stable pods' p99, 40 requests
    outcome = reconciled(api)
    assert serving_revision(api) == rev(8)  # the serving pods never left revision 8
    assert SLICE not in api.objects  # out of the endpoints
    assert api.objects[CANARY]["spec"]["replicas"] == 0
    assert rollout(api)["phase"] == "Aborted"
    assert rollout(api)["bake"]["verdict"] == "Failed"
    assert "TTFT p99 900 ms > 1.5 x the stable pods' 200 ms" in rollout(api)["message"]
    degraded = cond(api, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "CanaryAborted")
    assert ("Warning", "RolloutAborted") in events(outcome)
    assert argocd_health(api.objects[PATH])[0] == "Degraded"
    # the verdict is kept on the canary: no second bake, whatever Prometheus says now
    live.canary = GOOD
    reads = len(live.reads)
    for _ in range(2):
        reconciled(api)
    assert (rollout(api)["phase"], serving_revision(api)) == ("Aborted", rev(8))
    assert SLICE not in api.objects
    assert len(live.reads) == reads
    # the next spec change gets a canary, and a bake, of its own
    apply_spec(api, 32, rollout=BAKE)
    assert rollout(api)["phase"] == "Canary"
    assert api.objects[CANARY]["spec"]["replicas"] == 1


def test_under_report_a_failed_bake_is_reported_and_promoted(live: Live) -> None:
    api = FakeApi(SETTINGS)
    report = {"onFailure": "Report", "thresholds": {"minOutputTokensPerSecond": 50}}
    _baking(api, report)
    reconciled(api)
    live.canary = figures(http_errors=10)
    reconciled(api)
    assert serving_revision(api) == rev(16)
    assert rollout(api)["phase"] == "Promoting"
    assert "failed its bake (onFailure: Report)" in rollout(api)["message"]


def test_without_a_prometheus_the_bake_waits_and_says_why() -> None:
    api = FakeApi(SETTINGS)  # no prometheusUrl
    _baking(api)
    reconciled(api)
    _age(api, 600)
    reconciled(api)
    assert rollout(api)["phase"] == "Baking"
    assert serving_revision(api) == rev(8)
    assert (
        "prometheusUrl setting, VLLM_OPERATOR_PROMETHEUS_URL, is empty" in (rollout(api)["message"])
    )
