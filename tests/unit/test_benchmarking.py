"""The benchmark step (benchmarking.py) against the in-memory API server: reading the history,
starting one run per revision (and nothing on a repeat), resuming an interrupted start,
recording failed and timed-out runs, superseding older runs and pruning the history."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.builders import service
from tests.unit.fake_api import FakeApi
from vllm_operator import benchmarking
from vllm_operator.apply import _path
from vllm_operator.gates import FAILED, PASSED, Run
from vllm_operator.render.benchmark import (
    REVISION_LABEL,
    record_name,
    render_result_configmap,
    render_run_record,
    run_name,
)
from vllm_operator.settings import OperatorSettings
from vllm_operator.spec import Service

SETTINGS = OperatorSettings()
SVC = Service.model_validate(
    {**service("minimal").model_dump(by_alias=True), "uid": "uid-1", "name": "svc"}
)


def cm_path(name: str) -> str:
    return _path("v1", "ConfigMap", "ns", name)


def job_path(name: str) -> str:
    return _path("batch/v1", "Job", "ns", name)


def put_run(
    api: FakeApi,
    rev: str,
    created: str,
    *,
    owner: str = "uid-1",
    **data: str,
) -> str:
    cm = render_result_configmap(SVC, rev)
    cm["metadata"]["creationTimestamp"] = created
    cm["metadata"]["ownerReferences"][0]["uid"] = owner
    cm["data"].update(data)
    api.put(cm_path(cm["metadata"]["name"]), cm)
    rec = render_run_record(SVC, rev)
    rec["metadata"]["creationTimestamp"] = created
    rec["metadata"]["ownerReferences"][0]["uid"] = owner
    api.put(cm_path(rec["metadata"]["name"]), rec)
    return str(cm["metadata"]["name"])


def record(api: FakeApi, run: str) -> dict[str, str]:
    """The operator's record of a run (the ConfigMap the Job cannot write)."""
    return dict(api.objects[cm_path(record_name(run))]["data"])


def put_job(api: FakeApi, rev: str, status: dict[str, Any]) -> str:
    name = run_name(SVC, rev)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {
                "serving.vllm-operator.dev/service": "svc",
                "app.kubernetes.io/component": "benchmark",
                REVISION_LABEL: rev,
            },
            "ownerReferences": [{"uid": "uid-1"}],
        },
        "status": status,
    }
    api.put(job_path(name), job)
    return name


def ok(tps: float) -> str:
    return json.dumps({"status": "ok", "headline": {"outputTokensPerSecond": tps}})


def step(api: FakeApi, rev: str, *, done: bool = True, protect: frozenset[str] = frozenset()):  # type: ignore[no-untyped-def]
    runs = benchmarking.history(api, SVC)
    return benchmarking.step(api, SVC, SETTINGS, rev, runs, rollout_done=done, protect=set(protect))


def test_history_reads_the_runs_of_this_service_oldest_first() -> None:
    api = FakeApi(SETTINGS)
    put_run(api, "bbbbbbbbbb", "2030-01-01T00:02:00Z", **{"result.json": ok(5)})
    put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z", **{"result.json": '{"status": "error"}'})
    put_run(api, "cccccccccc", "2030-01-01T00:03:00Z", **{"result.json": "{not json"})
    put_run(api, "dddddddddd", "2030-01-01T00:04:00Z", owner="someone-else")
    runs = benchmarking.history(api, SVC)
    assert [(r.revision, r.state) for r in runs] == [
        ("aaaaaaaaaa", "Failed"),
        ("bbbbbbbbbb", "Complete"),
        ("cccccccccc", "Failed"),  # an unreadable result fails the run, saying why
    ]
    assert runs[1].headline.output_tokens_per_second == 5


