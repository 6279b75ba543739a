"""The benchmark pod cannot steer the operator, and cannot be steered away (issue 10, item 5).

The Job may patch one ConfigMap, its run's: a verdict or a spec written there is never read;
the operator's record of the run is a second ConfigMap the Job's Role does not name. A spec
recorded for a rollback target is deployed only when it re-renders to the recorded revision,
and an unusable record or result is a condition and an event. The runner's own argparse sees
the operator's URL whatever the user's args say.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.builders import body, service
from tests.unit.fake_api import FakeApi
from vllm_bench.cli import build_parser
from vllm_operator import API_VERSION
from vllm_operator.api.records import Run
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.policy import Plan, Start, confirming
from vllm_operator.observe.read import history
from vllm_operator.reconcile import reconcile, restorable
from vllm_operator.render.benchmark import (
    render_account,
    render_job,
    render_result_configmap,
    render_run_record,
    revision,
    spec_hash,
)
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.render.service import endpoint
from vllm_operator.write.apply import _path
from vllm_operator.write.benchmark_runs import carry_out

SETTINGS = OperatorSettings()
RUN = "minimal-bench-aaaaaaaa"


def runner_namespace(svc: Service) -> Any:
    args = render_job(svc, SETTINGS, "aaaaaaaaaa")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    return build_parser().parse_args(args[args.index("--") + 1 :])


@pytest.mark.parametrize(
    "arg",
    [
        "--url=http://elsewhere:8000",
        "--url",
        "--ur=http://x",
        "--model",
        "--out=/tmp/x",
        "--api-key",
        "--scenarios=naive",
        "--max-duration-seconds=99999",
        "--",
        "-x",
    ],
)
def test_runner_flags_the_operator_sets_are_refused(arg: str) -> None:
    with pytest.raises(ValidationError, match=r"benchmark\.args"):
        service("minimal", {"benchmark": {"args": ["--requests", "4", arg]}})


def test_other_runner_flags_are_accepted_and_reach_the_runner() -> None:
    svc = service("minimal", {"benchmark": {"args": ["--requests", "4", "--max-rps=5", "-1"]}})
    ns = runner_namespace(service("minimal", {"benchmark": {"args": ["--requests", "4"]}}))
    assert ns.requests == 4
    assert svc.spec.benchmark.args == ["--requests", "4", "--max-rps=5", "-1"]


def test_the_runner_sees_the_operators_url_even_past_the_schema() -> None:
    """An object stored before the rule existed (or a flag the rule does not know yet): the
    operator's flags come last and argparse keeps the last value."""
    svc = service("minimal")
    evil = ["--url", "http://elsewhere:8000", "--out=/tmp/x", "--model", "other"]
    spec = svc.spec.model_copy(
        update={"benchmark": svc.spec.benchmark.model_copy(update={"args": evil})}
    )
    ns = runner_namespace(svc.model_copy(update={"spec": spec}))
    assert ns.url == endpoint(svc, SETTINGS).removesuffix("/v1")
    assert (ns.out, ns.model) == ("/results", svc.spec.served_model_name)


def test_the_jobs_role_names_only_its_runs_configmap_and_never_the_record() -> None:
    svc = service("minimal")
    role = render_account(svc, "aaaaaaaaaa")[1]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["minimal-bench-aaaaaaaa"],
            "verbs": ["get", "patch"],
        }
    ]
    # the run's ConfigMap carries nothing of the operator's decisions
    assert render_result_configmap(svc, "aaaaaaaaaa")["data"] == {"state": "Running"}


