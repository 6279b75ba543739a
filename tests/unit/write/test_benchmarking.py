"""The benchmark part of the apply step (benchmarking.carry_out) and the history it is
decided on (observe.history), against the in-memory API server: a planned start writes its
objects in order and a repeat writes nothing, a resumed start writes only the Job's part,
records are merged (and never overtake a result that landed after the history was read),
pruning deletes both ConfigMaps of a run. What to do is policy.decide's (test_policy.py)."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.builders import service
from tests.unit.fake_api import FakeApi
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.policy import SUPERSEDED, Plan, Record, Start
from vllm_operator.observe.read import history
from vllm_operator.render.benchmark import (
    REVISION_LABEL,
    record_name,
    render_result_configmap,
    render_run_record,
    run_name,
)
from vllm_operator.write.apply import _path
from vllm_operator.write.benchmark_runs import carry_out

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


def test_history_reads_the_runs_of_this_service_oldest_first() -> None:
    api = FakeApi(SETTINGS)
    put_run(api, "bbbbbbbbbb", "2030-01-01T00:02:00Z", **{"result.json": ok(5)})
    put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z", **{"result.json": '{"status": "error"}'})
    put_run(api, "cccccccccc", "2030-01-01T00:03:00Z", **{"result.json": "{not json"})
    put_run(api, "dddddddddd", "2030-01-01T00:04:00Z", owner="someone-else")
    runs = history(api, SVC)
    assert [(r.revision, r.state) for r in runs] == [
        ("aaaaaaaaaa", "Failed"),
        ("bbbbbbbbbb", "Complete"),
        ("cccccccccc", "Failed"),  # an unreadable result fails the run, saying why
    ]
    assert runs[1].headline.output_tokens_per_second == 5


def test_a_planned_start_writes_the_record_first_and_a_repeat_writes_nothing() -> None:
    api = FakeApi(SETTINGS)
    start = Plan(enabled=True, start=Start("svc-bench-aaaaaaaa", "aaaaaaaaaa"))
    changes = carry_out(api, SVC, SETTINGS, start)
    assert [(c.kind, c.name, c.action) for c in changes] == [
        ("ConfigMap", "svc-bench-aaaaaaaa-record", "created"),  # the operator's record
        ("ConfigMap", "svc-bench-aaaaaaaa", "created"),  # the Job's result ConfigMap
        ("ServiceAccount", "svc-bench", "created"),
        ("Role", "svc-bench", "created"),
        ("RoleBinding", "svc-bench", "created"),
        ("Job", "svc-bench-aaaaaaaa", "created"),
    ]
    # every object records the generation it was started from
    generation = api.objects[job_path("svc-bench-aaaaaaaa")]["metadata"]["annotations"]
    assert generation[f"{SETTINGS.annotation_prefix}/generation"] == "1"
    writes = len(api.writes_made())
    assert carry_out(api, SVC, SETTINGS, start) == []
    assert len(api.writes_made()) == writes


def test_a_resumed_start_writes_only_the_account_and_the_job() -> None:
    api = FakeApi(SETTINGS)
    put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z")  # the Job was never created
    resume = Start("svc-bench-aaaaaaaa", "aaaaaaaaaa", resume=True)
    changes = carry_out(api, SVC, SETTINGS, Plan(enabled=True, start=resume))
    assert [c.kind for c in changes] == ["ServiceAccount", "Role", "RoleBinding", "Job"]


def test_a_rerun_start_is_named_by_its_token_and_its_role_names_its_configmap() -> None:
    api = FakeApi(SETTINGS)
    name = run_name(SVC.model_copy(update={"rerun": "2030-05-01"}), "aaaaaaaaaa")
    carry_out(api, SVC, SETTINGS, Plan(enabled=True, start=Start(name, "aaaaaaaaaa", "2030-05-01")))
    assert job_path(name) in api.objects
    assert cm_path(record_name(name)) in api.objects
    role = api.objects[_path("rbac.authorization.k8s.io/v1", "Role", "ns", "svc-bench")]
    assert role["rules"][0]["resourceNames"] == [name]


def failed(message: str) -> Record:
    return Record(
        "svc-bench-aaaaaaaa",
        "aaaaaaaaaa",
        {"state": "Failed", "message": message},
        unless_result=True,
    )


def test_a_stop_deletes_the_job_and_its_record_says_why_unless_a_result_landed() -> None:
    api = FakeApi(SETTINGS)
    running = put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z")
    put_job(api, "aaaaaaaaaa", {"active": 1})
    plan = Plan(enabled=True, stop=(running,), record=(failed(SUPERSEDED),))
    changes = carry_out(api, SVC, SETTINGS, plan)
    assert [(c.kind, c.name, c.action) for c in changes] == [("Job", running, "deleted")]
    assert job_path(running) not in api.objects
    assert record(api, running) | {"spec.json": "", "specHash": ""} == {
        "spec.json": "",
        "specHash": "",
        "state": "Failed",
        "message": SUPERSEDED,
    }
    # the same, but the result landed after the history was read: the result decides
    api = FakeApi(SETTINGS)
    running = put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z", **{"result.json": ok(5)})
    put_job(api, "aaaaaaaaaa", {"active": 1})
    carry_out(api, SVC, SETTINGS, plan)
    assert "state" not in record(api, running)


def test_a_record_is_merged_and_a_run_without_one_gets_one() -> None:
    api = FakeApi(SETTINGS)
    name = put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z", **{"result.json": ok(5)})
    verdict = Record(name, "aaaaaaaaaa", {"verdict": "Passed", "verdictFailures": ""})
    carry_out(api, SVC, SETTINGS, Plan(enabled=True, record=(verdict,)))
    assert record(api, name)["verdict"] == "Passed"
    assert "spec.json" in record(api, name)  # merged, not replaced
    # a run recorded by an earlier version, without a record
    del api.objects[cm_path(record_name(name))]
    carry_out(api, SVC, SETTINGS, Plan(enabled=True, record=(verdict,)))
    assert record(api, name) == {"verdict": "Passed", "verdictFailures": ""}
    (run,) = history(api, SVC)
    assert (run.state, run.verdict) == ("Complete", "Passed")


def test_pruning_deletes_both_configmaps_of_a_run() -> None:
    api = FakeApi(SETTINGS)
    gone = put_run(api, "aaaaaaaaaa", "2030-01-01T00:01:00Z", **{"result.json": ok(5)})
    kept = put_run(api, "bbbbbbbbbb", "2030-01-01T00:02:00Z", **{"result.json": ok(5)})
    carry_out(api, SVC, SETTINGS, Plan(enabled=True, prune=(gone,)))
    assert cm_path(gone) not in api.objects
    assert cm_path(record_name(gone)) not in api.objects
    assert [r.name for r in history(api, SVC)] == [kept]
