"""The benchmark Job's ConfigMap is validated at the observe edge (issue 19, item 4): a headline
value that is not a number, or a state outside the CRD's enum, fails the run with a message
naming the key and the bad value - never an exception in the decision step (a frozen status,
no Event), never a status the API server refuses (422)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, rolled_out
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.api.status_schema import VLLMServiceStatus
from vllm_operator.observe.benchresult import JobReport, read_job_report
from vllm_operator.reconcile import reconcile
from vllm_operator.render.benchmark import revision, run_name
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.write.apply import _path

SETTINGS = OperatorSettings()


def result(**headline: Any) -> str:
    return json.dumps({"status": "ok", "headline": headline})


def test_a_valid_result_is_read_as_it_was_written() -> None:
    data = {"state": "Complete", "message": "", "result.json": result(outputTokensPerSecond=12)}
    assert read_job_report(data) == JobReport(
        "Complete", "", {"status": "ok", "headline": {"outputTokensPerSecond": 12}}
    )
    # the operator's initial state, before the Job patched it: the result's status decides
    data = {"state": "Running", "result.json": json.dumps({"status": "failed", "errors": []})}
    assert read_job_report(data).state == "Failed"
    assert read_job_report({"state": "Running"}) == JobReport("Running", "")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"state": "Complete", "result.json": result(outputTokensPerSecond="fast")},
            (
                "InvalidResult: result.json headline.outputTokensPerSecond is 'fast': "
                "Input should be a valid number"
            ),
        ),
        (
            {"state": "Complete", "result.json": result(kvCacheTokens=1.5)},
            (
                "InvalidResult: result.json headline.kvCacheTokens is 1.5: "
                "Input should be a valid integer"
            ),
        ),
        (
            {"state": "Complete", "result.json": result(ttftP95Seconds=True)},
            (
                "InvalidResult: result.json headline.ttftP95Seconds is true: "
                "Input should be a valid number"
            ),
        ),
        (
            {
                "state": "Complete",
                "result.json": '{"status": "ok", "headline": {"x": 1}, '
                '"liveLoad": {"quiet": "no"}}',
            },
            "InvalidResult: result.json liveLoad.quiet is 'no': Input should be a valid boolean",
        ),
        (
            {"state": "Complete", "result.json": json.dumps({"status": "ok", "headline": [1]})},
            (
                "InvalidResult: result.json headline is [1]: Input should be a valid dictionary or "
                "instance of ResultHeadline"
            ),
        ),
        (
            {"state": "Done", "result.json": result(outputTokensPerSecond=12)},
            "InvalidResult: state is 'Done', not one of Running, Complete, Failed",
        ),
        (
            {"state": "Complete"},
            "InvalidResult: state is Complete without result.json",
        ),
        (
            {"state": "Complete", "result.json": "[]"},
            "InvalidResult: result.json is not a JSON object",
        ),
    ],
)
def test_an_invalid_job_configmap_fails_the_run_naming_the_key_and_the_value(
    data: dict[str, str], message: str
) -> None:
    assert read_job_report(data) == JobReport("Failed", message)


def test_not_a_finite_number_and_a_huge_message_are_refused_or_cut() -> None:
    nan = '{"status": "ok", "headline": {"outputTokensPerSecond": NaN}}'
    got = read_job_report({"state": "Complete", "result.json": nan})
    assert got.message == (
        "InvalidResult: result.json headline.outputTokensPerSecond is NaN: "
        "Input should be a finite number"
    )
    long = read_job_report({"state": "Failed", "message": "x" * 100_000})
    assert (long.state, len(long.message)) == ("Failed", 2048)


# ---- through reconcile(): the status is written, with a Warning, and is the CRD's ---------

GATES = {"thresholds": {"minOutputTokensPerSecond": 50}}
PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
SVC = Service.from_body(body("minimal", {"benchmark": GATES}))
RUN = run_name(SVC, revision(render_pod_template(SVC, SETTINGS)))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"state": "Complete", "result.json": result(outputTokensPerSecond="fast")},
            (
                "InvalidResult: result.json headline.outputTokensPerSecond is 'fast': "
                "Input should be a valid number"
            ),
        ),
        (
            {"state": "Bogus", "result.json": result(outputTokensPerSecond=60)},
            "InvalidResult: state is 'Bogus', not one of Running, Complete, Failed",
        ),
    ],
)
def test_an_invalid_result_is_reported_with_a_warning_not_raised(
    data: dict[str, str], message: str
) -> None:
    api = FakeApi(SETTINGS)
    api.put(PATH, body("minimal", {"benchmark": GATES}))
    reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)
    rolled_out(api)
    reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)  # the run starts
    api.objects[_path("v1", "ConfigMap", "ns", RUN)]["data"] = data
    api.objects[_path("batch/v1", "Job", "ns", RUN)]["status"] = {"succeeded": 1}
    outcome = reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)
    status = api.objects[PATH]["status"]
    VLLMServiceStatus.model_validate(status, strict=True)  # what the CRD's schema accepts
    assert status["benchmark"]["state"] == "Failed"
    done = next(c for c in status["conditions"] if c["type"] == "BenchmarkComplete")
    assert (done["status"], done["reason"], done["message"]) == (
        "False",
        "BenchmarkFailed",
        message,
    )
    assert ("Warning", "BenchmarkFailed", message) in [
        (e.type, e.reason, e.message) for e in outcome.events
    ]
