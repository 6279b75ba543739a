"""covers(desired, live): the check that lets a resync make zero writes; Writer.apply's use of
it (with a recording stand-in for the HTTP call); and reconcile's status patch and events."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.unit.builders import service
from vllm_operator.api.records import Target
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.decide.policy import Start
from vllm_operator.reconcile import Event, _events
from vllm_operator.render.deployment import render_deployment
from vllm_operator.write.apply import Change, Writer, covers

SETTINGS = OperatorSettings(cluster_domain="cluster.local")


def rendered() -> dict[str, Any]:
    return render_deployment(service("minimal"), SETTINGS)


def as_the_api_server_returns_it(desired: dict[str, Any]) -> dict[str, Any]:
    """The rendered Deployment with the fields the API server and controllers add."""
    # what the operator applied: the rendered object plus its desired-hash annotation
    live = copy.deepcopy(Writer(None, SETTINGS).stamp(desired))
    live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "1"
    live["metadata"].update(
        uid="d-1",
        resourceVersion="42",
        generation=1,
        creationTimestamp="2030-01-01T00:00:00Z",
        managedFields=[{"manager": "vllm-operator", "operation": "Apply"}],
    )
    pod = live["spec"]["template"]["spec"]
    pod.update(
        restartPolicy="Always",
        dnsPolicy="ClusterFirst",
        schedulerName="default-scheduler",
        serviceAccountName="default",
    )
    pod["securityContext"]["supplementalGroupsPolicy"] = "Merge"  # a default it adds
    pod["volumes"][1]["emptyDir"]["medium"] = ""  # hypothetical default inside a nested dict
    (ctr,) = pod["containers"]
    ctr.setdefault("terminationMessagePath", "/dev/termination-log")  # defaults it adds
    ctr.setdefault("terminationMessagePolicy", "File")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        ctr[probe]["httpGet"]["scheme"] = "HTTP"
    ctr["resources"] = {  # re-spelled quantities
        "requests": {"nvidia.com/gpu": 1},
        "limits": {"nvidia.com/gpu": "1"},
    }
    # name-keyed lists come back in another order, with injected items
    ctr["env"] = [{"name": "INJECTED", "value": "x"}, *ctr["env"]]
    ctr["volumeMounts"] = list(reversed(ctr["volumeMounts"]))
    pod["containers"].append({"name": "sidecar", "image": "proxy"})
    live["status"] = {"replicas": 1, "observedGeneration": 1}
    return live


def test_covers_a_live_object_with_defaults() -> None:
    desired = rendered()
    assert covers(desired, as_the_api_server_returns_it(desired))
    assert covers(desired, copy.deepcopy(desired))


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["spec"].update(replicas=2),
        lambda d: d["spec"]["template"]["spec"]["containers"][0].update(image="other"),
        lambda d: d["spec"]["template"]["spec"]["containers"][0].pop("lifecycle"),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["args"].append("--x"),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["args"].reverse(),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"].clear(),
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["env"][-1].update(value="/x"),
        lambda d: d["spec"]["template"]["spec"]["tolerations"].append({"key": "more"}),
        lambda d: d["metadata"]["labels"].pop("app.kubernetes.io/part-of"),
        lambda d: d["spec"]["template"]["metadata"].pop("annotations"),
        lambda d: d["spec"]["template"]["spec"].update(containers={"name": "vllm"}),
    ],
    ids=[
        "replicas",
        "image",
        "missing-lifecycle",
        "extra-arg",
        "args-order",
        "env-emptied",
        "env-value",
        "extra-toleration",
        "missing-label",
        "missing-annotations",
        "list-became-dict",
    ],
)
def test_does_not_cover_a_differing_or_missing_field(change: Any) -> None:
    desired = rendered()
    live = as_the_api_server_returns_it(desired)
    change(live)
    assert not covers(desired, live)


def test_desired_fields_missing_from_live() -> None:
    assert not covers({"a": 1}, {})
    assert not covers({"a": {"b": 1}}, {"a": {}})
    assert not covers({"a": {"b": None}}, {"a": {}})  # even a null must be there
    assert covers({"a": None}, {"a": None})
    assert covers({}, {"anything": 1})


@pytest.mark.parametrize(
    ("desired", "live"),
    [
        ("1000m", "1"),
        ("1", "1000m"),
        ("500m", "0.5"),
        ("1Gi", "1073741824"),
        ("1Gi", 1073741824),
        ("1k", "1000"),
        ("1e3", "1k"),
        ("16Gi", "16384Mi"),
    ],
)
def test_quantities_spelled_differently_are_equal(desired: str, live: object) -> None:
    assert covers(desired, live, ("resources", "limits", "memory"))
    assert covers(desired, live, ("emptyDir", "sizeLimit"))
    assert covers(
        {"resources": {"limits": {"memory": desired}}}, {"resources": {"limits": {"memory": live}}}
    )


@pytest.mark.parametrize(
    ("desired", "live"),
    [("1Gi", "1G"), ("1", "2"), ("100m", "1"), ("8Gi", "8"), ("abc", "abd")],
)
def test_different_quantities_and_strings_differ(desired: str, live: str) -> None:
    assert not covers(desired, live)
    assert not covers(desired, live, ("resources", "requests", "cpu"))


@pytest.mark.parametrize(
    ("desired", "live"),
    [("1000m", "1"), ("1e3", "1k"), ("7e65125782", "7e65125783"), ("1", "1.0")],
)
def test_strings_outside_quantity_fields_are_compared_as_strings(desired: str, live: str) -> None:
    """Only where the schema says quantity: an env value, a label, an annotation (a revision
    hash such as 7e65125782) is the string it is."""
    for path in [
        ("spec", "template", "spec", "containers", "env", "value"),
        ("metadata", "labels", "vllm-operator.dev/revision"),
        ("metadata", "annotations", "vllm-operator.dev/desired-hash"),
        ("spec", "template", "spec", "containers", "args"),
    ]:
        assert not covers(desired, live, path)


@pytest.mark.timeout(60, method="thread")  # a C-level stall ignores signals
def test_a_huge_exponent_is_refused_before_any_arithmetic() -> None:
    """A quantity field holding 9e999999999999 (which, computed, would never finish) is not a
    quantity: refused at once, so it is a difference, not a stall."""
    assert not covers("9e999999999999", "9e999999999998", ("resources", "limits", "memory"))
    assert not covers("1e-999999999999", "1n", ("resources", "limits", "memory"))
    assert covers("1e64", "1e64", ("resources", "limits", "memory"))  # the same string
    assert covers("1e99", "10e98", ("resources", "limits", "memory"))  # the bound itself (99)
    # the stall as it was seen: a revision label shaped like a number, first in the walk
    desired = {"metadata": {"labels": {"vllm-operator.dev/revision": "9e999999999999"}}}
    assert not covers(desired, {"metadata": {"labels": {"vllm-operator.dev/revision": "abc"}}})


def test_name_keyed_lists_match_by_name_in_any_order() -> None:
    desired = [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]
    assert covers(desired, [{"name": "b", "value": "2"}, {"name": "a", "value": "1"}])
    # extra live items (injected sidecars, env) and extra live fields are fine
    assert covers(
        desired,
        [
            {"name": "z", "value": "9"},
            {"name": "b", "value": "2", "extra": True},
            {"name": "a", "value": "1"},
        ],
    )
    assert not covers(desired, [{"name": "a", "value": "1"}])
    assert not covers(desired, [{"name": "a", "value": "1"}, {"name": "b", "value": "3"}])
    assert not covers(desired, [{"name": "a", "value": "1"}, "b"])
    assert not covers(desired, {"a": {"value": "1"}})


def test_name_keyed_lists_with_a_duplicate_name_use_the_last_live_item() -> None:
    """Two live items of one name: only the last is compared (documents current behaviour;
    the renderer never emits two items of one name)."""
    desired = [{"name": "a", "value": "1"}]
    assert covers(desired, [{"name": "a", "value": "0"}, {"name": "a", "value": "1"}])
    assert not covers(desired, [{"name": "a", "value": "1"}, {"name": "a", "value": "0"}])


def test_plain_lists_compare_in_order_and_by_length() -> None:
    assert covers(["--a", "1"], ["--a", "1"])
    assert not covers(["--a", "1"], ["1", "--a"])
    assert not covers(["--a", "1"], ["--a", "1", "--b"])
    assert not covers(["--a", "1", "--b"], ["--a", "1"])
    assert covers([], [])
    assert not covers([], ["x"])  # an empty desired list is not name-keyed
    # dicts without a name (tolerations) are compared position by position
    tol = [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]
    assert covers(tol, [{**tol[0], "effect": ""}, tol[1]])
    assert not covers(tol, list(reversed(tol)))
    # one item without a name makes the whole list positional
    mixed = [{"name": "a"}, {"key": "b"}]
    assert covers(mixed, [{"name": "a"}, {"key": "b"}])
    assert not covers(mixed, [{"key": "b"}, {"name": "a"}])
    assert not covers(["x"], "x")


def test_int_and_string_handling() -> None:
    """As implemented: in a quantity field a desired string is compared as a quantity against
    a live string or int (elsewhere as the string it is); a desired int must equal the live
    value (Python equality, so 1 == True == 1.0)."""
    q = ("resources", "limits", "cpu")
    assert covers("8", 8, q)
    assert covers("8", "08", q)
    assert covers("0.9", "0.90", q)
    assert not covers("8", 8)
    assert not covers("8", "08")
    assert not covers("8", 8.0, q)  # a float is never parsed as a quantity
    assert not covers(8, "8")
    assert not covers("8", 8.0)  # a float is never parsed as a quantity
    assert covers(8, 8.0)
    assert covers(1, True)
    assert covers(True, 1)
    assert not covers("1", True)
    assert not covers("true", True)
    assert not covers("", 0)
    assert not covers(None, "x")
    assert covers(None, None)


def test_an_omitted_field_is_not_drift() -> None:
    """covers only checks what desired has: a field the renderer stopped emitting (here the
    API key variable after spec.apiKey was removed) still covers the old live object."""
    with_key = render_deployment(service("minimal", {"apiKey": {"name": "api"}}), SETTINGS)
    without_key = rendered()
    assert covers(without_key, with_key)
    # (the same shutdown timeout: the args stay; only the preStop pause is left out)
    no_drain = render_deployment(
        service("minimal", {"drainSeconds": 0, "shutdownTimeoutSeconds": 105}), SETTINGS
    )
    assert covers(no_drain, without_key)


# ---- Writer.apply --------------------------------------------------------------------------


class RecordingWriter(Writer):
    """A Writer whose HTTP call is recorded; GETs answer 404 unless `live` is set."""

    def __init__(self, live: dict[str, Any] | None = None) -> None:
        super().__init__(api=None, settings=SETTINGS)  # type: ignore[arg-type]
        self.live = live
        self.calls: list[tuple[str, str, list[tuple[str, str]] | None, str]] = []

    def _call(
        self,
        method: str,
        path: str,
        body: object = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        self.calls.append((method, path, query, content_type))
        if method == "GET":
            if self.live is None:
                raise ApiException(status=404, reason="Not Found")
            return copy.deepcopy(self.live)
        return {}


def test_apply_skips_a_covered_object() -> None:
    desired = rendered()
    writer = RecordingWriter()
    assert writer.apply(desired, live=as_the_api_server_returns_it(desired)) is None
    assert writer.calls == []
    assert writer.writes == 0


def test_apply_reads_live_when_not_given() -> None:
    desired = rendered()
    writer = RecordingWriter(live=as_the_api_server_returns_it(desired))
    assert writer.apply(desired) is None
    assert [m for m, *_ in writer.calls] == ["GET"]
    assert writer.writes == 0


def test_apply_creates_with_server_side_apply() -> None:
    writer = RecordingWriter()
    assert writer.apply(rendered()) == Change("Deployment", "minimal", "created")
    assert writer.calls[-1] == (
        "PATCH",
        "/apis/apps/v1/namespaces/ns/deployments/minimal",
        [("fieldManager", "vllm-operator"), ("force", "true")],
        "application/apply-patch+yaml",
    )
    assert writer.writes == 1


def test_apply_updates_a_drifted_object() -> None:
    desired = rendered()
    live = as_the_api_server_returns_it(desired)
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "edited-by-hand"
    writer = RecordingWriter()
    assert writer.apply(desired, live=live) == Change("Deployment", "minimal", "updated")
    assert writer.writes == 1


def test_apply_writes_when_a_rendered_field_was_removed() -> None:
    with_key = render_deployment(service("minimal", {"apiKey": {"name": "api"}}), SETTINGS)
    writer = RecordingWriter()
    change = writer.apply(rendered(), live=as_the_api_server_returns_it(with_key))
    assert change == Change("Deployment", "minimal", "updated")


# ---- reconcile: events (the status write: test_reconcile.py) --------------------------


def cond(kind: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2030-01-01T00:00:00Z",
        "observedGeneration": 1,
    }


READY = cond("Ready", "True", "Available", "2/2 replicas serve m")
NOT_READY = cond("Ready", "False", "RolloutInProgress", "1/2 replicas updated, 1 available")
HEALTHY = cond("Degraded", "False", "AsExpected")
UNSCHEDULABLE = cond("Degraded", "True", "Unschedulable", "pod p: 0/1 nodes")
CRASHING = cond("Degraded", "True", "CrashLoopBackOff", "pod p: back-off")


def st(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"conditions": list(conditions)}


def test_one_event_per_change() -> None:
    changes = [
        Change("Deployment", "x", "created"),
        Change("Service", "x", "updated"),
        Change("HorizontalPodAutoscaler", "x", "deleted"),
    ]
    same = st(NOT_READY, HEALTHY)
    assert _events(same, same, changes) == [
        Event("Normal", "DeploymentCreated", "Deployment x created"),
        Event("Normal", "ServiceUpdated", "Service x updated"),
        Event("Normal", "HorizontalPodAutoscalerDeleted", "HorizontalPodAutoscaler x deleted"),
    ]


def test_ready_event_only_on_the_transition_to_ready() -> None:
    assert _events(st(NOT_READY, HEALTHY), st(READY, HEALTHY), []) == [
        Event("Normal", "Ready", "2/2 replicas serve m")
    ]
    assert _events({}, st(READY, HEALTHY), []) == [Event("Normal", "Ready", "2/2 replicas serve m")]
    assert _events(st(READY, HEALTHY), st(READY, HEALTHY), []) == []
    assert _events(st(READY, HEALTHY), st(NOT_READY, HEALTHY), []) == []
    assert _events({}, st(NOT_READY, HEALTHY), []) == []


def test_warning_on_degraded_transitions() -> None:
    assert _events(st(NOT_READY, HEALTHY), st(NOT_READY, UNSCHEDULABLE), []) == [
        Event("Warning", "Unschedulable", "pod p: 0/1 nodes")
    ]
    assert _events(st(NOT_READY, UNSCHEDULABLE), st(NOT_READY, UNSCHEDULABLE), []) == []
    assert _events(st(NOT_READY, UNSCHEDULABLE), st(NOT_READY, HEALTHY), []) == []
    # a new reason while still degraded is a new warning (status and reason are compared)
    assert _events(st(NOT_READY, UNSCHEDULABLE), st(NOT_READY, CRASHING), []) == [
        Event("Warning", "CrashLoopBackOff", "pod p: back-off")
    ]


def test_change_events_come_before_condition_events() -> None:
    events = _events(
        st(NOT_READY, UNSCHEDULABLE), st(READY, HEALTHY), [Change("Deployment", "x", "updated")]
    )
    assert events == [
        Event("Normal", "DeploymentUpdated", "Deployment x updated"),
        Event("Normal", "Ready", "2/2 replicas serve m"),
    ]


def test_a_run_started_is_one_event_not_one_per_part() -> None:
    changes = [
        Change("ConfigMap", "m-bench-abc-record", "created"),
        Change("ConfigMap", "m-bench-abc", "created"),
        Change("ServiceAccount", "m-bench", "created"),
        Change("Role", "m-bench", "updated"),
        Change("RoleBinding", "m-bench", "created"),
        Change("Job", "m-bench-abc", "created"),
    ]
    start = Start(run="m-bench-abc", revision="abc", target=Target("m-1", "u", "10.0.0.9", 8000))
    same = st(READY, HEALTHY)
    assert _events(same, same, changes, start) == [
        Event("Normal", "BenchmarkStarted", "Job m-bench-abc measures revision abc on pod m-1")
    ]
    # a run stopped is still reported
    stop = [Change("Job", "m-bench-old", "deleted")]
    assert _events(same, same, stop) == [Event("Normal", "JobDeleted", "Job m-bench-old deleted")]


def test_empty_values_the_api_server_omits_are_not_drift() -> None:
    """EnvVar.value and Toleration.value are `omitempty`: the API server stores `value: ""`
    as no key at all, so a live object without it is what applying `""` leaves."""
    desired = {
        "env": [{"name": "EMPTY", "value": ""}],
        "tolerations": [{"key": "gpu", "operator": "Exists", "value": "", "effect": "NoSchedule"}],
        "nodeSelector": {},
        "imagePullSecrets": [],
    }
    live = {
        "env": [{"name": "EMPTY"}],
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    assert covers(desired, live)
    # a non-empty value that live lacks is drift, and so is a live value other than ""
    assert not covers({"env": [{"name": "EMPTY", "value": "x"}]}, live)
    assert not covers(desired, {**live, "env": [{"name": "EMPTY", "value": "set"}]})


def test_every_patch_names_the_operator_s_field_manager() -> None:
    """Server-side apply, the run record's merge patch and the status patch all carry
    fieldManager: managedFields then say which writes are the operator's (an unnamed patch
    is recorded under the client's user agent)."""
    w = RecordingWriter()
    w.apply(rendered())
    w.patch_configmap("ns", "m-bench-1-record", {"verdict": "Passed"})
    w.replace_status("ns", "minimal", {"observedGeneration": 1})
    patches = [c for c in w.calls if c[0] == "PATCH"]
    assert len(patches) == 3
    for _, path, query, _ in patches:
        assert ("fieldManager", SETTINGS.field_manager) in (query or []), path
