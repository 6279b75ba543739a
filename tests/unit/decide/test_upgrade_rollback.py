"""An operator upgrade must not undo rollbacks (issue 19, item 2): reconcile() against the
in-memory API server. A passes, B fails twice and A is restored; then the operator renders
pod templates differently (modelled by another default GPU image: what an operator release
or a change of its settings does). The spec is still B: the rollback stays in force, A's
recorded spec is rendered as this operator renders it, B is not measured again, and the
status and one Event say so. The user ends it as before (the rerun annotation, a spec
change)."""

from __future__ import annotations

import copy
from typing import Any

from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, publish, rolled_out, template_revision
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import RERUN_ANNOTATION, Service
from vllm_operator.decide.policy import confirming
from vllm_operator.reconcile import Outcome, reconcile
from vllm_operator.render.benchmark import revision, run_name
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.status.prose import rendering_changed
from vllm_operator.write.apply import _path

BEFORE = OperatorSettings()
# the next release (or `helm upgrade --set gpuImage=...`): every pod template renders anew
AFTER = OperatorSettings(gpu_image="vllm/vllm-openai:v0.33.0")
PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP = _path("apps/v1", "Deployment", "ns", "minimal")
GATES = {"onFailure": "Rollback", "thresholds": {"minOutputTokensPerSecond": 50}}


# the flow measured after the rollout (rollout.canary off): what an upgrade does to a
# rollback in force there (tests/unit/decide/test_canary.py: the same through a canary)
DIRECT = {"canary": {"enabled": False}}


def spec(seqs: int) -> dict[str, Any]:
    return {"engine": {"maxNumSeqs": seqs}, "benchmark": GATES, "rollout": DIRECT}


def svc(seqs: int) -> Service:
    return Service.from_body(body("minimal", spec(seqs)))


def rev(seqs: int, settings: OperatorSettings = BEFORE) -> str:
    return revision(render_pod_template(svc(seqs), settings))


def reconciled(api: FakeApi, settings: OperatorSettings = BEFORE) -> Outcome:
    return reconcile(copy.deepcopy(api.objects[PATH]), api, settings)


def roll_to(api: FakeApi, seqs: int) -> None:
    generation = api.objects[PATH]["metadata"]["generation"] + 1 if PATH in api.objects else 1
    api.put(PATH, body("minimal", spec(seqs), generation=generation))
    reconciled(api)
    rolled_out(api)
    reconciled(api)


def cond(api: FakeApi, kind: str) -> dict[str, Any]:
    return next(c for c in api.objects[PATH]["status"]["conditions"] if c["type"] == kind)


def jobs(api: FakeApi) -> set[str]:
    return {p.rsplit("/", 1)[1] for p in api.objects if "/jobs/" in p}


def rolled_back_to_a() -> FakeApi:
    """A (maxNumSeqs 16) passed; B (8) failed in two runs: A's pod template serves."""
    api = FakeApi(BEFORE)
    roll_to(api, 16)
    publish(api, run_name(svc(16), rev(16)), 60)
    reconciled(api)
    roll_to(api, 8)
    b = svc(8)
    publish(api, run_name(b, rev(8)), 10)
    reconciled(api)  # its confirmation starts
    publish(api, run_name(confirming(b), rev(8)), 12)
    assert reconciled(api).rolled_back_to == rev(16)
    rolled_out(api)
    assert reconciled(api).changes == ()
    assert template_revision(api.objects[DEP]) == rev(16)
    return api


