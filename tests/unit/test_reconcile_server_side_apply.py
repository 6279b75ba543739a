"""reconcile() against the fake's server-side apply (tests/unit/fake_api.py: field ownership,
omitempty, defaulting), where the operator's own logic depends on what the API server does
with its applies: what it drops or adds is not drift, what another client owns stays, and what
the operator stops setting goes. (The same cases against the real control plane:
tests/integration.)"""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest

from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, applied
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.reconcile import reconcile
from vllm_operator.write.apply import _path, covers

SETTINGS = OperatorSettings()
SVC = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP = _path("apps/v1", "Deployment", "ns", "minimal")
HPA_MANAGER = "kube-controller-manager"  # the HPA controller's scale updates


def settled(spec: dict[str, Any]) -> FakeApi:
    """A service reconciled until its resync writes nothing (the first passes create the
    children and write the status)."""
    api = FakeApi(SETTINGS)
    api.put(SVC, body("minimal", spec))
    for _ in range(3):
        reconcile(copy.deepcopy(api.objects[SVC]), api, SETTINGS)
    return api


def writes_of_a_resync(api: FakeApi) -> list[tuple[str, str]]:
    before = len(api.requests)
    reconcile(copy.deepcopy(api.objects[SVC]), api, SETTINGS)
    return [r for r in api.requests[before:] if r[0] != "GET"]


def container(api: FakeApi) -> dict[str, Any]:
    return dict(api.objects[DEP]["spec"]["template"]["spec"]["containers"][0])


def test_empty_values_the_api_server_drops_are_not_drift() -> None:
    api = settled(
        {
            "env": [{"name": "EMPTY", "value": ""}, {"name": "SET", "value": "1"}],
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "", "effect": "NoSchedule"}
            ],
        }
    )
    # stored as the API server stores them: without the empty values (the fake dropped them),
    # and with its defaults
    env = container(api)["env"]
    assert {"name": "EMPTY"} in env, env
    (toleration,) = [
        t
        for t in api.objects[DEP]["spec"]["template"]["spec"]["tolerations"]
        if t.get("key") == "dedicated"
    ]
    assert "value" not in toleration
    assert container(api)["terminationMessagePath"] == "/dev/termination-log"
    # a resync sees no drift: no apply, no event
    assert writes_of_a_resync(api) == []
    # positive control: a real change is written
    spec = api.objects[SVC]["spec"]
    spec["env"][1]["value"] = "2"
    writes = writes_of_a_resync(api)
    assert ("PATCH", DEP) in writes, writes
    assert {"name": "SET", "value": "2"} in container(api)["env"]


def test_what_another_client_set_stays_and_what_the_operator_stops_setting_goes() -> None:
    api = settled({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]})
    # `kubectl rollout restart` (an update of its own: a template annotation) and a label a
    # person added
    api.update_by(
        "kubectl-rollout",
        DEP,
        {
            "metadata": {"labels": {"team": "ml"}},
            "spec": {
                "template": {
                    "metadata": {
                        "annotations": {"kubectl.kubernetes.io/restartedAt": "2030-01-01T00:00:00Z"}
                    }
                }
            },
        },
    )
    managers = {e["manager"] for e in api.objects[DEP]["metadata"]["managedFields"]}
    assert managers == {"vllm-operator", "kubectl-rollout"}
    # the operator stops setting B: its next apply drops B and keeps what kubectl set
    api.objects[SVC]["spec"]["env"] = [{"name": "A", "value": "1"}]
    assert ("PATCH", DEP) in writes_of_a_resync(api)
    dep = api.objects[DEP]
    names = [e["name"] for e in container(api)["env"]]
    assert "A" in names, names
    assert "B" not in names, names
    assert dep["metadata"]["labels"]["team"] == "ml"
    restarted = dep["spec"]["template"]["metadata"]["annotations"]
    assert restarted["kubectl.kubernetes.io/restartedAt"] == "2030-01-01T00:00:00Z"
    assert "B" not in [
        e["name"] for e in applied(api, DEP)["spec"]["template"]["spec"]["containers"][0]["env"]
    ]