def test_a_verdict_or_spec_written_by_the_job_is_never_read() -> None:
    svc = Service.model_validate({**service("minimal").model_dump(by_alias=True), "uid": "uid-1"})
    api = FakeApi(SETTINGS)
    carry_out(api, svc, SETTINGS, Plan(enabled=True, start=Start(RUN, "aaaaaaaaaa")))
    run_cm = api.objects[_path("v1", "ConfigMap", "ns", "minimal-bench-aaaaaaaa")]
    record = api.objects[_path("v1", "ConfigMap", "ns", "minimal-bench-aaaaaaaa-record")]
    assert json.loads(record["data"]["spec.json"])["model"]["id"] == svc.spec.model.id
    # what a hostile runner image could write with its Role
    run_cm["data"].update(
        {
            "result.json": json.dumps({"status": "ok", "headline": {}}),
            "verdict": "Passed",
            "spec.json": json.dumps({"model": {"id": "evil/model"}}),
            "state": "Complete",
        }
    )
    (run,) = history(api, svc)
    assert (run.state, run.verdict) == ("Complete", None)
    assert json.loads(run.spec_json)["model"]["id"] == svc.spec.model.id


def test_a_result_that_is_not_json_fails_the_run_with_the_reason() -> None:
    svc = Service.model_validate({**service("minimal").model_dump(by_alias=True), "uid": "uid-1"})
    api = FakeApi(SETTINGS)
    carry_out(api, svc, SETTINGS, Plan(enabled=True, start=Start(RUN, "aaaaaaaaaa")))
    api.objects[_path("v1", "ConfigMap", "ns", "minimal-bench-aaaaaaaa")]["data"]["result.json"] = (
        "{not json"
    )
    (run,) = history(api, svc)
    assert run.state == "Failed"
    assert run.message.startswith("InvalidResult: result.json is not valid JSON")


def test_a_failed_run_is_a_condition_and_one_warning_event() -> None:
    path = _path(API_VERSION, "VLLMService", "ns", "minimal")
    api = FakeApi(SETTINGS)
    api.put(path, body("minimal"))
    svc = Service.from_body(api.objects[path])
    rev = revision(render_pod_template(svc, SETTINGS))
    cm = render_result_configmap(svc, rev)
    cm["metadata"]["ownerReferences"][0]["uid"] = "uid-1"
    cm["metadata"]["creationTimestamp"] = "2030-01-01T00:01:00Z"
    cm["data"]["result.json"] = "{not json"
    api.put(_path("v1", "ConfigMap", "ns", cm["metadata"]["name"]), cm)
    outcome = reconcile(api.objects[path], api, SETTINGS)
    done = next(
        c for c in api.objects[path]["status"]["conditions"] if c["type"] == "BenchmarkComplete"
    )
    assert (done["status"], done["reason"]) == ("False", "BenchmarkFailed")
    assert done["message"].startswith("InvalidResult: result.json is not valid JSON")
    assert [e.reason for e in outcome.events if e.type == "Warning"] == ["BenchmarkFailed"]
    outcome = reconcile(api.objects[path], api, SETTINGS)
    assert [e for e in outcome.events if e.type == "Warning"] == []


def _run(svc: Service, spec_json: str, rev: str, recorded_hash: str = "") -> Run:
    return Run(
        rev,
        f"minimal-bench-{rev[:8]}",
        "t",
        "Complete",
        spec_json,
        verdict="Passed",
        spec_hash=recorded_hash,
    )


def test_a_recorded_spec_is_restored_unless_it_was_edited_after_the_run() -> None:
    current = service("minimal", {"engine": {"maxModelLen": 4096}})
    old = service("minimal")
    old_rev = revision(render_pod_template(old, SETTINGS))
    old_json = old.spec.model_dump_json(by_alias=True, exclude_none=True)
    restored, why = restorable(current, _run(old, old_json, old_rev, spec_hash(old_json)), SETTINGS)
    assert why is None
    assert restored is not None
    assert restored.spec == old.spec
    # a spec planted in the record after the run (not the text its hash was recorded of)
    planted = service("minimal", {"image": "evil/image:1"}).spec.model_dump_json(by_alias=True)
    restored, why = restorable(current, _run(old, planted, old_rev, spec_hash(old_json)), SETTINGS)
    assert restored is None
    planted_rev = revision(
        render_pod_template(service("minimal", {"image": "evil/image:1"}), SETTINGS)
    )
    assert why == (
        f"the record of revision {old_rev} (minimal-bench-{old_rev[:8]}-record) renders revision "
        f"{planted_rev}, not {old_rev}, and its spec is not the one recorded with the run (spec "
        f"hash {spec_hash(planted)}, recorded {spec_hash(old_json)})"
    )
    assert restorable(current, _run(old, "{", old_rev), SETTINGS)[1] == (
        f"the record of revision {old_rev} (minimal-bench-{old_rev[:8]}-record) does not parse: "
        "Invalid JSON: EOF while parsing an object at line 1 column 1"
    )
    assert restorable(current, _run(old, "", old_rev), SETTINGS)[1] == (
        f"the record of revision {old_rev} (minimal-bench-{old_rev[:8]}-record) holds no spec"
    )