def test_the_operators_new_rendering_keeps_the_rollback_in_force_and_says_so() -> None:
    api = rolled_back_to_a()
    a, b = rev(16), rev(8)
    a_now, b_now = rev(16, AFTER), rev(8, AFTER)
    assert (a_now != a, b_now != b) == (True, True)  # the upgrade changes every rendering
    before_jobs = jobs(api)
    outcome = reconciled(api, AFTER)
    # still rolled back to A: its recorded spec as this operator renders it
    assert outcome.rolled_back_to == a
    assert template_revision(api.objects[DEP]) == a_now
    assert api.objects[DEP]["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "vllm/vllm-openai:v0.33.0"
    )
    # B is not measured again: no Job, no run of B's new rendering
    assert jobs(api) == before_jobs
    assert not [p for p in api.objects if b_now[:8] in p]
    status = api.objects[PATH]["status"]
    assert status["revision"] == a_now
    assert status["benchmark"]["rolledBackTo"] == a
    assert status["benchmark"]["revision"] == b
    assert status["benchmark"]["renderedAs"] == b_now
    assert status["benchmark"]["restoredAs"] == a_now
    degraded = cond(api, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "BenchmarkRollback")
    assert degraded["message"] == (
        f"revision {b} failed its benchmark gates in two runs (outputTokensPerSecond 12 < "
        f"minimum 50); rolled back to revision {a} (its pod template only) until the spec "
        "renders another revision or the rerun-benchmark annotation changes; this operator "
        f"renders the pod templates differently (an upgrade or its settings): the spec "
        f"renders revision {b_now} now, still the spec that failed, and revision {a}'s "
        f"recorded spec renders revision {a_now}, which runs now"
    )
    assert [(e.type, e.reason, e.message) for e in outcome.events] == [
        ("Normal", "DeploymentUpdated", "Deployment minimal updated"),
        (
            "Normal",
            "RenderingChanged",
            (
                f"this operator renders the spec as revision {b_now} (it failed as {b}) and "
                f"revision {a}'s recorded spec as {a_now}: the rollback to {a} stays in force "
                f"(revision {a_now} runs); the rerun-benchmark annotation measures the spec as "
                "rendered now"
            ),
        ),
    ]
    # and so it stays: the rollout of A's new rendering finishes, nothing more is written
    rolled_out(api)
    again = reconciled(api, AFTER)
    assert (again.rolled_back_to, again.changes, again.events) == (a, (), ())
    assert jobs(api) == before_jobs
    assert template_revision(api.objects[DEP]) == a_now


def test_the_rerun_annotation_ends_it_and_measures_the_spec_as_rendered_now() -> None:
    api = rolled_back_to_a()
    reconciled(api, AFTER)
    rolled_out(api)
    api.objects[PATH]["metadata"]["annotations"] = {RERUN_ANNOTATION: "after-upgrade"}
    assert reconciled(api, AFTER).rolled_back_to is None
    b_now = rev(8, AFTER)
    assert template_revision(api.objects[DEP]) == b_now
    rolled_out(api)
    reconciled(api, AFTER)
    named = svc(8).model_copy(update={"rerun": "after-upgrade"})
    assert run_name(named, b_now) in jobs(api)
    assert "renderedAs" not in api.objects[PATH]["status"]["benchmark"]


def test_a_target_recorded_by_the_earlier_rendering_is_restored_as_rendered_now() -> None:
    """A passed before the upgrade; C rolls out after it and fails twice: A's recorded spec
    renders another revision now, and is restored (it was refused before: the failing C
    kept serving)."""
    api = FakeApi(BEFORE)
    roll_to(api, 16)
    publish(api, run_name(svc(16), rev(16)), 60)
    reconciled(api)
    api.put(PATH, body("minimal", spec(4), generation=2))
    reconciled(api, AFTER)
    rolled_out(api)
    reconciled(api, AFTER)
    c, c_rev = svc(4), rev(4, AFTER)
    publish(api, run_name(c, c_rev), 10)
    reconciled(api, AFTER)
    publish(api, run_name(confirming(c), c_rev), 12)
    outcome = reconciled(api, AFTER)
    assert outcome.rolled_back_to == rev(16)
    assert template_revision(api.objects[DEP]) == rev(16, AFTER)
    status = api.objects[PATH]["status"]
    assert (status["revision"], status["benchmark"]["restoredAs"]) == (
        rev(16, AFTER),
        rev(16, AFTER),
    )
    assert "renderedAs" not in status["benchmark"]
    degraded = cond(api, "Degraded")
    assert degraded["reason"] == "BenchmarkRollback"
    assert degraded["message"].endswith(
        f"; this operator renders the pod templates differently (an upgrade or its "
        f"settings): revision {rev(16)}'s recorded spec renders revision {rev(16, AFTER)}, "
        "which runs now"
    )
    # the rollback's own Warning says it: no second event about the rendering
    assert [
        e.reason for e in outcome.events if e.reason.startswith(("Benchmark", "Rendering"))
    ] == ["BenchmarkRollback"]


def test_the_event_names_what_renders_anew_and_what_runs() -> None:
    bench = {"revision": "bbbb", "rolledBackTo": "aaaa", "restoredAs": "a222"}
    assert rendering_changed(bench) == (
        "this operator renders revision aaaa's recorded spec as a222: the rollback to aaaa "
        "stays in force (revision a222 runs); the rerun-benchmark annotation measures the "
        "spec as rendered now"
    )
    assert rendering_changed({**bench, "restoredAs": None, "renderedAs": "b222"}) == (
        "this operator renders the spec as revision b222 (it failed as bbbb): the rollback to "
        "aaaa stays in force (revision aaaa runs); the rerun-benchmark annotation measures "
        "the spec as rendered now"
    )
    assert rendering_changed({"revision": "bbbb", "rolledBackTo": "aaaa"}) == ""
    assert rendering_changed({"revision": "bbbb", "renderedAs": "b222"}) == ""