def test_the_autoscalers_count_is_left_to_it_once_it_owns_spec_replicas() -> None:
    api = settled({"autoscaling": {"enabled": True, "minReplicas": 1, "maxReplicas": 4}})
    assert "replicas" in applied(api, DEP)["spec"]  # before the HPA's first scale: the operator's
    api.update_by(HPA_MANAGER, DEP, {"spec": {"replicas": 3}})
    api.objects[SVC]["spec"]["env"] = [{"name": "A", "value": "1"}]  # (a change: it applies)
    assert ("PATCH", DEP) in writes_of_a_resync(api)
    assert api.objects[DEP]["spec"]["replicas"] == 3
    # the operator handed the field over (its apply leaves it out), so no apply of its can put
    # back a count it read before the autoscaler's next change
    assert "replicas" not in applied(api, DEP)["spec"]
    owners = [
        e["manager"]
        for e in api.objects[DEP]["metadata"]["managedFields"]
        if "f:replicas" in e["fieldsV1"].get("f:spec", {})
    ]
    assert HPA_MANAGER in owners, owners


class ScalesBeforeTheApply(FakeApi):
    """The HPA's first scale lands between the operator's read of the Deployment and its
    apply (the race of issue 31): the first apply of the Deployment in a reconcile finds it
    scaled to `to` by the HPA controller."""

    def __init__(self, to: int) -> None:
        super().__init__(SETTINGS)
        self.to, self.armed, self.scaled = to, False, 0

    def _call(self, method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if self.armed and method == "PATCH" and path == DEP:
            self.armed = False
            self.update_by(HPA_MANAGER, DEP, {"spec": {"replicas": self.to}})
            self.scaled += 1
        return super()._call(method, path, *args, **kwargs)


def test_the_autoscalers_first_scale_between_the_read_and_the_apply_is_not_taken_back() -> None:
    api = ScalesBeforeTheApply(to=3)
    api.put(SVC, body("minimal", {"autoscaling": {"enabled": True, "minReplicas": 1}}))
    for _ in range(3):
        reconcile(copy.deepcopy(api.objects[SVC]), api, SETTINGS)
    assert api.objects[DEP]["spec"]["replicas"] == 1
    assert "replicas" in applied(api, DEP)["spec"]  # the operator's, before the HPA's scale
    # a change makes the operator apply the Deployment, rendered from a read at 1 replica; the
    # HPA scales to 3 in between
    api.objects[SVC]["spec"]["env"] = [{"name": "A", "value": "1"}]
    api.armed = True
    outcome = reconcile(copy.deepcopy(api.objects[SVC]), api, SETTINGS)
    assert api.scaled == 1  # (the race happened)
    assert api.objects[DEP]["spec"]["replicas"] == 3, "the operator took the HPA's scale back"
    assert {"name": "A", "value": "1"} in api.objects[DEP]["spec"]["template"]["spec"][
        "containers"
    ][0]["env"]
    assert "replicas" not in applied(api, DEP)["spec"]  # handed over to the HPA
    assert not any(e.type == "Warning" for e in outcome.events), outcome.events
    # the negative control: without the precondition the same race takes the count back
    # (a resourceVersion the API server does not check: the apply wins with force)
    api = ScalesBeforeTheApply(to=3)
    api.put(SVC, body("minimal", {"autoscaling": {"enabled": True, "minReplicas": 1}}))
    for _ in range(3):
        reconcile(copy.deepcopy(api.objects[SVC]), api, SETTINGS)
    api.objects[SVC]["spec"]["env"] = [{"name": "A", "value": "1"}]
    api.armed = True
    unchecked = api._server_side_apply

    def without_precondition(path: str, body: dict[str, Any], manager: str) -> dict[str, Any]:
        body = copy.deepcopy(body)
        body.get("metadata", {}).pop("resourceVersion", None)
        return unchecked(path, body, manager)

    api._server_side_apply = without_precondition  # type: ignore[method-assign]
    reconcile(copy.deepcopy(api.objects[SVC]), api, SETTINGS)
    assert api.scaled == 1
    assert api.objects[DEP]["spec"]["replicas"] == 1


def leaves_equal_to(obj: object, value: str, at: tuple[str | int, ...] = ()) -> list[Any]:
    """The paths (keys and list indices) of the strings in `obj` that equal `value`."""
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in leaves_equal_to(v, value, (*at, k))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in leaves_equal_to(v, value, (*at, i))]
    return [at] if obj == value else []