def test_a_finished_rollout_starts_one_run_and_a_repeat_writes_nothing() -> None:
    api = FakeApi(SETTINGS)
    job, changes = step(api, "aaaaaaaaaa", done=False)
    assert (job, changes, api.writes_made()) == (None, [], [])  # the rollout is not done
    job, changes = step(api, "aaaaaaaaaa")
    assert [(c.kind, c.action) for c in changes] == [
        ("ConfigMap", "created"),  # the operator's record of the run
        ("ConfigMap", "created"),  # the Job's result ConfigMap
        ("ServiceAccount", "created"),
        ("Role", "created"),
        ("RoleBinding", "created"),
        ("Job", "created"),
    ]
    assert job is not None
    assert job.name == "svc-bench-aaaaaaaa"
    writes = len(api.writes_made())
    put_job(api, "aaaaaaaaaa", {"active": 1})  # the Job controller's view
    job, changes = step(api, "aaaaaaaaaa")
    assert changes == []
    assert job is not None
    assert job.active
    assert len(api.writes_made()) == writes


def test_a_start_interrupted_after_the_configmap_is_completed() -> None:
    api = FakeApi(SETTINGS)
    put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z")  # the Job was never created
    _, changes = step(api, "aaaaaaaaaa")
    assert ("Job", "created") in [(c.kind, c.action) for c in changes]
    assert ("ConfigMap", "created") not in [(c.kind, c.action) for c in changes]


def test_a_failed_job_is_recorded_in_its_run() -> None:
    api = FakeApi(SETTINGS)
    name = put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z")
    put_job(
        api,
        "aaaaaaaaaa",
        {
            "failed": 1,
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ],
        },
    )
    step(api, "aaaaaaaaaa")
    data = record(api, name)
    assert data["state"] == "Failed"
    assert data["message"] == "BackoffLimitExceeded: Job has reached the specified backoff limit"


def test_a_job_past_its_deadline_is_recorded_as_such() -> None:
    api = FakeApi(SETTINGS)
    name = put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z")
    put_job(
        api,
        "aaaaaaaaaa",
        {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]},
    )
    step(api, "aaaaaaaaaa")
    data = record(api, name)
    assert data["message"] == (
        f"DeadlineExceeded: the benchmark ran past its deadline "
        f"({SVC.spec.benchmark.timeout_seconds}s)"
    )


def test_a_succeeded_job_without_a_result_is_a_failed_run_but_a_late_result_counts() -> None:
    api = FakeApi(SETTINGS)
    name = put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z")
    put_job(api, "aaaaaaaaaa", {"succeeded": 1})
    step(api, "aaaaaaaaaa")
    assert record(api, name)["state"] == "Failed"
    # the same, but the result landed after the history was read: not marked failed
    api = FakeApi(SETTINGS)
    name = put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z")
    put_job(api, "aaaaaaaaaa", {"succeeded": 1})
    runs = benchmarking.history(api, SVC)
    api.objects[cm_path(name)]["data"]["result.json"] = ok(5)
    benchmarking.step(api, SVC, SETTINGS, "aaaaaaaaaa", runs, rollout_done=True, protect=set())
    assert "state" not in record(api, name)  # the result decides


def test_a_newer_revision_supersedes_a_running_run_but_not_a_finished_one() -> None:
    api = FakeApi(SETTINGS)
    running = put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z")
    put_job(api, "aaaaaaaaaa", {"active": 1})
    done = put_run(api, "bbbbbbbbbb", "2030-01-01T00:02:00Z", **{"result.json": ok(5)})
    put_job(api, "bbbbbbbbbb", {"active": 1})  # published, not yet marked complete
    _, changes = step(api, "cccccccccc")
    assert ("Job", running, "deleted") in [(c.kind, c.name, c.action) for c in changes]
    assert job_path(running) not in api.objects
    assert record(api, running)["state"] == "Failed"
    assert "superseded" in record(api, running)["message"]
    assert job_path(done) in api.objects
    assert "state" not in record(api, done)  # its result stands


