"""The benchmark history across rollouts and reverts, through reconcile() against the
in-memory API server (issue 19): a revision whose run was superseded is measured when it
comes back (item 6), and a failure rolls back to what served before it (item 5)."""

from __future__ import annotations

import copy
from typing import Any

from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, publish, rolled_out, template_revision
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.policy import SUPERSEDED, confirming
from vllm_operator.observe.read import history
from vllm_operator.reconcile import Outcome, reconcile
from vllm_operator.render.benchmark import revision, run_name
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.write.apply import _path

SETTINGS = OperatorSettings()
PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP = _path("apps/v1", "Deployment", "ns", "minimal")


def spec(seqs: int, **bench: Any) -> dict[str, Any]:
    # measured after the rollout (rollout.canary off; tests/unit/decide/test_canary.py: on a canary)
    return {"engine": {"maxNumSeqs": seqs}, "benchmark": bench, "rollout": DIRECT}


DIRECT = {"canary": {"enabled": False}}


def svc(seqs: int, **bench: Any) -> Service:
    return Service.from_body(body("minimal", spec(seqs, **bench)))


def rev(seqs: int) -> str:
    return revision(render_pod_template(svc(seqs), SETTINGS))


def reconciled(api: FakeApi) -> Outcome:
    return reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)


def roll_to(api: FakeApi, seqs: int, **bench: Any) -> None:
    """The user applies a spec; the operator applies it and the rollout finishes."""
    generation = api.objects[PATH]["metadata"]["generation"] + 1 if PATH in api.objects else 1
    api.put(PATH, body("minimal", spec(seqs, **bench), generation=generation))
    reconciled(api)
    rolled_out(api)
    reconciled(api)


def test_a_revision_whose_run_was_superseded_is_measured_when_it_comes_back() -> None:
    api = FakeApi(SETTINGS)
    roll_to(api, 8)
    first = run_name(svc(8), rev(8))
    job = _path("batch/v1", "Job", "ns", first)
    api.objects[job]["status"] = {"active": 1}  # measuring when the next spec arrives
    roll_to(api, 16)  # its run is superseded
    assert job not in api.objects
    assert {r.name: r.message for r in history(api, svc(8))}[first] == SUPERSEDED
    roll_to(api, 8)  # back to it: a new run measures it
    runs = [r for r in history(api, svc(8)) if r.revision == rev(8)]
    assert [r.state for r in runs] == ["Failed", "Running"]
    second = runs[1].name
    assert _path("batch/v1", "Job", "ns", second) in api.objects
    done = next(
        c for c in api.objects[PATH]["status"]["conditions"] if c["type"] == "BenchmarkComplete"
    )
    assert (done["status"], done["reason"]) == ("False", "BenchmarkRunning")
    publish(api, second, 60)
    reconciled(api)
    bench = api.objects[PATH]["status"]["benchmark"]
    assert (bench["job"], bench["state"], bench["outputTokensPerSecond"]) == (
        second,
        "Complete",
        60,
    )


def test_a_confirmed_failure_restores_what_served_before_not_the_newest_passing_run() -> None:
    """Item 5: A passes, B passes, the user reverts to A (measured already: no new run), C
    rolls out and fails twice: A is restored (what served before C), not B."""
    gates = {"onFailure": "Rollback", "thresholds": {"minOutputTokensPerSecond": 50}}
    api = FakeApi(SETTINGS)
    roll_to(api, 8, **gates)
    publish(api, run_name(svc(8), rev(8)), 60)
    reconciled(api)
    roll_to(api, 16, **gates)
    publish(api, run_name(svc(16), rev(16)), 70)
    reconciled(api)
    roll_to(api, 8, **gates)  # back to A
    assert {r.revision: r.verdict for r in history(api, svc(8))} == {
        rev(8): "Passed",
        rev(16): "Passed",
    }
    roll_to(api, 32, **gates)  # C
    c = svc(32, **gates)
    first = run_name(c, rev(32))
    publish(api, first, 10)
    reconciled(api)  # failed: its confirmation starts
    second = run_name(confirming(c), rev(32))
    publish(api, second, 12)
    outcome = reconciled(api)
    assert outcome.rolled_back_to == rev(8)
    assert template_revision(api.objects[DEP]) == rev(8)
    degraded = next(c for c in api.objects[PATH]["status"]["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "BenchmarkRollback")
    assert f"rolled back to revision {rev(8)}" in degraded["message"]
    # and it stays so on the next reconciles (the rolled-back Deployment names C before it)
    rolled_out(api)
    assert reconciled(api).rolled_back_to == rev(8)
    assert template_revision(api.objects[DEP]) == rev(8)