def set_leaf(obj: Any, path: tuple[str | int, ...], value: str) -> None:
    for key in path[:-1]:
        obj = obj[key]
    obj[path[-1]] = value


# a string that reads as a number with an exponent no computer could expand (9 x 10^(10^12)):
# compared as a quantity, a reconcile would never finish, and every service would stall
HUGE = "9e999999999999"


@pytest.mark.timeout(120, method="thread")  # a C-level stall ignores signals
def test_strings_shaped_like_huge_numbers_are_strings_everywhere_a_user_writes_one() -> None:
    """Every string field a user writes holds such a value; reconcile settles (the pytest
    timeout is the bound: with the old comparison the first resync never returned) and its
    resync writes nothing. The positive control: changing one of those strings to another
    of the same shape is drift, written."""
    api = settled(
        {
            "env": [{"name": "HUGE", "value": HUGE}, {"name": "SMALL", "value": "7e651"}],
            "engine": {"extraArgs": ["--override-generation-config", HUGE]},
            "nodeSelector": {"pool": HUGE},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": HUGE, "effect": "NoSchedule"}
            ],
            "podLabels": {"team": HUGE},
            "podAnnotations": {"note": HUGE, "other": "1e999999999998"},
        }
    )
    assert {"name": "HUGE", "value": HUGE} in container(api)["env"]
    assert writes_of_a_resync(api) == []
    # each place a child carries one of them, alone changed to another such string: a
    # difference, found at once (compared as numbers, the walk would never return)
    places = [
        (path, leaf)
        for path, obj in api.objects.items()
        if path != SVC
        for leaf in leaves_equal_to(obj, HUGE)
    ]
    assert {path for path, _ in places} >= {DEP}, places
    assert len(places) >= 5, places  # env, an arg, a node selector, a toleration, a label...
    for path, leaf in places:
        live = api.objects[path]
        desired = copy.deepcopy(live)
        set_leaf(desired, leaf, "9e999999999996")
        assert covers(live, copy.deepcopy(live)), (path, leaf)
        assert not covers(desired, live), (path, leaf)
    spec = api.objects[SVC]["spec"]
    spec["env"][0]["value"] = "9e999999999998"
    spec["podLabels"]["team"] = "9e999999999997"
    writes = writes_of_a_resync(api)
    assert ("PATCH", DEP) in writes, writes
    assert {"name": "HUGE", "value": "9e999999999998"} in container(api)["env"]


@pytest.mark.parametrize(
    "spec",
    [{}, {"benchmark": {"enabled": True, "thresholds": {"minOutputTokensPerSecond": 1}}}],
    ids=["plain", "benchmark-gated"],
)
def test_a_resync_renders_the_pod_template_once(
    spec: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31: the spec's pod template is rendered once per reconcile and handed on (its
    revision to decide(), the template to the Deployment and the canary, the revision to the
    status); the one more render compares the spec the live Deployment was rendered from
    (served_spec). It was 6 before: every stage rendered its own."""
    import vllm_operator.render.deployment as deployment  # noqa: PLC0415

    api = settled(spec)
    calls: list[str] = []
    original = deployment.render_pod_template

    def counting(svc: Any, settings: OperatorSettings) -> dict[str, Any]:
        calls.append(svc.name)
        return original(svc, settings)

    # every module that imported it (the count stays true when a new stage imports it)
    for module in list(sys.modules.values()):
        if getattr(module, "render_pod_template", None) is original:
            monkeypatch.setattr(module, "render_pod_template", counting)
    assert writes_of_a_resync(api) == []  # a no-op resync
    assert calls == ["minimal", "minimal"], calls
