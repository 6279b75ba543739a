"""A finished run is summarized once into its record and never parsed again (issue 19,
item 10): the watch cache leaves the Job's result.json out, a run not yet summarized reads
it once, and a no-op resync of a service with a completed run parses no result and writes
nothing."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.unit.builders import body
from tests.unit.fake_api import FakeApi, rolled_out
from vllm_operator import API_VERSION
from vllm_operator.api.records import Run
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.policy import Record
from vllm_operator.observe import read as observe
from vllm_operator.observe.benchresult import (
    LEFT_OUT_ANNOTATION,
    SUMMARY_KEY,
    JobReport,
    brief,
    left_out,
    read_job_report,
    read_summary,
    summarize,
    trim,
)
from vllm_operator.observe.read import history
from vllm_operator.reconcile import Outcome, reconcile
from vllm_operator.render.benchmark import record_name, revision, run_name
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.write.apply import _path
from vllm_operator.write.benchmark_runs import summaries

SETTINGS = OperatorSettings()
PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
RESULT = {
    "status": "ok",
    "finishedAt": "2026-12-01T12:00:00Z",
    "headline": {"outputTokensPerSecond": 1873.5, "kvCacheTokens": 183424},
    "liveLoad": {"foreignRequests": 0, "quiet": True},
    "errors": [{"scenario": "prefix", "message": "timed out"}],
    "scenarios": [{"name": "throughput", "samples": [{"ttftSeconds": 0.08}] * 1000}],
}
BRIEF = {
    "status": "ok",
    "finishedAt": "2026-12-01T12:00:00Z",
    "headline": {"kvCacheTokens": 183424, "outputTokensPerSecond": 1873.5},
    "liveLoad": {"foreignRequests": 0, "quiet": True},
}


def test_the_cache_keeps_a_job_configmap_without_its_result() -> None:
    cm = {
        "metadata": {"name": "r", "labels": {"app.kubernetes.io/component": "benchmark"}},
        "data": {"state": "Complete", "message": "", "result.json": json.dumps(RESULT)},
    }
    assert trim(cm) == {
        "metadata": {
            "name": "r",
            "labels": {"app.kubernetes.io/component": "benchmark"},
            "annotations": {LEFT_OUT_ANNOTATION: "result.json"},
        },
        "data": {"state": "Complete", "message": ""},
    }
    assert left_out(cm)
    # the run's record, and a Job's ConfigMap without a result yet, are kept whole
    record = {
        "metadata": {"labels": {"app.kubernetes.io/component": "benchmark-record"}},
        "data": {"result.json": "x", SUMMARY_KEY: "{}"},
    }
    running = {
        "metadata": {"labels": {"app.kubernetes.io/component": "benchmark"}},
        "data": {"state": "Running"},
    }
    assert trim(copy.deepcopy(record)) == record
    assert trim(copy.deepcopy(running)) == running
    assert not left_out(running)


def test_a_summary_keeps_only_what_decisions_read_and_reads_back_exactly() -> None:
    report = read_job_report({"result.json": json.dumps(RESULT)})
    assert brief(report) == JobReport("Complete", "prefix: timed out", BRIEF)
    text = summarize(report, "2026-12-01T11:00:00Z")
    assert json.loads(text) == {
        "state": "Complete",
        "message": "prefix: timed out",
        "created": "2026-12-01T11:00:00Z",
        "result": BRIEF,
    }
    assert len(text) < 400  # of a result of ~36 KB here, ~900 KB at most
    assert read_summary(text) == (brief(report), "2026-12-01T11:00:00Z")
    failed = JobReport("Failed", "InvalidResult: result.json is not valid JSON")
    assert read_summary(summarize(failed, "")) == (failed, "")


@pytest.mark.parametrize(
    "text", ["", "not json", '{"state": "Bogus", "message": ""}', '{"message": ""}', "[]"]
)
def test_a_record_without_a_valid_summary_has_none(text: str) -> None:
    assert read_summary(text) is None


def test_summaries_are_one_record_write_per_run_that_lacks_one() -> None:
    runs = [
        Run("a1", "r-a", "t1", "Complete", "", summary='{"state":"Complete"}'),
        Run("a2", "r-b", "t2", "Running", ""),
    ]
    assert summaries(runs) == [Record("r-a", "a1", {SUMMARY_KEY: '{"state":"Complete"}'})]


def _svc() -> Service:
    return Service.from_body(body("minimal", {"benchmark": {}}))


def _reconciled(api: FakeApi) -> Outcome:
    return reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)


@pytest.fixture
def finished() -> tuple[FakeApi, str]:
    """A service whose run has published its result and whose Job succeeded."""
    api = FakeApi(SETTINGS)
    api.put(PATH, body("minimal", {"benchmark": {}}))
    _reconciled(api)
    rolled_out(api)
    _reconciled(api)
    name = run_name(_svc(), revision(render_pod_template(_svc(), SETTINGS)))
    cm = api.objects[_path("v1", "ConfigMap", "ns", name)]
    cm["data"] |= {"state": "Complete", "result.json": json.dumps(RESULT)}
    api.objects[_path("batch/v1", "Job", "ns", name)]["status"] = {"succeeded": 1}
    return api, name


def _counting_parses(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    parsed: list[dict[str, Any]] = []

    def counted(data: dict[str, Any]) -> JobReport:
        parsed.append(data)
        return read_job_report(data)

    monkeypatch.setattr(observe, "read_job_report", counted)
    return parsed


def test_a_finished_run_is_summarized_once_then_never_parsed_again(
    finished: tuple[FakeApi, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    api, name = finished
    parsed = _counting_parses(monkeypatch)
    _reconciled(api)  # the run is seen finished: parsed once, summarized into its record
    assert len(parsed) == 1
    record = api.objects[_path("v1", "ConfigMap", "ns", record_name(name))]["data"]
    assert json.loads(record[SUMMARY_KEY])["result"] == BRIEF
    status = api.objects[PATH]["status"]["benchmark"]
    assert (status["state"], status["outputTokensPerSecond"]) == ("Complete", 1873.5)

    parsed.clear()
    before = len(api.requests)
    for _ in range(3):  # no-op resyncs: no result parsed, nothing written
        again = _reconciled(api)
        assert again.changes == ()
        assert again.events == ()
    assert parsed == []
    assert [r for r in api.requests[before:] if r[0] != "GET"] == []
    assert api.objects[PATH]["status"]["benchmark"] == status
    (run,) = history(api, _svc())
    assert (run.state, run.result, run.summary) == ("Complete", BRIEF, "")


def test_a_trimmed_result_is_read_from_the_api_server_once(
    finished: tuple[FakeApi, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the watch cache lists it (no result.json): the run reads its ConfigMap with one
    GET, the first time it is seen finished, never after (an earlier release's run too: its
    record has no summary)."""
    api, name = finished
    listed = FakeApi.list_children

    def as_cached(self: FakeApi, *args: Any) -> list[dict[str, Any]]:
        return [trim(o) for o in listed(self, *args)]

    monkeypatch.setattr(FakeApi, "list_children", as_cached)
    cm_path = _path("v1", "ConfigMap", "ns", name)
    before = len(api.requests)
    (run,) = history(api, _svc())
    assert [r for r in api.requests[before:] if r[1] == cm_path] == [("GET", cm_path)]
    assert (run.state, run.result) == ("Complete", BRIEF)
    assert json.loads(run.summary) == json.loads(
        summarize(read_job_report(api.objects[cm_path]["data"]), run.created)
    )
    _reconciled(api)  # writes the summary
    before = len(api.requests)
    history(api, _svc())
    assert ("GET", cm_path) not in api.requests[before:]
