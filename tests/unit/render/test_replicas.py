"""Autoscaling switched off keeps a sane replica count (issue 10, item 8): the count the
autoscaler chose is held until spec.replicas changes (decide_replicas, a pure decision), and
the reconcile follows it against the in-memory API server."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.builders import body, service
from tests.unit.fake_api import FakeApi
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import RELEASE_HOLD_ANNOTATION
from vllm_operator.reconcile import reconcile
from vllm_operator.render.deployment import (
    REPLICAS_HELD_ANNOTATION,
    REPLICAS_HELD_SINCE_ANNOTATION,
    decide_replicas,
    render_deployment,
    replicas_managers,
)
from vllm_operator.write.apply import _path

SETTINGS = OperatorSettings()
ON = {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 8}}
OFF = {"autoscaling": {"enabled": False, "minReplicas": 2, "maxReplicas": 8}}
SVC_PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP_PATH = _path("apps/v1", "Deployment", "ns", "minimal")


T0 = "2026-12-02T06:00:00Z"


@pytest.mark.parametrize(
    ("spec", "live", "held", "expected"),
    [
        (ON, None, None, (2, "1", None)),  # a new autoscaled Deployment starts at minReplicas
        (ON, 5, None, (5, "1", None)),  # the HPA's count, recorded against spec.replicas 1
        (ON, 20, "1", (8, "1", None)),  # within min/max
        (OFF, 5, "1", (5, "1", T0)),  # switched off: the HPA's count is held, from now
        ({**OFF, "replicas": 3}, 5, "1", (3, None, None)),  # spec.replicas changed: it applies
        (OFF, 5, None, (1, None, None)),  # no hold (never autoscaled): spec.replicas rules
        (OFF, None, "1", (1, None, None)),  # no Deployment: spec.replicas
        ({**OFF, "replicas": 3}, 3, None, (3, None, None)),
        (OFF, 1, "1", (1, None, None)),  # the HPA's count is spec.replicas: nothing to hold
    ],
)
def test_decide_replicas(
    spec: dict[str, Any],
    live: int | None,
    held: str | None,
    expected: tuple[int, str | None, str | None],
) -> None:
    assert decide_replicas(service("minimal", spec), live, held, now=T0) == expected


def test_a_hold_ends_by_itself_and_on_the_release_annotation() -> None:
    """`kubectl scale vsvc --replicas=1` when spec.replicas is 1 already changes nothing the
    operator can see: the hold is bounded in time, and the annotation ends it at once."""
    svc = service("minimal", OFF)
    held = {"live_since": T0, "hold_seconds": 300.0}
    assert decide_replicas(svc, 8, "1", now="2026-12-02T06:04:59Z", **held) == (8, "1", T0)
    assert decide_replicas(svc, 8, "1", now="2026-12-02T06:05:00Z", **held) == (1, None, None)
    assert decide_replicas(svc, 8, "1", now=T0, hold_seconds=0) == (1, None, None)
    released = service("minimal", OFF).model_copy(update={"release_hold": True})
    assert decide_replicas(released, 8, "1", now=T0, **held) == (1, None, None)


def reconcile_with(api: FakeApi, spec: dict[str, Any], generation: int) -> dict[str, Any]:
    obj = body("minimal", spec, generation=generation)
    obj["status"] = copy.deepcopy(api.objects.get(SVC_PATH, {}).get("status", {}))
    api.put(SVC_PATH, obj)
    reconcile(copy.deepcopy(api.objects[SVC_PATH]), api, SETTINGS)
    return api.objects[DEP_PATH]


def test_switching_autoscaling_off_keeps_the_count_the_hpa_chose() -> None:
    api = FakeApi(SETTINGS)
    dep = reconcile_with(api, ON, 1)
    assert dep["spec"]["replicas"] == 2
    dep["spec"]["replicas"] = 5  # the HPA scaled it
    hpa_path = _path("autoscaling/v2", "HorizontalPodAutoscaler", "ns", "minimal")
    assert hpa_path in api.objects
    dep = reconcile_with(api, OFF, 2)
    assert hpa_path not in api.objects  # pruned
    assert dep["spec"]["replicas"] == 5
    assert dep["metadata"]["annotations"][REPLICAS_HELD_ANNOTATION] == "1"
    writes = len(api.writes_made())
    reconcile(copy.deepcopy(api.objects[SVC_PATH]), api, SETTINGS)
    assert len(api.writes_made()) == writes  # a resync while held writes nothing
    dep = reconcile_with(api, {**OFF, "replicas": 2}, 3)  # kubectl scale vsvc --replicas=2
    assert dep["spec"]["replicas"] == 2
    assert REPLICAS_HELD_ANNOTATION not in dep["metadata"].get("annotations", {})


def test_the_status_says_a_hold_is_in_force_until_when_and_how_to_end_it() -> None:
    api = FakeApi(SETTINGS)
    dep = reconcile_with(api, ON, 1)
    dep["spec"]["replicas"] = 8  # the HPA scaled it
    dep = reconcile_with(api, OFF, 2)
    assert dep["spec"]["replicas"] == 8
    since = dep["metadata"]["annotations"][REPLICAS_HELD_SINCE_ANNOTATION]
    status = api.objects[SVC_PATH]["status"]
    assert status["autoscaling"]["heldReplicas"] == 8
    assert status["autoscaling"]["heldSince"] == since
    cond = next(c for c in status["conditions"] if c["type"] == "AutoscalingActive")
    assert (cond["status"], cond["reason"]) == ("False", "ReplicasHeld")
    assert "the 8 replicas the autoscaler chose are held (spec.replicas is 1)" in cond["message"]
    assert "serving.vllm-operator.dev/release-replicas-hold=now" in cond["message"]
    # the release annotation: spec.replicas at once, and the status no longer reports a hold
    obj = copy.deepcopy(api.objects[SVC_PATH])
    obj["metadata"].setdefault("annotations", {})[RELEASE_HOLD_ANNOTATION] = "now"
    api.put(SVC_PATH, obj)
    reconcile(copy.deepcopy(api.objects[SVC_PATH]), api, SETTINGS)
    dep = api.objects[DEP_PATH]
    assert dep["spec"]["replicas"] == 1
    assert REPLICAS_HELD_SINCE_ANNOTATION not in dep["metadata"].get("annotations", {})
    status = api.objects[SVC_PATH]["status"]
    assert "heldReplicas" not in (status.get("autoscaling") or {})
    assert not any(c["reason"] == "ReplicasHeld" for c in status["conditions"])


HPA_SCALED = {
    "manager": "kube-controller-manager",
    "operation": "Update",
    "subresource": "scale",
    "fieldsV1": {"f:spec": {"f:replicas": {}}},
}
OURS = {
    "manager": SETTINGS.field_manager,
    "operation": "Apply",
    "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}},
}


def _live(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"managedFields": list(entries)}, "spec": {"replicas": 5}}


def test_who_owns_replicas_besides_the_operator() -> None:
    assert replicas_managers(None, SETTINGS.field_manager) == set()
    assert replicas_managers(_live(OURS), SETTINGS.field_manager) == set()
    assert replicas_managers(_live(OURS, HPA_SCALED), SETTINGS.field_manager) == {
        "kube-controller-manager"
    }
    template_only = {**HPA_SCALED, "fieldsV1": {"f:spec": {"f:template": {}}}}
    assert replicas_managers(_live(OURS, template_only), SETTINGS.field_manager) == set()


@pytest.mark.parametrize(
    ("spec", "elsewhere", "written"),
    [
        (ON, False, 5),  # nobody else owns it yet: the operator writes the live count (clamped)
        (ON, True, None),  # the HPA owns it: left out, so the apply hands it over
        (OFF, True, 5),  # switched off (held): the operator takes replicas back
        ({**OFF, "replicas": 3}, True, 3),
    ],
)
def test_replicas_are_left_to_the_autoscaler_once_it_owns_them(
    spec: dict[str, Any], elsewhere: bool, written: int | None
) -> None:
    dep = render_deployment(
        service("minimal", spec),
        SETTINGS,
        5,
        live_held="1",
        live_since=T0,
        now=T0,
        replicas_owned_elsewhere=elsewhere,
    )
    assert dep["spec"].get("replicas") == written
