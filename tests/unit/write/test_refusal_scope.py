"""What a refused or failed request does to the status (issue 19): only a refused write of what
serves (the Deployment, the Service) makes the service un-Ready; a refused HPA, PDB or
monitoring object is ChildrenSynced=False (and Degraded), a refused benchmark run's object is
BenchmarkComplete=False, a failed read is ChildrenSynced=False / ReadFailed with everything else
kept; and an object of a child's name that the service does not own is never written over
(NotOwned). Each is one Warning event, and a failed reconcile (the caller retries)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.chart_support import argocd_health
from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, rolled_out
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.reconcile import Event, Outcome, reconcile
from vllm_operator.render.meta import MANAGED_BY
from vllm_operator.write.apply import NotOwnedError, ReadError, _path

SETTINGS = OperatorSettings()
SVC_PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
QUOTA = "forbidden: exceeded quota: team-quota, requested: count/{0}=1, used: 4, limited: 4"
NO_BENCHMARK: dict[str, Any] = {"benchmark": {"enabled": False}}
MONITORING = "/apis/monitoring.coreos.com/v1"


def stored(api: FakeApi) -> dict[str, Any]:
    return copy.deepcopy(api.objects[SVC_PATH])


def run(api: FakeApi) -> Outcome:
    return reconcile(stored(api), api, SETTINGS)


def cond(api: FakeApi, kind: str) -> dict[str, Any]:
    conditions = stored(api).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), {})


def brief(api: FakeApi, kind: str) -> tuple[str, str]:
    c = cond(api, kind)
    return c.get("status", ""), c.get("reason", "")


def status_writes(api: FakeApi, since: int) -> list[tuple[str, str]]:
    return [r for r in api.writes_made()[since:] if r[1] == SVC_PATH + "/status"]


def with_prometheus_operator(api: FakeApi) -> None:
    api.put(
        MONITORING,
        {
            "kind": "APIResourceList",
            "resources": [{"name": "prometheusrules"}, {"name": "podmonitors"}],
        },
    )


def make(spec: dict[str, Any] | None = None, *, monitoring: bool = False) -> FakeApi:
    api = FakeApi(SETTINGS)
    api.put(SVC_PATH, body("minimal", spec=spec, generation=3))
    if monitoring:
        with_prometheus_operator(api)
    return api


def serving(api: FakeApi) -> list[Event]:
    """Two reconciles around a finished rollout (what the Deployment controller reports):
    the events of both."""
    events = list(run(api).events)
    rolled_out(api)
    return events + list(run(api).events)


# ---- (3) a refused child that does not serve -----------------------------------------------

CHILDREN = [
    pytest.param(
        {**NO_BENCHMARK, "autoscaling": {"enabled": True}},
        False,
        "/horizontalpodautoscalers/",
        "HorizontalPodAutoscaler",
        id="hpa",
    ),
    pytest.param(
        {**NO_BENCHMARK, "replicas": 2},
        False,
        "/poddisruptionbudgets/",
        "PodDisruptionBudget",
        id="pdb",
    ),
    pytest.param(NO_BENCHMARK, True, "/prometheusrules/", "PrometheusRule", id="rule"),
    pytest.param(NO_BENCHMARK, True, "/podmonitors/", "PodMonitor", id="podmonitor"),
]


@pytest.mark.parametrize(("spec", "monitoring", "fragment", "kind"), CHILDREN)
def test_a_refused_child_that_does_not_serve_leaves_ready_to_what_serves(
    spec: dict[str, Any], monitoring: bool, fragment: str, kind: str
) -> None:
    api = make(spec, monitoring=monitoring)
    message = QUOTA.format(kind.lower())
    api.deny(fragment, 403, message)
    events = serving(api)
    out = run(api)
    assert out.failed is not None  # the caller retries it with back-off
    assert out.failed.code == 403
    # Ready is what the Deployment says: it serves
    assert brief(api, "Ready") == ("True", "Available")
    assert brief(api, "Progressing") == ("False", "RolloutComplete")
    synced = cond(api, "ChildrenSynced")
    assert (synced["status"], synced["reason"]) == ("False", "ApplyFailed")
    assert synced["message"] == f"{kind} minimal: {message}"
    assert synced["observedGeneration"] == 3
    assert brief(api, "Degraded") == ("True", "ApplyFailed")
    assert cond(api, "Degraded")["message"] == synced["message"]
    # what serves was written all the same
    assert _path("apps/v1", "Deployment", "ns", "minimal") in api.objects
    assert _path("v1", "Service", "ns", "minimal") in api.objects
    # one Warning for the refusal (not one per condition it is on, nor per retry)
    warnings = [(e.type, e.reason, e.message) for e in [*events, *out.events] if e.type != "Normal"]
    assert warnings == [("Warning", "ApplyFailed", synced["message"])]
    assert "Ready" in [e.reason for e in events]
    before = len(api.writes_made())
    assert run(api).events == ()
    assert status_writes(api, before) == []
    # the refusal lifted: the child is written and the conditions say so
    api.denials.clear()
    healed = run(api)
    assert healed.failed is None
    assert brief(api, "ChildrenSynced") == ("True", "Applied")
    assert brief(api, "Degraded") == ("False", "AsExpected")
    assert brief(api, "Ready") == ("True", "Available")
    assert (kind, "created") in [(c.kind, c.action) for c in healed.changes]


def test_a_refused_benchmark_object_is_on_the_benchmark_condition_not_ready() -> None:
    api = make()
    message = 'roles.rbac.authorization.k8s.io "minimal-bench" is forbidden: ' + QUOTA.format(
        "roles"
    )
    api.deny("/roles/", 403, message)
    events = serving(api)  # the rollout is done: the revision's run starts, and is refused
    assert brief(api, "Ready") == ("True", "Available")
    bench = cond(api, "BenchmarkComplete")
    assert (bench["status"], bench["reason"]) == ("False", "ApplyFailed")
    assert bench["message"].startswith("Role minimal-")
    assert message in bench["message"]
    assert brief(api, "ChildrenSynced") == ("True", "Applied")
    assert brief(api, "Degraded") == ("False", "AsExpected")
    assert not [p for p in api.objects if "/jobs/" in p]
    warnings = [(e.reason, e.message) for e in events if e.type == "Warning"]
    assert warnings == [("ApplyFailed", bench["message"])]
    before = len(api.writes_made())
    again = run(api)
    assert again.failed is not None
    assert again.events == ()
    # the retry's refusal is the one on record: no status write (not "starting", then refused)
    assert status_writes(api, before) == []
    api.denials.clear()
    healed = run(api)
    assert healed.failed is None
    assert [p for p in api.objects if "/jobs/" in p]
    assert brief(api, "BenchmarkComplete") == ("False", "BenchmarkRunning")
    assert brief(api, "Ready") == ("True", "Available")


@pytest.mark.parametrize(
    "fragment",
    ["/deployments/minimal", "/services/minimal", "/horizontalpodautoscalers/minimal"],
    ids=["deployment", "service", "hpa"],
)
def test_a_failed_read_keeps_the_status_and_is_reported_as_read_failed(fragment: str) -> None:
    api = make({**NO_BENCHMARK, "autoscaling": {"enabled": True}})
    serving(api)
    ready = cond(api, "Ready")
    assert ready["status"] == "True"
    # a spec change whose reconcile cannot read: nothing was acted on
    obj = stored(api)
    obj["metadata"]["generation"] = 4
    obj["spec"]["replicas"] = 3
    api.put(SVC_PATH, obj)
    message = "Too many requests, please try again later."
    api.deny_reads(fragment, 429, message)
    out = run(api)
    assert isinstance(out.failed, ReadError)
    assert out.failed.code == 429
    assert cond(api, "Ready") == ready  # kept as it was, transition time included
    assert brief(api, "Degraded") == ("False", "AsExpected")
    assert stored(api)["status"]["observedGeneration"] == 3
    synced = cond(api, "ChildrenSynced")
    assert (synced["status"], synced["reason"]) == ("False", "ReadFailed")
    assert synced["message"].startswith("reading ")
    assert message in synced["message"]
    assert [(e.type, e.reason) for e in out.events] == [("Warning", "ReadFailed")]
    assert run(api).events == ()
    api.read_denials.clear()
    assert run(api).failed is None
    assert brief(api, "ChildrenSynced") == ("True", "Applied")
    assert stored(api)["status"]["observedGeneration"] == 4


# ---- (9) an object of a child's name that the service does not own ------------------------


def foreign(kind: str) -> tuple[str, str, dict[str, Any]]:
    """(api_version, path, object): someone else's object named like the service's child."""
    meta = {
        "name": "minimal",
        "namespace": "ns",
        "uid": "theirs",
        "creationTimestamp": "2029-01-01T00:00:00Z",
        "labels": {"app": "theirs"},
    }
    objects: dict[str, tuple[str, dict[str, Any]]] = {
        "Service": (
            "v1",
            {
                "selector": {"app": "theirs"},
                "ports": [{"name": "web", "port": 80, "targetPort": 8080}],
            },
        ),
        "Deployment": (
            "apps/v1",
            {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "theirs"}},
                "template": {
                    "metadata": {"labels": {"app": "theirs"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        ),
        "HorizontalPodAutoscaler": (
            "autoscaling/v2",
            {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"},
                "minReplicas": 1,
                "maxReplicas": 3,
            },
        ),
        "PodDisruptionBudget": (
            "policy/v1",
            {"minAvailable": 1, "selector": {"matchLabels": {"app": "theirs"}}},
        ),
        "PrometheusRule": ("monitoring.coreos.com/v1", {"groups": []}),
    }
    api_version, spec = objects[kind]
    obj = {"apiVersion": api_version, "kind": kind, "metadata": dict(meta), "spec": spec}
    if kind == "Deployment":
        obj["status"] = {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1}
    return api_version, _path(api_version, kind, "ns", "minimal"), obj


@pytest.mark.parametrize("kind", ["Service", "Deployment"])
def test_a_foreign_object_of_what_serves_is_not_taken_over_and_the_service_is_not_ready(
    kind: str,
) -> None:
    api = make(NO_BENCHMARK)
    _, path, theirs = foreign(kind)
    api.put(path, theirs)
    out = run(api)
    assert isinstance(out.failed, NotOwnedError)
    assert api.objects[path] == theirs  # untouched: no selector, port or owner written
    assert ("PATCH", path) not in api.requests
    ready = cond(api, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NotOwned")
    assert ready["message"] == (
        f"{kind} minimal exists and is not owned by this VLLMService (it has no owner "
        "reference): not taken over; delete or rename it"
    )
    assert brief(api, "Degraded") == ("True", "NotOwned")
    assert brief(api, "ChildrenSynced") == ("False", "NotOwned")
    assert [(e.type, e.reason, e.message) for e in out.events] == [
        ("Warning", "NotOwned", ready["message"])
    ]
    assert run(api).events == ()
    assert api.objects[path] == theirs
    # its owner deletes it: the service's own is created
    del api.objects[path]
    rolled = run(api)
    assert rolled.failed is None
    assert api.objects[path]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert brief(api, "ChildrenSynced") == ("True", "Applied")


@pytest.mark.parametrize(
    ("kind", "spec", "monitoring"),
    [
        ("HorizontalPodAutoscaler", {"autoscaling": {"enabled": True}}, False),
        ("PodDisruptionBudget", {"replicas": 2}, False),
        ("PrometheusRule", {}, True),
    ],
)
def test_a_foreign_object_of_another_child_is_not_taken_over(
    kind: str, spec: dict[str, Any], monitoring: bool
) -> None:
    api = make({**NO_BENCHMARK, **spec}, monitoring=monitoring)
    _, path, theirs = foreign(kind)
    theirs["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other", "uid": "u-other"}
    ]
    api.put(path, theirs)
    serving(api)
    out = run(api)
    assert isinstance(out.failed, NotOwnedError)
    assert api.objects[path] == theirs
    assert ("PATCH", path) not in api.requests
    assert brief(api, "Ready") == ("True", "Available")
    synced = cond(api, "ChildrenSynced")
    assert (synced["status"], synced["reason"]) == ("False", "NotOwned")
    assert synced["message"] == (
        f"{kind} minimal exists and is not owned by this VLLMService (owned by Deployment "
        "other): not taken over; delete or rename it"
    )
    # (and the prune, which deletes only what the service owns, leaves it alone too)
    assert ("DELETE", path) not in api.requests


def test_a_child_of_an_earlier_service_of_the_same_name_is_taken_over() -> None:
    """Deleted and created again before the garbage collector removed its children: the
    Deployment is the predecessor's (a VLLMService of this name), so it is this one's."""
    api = make(NO_BENCHMARK)
    run(api)
    path = _path("apps/v1", "Deployment", "ns", "minimal")
    api.objects[path]["metadata"]["ownerReferences"][0]["uid"] = "uid-of-the-deleted-one"
    out = run(api)
    assert out.failed is None
    assert ("Deployment", "updated") in [(c.kind, c.action) for c in out.changes]
    assert api.objects[path]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


class LabelledCache:
    """The watch cache as the informer keeps it: only objects carrying the operator's
    managed-by label (a server-side label selector), always synced."""

    KINDS = frozenset({"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"})

    def __init__(self, api: FakeApi) -> None:
        self.api = api
        self.reads = 0

    @staticmethod
    def _ours(obj: dict[str, Any] | None) -> bool:
        labels = (obj or {}).get("metadata", {}).get("labels") or {}
        return labels.get("app.kubernetes.io/managed-by") == MANAGED_BY

    def lookup(
        self, api_version: str, kind: str, namespace: str, name: str
    ) -> tuple[bool, dict[str, Any] | None]:
        if kind not in self.KINDS:
            return False, None
        obj = self.api.objects.get(_path(api_version, kind, namespace, name))
        return True, obj if self._ours(obj) else None

    def select(
        self, api_version: str, kind: str, namespace: str, selector: str
    ) -> list[dict[str, Any]] | None:
        return None  # (lists go to the fake API server)

    def written(self, obj: dict[str, Any]) -> None:
        pass

    def removed(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        pass


def test_absent_from_the_labelled_cache_is_read_once_before_a_create_and_never_on_a_resync() -> (
    None
):
    api = make(NO_BENCHMARK)
    api.cache = LabelledCache(api)
    _, path, theirs = foreign("Service")
    api.put(path, theirs)
    out = run(api)
    assert isinstance(out.failed, NotOwnedError)  # the cache said absent; the API server not
    assert api.objects[path] == theirs
    assert api.requests.count(("GET", path)) == 1
    del api.objects[path]
    before = len(api.requests)
    assert run(api).failed is None
    assert api.requests[before:].count(("GET", path)) == 1  # the one read before the create
    rolled_out(api)
    run(api)
    # resyncs where nothing changed: no read of the Service (the cache has it), no write
    before, writes = len(api.requests), len(api.writes_made())
    for _ in range(3):
        assert run(api).changes == ()
    assert ("GET", path) not in api.requests[before:]
    assert len(api.writes_made()) == writes


# ---- what GitOps tools make of it (deploy/argocd/health.lua) -------------------------------


def test_argocd_sees_a_refused_child_as_degraded_and_a_failed_read_as_no_change() -> None:
    api = make({**NO_BENCHMARK, "autoscaling": {"enabled": True}})
    api.deny("/horizontalpodautoscalers/", 403, QUOTA.format("horizontalpodautoscalers"))
    serving(api)
    refused = cond(api, "ChildrenSynced")
    assert argocd_health(stored(api)) == ("Degraded", f"ApplyFailed: {refused['message']}")
    api.denials.clear()
    run(api)
    healthy = argocd_health(stored(api))
    assert healthy[0] == "Healthy"
    api.deny_reads("/deployments/minimal", 429, "Too many requests, please try again later.")
    run(api)
    assert brief(api, "ChildrenSynced") == ("False", "ReadFailed")
    assert argocd_health(stored(api)) == healthy
