"""A rollback restores a pod template, not a whole spec (issue 10, item 4): during a rollback,
replicas, autoscaling and the PDB follow the current spec, and loosening the failed threshold
does not report BenchmarkPassed=True beside Degraded=BenchmarkRollback."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, template_revision
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.policy import confirming
from vllm_operator.reconcile import reconcile
from vllm_operator.render.benchmark import render_result_configmap, render_run_record, revision
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.write.apply import _path

SETTINGS = OperatorSettings()
PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
GATES = {"onFailure": "Rollback", "thresholds": {"minOutputTokensPerSecond": 10}}


def put_run(
    api: FakeApi,
    svc: Service,
    minute: int,
    tps: float,
    verdict: str | None,
    rerun: str | None = None,
) -> str:
    rev = revision(render_pod_template(svc, SETTINGS))
    named = svc.model_copy(update={"rerun": rerun})
    result = {"status": "ok", "headline": {"outputTokensPerSecond": tps}}
    record: dict[str, str] = {"spec.json": svc.spec.model_dump_json(by_alias=True)}
    if verdict:
        record |= {
            "verdict": verdict,
            "verdictFailures": ""
            if verdict == "Passed"
            else "outputTokensPerSecond 5 < minimum 10",
        }
    for cm, data in (
        (render_result_configmap(named, rev), {"result.json": json.dumps(result)}),
        (render_run_record(named, rev), record),
    ):
        cm["metadata"]["creationTimestamp"] = f"2030-01-01T00:0{minute}:00Z"
        cm["metadata"]["ownerReferences"][0]["uid"] = "uid-1"
        cm["data"] = data
        api.put(_path("v1", "ConfigMap", "ns", cm["metadata"]["name"]), cm)
    return rev


def cond(api: FakeApi, kind: str) -> dict[str, Any]:
    return next(c for c in api.objects[PATH]["status"]["conditions"] if c["type"] == kind)


def rolled_back(spec: dict[str, Any]) -> tuple[FakeApi, str]:
    """A service whose revision B failed its gate in two runs (recorded), A passed before it;
    the spec now is B's plus `spec` (changes that do not touch the pod template)."""
    api = FakeApi(SETTINGS)
    a = Service.from_body(body("minimal", {"benchmark": GATES}))
    b_body = body("minimal", {"benchmark": GATES, "engine": {"maxModelLen": 4096}})
    b = Service.from_body(b_body)
    a_rev = put_run(api, a, 1, 50, "Passed")
    put_run(api, b, 2, 5, "Failed")
    put_run(api, b, 3, 5, "Failed", confirming(b).rerun)  # and its confirmation failed too
    api.put(PATH, body("minimal", {"benchmark": GATES, "engine": {"maxModelLen": 4096}, **spec}))
    reconcile(api.objects[PATH], api, SETTINGS)
    return api, a_rev


def test_scaling_during_a_rollback_takes_effect_and_only_the_template_is_restored() -> None:
    api, a_rev = rolled_back({"replicas": 3})
    dep = api.objects[_path("apps/v1", "Deployment", "ns", "minimal")]
    assert dep["spec"]["replicas"] == 3  # the current spec's, not A's 1
    assert template_revision(dep) == a_rev  # A's pod template
    # replicas 3: the current spec's PDB exists (A's spec, with 1 replica, has none)
    assert _path("policy/v1", "PodDisruptionBudget", "ns", "minimal") in api.objects
    assert api.objects[PATH]["status"]["revision"] == a_rev
    assert cond(api, "Degraded")["reason"] == "BenchmarkRollback"


def test_autoscaling_switched_on_during_a_rollback_renders_the_hpa() -> None:
    api, _ = rolled_back({"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 4}})
    assert _path("autoscaling/v2", "HorizontalPodAutoscaler", "ns", "minimal") in api.objects
    assert api.objects[_path("apps/v1", "Deployment", "ns", "minimal")]["spec"]["replicas"] == 2


def test_loosening_the_failed_threshold_keeps_the_conditions_consistent() -> None:
    loose = {"benchmark": {**GATES, "thresholds": {"minOutputTokensPerSecond": 1}}}
    api, _ = rolled_back(loose)
    passed, degraded = cond(api, "BenchmarkPassed"), cond(api, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "BenchmarkRollback")
    assert (passed["status"], passed["reason"], passed["message"]) == (
        "False",
        "ThresholdsNotMet",
        "outputTokensPerSecond 5 < minimum 10",
    )
    assert api.objects[PATH]["status"]["benchmark"]["passed"] is False
