"""A canary's bake on live traffic (issue 21, item 2): after its benchmark passes, the canary
joins the Service's endpoints (an EndpointSlice of the operator's), its live figures are
compared with the stable pods' (Prometheus, read through observe/live.py), and it is aborted
at once when worse, or promoted at the window's end. The verdict (decide/bake.py) exactly, then
the whole flow through reconcile() against the in-memory API server, Prometheus replaced by
figures the test sets (the real one is read on the real node: tests/node/test_canary_node.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import socket
import time
from typing import Any

import pytest
import requests

from tests.chart_support import argocd_health
from tests.unit.decide.test_canary import (
    CANARY,
    DEP,
    PATH,
    SETTINGS,
    apply_spec,
    cond,
    events,
    passed_on_canary,
    reconciled,
    rev,
    rollout,
    serving_revision,
    svc,
)
from tests.unit.fake_api import FakeApi, publish, rolled_out
from vllm_operator.api.spec import BakeSpec
from vllm_operator.decide.bake import (
    BAKE_FAILED,
    BAKE_INCONCLUSIVE,
    BAKE_PASSED,
    BAKE_SKIPPED,
    judge_bake,
    too_exposed,
)
from vllm_operator.observe.live import LiveBudgetError, PrometheusLive, min_window_seconds, queries
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
    during = judge_bake(LIMITS, Bake("t", 30, canary=GOOD, stable=GOOD))
    assert during.verdict is None
    assert "until 30 s from now" in during.message
    assert "canary 40 requests, TTFT p99 200 ms" in during.message
    after = judge_bake(LIMITS, Bake("t", 60, canary=GOOD, stable=GOOD))
    assert after.verdict == BAKE_PASSED


@pytest.mark.parametrize(
    ("canary", "why"),
    [
        (figures(ttft_p99=0.31), "TTFT p99 310 ms > 1.5 x the stable pods' 200 ms"),
        (figures(itl_p99=0.031), "inter-token latency p99 31 ms > 1.5 x the stable pods' 20 ms"),
        (figures(http_errors=1), "5xx share 2.5% against the stable pods' 0.0%"),
    ],
)
def test_a_worse_canary_fails_as_soon_as_it_answered_enough(canary: LiveFigures, why: str) -> None:
    def bake(c: LiveFigures, recent: LiveFigures | None = None) -> Bake:
        """20 s in: worse over the whole bake and (by default) over its most recent half."""
        r = c if recent is None else recent
        return Bake("t", 20, canary=c, stable=GOOD, recent_canary=r, recent_stable=GOOD)

    verdict = judge_bake(LIMITS, bake(canary))
    assert verdict.verdict == BAKE_FAILED
    assert why in verdict.message
    assert "over the whole bake and its most recent half" in verdict.message
    # at the limit exactly, or with fewer requests than minRequests, it is not (yet) failed
    at_limit = figures(ttft_p99=0.3, itl_p99=0.03, http_errors=0.4)
    assert judge_bake(LIMITS, bake(at_limit)).verdict is None
    few = LiveFigures(**{**canary.__dict__, "requests": 19, "http_requests": 19})
    assert judge_bake(LIMITS, bake(few)).verdict is None
    # worse over the whole bake only: a spike that is over (the canary's first seconds)
    spike = judge_bake(LIMITS, bake(canary, recent=GOOD))
    assert spike.verdict is None
    assert "not over its most recent half: a spike that is over" in spike.message
    # no second look yet (the bake too young for a half of its own): wait, say so
    young = judge_bake(LIMITS, Bake("t", 10, canary=canary, stable=GOOD))
    assert young.verdict is None
    assert "to be confirmed over its most recent half" in young.message
    # and at the window's end the spike that is over passes
    assert (
        judge_bake(
            LIMITS,
            Bake("t", 60, canary=canary, stable=GOOD, recent_canary=GOOD, recent_stable=GOOD),
        ).verdict
        == BAKE_PASSED
    )


def test_a_latency_over_its_limit_within_the_histograms_resolution_decides_nothing() -> None:
    """vLLM's TTFT buckets jump from 100 to 250 ms: a few of the canary's requests past 100 ms
    make an interpolated p99 of 223 ms beside the stable pods' 100 ms (two of seven rollouts of
    an unchanged revision were aborted so, on the real node). The p99 is known only to lie in
    its bucket; a bucket that reaches below the limit is shown and decides nothing; one wholly
    above it aborts."""
    stable = figures(ttft_p99=0.1, ttft_p99_floor=0.08)
    blurred = figures(ttft_p99=0.223, ttft_p99_floor=0.1)

    def bake(c: LiveFigures, elapsed: float = 30) -> Bake:
        return Bake("t", elapsed, canary=c, stable=stable, recent_canary=c, recent_stable=stable)

    during = judge_bake(LIMITS, bake(blurred))
    assert during.verdict is None
    assert (
        "not decisive: TTFT p99 223 ms above 1.5 x the stable pods' 100 ms, within the "
        "histogram's bucket from 100 ms"
    ) in during.message
    at_end = judge_bake(LIMITS, bake(blurred, elapsed=60))
    assert at_end.verdict == BAKE_PASSED
    assert "not decisive" in at_end.message
    # a canary whose p99 lies in a bucket wholly above the limit (750 ms to 1 s) is aborted
    slow = judge_bake(LIMITS, bake(figures(ttft_p99=0.9, ttft_p99_floor=0.75)))
    assert slow.verdict == BAKE_FAILED
    assert "TTFT p99 900 ms > 1.5 x the stable pods' 100 ms" in slow.message
    # the bucket's lower bound at the limit exactly: wholly above it
    edge = figures(itl_p99=0.045, itl_p99_floor=0.03)
    assert judge_bake(LIMITS, bake(edge)).verdict == BAKE_FAILED


def test_figures_that_reach_back_before_the_bake_decide_no_abort_until_the_window_ends() -> None:
    """10 s into the bake, Prometheus's shortest window (60 s: four 15 s scrapes) still
    covers the 50 s before it (the canary's benchmark run, its start): shown, no verdict;
    once the window holds the bake alone the same figures abort it; a bake shorter than the
    shortest window is judged on what there is at its end."""
    worse = figures(ttft_p99=0.9)
    early = judge_bake(LIMITS, Bake("t", 10, canary=worse, stable=GOOD, window=60))
    assert early.verdict is None
    assert "they decide nothing until 50 s from now" in early.message
    assert "TTFT p99 900 ms" in early.message  # (the figures are shown)
    assert (
        judge_bake(LIMITS, Bake("t", 60, canary=worse, stable=GOOD, window=61)).verdict
        == BAKE_FAILED
    )
    short = BakeSpec(seconds=30, min_requests=20)
    at_end = judge_bake(short, Bake("t", 30, canary=worse, stable=GOOD, window=60))
    assert at_end.verdict == BAKE_FAILED


def test_the_shortest_window_is_four_scrape_intervals() -> None:
    assert min_window_seconds("15s") == 60
    assert min_window_seconds("2s") == 8
    assert min_window_seconds("1m") == 240
    assert min_window_seconds("500ms") == 4
    assert min_window_seconds("fast") == 60
    assert queries("ns", 'pod="p"', 3, min_window=8)["requests"].endswith("[8s]))")


def test_a_window_without_enough_traffic_is_inconclusive_and_a_read_failure_no_verdict() -> None:
    quiet = figures(requests=3, http_requests=3)
    verdict = judge_bake(LIMITS, Bake("t", 61, canary=quiet, stable=GOOD))
    assert verdict.verdict == BAKE_INCONCLUSIVE
    assert "3 requests to the canary (fewer than minRequests 20)" in verdict.message
    failed_read = judge_bake(LIMITS, Bake("t", 600, error="reading Prometheus failed: timeout"))
    assert failed_read.verdict is None
    assert "no figures: reading Prometheus failed: timeout" in failed_read.message


def test_the_queries_select_the_canary_pod_and_the_stable_service_over_the_window() -> None:
    q = queries("ns", 'pod="minimal-canary-abc"', 10)
    assert q["ttft_buckets"] == (
        "sum by (le) (increase(vllm:time_to_first_token_seconds_bucket"
        '{namespace="ns",pod="minimal-canary-abc"}[60s]))'
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

    min_window_seconds = 8  # (2 s scrapes, as the local cluster's Prometheus)

    def __init__(self) -> None:
        self.canary = GOOD
        self.stable = GOOD
        self.reads: list[str] = []

    def figures(
        self, namespace: str, selector: str, window_seconds: int, deadline: float | None = None
    ) -> LiveFigures:
        self.reads.append(selector)
        return self.canary if selector.startswith("pod=") else self.stable

    def idle(self, namespace: str, service: str, seconds: int) -> bool:
        return False  # (scale to zero's read: never idle here)


BAKE = {"canary": {"bake": {"seconds": 60, "minRequests": 20}}}


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> Live:
    reader = Live()
    monkeypatch.setattr("vllm_operator.reconcile.live_reader", lambda url, interval: reader)
    return reader


def _baking(api: FakeApi, bench: dict[str, Any] | None = None) -> str:
    """Revision 8 serves; 16 passed its benchmark on the canary and starts baking."""
    passed_on_canary(api, bench, rollout=BAKE)
    return run_name(svc(16), rev(16))


def _age(api: FakeApi, seconds: float) -> None:
    """The bake began `seconds` ago: as the operator recorded it (status.rollout.bake.startedAt,
    on its clock), and its EndpointSlice's creation (the cluster's clock, which the pod's own
    stamps are compared with)."""
    then = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    api.objects[SLICE]["metadata"]["creationTimestamp"] = then
    api.objects[PATH]["status"]["rollout"]["bake"]["startedAt"] = then


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
    bake = rollout(api)["bake"]
    ends = dt.datetime.fromisoformat(bake["endsAt"].replace("Z", "+00:00"))
    began = dt.datetime.fromisoformat(bake["startedAt"].replace("Z", "+00:00"))
    assert (ends - began).total_seconds() == 60
    assert f"until {bake['endsAt']}" in rollout(api)["message"]
    assert "seconds" not in bake
    assert serving_revision(api) == rev(8)
    # the figures unchanged, a reconcile later: no status write (issue 32, item 8: the
    # countdown in the message and bake.seconds wrote the status on every reconcile); the
    # control: the figures were read again
    status_path = PATH + "/status"
    reads, writes = len(live.reads), len(api.writes_made())
    time.sleep(1.1)  # (the clock moves on by a second: a countdown would change; not a wait)
    reconciled(api)
    assert len(live.reads) > reads
    assert [w for w in api.writes_made()[writes:] if w[1] == status_path] == []
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


def test_the_bakes_age_is_read_on_the_operators_clock_alone(live: Live) -> None:
    """Issue 31 (one clock): the bake's start is what the operator recorded, on its clock, when
    it wrote the EndpointSlice; the API server's stamp on that slice (an hour behind here, as
    a skewed clock would put it) does not age the bake. Before, the elapsed time was the
    operator's now minus the slice's creationTimestamp: this bake would have been promoted
    at once, an hour old."""
    api = FakeApi(SETTINGS)
    _baking(api)
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    reconciled(api)  # the reconcile that writes the slice records when the bake began
    assert SLICE in api.objects
    recorded = rollout(api)["bake"]["startedAt"]
    began = dt.datetime.fromisoformat(recorded.replace("Z", "+00:00"))
    assert before <= began <= dt.datetime.now(dt.UTC)
    skewed = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    api.objects[SLICE]["metadata"]["creationTimestamp"] = skewed.strftime("%Y-%m-%dT%H:%M:%SZ")
    reads = len(live.reads)
    reconciled(api)
    assert len(live.reads) > reads  # the figures were read: the bake was judged, and goes on
    assert rollout(api)["phase"] == "Baking"
    assert rollout(api)["bake"]["startedAt"] == recorded
    assert serving_revision(api) == rev(8)
    # the control: a minute later on the operator's clock, it is promoted
    _age(api, 61)
    reconciled(api)
    assert rollout(api)["phase"] == "Promoting"
    assert serving_revision(api) == rev(16)


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
    # one Warning for the abort (Degraded's CanaryAborted quoted the same message: issue 31)
    assert [e for e in events(outcome) if e[0] == "Warning"] == [("Warning", "RolloutAborted")]
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
    _age(api, 20)  # (older than the shortest window: the figures are the bake's alone)
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


# ---- issue 32: what a bake must never promote ------------------------------------------------

# the figures: every live request answered with a 5xx (none finishes: vLLM's count and
# its latency histograms have no sample; the API server's responses count them all)
ALL_5XX = LiveFigures(requests=0, http_requests=400, http_errors=400, ttft_p99=None, itl_p99=None)
SILENT = LiveFigures(requests=0, http_requests=0, http_errors=0, ttft_p99=None, itl_p99=None)


def test_a_canary_answering_every_live_request_with_a_5xx_fails() -> None:
    # (it was Inconclusive, then promoted: 0 finished requests never reached minRequests)
    mid = judge_bake(
        LIMITS,
        Bake("t", 20, canary=ALL_5XX, stable=GOOD, recent_canary=ALL_5XX, recent_stable=GOOD),
    )
    assert mid.verdict == BAKE_FAILED
    assert "5xx share 100.0% against the stable pods' 0.0%" in mid.message
    # at the window's end with no recent half read, and with no stable figures at all (a 5xx
    # share of 0 to compare with)
    assert judge_bake(LIMITS, Bake("t", 61, canary=ALL_5XX, stable=GOOD)).verdict == BAKE_FAILED
    assert judge_bake(LIMITS, Bake("t", 61, canary=ALL_5XX)).verdict == BAKE_FAILED
    # the control: the stable pods fail as much (a shared fault, not the revision's)
    same = judge_bake(LIMITS, Bake("t", 61, canary=ALL_5XX, stable=ALL_5XX))
    assert same.verdict == BAKE_PASSED


def test_a_canary_that_stops_answering_in_the_second_half_fails() -> None:
    slow = figures(ttft_p99=5.0)
    fast = figures(ttft_p99=0.1)
    # the figures: whole-bake TTFT p99 5,000 vs 100 ms, the recent half 0 requests
    # (it was "as good as the stable pods": no sample read as "not worse")
    # (the stable pods' traffic fell in that half too: not "stopped answering", judged on the
    # whole bake at the window's end)
    quieter = figures(ttft_p99=0.1, requests=10, http_requests=10)
    end = judge_bake(
        LIMITS,
        Bake("t", 61, canary=slow, stable=fast, recent_canary=SILENT, recent_stable=quieter),
    )
    assert end.verdict == BAKE_FAILED
    assert "TTFT p99 5000 ms > 1.5 x the stable pods' 100 ms" in end.message
    # before the window's end: 40 answered before the recent half, 0 in it, while the stable
    # pods answered 40 in it (of 80): it stopped answering, failed at once, whatever latency
    whole_stable = figures(requests=80, http_requests=80)
    hung = Bake("t", 30, canary=GOOD, stable=whole_stable, recent_canary=SILENT, recent_stable=GOOD)
    verdict = judge_bake(LIMITS, hung)
    assert verdict.verdict == BAKE_FAILED
    assert "stopped answering: 0 requests in the bake's most recent half" in verdict.message
    # the controls: the traffic stopped for everyone (the stable pods answered 5 of 80 in the
    # half), or the canary had answered too few before it to expect any: still baking
    lull = dataclasses.replace(hung, recent_stable=figures(requests=5, http_requests=5))
    assert judge_bake(LIMITS, lull).verdict is None
    few = figures(requests=10, http_requests=10)
    assert judge_bake(LIMITS, dataclasses.replace(hung, canary=few)).verdict is None


def _inconclusive(api: FakeApi, live: Live, policy: str | None) -> Any:
    """16 bakes; its window ends with 3 requests to the canary."""
    bake: dict[str, Any] = {"seconds": 60, "minRequests": 20}
    if policy is not None:
        bake["whenInconclusive"] = policy
    passed_on_canary(api, rollout={"canary": {"bake": bake}})
    reconciled(api)
    live.canary = figures(requests=3, http_requests=3)
    _age(api, 61)
    return reconciled(api)


def test_an_inconclusive_bake_waits_by_default_with_a_warning_until_there_is_traffic(
    live: Live,
) -> None:
    api = FakeApi(SETTINGS)
    outcome = _inconclusive(api, live, None)
    # not promoted unseen: it bakes on, the serving pods at 8, the canary in the endpoints
    assert serving_revision(api) == rev(8)
    assert rollout(api)["phase"] == "Baking"
    assert rollout(api)["bake"]["verdict"] == "Inconclusive"
    assert "whenInconclusive: Wait" in rollout(api)["message"]
    assert SLICE in api.objects
    assert ("Warning", "BakeInconclusive") in events(outcome)
    assert ("Warning", "BakeInconclusive") not in events(reconciled(api))  # said once
    # traffic comes: judged on it then (here as good as the stable pods: promoted)
    live.canary = GOOD
    reconciled(api)
    assert rollout(api)["phase"] == "Promoting"
    assert rollout(api)["bake"]["verdict"] == "Passed"
    assert serving_revision(api) == rev(16)


def test_an_inconclusive_bake_is_promoted_or_aborted_as_the_user_says(live: Live) -> None:
    api = FakeApi(SETTINGS)
    outcome = _inconclusive(api, live, "Promote")
    assert rollout(api)["phase"] == "Promoting"
    assert serving_revision(api) == rev(16)
    assert "whenInconclusive: Promote" in rollout(api)["message"]
    assert ("Warning", "BakeInconclusive") in events(outcome)
    api = FakeApi(SETTINGS)
    outcome = _inconclusive(api, live, "Abort")
    assert rollout(api)["phase"] == "Aborted"
    assert serving_revision(api) == rev(8)
    assert "inconclusive (whenInconclusive: Abort)" in rollout(api)["message"]
    assert ("Warning", "RolloutAborted") in events(outcome)
    assert SLICE not in api.objects


class _Hung:
    """A Prometheus that accepts a connection and never answers."""

    def __enter__(self) -> str:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *_: object) -> None:
        self.sock.close()


def test_a_hung_prometheus_costs_a_read_its_client_timeout_and_a_reconcile_its_budget() -> None:
    with _Hung() as url:
        reader = PrometheusLive(url, timeout_seconds=0.5)
        start = time.monotonic()
        with pytest.raises(requests.exceptions.ConnectionError):
            reader.figures("ns", 'pod="p"', 60)
        # (without a client timeout this never returned; the bound is loose: a loaded machine)
        assert time.monotonic() - start < 30
        # past the reconcile's deadline no query is begun
        with pytest.raises(LiveBudgetError):
            reader.figures("ns", 'pod="p"', 60, deadline=time.monotonic() - 1)


# ---- issue 32, items 3 and 4: the baking pod stops serving; the record outlives the children --


def _canary_pod(api: FakeApi) -> str:
    (path,) = [p for p in api.objects if "/pods/minimal-canary-" in p]
    return path


def _now_stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unready(pod: dict[str, Any]) -> None:
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]


def _restarted(pod: dict[str, Any]) -> None:
    pod["status"]["containerStatuses"] = [
        {
            "name": "vllm",
            "restartCount": 1,
            "state": {"running": {"startedAt": _now_stamp()}},
            "lastState": {
                "terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": _now_stamp()}
            },
        }
    ]


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        (_unready, "is not Ready (its readiness probe fails)"),
        (_restarted, "restarted during the bake (exit 137, OOMKilled; restarts 1)"),
        (None, "is gone (deleted, evicted or drained)"),
    ],
)
def test_a_baking_pod_that_stops_serving_ends_the_bake_as_failed(
    live: Live, fault: Any, why: str
) -> None:
    api = FakeApi(SETTINGS)
    _baking(api)
    reconciled(api)
    _age(api, 20)
    reconciled(api)
    assert rollout(api)["phase"] == "Baking"  # the control: baking, the figures as good
    pod = _canary_pod(api)
    if fault is None:
        del api.objects[pod]
    else:
        fault(api.objects[pod])
    outcome = reconciled(api)
    assert rollout(api)["phase"] == "Aborted"
    assert rollout(api)["bake"]["verdict"] == "Failed"
    assert why in rollout(api)["message"]
    assert serving_revision(api) == rev(8)
    assert SLICE not in api.objects
    assert ("Warning", "RolloutAborted") in events(outcome)


def test_a_restart_before_the_bake_began_is_not_one_during_it(live: Live) -> None:
    api = FakeApi(SETTINGS)
    _baking(api)
    reconciled(api)
    _age(api, 20)
    pod = api.objects[_canary_pod(api)]
    _restarted(pod)
    # (it restarted a minute ago, during its benchmark run; the bake began 20 s ago)
    earlier = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)
    pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["finishedAt"] = (
        earlier.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    reconciled(api)
    assert rollout(api)["phase"] == "Baking"


def test_a_bake_whose_endpoint_and_pod_are_gone_fails_by_the_status_record(live: Live) -> None:
    # the slice pruned and the pod gone between two looks (the operator down meanwhile): the
    # status on record says the bake began; it is not begun again from zero
    api = FakeApi(SETTINGS)
    _baking(api)
    reconciled(api)
    _age(api, 20)
    reconciled(api)
    assert rollout(api)["bake"]["startedAt"]
    del api.objects[SLICE]
    _unready(api.objects[_canary_pod(api)])
    reconciled(api)
    assert rollout(api)["phase"] == "Aborted"
    assert "stopped serving during the bake" in rollout(api)["message"]
    # the verdict outlives the canary Deployment that keeps it: deleted, it stays aborted
    del api.objects[CANARY]
    for _ in range(2):
        reconciled(api)
    assert rollout(api)["phase"] == "Aborted"
    assert serving_revision(api) == rev(8)
    assert SLICE not in api.objects


def test_a_pod_replaced_after_its_run_passed_bakes_as_its_replacement(live: Live) -> None:
    api = FakeApi(SETTINGS)
    passed_on_canary(api, rollout=BAKE)
    # evicted, and its ReplicaSet's replacement Ready, before the bake begins
    old = _canary_pod(api)
    pod = api.objects.pop(old)
    pod["metadata"] = {**pod["metadata"], "name": pod["metadata"]["name"] + "b", "uid": "new"}
    pod["status"] = {**pod["status"], "podIP": "10.0.0.10"}
    api.put(old + "b", pod)
    reconciled(api)
    assert rollout(api)["phase"] == "Baking"
    (endpoint,) = api.objects[SLICE]["endpoints"]
    assert endpoint["targetRef"]["name"] == pod["metadata"]["name"]
    assert endpoint["addresses"] == ["10.0.0.10"]


def test_replace_stable_keeps_the_stable_pod_out_while_the_canary_bakes(live: Live) -> None:
    # (issue 31: the one-fewer rule held in the Canary phase only; in Baking the serving
    # Deployment went back to 3 while the canary still held the GPU, the third pod Pending)
    extra = {
        "replicas": 3,
        "rollout": {"canary": {"whenNoRoom": "ReplaceStable", **BAKE["canary"]}},
    }
    api = FakeApi(SETTINGS)
    apply_spec(api, 8, None, **extra)
    rolled_out(api)
    reconciled(api)
    apply_spec(api, 16, None, **extra)
    pod = "minimal-canary-abc-x1"
    api.put(
        _path("v1", "Pod", "ns", pod),
        {
            "metadata": {
                "name": pod,
                "namespace": "ns",
                "uid": "p",
                "creationTimestamp": _now_stamp(),
                "labels": dict(api.objects[CANARY]["spec"]["template"]["metadata"]["labels"]),
            },
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                    }
                ],
            },
        },
    )
    reconciled(api)
    assert api.objects[DEP]["spec"]["replicas"] == 2
    del api.objects[_path("v1", "Pod", "ns", pod)]
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    publish(api, run_name(svc(16, None, **extra), rev(16)), 70)
    for _ in range(2):
        reconciled(api)
        assert rollout(api)["phase"] == "Baking"
        assert api.objects[DEP]["spec"]["replicas"] == 2  # still one out while it bakes
    _age(api, 61)
    reconciled(api)
    assert (serving_revision(api), api.objects[DEP]["spec"]["replicas"]) == (rev(16), 3)


def test_a_bake_the_canary_would_take_too_much_of_the_traffic_for_is_skipped_and_said(
    live: Live,
) -> None:
    """One Ready serving pod: the canary, one endpoint more, takes about half the live traffic
    (kube-proxy spreads connections evenly). bake.maxTrafficShare bounds it: above the share the
    bake is skipped, the revision promoted on its benchmark with a Warning; at the share it
    bakes (the control: the same flow, the same pod counts)."""
    exposed = BakeSpec(seconds=60, max_traffic_share=0.25)
    assert too_exposed(exposed, 3) is None  # 1/4: within 0.25
    one = too_exposed(exposed, 1)
    assert one is not None
    assert one.verdict == BAKE_SKIPPED
    assert "about 50% of live traffic, above bake.maxTrafficShare 0.25" in one.message
    assert "it needs 3 or more" in one.message
    assert too_exposed(BakeSpec(seconds=60), 1) is None  # the default: always bake

    api = FakeApi(SETTINGS)
    passed_on_canary(api, rollout={"canary": {"bake": {"seconds": 60, "maxTrafficShare": 0.4}}})
    outcome = reconciled(api)
    assert rollout(api)["phase"] == "Promoting"
    assert rollout(api)["bake"] == {"verdict": "Skipped"}
    assert (
        "was not baked (its bake was skipped: beside 1 Ready serving pod"
        in (rollout(api)["message"])
    )
    assert ("Warning", "BakeSkipped") in events(outcome)
    assert SLICE not in api.objects
    assert serving_revision(api) == rev(16)
    assert live.reads == []  # never read: nothing was baked
    rolled_out(api)
    outcome = reconciled(api)
    assert rollout(api)["phase"] == "Promoted"
    assert rollout(api)["bake"] == {"verdict": "Skipped"}
    assert ("Warning", "BakeSkipped") not in events(outcome)  # said once

    # at the share (1/2 beside one pod): it bakes
    api = FakeApi(SETTINGS)
    passed_on_canary(api, rollout={"canary": {"bake": {"seconds": 60, "maxTrafficShare": 0.5}}})
    reconciled(api)
    assert rollout(api)["phase"] == "Baking"
    assert SLICE in api.objects


TO_ZERO = {"enabled": True, "minReplicas": 0, "idleSeconds": 600}


@pytest.mark.parametrize("at_zero", [True, False])
def test_a_spec_change_at_zero_is_measured_on_a_canary_and_promoted_without_a_bake(
    live: Live, at_zero: bool
) -> None:
    """At zero (scale to zero) a gated spec change still starts a canary, measured like any
    other; with no live traffic to bake on, a passing canary is promoted on its benchmark
    alone, and the status says so. The control: the same service serving bakes."""
    api = FakeApi(SETTINGS)
    apply_spec(api, 8, autoscaling=TO_ZERO, rollout=BAKE)
    rolled_out(api)
    reconciled(api)
    publish(api, run_name(svc(8), rev(8)), 60)
    reconciled(api)
    if at_zero:
        status = api.objects[PATH]["status"]
        status.setdefault("autoscaling", {})["zero"] = {
            "phase": "ScaledToZero",
            "since": "2030-01-01T00:00:00Z",
        }
        reconciled(api)
        assert api.objects[DEP]["spec"]["replicas"] == 0
    apply_spec(api, 16, autoscaling=TO_ZERO, rollout=BAKE)
    # measured on a canary, whether or not the serving Deployment is at zero
    assert api.objects[CANARY]["spec"]["replicas"] == 1
    assert serving_revision(api) == rev(8)
    rolled_out(api, name="minimal-canary")
    reconciled(api)
    publish(api, run_name(svc(16), rev(16)), 70)
    reconciled(api)
    if not at_zero:
        assert rollout(api)["phase"] == "Baking"
        assert SLICE in api.objects
        return
    assert rollout(api)["phase"] == "Promoting"
    assert "not baked: the service is at zero" in rollout(api)["message"]
    assert rollout(api)["bake"]["verdict"] == "Skipped"
    assert SLICE not in api.objects
    assert serving_revision(api) == rev(16)
    assert api.objects[DEP]["spec"]["replicas"] == 0  # still at zero: the next wake starts 16
    assert api.objects[PATH]["status"]["autoscaling"]["zero"]["phase"] == "ScaledToZero"
    rolled_out(api)
    reconciled(api)
    assert rollout(api)["phase"] == "Promoted"
    assert "its bake was skipped: the service is at zero" in rollout(api)["message"]
