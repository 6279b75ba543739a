"""A failing verdict is confirmed once before it rolls back (issue 10, item 7): reconcile()
against the in-memory API server, from the first run's failed result to the second run's
verdict - a passing confirmation keeps the revision, a failing one rolls back; both runs stay
in the history, and the status says what is going on at each step."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, rolled_out, template_revision
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.policy import confirming
from vllm_operator.observe.read import history
from vllm_operator.reconcile import Outcome, reconcile
from vllm_operator.render.benchmark import (
    render_result_configmap,
    render_run_record,
    revision,
    run_name,
)
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.write.apply import _path

SETTINGS = OperatorSettings()
PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP = _path("apps/v1", "Deployment", "ns", "minimal")
GATES = {"onFailure": "Rollback", "thresholds": {"minOutputTokensPerSecond": 50}}
GOOD = Service.from_body(body("minimal", {"benchmark": GATES}))
GOOD_REV = revision(render_pod_template(GOOD, SETTINGS))
NEW = Service.from_body(body("minimal", {"benchmark": GATES, "engine": {"maxNumSeqs": 8}}))
NEW_REV = revision(render_pod_template(NEW, SETTINGS))
FIRST = run_name(NEW, NEW_REV)
SECOND = run_name(confirming(NEW), NEW_REV)


def cond(api: FakeApi, kind: str) -> dict[str, Any]:
    return next((c for c in api.objects[PATH]["status"]["conditions"] if c["type"] == kind), {})


def publish(api: FakeApi, run: str, tps: float) -> None:
    """What the runner writes into its run's ConfigMap, and the Job's success."""
    cm = api.objects[_path("v1", "ConfigMap", "ns", run)]
    result = {"status": "ok", "headline": {"outputTokensPerSecond": tps}}
    cm["data"]["result.json"] = json.dumps(result)
    api.objects[_path("batch/v1", "Job", "ns", run)]["status"] = {"succeeded": 1}


def reconciled(api: FakeApi) -> Outcome:
    return reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)


def first_run_failed() -> tuple[FakeApi, list[Outcome]]:
    """The good revision passed earlier; the new one rolled out, its first run failed."""
    api = FakeApi(SETTINGS)
    for cm, data in (
        (
            render_result_configmap(GOOD, GOOD_REV),
            {
                "result.json": json.dumps(
                    {"status": "ok", "headline": {"outputTokensPerSecond": 90}}
                )
            },
        ),
        (
            render_run_record(GOOD, GOOD_REV),
            {"spec.json": GOOD.spec.model_dump_json(by_alias=True), "verdict": "Passed"},
        ),
    ):
        cm["metadata"]["creationTimestamp"] = "2030-01-01T00:01:00Z"
        cm["data"] = data
        api.put(_path("v1", "ConfigMap", "ns", cm["metadata"]["name"]), cm)
    api.put(PATH, body("minimal", {"benchmark": GATES, "engine": {"maxNumSeqs": 8}}))
    reconciled(api)  # the new revision is applied
    rolled_out(api)
    reconciled(api)  # its first run starts
    assert _path("batch/v1", "Job", "ns", FIRST) in api.objects
    publish(api, FIRST, 10)
    return api, [reconciled(api), reconciled(api)]


def test_a_first_failed_run_is_confirmed_before_anything_is_rolled_back() -> None:
    api, (outcome, again) = first_run_failed()
    assert template_revision(api.objects[DEP]) == NEW_REV  # not rolled back
    assert _path("batch/v1", "Job", "ns", SECOND) in api.objects  # the confirmation runs
    done, passed = cond(api, "BenchmarkComplete"), cond(api, "BenchmarkPassed")
    assert (done["status"], done["reason"]) == ("False", "ConfirmingFailure")
    assert done["message"] == (
        f"run {FIRST} failed its gates (outputTokensPerSecond 10 < minimum 50); run {SECOND} "
        f"measures revision {NEW_REV} again before any rollback"
    )
    assert (passed["status"], passed["reason"]) == ("Unknown", "Confirming")
    assert cond(api, "Degraded")["status"] == "False"
    assert api.objects[PATH]["status"]["benchmark"]["job"] == SECOND
    assert ("Normal", "ConfirmingFailure") in [(e.type, e.reason) for e in outcome.events]
    assert again.events == ()  # posted once
    assert again.changes == ()


def test_a_passing_confirmation_keeps_the_revision() -> None:
    api, _ = first_run_failed()
    publish(api, SECOND, 60)
    reconciled(api)
    outcome = reconciled(api)
    assert outcome.rolled_back_to is None
    assert template_revision(api.objects[DEP]) == NEW_REV
    assert cond(api, "BenchmarkPassed")["status"] == "True"
    assert (cond(api, "BenchmarkComplete")["status"], cond(api, "Degraded")["status"]) == (
        "True",
        "False",
    )
    bench = api.objects[PATH]["status"]["benchmark"]
    assert (bench["job"], bench["outputTokensPerSecond"], bench["passed"]) == (SECOND, 60, True)
    # both runs are in the history, each with its verdict
    runs = {r.name: r.verdict for r in history(api, NEW)}
    assert (runs[FIRST], runs[SECOND]) == ("Failed", "Passed")


def test_a_failing_confirmation_rolls_back() -> None:
    api, _ = first_run_failed()
    publish(api, SECOND, 12)
    outcome = reconciled(api)
    assert outcome.rolled_back_to == GOOD_REV
    assert template_revision(api.objects[DEP]) == GOOD_REV
    degraded = cond(api, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "BenchmarkRollback")
    assert degraded["message"].startswith(
        f"revision {NEW_REV} failed its benchmark gates in two runs "
        "(outputTokensPerSecond 12 < minimum 50); rolled back to revision "
    )
    assert cond(api, "BenchmarkPassed")["status"] == "False"
    runs = {r.name: r.verdict for r in history(api, NEW)}
    assert (runs[FIRST], runs[SECOND]) == ("Failed", "Failed")
    # the rollback in force: no third run, no flip back
    writes = len(api.writes_made())
    rolled_out(api)
    assert reconciled(api).changes == ()
    assert [
        w for w in api.writes_made()[writes:] if "/jobs/" in w[1] or "/deployments/" in w[1]
    ] == []
