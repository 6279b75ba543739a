"""reconcile() against an in-memory API server (tests/unit/fake_api.py): the status is
exactly what was computed (replaced, never merged), every refused request reaches the status,
events follow transitions (each posted once), and a resync where nothing changed writes
nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, rolled_out
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.reconcile import Outcome, reconcile
from vllm_operator.write.apply import _path

SETTINGS = OperatorSettings()
SVC_PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
POLICY = (
    "deployments.apps \"minimal\" is forbidden: ValidatingAdmissionPolicy 'no-gpus' with "
    "binding 'no-gpus' denied request: GPUs are not allowed here"
)


def stored(api: FakeApi) -> dict[str, Any]:
    return copy.deepcopy(api.objects[SVC_PATH])


def run(api: FakeApi) -> Outcome:
    """One reconcile of the stored object, as the handlers do it (a fresh read)."""
    return reconcile(stored(api), api, SETTINGS)


def cond(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), {})


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi(SETTINGS)
    fake.put(SVC_PATH, body("minimal", generation=3))
    return fake


def test_the_status_is_replaced_so_stale_nested_keys_cannot_survive(api: FakeApi) -> None:
    obj = stored(api)
    # what an earlier revision's run left: a verdict, a rollback, numbers of another revision
    obj["status"] = {
        "observedGeneration": 2,
        "revision": "aaaa",
        "benchmark": {
            "revision": "aaaa",
            "passed": False,
            "failures": ["outputTokensPerSecond 1 < minimum 2"],
            "rolledBackTo": "bbbb",
            "outputTokensPerSecond": 1.0,
            "job": "minimal-bench-aaaa",
        },
        "oldTopLevelField": "x",
    }
    api.put(SVC_PATH, obj)
    run(api)
    bench = stored(api)["status"]["benchmark"]
    assert bench == {"revision": stored(api)["status"]["revision"]}  # no run of it yet
    assert "oldTopLevelField" not in stored(api)["status"]


def test_a_no_op_resync_writes_nothing(api: FakeApi) -> None:
    first = run(api)
    assert first.failed is None
    assert api.writes_made()  # a positive control: the first reconcile did write
    before = len(api.requests)
    for _ in range(3):
        again = run(api)
        assert again.changes == ()
        assert again.events == ()
    assert api.writes_made() == [r for r in api.requests[:before] if r[0] != "GET"]
    assert len(api.requests) > before  # the resyncs ran: they read


@pytest.mark.parametrize(
    ("fragment", "code", "message"),
    [
        ("/deployments/", 422, POLICY),  # a ValidatingAdmissionPolicy / webhook denial
        ("/deployments/", 403, 'deployments.apps "minimal" is forbidden: User cannot patch'),
        ("/services/", 403, 'services "minimal" is forbidden: exceeded quota: q, requested: ...'),
        ("/services/", 500, "Internal error occurred: etcdserver: request timed out"),
    ],
    ids=["policy-422", "rbac-403", "quota-403", "server-500"],
)
def test_a_refused_apply_reaches_the_status_once(
    api: FakeApi, fragment: str, code: int, message: str
) -> None:
    api.deny(fragment, code, message)
    out = run(api)
    assert out.failed is not None
    assert out.failed.code == code
    obj = stored(api)
    ready = cond(obj, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ApplyFailed")
    assert message in ready["message"]
    assert ready["observedGeneration"] == obj["status"]["observedGeneration"] == 3
    assert cond(obj, "Degraded")["reason"] == "ApplyFailed"
    assert [(e.type, e.reason) for e in out.events] == [("Warning", "ApplyFailed")]
    assert message in out.events[0].message
    # the retry fails the same way: no new event, no status write
    writes = len(api.writes_made())
    again = run(api)
    assert again.failed is not None
    assert again.events == ()
    status_writes = [r for r in api.writes_made()[writes:] if r[1].endswith("/status")]
    assert status_writes == []
    # the denial lifted: the failure leaves the status
    api.denials.clear()
    healed = run(api)
    assert healed.failed is None
    obj = stored(api)
    assert cond(obj, "Ready")["reason"] != "ApplyFailed"
    assert cond(obj, "Degraded")["status"] == "False"


def test_an_invalid_spec_is_reported_with_one_event(api: FakeApi) -> None:
    obj = stored(api)
    obj["spec"]["env"] = [{"name": "X", "valueFrom": {"bogusRef": {}}}]
    api.put(SVC_PATH, obj)
    out = run(api)
    assert out.invalid is not None
    assert "spec.env" in out.invalid
    assert [(e.type, e.reason) for e in out.events] == [("Warning", "InvalidSpec")]
    assert cond(stored(api), "Ready")["reason"] == "InvalidSpec"
    assert run(api).events == ()
    assert not any("/deployments/" in p for _, p in api.writes_made())


def test_ready_is_announced_once_per_transition(api: FakeApi) -> None:
    run(api)
    rolled_out(api)
    events = [e.reason for _ in range(3) for e in run(api).events]
    assert events.count("Ready") == 1  # (the benchmark's ConfigMap, Job etc. also start)


def test_ready_reaches_the_status_before_the_run_it_starts_is_written(api: FakeApi) -> None:
    """At fleet scale a run's six writes take seconds: the status says Ready (and that the
    run is starting) first, then what the run's writes left."""
    run(api)
    rolled_out(api)  # with the one Ready pod of the revision, for the run to measure
    before = len(api.requests)
    statuses: list[dict[str, Any]] = []
    patch = api._patch

    def recording(path: str, body: object, content_type: str, manager: str = "") -> dict[str, Any]:
        if path == SVC_PATH + "/status":
            statuses.append(copy.deepcopy(body[0]["value"]))  # type: ignore[index]
        return patch(path, body, content_type, manager)

    api._patch = recording  # type: ignore[method-assign]
    out = run(api)
    writes = [p for m, p in api.requests[before:] if m != "GET"]
    job = next(i for i, p in enumerate(writes) if "/jobs/" in p)
    assert writes.index(SVC_PATH + "/status") < job  # the Job (written: a positive control)
    interim, final = statuses
    assert cond({"status": interim}, "Ready")["status"] == "True"
    assert cond({"status": interim}, "BenchmarkComplete")["message"] == (
        "starting the benchmark Job"
    )
    assert cond({"status": final}, "BenchmarkComplete")["reason"] == "BenchmarkRunning"
    assert [e.reason for e in out.events].count("Ready") == 1
    assert "BenchmarkStarted" in [e.reason for e in out.events]


