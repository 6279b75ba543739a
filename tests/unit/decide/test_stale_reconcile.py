"""Restarts behave (issue 10, item 9): a reconcile that read an older generation of the
service than the one its children were written from changes nothing - no child goes back to
the older spec, and the run of the current revision is never superseded by the older one's.

These fail without the generation guard: the stale reconcile patches the old pod template
back and deletes the new revision's running benchmark Job ("superseded by a newer rollout").
"""

from __future__ import annotations

import copy
from typing import Any

from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, rolled_out
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.policy import decide
from vllm_operator.observe.read import observe
from vllm_operator.reconcile import reconcile
from vllm_operator.render.benchmark import revision, run_name
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.write.apply import _path

SETTINGS = OperatorSettings()
SVC_PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP_PATH = _path("apps/v1", "Deployment", "ns", "minimal")
GENERATION = f"{SETTINGS.annotation_prefix}/generation"


def job_path(name: str) -> str:
    return _path("batch/v1", "Job", "ns", name)


def two_generations() -> tuple[FakeApi, dict[str, Any], Service]:
    """Generation 1 rolled out and measured; generation 2 (another pod template) rolled out
    and its run going. Returns the API, the stale body of generation 1, and generation 2."""
    api = FakeApi(SETTINGS)
    old = body("minimal", generation=1)
    api.put(SVC_PATH, old)
    reconcile(copy.deepcopy(old), api, SETTINGS)
    rolled_out(api)
    reconcile(copy.deepcopy(api.objects[SVC_PATH]), api, SETTINGS)  # gen 1's run starts
    stale = copy.deepcopy(api.objects[SVC_PATH])
    new = body("minimal", {"engine": {"maxNumSeqs": 8}}, generation=2)
    new["status"] = stale.get("status", {})
    api.put(SVC_PATH, new)
    reconcile(copy.deepcopy(new), api, SETTINGS)  # gen 1's run superseded, gen 2 rolls
    rolled_out(api)
    reconcile(copy.deepcopy(api.objects[SVC_PATH]), api, SETTINGS)  # gen 2's run starts
    svc = Service.from_body(new)
    name = run_name(svc, revision(render_pod_template(svc, SETTINGS)))
    api.objects[job_path(name)]["status"] = {"active": 1}
    return api, stale, svc


def test_a_stale_read_never_regresses_a_child_nor_supersedes_the_current_run() -> None:
    api, stale, svc = two_generations()
    rev = revision(render_pod_template(svc, SETTINGS))
    name = run_name(svc, rev)
    # positive control: the newer generation started its run
    assert job_path(name) in api.objects
    template = copy.deepcopy(api.objects[DEP_PATH]["spec"]["template"])
    writes, requests = len(api.writes_made()), len(api.requests)

    outcome = reconcile(stale, api, SETTINGS)  # e.g. a resume handed an old body

    template_after = api.objects[DEP_PATH]["spec"]["template"]
    assert template_after == template  # the Deployment was not regressed
    assert outcome.stale
    assert job_path(name) in api.objects  # the current revision's run goes on
    record = api.objects[_path("v1", "ConfigMap", "ns", f"{name}-record")]["data"]
    assert "state" not in record
    assert api.writes_made()[writes:] == []
    # the stale reconcile ran: it read the Deployment
    assert ("GET", DEP_PATH) in api.requests[requests:]
    # what it went by: the generation each child was written from
    assert api.objects[DEP_PATH]["metadata"]["annotations"][GENERATION] == "2"
    assert api.objects[job_path(name)]["metadata"]["annotations"][GENERATION] == "2"


def test_the_policy_never_stops_a_run_started_from_a_later_generation() -> None:
    """The guard in the policy itself, whatever its caller checked first."""
    api, stale, svc = two_generations()
    name = run_name(svc, revision(render_pod_template(svc, SETTINGS)))
    old = Service.from_body(stale)
    plan = decide(old, observe(api, old), SETTINGS)
    assert name not in plan.stop
    # positive control: at the current generation, a run of another revision started from
    # an earlier generation is stopped
    other = f"{svc.name}-bench-{'f' * 8}"
    job = copy.deepcopy(api.objects[job_path(name)])
    job["metadata"]["name"] = other
    job["metadata"]["annotations"][GENERATION] = "1"
    api.put(job_path(other), job)
    plan = decide(svc, observe(api, svc), SETTINGS)
    assert plan.stop == (other,)


def test_a_child_of_a_newer_generation_is_not_pruned_by_a_stale_read() -> None:
    api = FakeApi(SETTINGS)
    new = body("minimal", {"autoscaling": {"enabled": True}}, generation=2)
    api.put(SVC_PATH, new)
    reconcile(copy.deepcopy(new), api, SETTINGS)
    hpa = _path("autoscaling/v2", "HorizontalPodAutoscaler", "ns", "minimal")
    assert hpa in api.objects
    # the Deployment written by an older generation (the stale check passes), the HPA by 2
    api.objects[DEP_PATH]["metadata"]["annotations"][GENERATION] = "1"
    stale = body("minimal", generation=1)
    stale["status"] = api.objects[SVC_PATH].get("status", {})
    reconcile(stale, api, SETTINGS)
    assert hpa in api.objects


def test_a_deployment_of_an_earlier_service_of_the_same_name_is_not_a_newer_generation() -> None:
    """Deleted and created again: the old service's Deployment, not yet collected, carries
    generation 7 - but it is not this service's, so this reconcile is not stale."""
    api = FakeApi(SETTINGS)
    api.put(SVC_PATH, body("minimal", generation=1))
    reconcile(copy.deepcopy(api.objects[SVC_PATH]), api, SETTINGS)
    dep = api.objects[DEP_PATH]
    dep["metadata"]["annotations"][GENERATION] = "7"
    dep["metadata"]["ownerReferences"][0]["uid"] = "uid-of-the-deleted-service"
    outcome = reconcile(copy.deepcopy(api.objects[SVC_PATH]), api, SETTINGS)
    assert not outcome.stale
    assert api.objects[DEP_PATH]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert api.objects[DEP_PATH]["metadata"]["annotations"][GENERATION] == "1"