def test_a_recorded_spec_is_restored_as_this_operator_renders_it() -> None:
    """Issue 19, item 2: an operator upgrade (here: another default GPU image) renders the
    recorded spec as another revision; it is restored all the same, with its hash intact or
    recorded by an earlier version without one."""
    current = service("minimal", {"engine": {"maxModelLen": 4096}})
    old = service("minimal")
    old_rev = revision(render_pod_template(old, SETTINGS))
    old_json = old.spec.model_dump_json(by_alias=True, exclude_none=True)
    upgraded = OperatorSettings(gpu_image="vllm/vllm-openai:v0.33.0")
    assert revision(render_pod_template(old, upgraded)) != old_rev
    for recorded_hash in (spec_hash(old_json), ""):
        restored, why = restorable(current, _run(old, old_json, old_rev, recorded_hash), upgraded)
        assert why is None
        assert restored is not None
        assert restored.spec == old.spec


def test_an_unusable_rollback_record_is_a_condition_and_one_event() -> None:
    """The failing revision keeps running (nothing unverified is deployed) and says why."""
    gates = {"benchmark": {"onFailure": "Rollback", "thresholds": {"minOutputTokensPerSecond": 10}}}
    path = _path(API_VERSION, "VLLMService", "ns", "minimal")
    api = FakeApi(SETTINGS)
    api.put(path, body("minimal", {"engine": {"maxModelLen": 4096}, **gates}))
    svc = Service.from_body(api.objects[path])
    old = service("minimal", gates)
    old_rev = revision(render_pod_template(old, SETTINGS))
    new_rev = revision(render_pod_template(svc, SETTINGS))
    result = {"status": "ok", "headline": {"outputTokensPerSecond": 5}}
    for named, rev, minute, spec_json, verdict in (
        (svc, old_rev, 1, '{"model": 1}', "Passed"),  # a record that does not parse
        # judged Failed, and its confirmation too
        (svc, new_rev, 2, svc.spec.model_dump_json(by_alias=True), "Failed"),
        (confirming(svc), new_rev, 3, svc.spec.model_dump_json(by_alias=True), "Failed"),
    ):
        for cm, data in (
            (render_result_configmap(named, rev), {"result.json": json.dumps(result)}),
            (
                render_run_record(named, rev),
                {"spec.json": spec_json, **({"verdict": verdict} if verdict else {})},
            ),
        ):
            cm["metadata"]["creationTimestamp"] = f"2030-01-01T00:0{minute}:00Z"
            cm["metadata"]["ownerReferences"][0]["uid"] = "uid-1"
            cm["data"] = data
            api.put(_path("v1", "ConfigMap", "ns", cm["metadata"]["name"]), cm)
    outcome = reconcile(api.objects[path], api, SETTINGS)
    status = api.objects[path]["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "RollbackRefused")
    assert f"the record of revision {old_rev}" in degraded["message"]
    assert "does not parse" in degraded["message"]
    assert status["revision"] == new_rev  # nothing unverified was deployed
    assert [e.reason for e in outcome.events if e.type == "Warning"] == ["RollbackRefused"]
    # a resync: the same condition, no second event
    outcome = reconcile(api.objects[path], api, SETTINGS)
    assert [e for e in outcome.events if e.type == "Warning"] == []