def test_pruning_keeps_the_newest_runs_and_the_protected_ones() -> None:
    api = FakeApi(SETTINGS)
    svc = SVC.model_copy(
        update={
            "spec": SVC.spec.model_copy(
                update={"benchmark": SVC.spec.benchmark.model_copy(update={"keep_runs": 2})}
            )
        }
    )
    names = [
        put_run(api, rev * 10, f"2030-01-01T00:0{i}:00Z", **{"result.json": ok(5)})
        for i, rev in enumerate("abcd", start=1)
    ]
    runs = benchmarking.history(api, svc)
    put_job(api, "dddddddddd", {"active": 1})
    benchmarking.step(api, svc, SETTINGS, "dddddddddd", runs, rollout_done=True, protect={names[0]})
    left = sorted(n for n in names if cm_path(n) in api.objects)
    # 4 runs, keep 2: the two oldest unprotected go (b, c); a is protected, d is current
    assert left == sorted([names[0], names[3]])


def run_(name: str, verdict: str | None = None, state: str = "Complete") -> Run:
    return Run(name[0] * 10, name, f"t-{name}", state, "", verdict=verdict)


def test_pruning_always_keeps_the_last_passing_run_and_the_baseline() -> None:
    """keepRuns 1: the rollback target and the regression baseline survive the next run."""
    a, b = run_("a", PASSED), run_("b", FAILED)
    assert benchmarking.runs_to_prune([a, b], "bbbbbbbbbb", "b", 1, set()) == []
    # c passed after a: c is both the last passing run and b's... a new revision d's baseline
    c, d = run_("c", PASSED), run_("d", state="Running")
    assert benchmarking.runs_to_prune([a, b, c, d], "dddddddddd", "d", 1, set()) == [a, b]
    # the current revision passed itself: it is the last passing run; a is its baseline
    assert benchmarking.runs_to_prune([a, b, c], "cccccccccc", "c", 1, set()) == [b]
    # keepRuns counts every run: two kept runs here, so only the oldest extra one goes
    assert benchmarking.runs_to_prune([a, b, c, d], "dddddddddd", "d", 3, set()) == [a]
    assert benchmarking.runs_to_prune([a, b, c, d], "dddddddddd", "d", 1, {"b"}) == [a]


def rerun(token: str) -> Service:
    return SVC.model_copy(update={"rerun": token})


def test_the_rerun_annotation_starts_a_fresh_run_of_the_same_revision() -> None:
    api = FakeApi(SETTINGS)
    first = put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z", **{"result.json": ok(5)})
    put_job(api, "aaaaaaaaaa", {"succeeded": 1})  # finished, lingering until its TTL
    svc = rerun("2030-05-01")
    runs = benchmarking.history(api, svc)
    job, changes = benchmarking.step(
        api, svc, SETTINGS, "aaaaaaaaaa", runs, rollout_done=True, protect=set()
    )
    name = run_name(svc, "aaaaaaaaaa")
    assert name.startswith("svc-bench-aaaaaaaa-")
    assert len(name) == len("svc-bench-aaaaaaaa-") + 4
    assert ("Job", name, "created") in [(c.kind, c.name, c.action) for c in changes]
    assert job is not None
    assert job.name == name
    assert cm_path(first) in api.objects  # the earlier run stays in the history
    # the same token again: nothing new; another token: another run
    put_job_named(api, name, "aaaaaaaaaa", {"active": 1})
    _, changes = benchmarking.step(
        api,
        svc,
        SETTINGS,
        "aaaaaaaaaa",
        benchmarking.history(api, svc),
        rollout_done=True,
        protect=set(),
    )
    assert changes == []
    other = rerun("again")
    _, changes = benchmarking.step(
        api,
        other,
        SETTINGS,
        "aaaaaaaaaa",
        benchmarking.history(api, other),
        rollout_done=True,
        protect=set(),
    )
    # the first re-run, still going, is superseded by the second
    assert ("Job", name, "deleted") in [(c.kind, c.name, c.action) for c in changes]
    assert ("Job", run_name(other, "aaaaaaaaaa"), "created") in [
        (c.kind, c.name, c.action) for c in changes
    ]


def put_job_named(api: FakeApi, name: str, rev: str, status: dict[str, Any]) -> None:
    job_name = put_job(api, rev, status)
    job = api.objects.pop(job_path(job_name))
    job["metadata"]["name"] = name
    api.put(job_path(name), job)
