"""Scale to zero's phases (decide/zero.py): idle -> zero only with the holder Ready and
Prometheus readable, a wake -> one replica, Ready -> the holder leaves the path."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.builders import body, service
from tests.unit.fake_api import FakeApi, rolled_out
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import WAKE_ANNOTATION, Service
from vllm_operator.decide.zero import SCALED_TO_ZERO, SERVING, WAKING, ZeroSeen, decide_zero
from vllm_operator.observe.live import idle_queries, is_idle
from vllm_operator.reconcile import reconcile
from vllm_operator.render.autoscaling import render_hpa
from vllm_operator.render.holder import holder_ports, holds_for
from vllm_operator.write.apply import _path

ZERO = {"autoscaling": {"enabled": True, "minReplicas": 0, "idleSeconds": 600}}
NOW = "2030-01-01T01:00:00Z"
SETTINGS = OperatorSettings(prometheus_url="http://prometheus.invalid:9090")
PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP = _path("apps/v1", "Deployment", "ns", "minimal")


def test_only_a_service_with_min_replicas_0_goes_to_zero() -> None:
    assert decide_zero(service(), ZeroSeen(idle=True, ready_pods=1), NOW) is None
    assert decide_zero(service(spec={"autoscaling": {"enabled": True}}), ZeroSeen(), NOW) is None
    with pytest.raises(
        ValidationError, match=r"minReplicas 0 \(scale to zero\) needs autoscaling\.enabled"
    ):
        service(spec={"autoscaling": {"minReplicas": 0}})
    # the HPA itself scales from 1 (autoscaling/v2 cannot scale a target at 0)
    hpa = render_hpa(service(spec=ZERO), OperatorSettings())
    assert hpa is not None
    assert hpa["spec"]["minReplicas"] == 1


def test_idle_for_the_period_goes_to_zero_with_the_holder_in_the_path() -> None:
    svc = service(spec=ZERO)
    since = "2030-01-01T00:50:00Z"  # serving for 600 s by NOW
    busy = decide_zero(svc, ZeroSeen(since=since, idle=False, ready_pods=1, holder_ready=True), NOW)
    assert busy is not None
    assert (busy.phase, busy.replicas, busy.holder_in_path) == (SERVING, None, False)
    # idle over the window but serving for less than it (just created or woken): not yet
    young = decide_zero(
        svc,
        ZeroSeen(since="2030-01-01T00:55:00Z", idle=True, ready_pods=1, holder_ready=True),
        NOW,
    )
    assert young is not None
    assert young.phase == SERVING
    idle = decide_zero(svc, ZeroSeen(since=since, idle=True, ready_pods=1, holder_ready=True), NOW)
    assert idle is not None
    assert (idle.phase, idle.since, idle.replicas, idle.holder_in_path) == (
        SCALED_TO_ZERO,
        NOW,
        0,
        True,
    )


def test_no_zero_without_the_holder_or_without_prometheus() -> None:
    svc = service(spec=ZERO)
    since = "2030-01-01T00:00:00Z"
    no_holder = decide_zero(svc, ZeroSeen(since=since, idle=True, ready_pods=1), NOW)
    assert no_holder is not None
    assert (no_holder.phase, no_holder.replicas) == (SERVING, None)
    assert "holder has no Ready pod" in no_holder.message
    blind = decide_zero(svc, ZeroSeen(since=since, idle=None, ready_pods=1, holder_ready=True), NOW)
    assert blind is not None
    assert blind.phase == SERVING
    assert "Prometheus" in blind.message


def test_a_wake_since_zero_starts_one_replica_and_ready_ends_the_hold() -> None:
    svc = service(spec=ZERO)
    since = "2030-01-01T00:30:00Z"
    at_zero = ZeroSeen(phase=SCALED_TO_ZERO, since=since, holder_ready=True)
    stays = decide_zero(svc, at_zero, NOW)
    assert stays is not None
    assert (stays.phase, stays.since, stays.replicas, stays.holder_in_path) == (
        SCALED_TO_ZERO,
        since,
        0,
        True,
    )
    # a wake asked before the service went to zero (the last burst's) does not count
    old = ZeroSeen(phase=SCALED_TO_ZERO, since=since, wake_requested_at="2030-01-01T00:10:00Z")
    old_plan = decide_zero(svc, old, NOW)
    assert old_plan is not None
    assert old_plan.phase == SCALED_TO_ZERO
    woken = decide_zero(
        svc, ZeroSeen(phase=SCALED_TO_ZERO, since=since, wake_requested_at=NOW), NOW
    )
    assert woken is not None
    assert (woken.phase, woken.replicas, woken.holder_in_path) == (WAKING, 1, True)
    starting = decide_zero(svc, ZeroSeen(phase=WAKING, since=NOW, ready_pods=0), NOW)
    assert starting is not None
    assert (starting.phase, starting.replicas, starting.holder_in_path) == (WAKING, 1, True)
    ready = decide_zero(svc, ZeroSeen(phase=WAKING, since=NOW, ready_pods=1), NOW)
    assert ready is not None
    assert (ready.phase, ready.replicas, ready.holder_in_path) == (SERVING, None, False)


def test_idle_is_no_request_finished_running_or_waiting_and_unknown_without_series() -> None:
    q = idle_queries("ns", "chat", "15m")
    assert q["finished"] == (
        'sum(increase(vllm:request_success_total{namespace="ns",service="chat"}[15m]))'
    )
    assert is_idle({"finished": 0.0, "busy": 0.0}) is True
    assert is_idle({"finished": 0.3, "busy": 0.0}) is True  # (an extrapolated 0)
    assert is_idle({"finished": 3.0, "busy": 0.0}) is False
    assert is_idle({"finished": 0.0, "busy": 1.0}) is False
    assert is_idle({"finished": None, "busy": 0.0}) is None


def test_the_holders_wake_annotation_is_read() -> None:
    b = body(spec=ZERO)
    b["metadata"]["annotations"] = {WAKE_ANNOTATION: NOW}
    assert Service.from_body(b).wake_requested_at == NOW


# ---- through the reconcile ---------------------------------------------------------------


class Idle:
    """Prometheus as the test sets it: whether the service had a request (observe/live.py)."""

    min_window_seconds = 8

    def __init__(self) -> None:
        self.state: bool | None = False
        self.reads = 0

    def figures(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("no bake here")

    def workload(self, *_: Any, **__: Any) -> Any:
        return None

    def idle(self, namespace: str, service: str, window_seconds: int) -> bool | None:
        self.reads += 1
        return self.state


def test_the_reconcile_takes_a_service_to_zero_and_back(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = Idle()
    monkeypatch.setattr("vllm_operator.reconcile.live_reader", lambda url, interval: reader)
    clock = {"now": "2030-01-01T00:00:00Z"}
    monkeypatch.setattr("vllm_operator.reconcile._now", lambda: clock["now"])
    api = FakeApi(SETTINGS)
    obj = body("minimal", {**ZERO, "benchmark": {"enabled": False}})
    api.put(PATH, obj)

    def reconciled() -> dict[str, Any]:
        reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)
        return dict(api.objects[PATH]["status"]["autoscaling"]["zero"])

    assert reconciled()["phase"] == SERVING
    rolled_out(api)
    assert reader.reads  # positive control: idleness was read
    # the namespace's holder and the -ready Service are there from the start
    holder = api.objects[_path("apps/v1", "Deployment", "ns", "vllm-holder")]
    assert _path("v1", "Service", "ns", "minimal-ready") in api.objects
    # idle for the period, but the holder has no Ready pod: not to zero, and says why
    reader.state = True
    clock["now"] = "2030-01-01T01:00:00Z"
    assert "holder has no Ready pod" in reconciled()["message"]
    # the holder's pod Ready (for the current set of services): to zero, the slice first
    annotations = holder["spec"]["template"]["metadata"]["annotations"]
    api.put(
        _path("v1", "Pod", "ns", "vllm-holder-1"),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "vllm-holder-1",
                "namespace": "ns",
                "uid": "hp1",
                "labels": holder["spec"]["template"]["metadata"]["labels"],
                "annotations": annotations,
            },
            "status": {
                "podIP": "10.1.0.9",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    zero = reconciled()
    assert zero["phase"] == SCALED_TO_ZERO
    assert api.objects[DEP]["spec"]["replicas"] == 0
    # the next reconcile, while the Deployment's status still counts the pod going away: at
    # zero it stays (seen on the real node: a lagging Ready count flipped it back)
    assert api.objects[DEP]["status"]["readyReplicas"] == 1
    assert reconciled()["phase"] == SCALED_TO_ZERO
    assert api.objects[DEP]["spec"]["replicas"] == 0
    slice_ = api.objects[_path("discovery.k8s.io/v1", "EndpointSlice", "ns", "minimal-holder")]
    assert slice_["endpoints"][0]["addresses"] == ["10.1.0.9"]
    # a held request's wake: one replica, the holder still in the path
    woke = copy.deepcopy(api.objects[PATH])
    woke["metadata"]["annotations"] = {WAKE_ANNOTATION: "2030-01-01T01:00:05Z"}
    api.put(PATH, woke)
    clock["now"] = "2030-01-01T01:00:06Z"
    assert reconciled()["phase"] == WAKING
    assert api.objects[DEP]["spec"]["replicas"] == 1
    assert _path("discovery.k8s.io/v1", "EndpointSlice", "ns", "minimal-holder") in api.objects
    # the pod Ready: serving, the holder's slice gone
    rolled_out(api)
    assert reconciled()["phase"] == SERVING
    assert _path("discovery.k8s.io/v1", "EndpointSlice", "ns", "minimal-holder") not in api.objects


def _holder_pod(name: str, ip: str, holds: dict[str, int], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {"app.kubernetes.io/name": "vllm-holder"},
            "annotations": {"serving.vllm-operator.dev/holds-for": holds_for(holds)},
            **meta,
        },
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_the_slice_lists_every_ready_holder_pod_that_holds_the_service_at_its_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the holder rolls to a new set of services, a pod started for the old set still
    holds this service (at the same port); a pod that holds it at another port, holds only
    others, or is terminating is not in its slice."""
    reader = Idle()
    reader.state = True
    monkeypatch.setattr("vllm_operator.reconcile.live_reader", lambda url, interval: reader)
    clock = {"now": "2030-01-01T00:00:00Z"}
    monkeypatch.setattr("vllm_operator.reconcile._now", lambda: clock["now"])
    api = FakeApi(SETTINGS)
    api.put(PATH, body("minimal", {**ZERO, "benchmark": {"enabled": False}}))
    other = body("minimal", {**ZERO, "benchmark": {"enabled": False}})
    other["metadata"].update(name="other", uid="uid-other")
    api.put(_path(API_VERSION, "VLLMService", "ns", "other"), other)
    reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)
    rolled_out(api)
    both = [Service.from_body(api.objects[PATH]), Service.from_body(other)]
    port = holder_ports(both)["minimal"]
    assert holder_ports([both[0]])["minimal"] == port  # (its port alone and beside "other")
    gone = {"deletionTimestamp": "2030-01-01T00:59:00Z"}
    for pod in (
        _holder_pod("vllm-holder-old", "10.1.0.1", {"minimal": port}),  # the old set
        _holder_pod("vllm-holder-new", "10.1.0.2", holder_ports(both)),  # the new set
        _holder_pod("vllm-holder-moved", "10.1.0.3", {"minimal": port + 1}),
        _holder_pod("vllm-holder-others", "10.1.0.4", {"other": holder_ports(both)["other"]}),
        _holder_pod("vllm-holder-leaving", "10.1.0.5", {"minimal": port}, **gone),
    ):
        api.put(_path("v1", "Pod", "ns", pod["metadata"]["name"]), pod)
    clock["now"] = "2030-01-01T01:00:00Z"
    reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)
    assert api.objects[PATH]["status"]["autoscaling"]["zero"]["phase"] == SCALED_TO_ZERO
    slice_ = api.objects[_path("discovery.k8s.io/v1", "EndpointSlice", "ns", "minimal-holder")]
    assert [e["targetRef"]["name"] for e in slice_["endpoints"]] == [
        "vllm-holder-new",
        "vllm-holder-old",
    ]
    assert slice_["ports"][0]["port"] == port