def test_a_name_with_a_dot_is_an_invalid_spec_and_nothing_is_applied() -> None:
    """The CRD refuses it; an object stored under an older CRD is reported, not applied."""
    api = FakeApi(SETTINGS)
    obj = body("minimal", generation=1)
    obj["metadata"]["name"] = "qwen2.5-7b"
    path = _path(API_VERSION, "VLLMService", "ns", "qwen2.5-7b")
    api.put(path, obj)
    out = reconcile(copy.deepcopy(obj), api, SETTINGS)
    assert out.invalid is not None
    assert out.invalid.startswith("metadata.name: ")
    assert [p for _, p in api.writes_made()] == [path + "/status"]


MONITORING = "/apis/monitoring.coreos.com/v1"
RULE_PATH = _path("monitoring.coreos.com/v1", "PrometheusRule", "ns", "minimal")
POD_MONITOR_PATH = _path("monitoring.coreos.com/v1", "PodMonitor", "ns", "minimal")


def with_prometheus_operator(api: FakeApi) -> None:
    """The discovery document the API server serves once the Prometheus Operator's CRDs
    are installed."""
    api.put(
        MONITORING,
        {
            "kind": "APIResourceList",
            "groupVersion": "monitoring.coreos.com/v1",
            "resources": [
                {"name": "prometheusrules", "namespaced": True, "kind": "PrometheusRule"},
                {"name": "podmonitors", "namespaced": True, "kind": "PodMonitor"},
                {"name": "servicemonitors", "namespaced": True, "kind": "ServiceMonitor"},
            ],
        },
    )


def test_without_the_prometheus_operator_the_status_says_so_and_nothing_is_tried(
    api: FakeApi,
) -> None:
    outcome = run(api)
    assert outcome.failed is None
    assert cond(stored(api), "Monitoring") == {
        "type": "Monitoring",
        "status": "False",
        "reason": "PrometheusOperatorMissing",
        "message": "the Prometheus Operator's CRDs (prometheusrules, "
        "podmonitors.monitoring.coreos.com) are not installed: no PrometheusRule or PodMonitor "
        "for this service; install the rules file deploy/monitoring/vllm-alerts.rules.yaml and "
        "the scrape configs deploy/monitoring/prometheus-scrape-configs.yaml in your "
        "Prometheus instead",
        "lastTransitionTime": cond(stored(api), "Monitoring")["lastTransitionTime"],
        "observedGeneration": 3,
    }
    # one discovery read, nothing listed, applied or pruned in the group
    assert [r for r in api.requests if "monitoring.coreos.com" in r[1]] == [("GET", MONITORING)]


def test_with_the_prometheus_operator_its_objects_are_applied_and_pruned(api: FakeApi) -> None:
    with_prometheus_operator(api)
    outcome = run(api)
    assert {(c.kind, c.action) for c in outcome.changes} >= {
        ("PrometheusRule", "created"),
        ("PodMonitor", "created"),
    }
    assert api.objects[RULE_PATH]["metadata"]["ownerReferences"][0]["kind"] == "VLLMService"
    assert api.objects[POD_MONITOR_PATH]["spec"]["podMetricsEndpoints"][0]["port"] == "http"
    assert (
        cond(stored(api), "Monitoring")["status"],
        cond(stored(api), "Monitoring")["reason"],
    ) == (
        "True",
        "Rendered",
    )
    # a resync writes nothing
    before = len(api.writes_made())
    assert run(api).changes == ()
    assert len(api.writes_made()) == before
    # monitoring switched off: both pruned, and the condition goes away
    obj = stored(api)
    obj["spec"]["monitoring"] = {"enabled": False}
    obj["metadata"]["generation"] = 4
    api.put(SVC_PATH, obj)
    outcome = run(api)
    assert {(c.kind, c.action) for c in outcome.changes} == {
        ("PrometheusRule", "deleted"),
        ("PodMonitor", "deleted"),
    }
    assert RULE_PATH not in api.objects
    assert POD_MONITOR_PATH not in api.objects
    assert cond(stored(api), "Monitoring") == {}


def test_the_outcome_carries_the_autoscaler_state_for_the_operator_gauge(api: FakeApi) -> None:
    obj = stored(api)
    obj["spec"]["autoscaling"] = {"enabled": True}
    api.put(SVC_PATH, obj)
    assert run(api).scaling_active is None  # the HPA controller has not spoken yet
    hpa_path = _path("autoscaling/v2", "HorizontalPodAutoscaler", "ns", "minimal")
    live = api.objects[hpa_path]
    live["status"] = {
        "conditions": [
            {
                "type": "ScalingActive",
                "status": "False",
                "reason": "FailedGetPodsMetric",
                "message": "no custom metrics API (custom.metrics.k8s.io) registered",
            }
        ]
    }
    outcome = run(api)
    assert outcome.scaling_active == "False"
    assert outcome.rolled_back_to is None
    assert cond(stored(api), "AutoscalingActive")["reason"] == "FailedGetPodsMetric"
