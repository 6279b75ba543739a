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
from vllm_operator.apply import _path
from vllm_operator.reconcile import reconcile
from vllm_operator.render.deployment import REPLICAS_HELD_ANNOTATION, decide_replicas
from vllm_operator.settings import OperatorSettings

SETTINGS = OperatorSettings()
ON = {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 8}}
OFF = {"autoscaling": {"enabled": False, "minReplicas": 2, "maxReplicas": 8}}
SVC_PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP_PATH = _path("apps/v1", "Deployment", "ns", "minimal")


@pytest.mark.parametrize(
    ("spec", "live", "held", "expected"),
    [
        (ON, None, None, (2, "1")),  # a new autoscaled Deployment starts at minReplicas
        (ON, 5, None, (5, "1")),  # the HPA's count, recorded against spec.replicas 1
        (ON, 20, "1", (8, "1")),  # within min/max
        (OFF, 5, "1", (5, "1")),  # switched off: the HPA's count is held
        ({**OFF, "replicas": 3}, 5, "1", (3, None)),  # spec.replicas changed: it applies
        (OFF, 5, None, (1, None)),  # no hold (never autoscaled): spec.replicas rules
        (OFF, None, "1", (1, None)),  # no Deployment: spec.replicas
        ({**OFF, "replicas": 3}, 3, None, (3, None)),
    ],
)
def test_decide_replicas(
    spec: dict[str, Any], live: int | None, held: str | None, expected: tuple[int, str | None]
) -> None:
    assert decide_replicas(service("minimal", spec), live, held) == expected


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
