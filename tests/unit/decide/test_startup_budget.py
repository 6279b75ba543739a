"""The startup probe's budget following the measured starts (issue 34 item 1,
probes.startupBudget Measured): factor x the slowest start of the same load key, within the
spec's bounds; decided once per revision (a new measurement never rewrites a running
revision's pods: it sets the next revision's); never part of the revision."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.builders import body, service
from tests.unit.fake_api import FakeApi, applied, rolled_out, template_revision
from vllm_operator import API_VERSION
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.startup import load_key, startup_budget, with_budget
from vllm_operator.reconcile import reconcile
from vllm_operator.render.benchmark import REVISION_ANNOTATION, revision
from vllm_operator.render.deployment import (
    render_pod_template,
    startup_probe_seconds,
    with_startup_budget,
)
from vllm_operator.write.apply import _path

SETTINGS = OperatorSettings()
PATH = _path(API_VERSION, "VLLMService", "ns", "minimal")
DEP = _path("apps/v1", "Deployment", "ns", "minimal")
MEASURED = {"probes": {"startupBudget": "Measured"}}


def startup(key: str, *slowest_ready: float) -> dict[str, Any]:
    """status.startup with one revision entry per figure, all of load key `key`."""
    return {
        "last": {"pod": "p", "uid": "u", "loadSeconds": 1},
        "revisions": [
            {"revision": f"r{i}", "starts": 1, "slowestReadySeconds": s, "loadKey": key}
            for i, s in enumerate(slowest_ready)
        ],
    }


def server_probe(template: dict[str, Any]) -> dict[str, Any]:
    return dict(template["spec"]["containers"][0]["startupProbe"])


def test_fixed_is_the_default_and_renders_as_before() -> None:
    svc = service()
    assert svc.spec.probes.startup_budget == "Fixed"
    assert startup_budget(svc, "rev", startup(load_key(svc), 100.0)) is None
    template = render_pod_template(svc, SETTINGS)
    assert startup_probe_seconds(template) == 1800
    assert "serving.vllm-operator.dev/startup-budget" not in template["metadata"]["annotations"]


def test_measured_follows_the_slowest_start_of_the_same_load_key_within_bounds() -> None:
    svc = service(spec=MEASURED)
    key = load_key(svc)
    # none measured yet: the fixed budget
    b = startup_budget(svc, "rev", None)
    assert b is not None
    assert (b.seconds, b.source) == (1800, "Fixed")
    # 3 x the slowest (200 s) of the same key; a slower start of another key does not count
    status = startup(key, 150.0, 200.0)
    status["revisions"].append(
        {"revision": "x", "starts": 1, "slowestReadySeconds": 900.0, "loadKey": "other"}
    )
    b = startup_budget(svc, "rev", status)
    assert b is not None
    assert (b.seconds, b.source, b.slowest_ready_seconds, b.factor) == (600, "Measured", 200, 3)
    # the least: measuredStartupMinSeconds (300); the most: startupTimeoutSeconds
    b = startup_budget(svc, "rev", startup(key, 20.0))
    assert b is not None
    assert b.seconds == 300
    b = startup_budget(svc, "rev", startup(key, 1000.0))
    assert b is not None
    assert b.seconds == 1800
    other = service(spec={"probes": {"startupBudget": "Measured", "measuredStartupFactor": 2}})
    b = startup_budget(other, "rev", startup(load_key(other), 200.0))
    assert b is not None
    assert b.seconds == 400


def test_the_load_key_changes_with_the_model_not_with_env_or_probes() -> None:
    base = service(spec=MEASURED)
    assert load_key(service(spec={**MEASURED, "env": [{"name": "A", "value": "1"}]})) == load_key(
        base
    )
    assert load_key(service(spec={"probes": {"startupBudget": "Fixed"}})) == load_key(base)
    assert load_key(service(spec={**MEASURED, "model": {"id": "Qwen/Qwen2.5-7B"}})) != load_key(
        base
    )
    assert load_key(service(spec={**MEASURED, "engine": {"maxModelLen": 4096}})) != load_key(base)


def test_the_budget_is_not_part_of_the_revision() -> None:
    svc = service(spec=MEASURED)
    template = render_pod_template(svc, SETTINGS)
    rev = revision(template)
    budgeted = with_startup_budget(template, 600, {"source": "Measured"})
    assert server_probe(budgeted)["failureThreshold"] == 60
    assert startup_probe_seconds(budgeted) == 600
    assert revision(budgeted) == rev
    assert revision(with_startup_budget(template, 301, {"source": "Measured"})) == rev
    # choosing Measured is a change of the spec's pod template: a revision of its own
    assert rev != revision(render_pod_template(service(), SETTINGS))
    # and a Fixed template's revision still covers its failureThreshold (as before)
    fixed = render_pod_template(service(), SETTINGS)
    changed = copy.deepcopy(fixed)
    changed["spec"]["containers"][0]["startupProbe"]["failureThreshold"] = 7
    assert revision(changed) != revision(fixed)


def test_a_live_deployment_of_the_revision_keeps_its_budget() -> None:
    svc = service(spec=MEASURED)
    template = render_pod_template(svc, SETTINGS)
    rev = revision(template)
    first = startup_budget(svc, rev, startup(load_key(svc), 200.0))
    assert first is not None
    live = {
        "metadata": {"annotations": {REVISION_ANNOTATION: rev}},
        "spec": {"template": with_budget(template, first)},
    }
    # a slower start measured later: the running revision keeps 600 s, the next gets 1,500 s
    later = startup(load_key(svc), 200.0, 500.0)
    kept = startup_budget(svc, rev, later, (None, live))
    assert kept is not None
    assert (kept.seconds, kept.source, kept.kept, kept.slowest_ready_seconds) == (
        600,
        "Measured",
        True,
        200,
    )
    nxt = startup_budget(svc, "another-rev", later, (live,))
    assert nxt is not None
    assert (nxt.seconds, nxt.kept) == (1500, False)


def test_the_minimum_may_not_exceed_the_timeout() -> None:
    with pytest.raises(ValidationError, match="measuredStartupMinSeconds must be <="):
        Service.from_body(
            body(
                spec={
                    "probes": {
                        "startupBudget": "Measured",
                        "startupTimeoutSeconds": 120,
                        "measuredStartupMinSeconds": 300,
                    }
                }
            )
        )
    # with a Fixed budget the minimum is not used, so it is not checked
    Service.from_body(body(spec={"probes": {"startupTimeoutSeconds": 120}}))


# ---- through the reconcile --------------------------------------------------------------


def put(api: FakeApi, spec: dict[str, Any], status: dict[str, Any] | None) -> None:
    generation = api.objects[PATH]["metadata"]["generation"] + 1 if PATH in api.objects else 1
    obj = body("minimal", spec, generation=generation)
    obj["status"] = status if status is not None else (api.objects.get(PATH) or {}).get("status")
    api.put(PATH, obj)
    reconcile(copy.deepcopy(api.objects[PATH]), api, SETTINGS)


def applied_budget(api: FakeApi) -> int | None:
    return startup_probe_seconds(applied(api, DEP)["spec"]["template"])


def test_the_reconcile_applies_the_budget_at_the_next_rollout_only() -> None:
    api = FakeApi(SETTINGS)
    spec = {**MEASURED, "benchmark": {"enabled": False}}
    key = load_key(Service.from_body(body("minimal", spec)))
    put(api, spec, {"startup": startup(key, 200.0)})
    rolled_out(api)
    assert applied_budget(api) == 600
    first_rev = template_revision(api.objects[DEP])
    shown = api.objects[PATH]["status"]["startup"]["probeBudget"]
    assert shown == {
        "revision": first_rev,
        "seconds": 600,
        "source": "Measured",
        "slowestReadySeconds": 200,
        "factor": 3,
    }
    # a slower start is measured: the running revision's template is not rewritten (no
    # rollout), and the status still names the budget it runs with
    status = dict(api.objects[PATH]["status"])
    status["startup"] = {**startup(key, 200.0, 400.0), "probeBudget": shown}
    put(api, spec, status)
    assert template_revision(api.objects[DEP]) == first_rev
    assert applied_budget(api) == 600
    assert api.objects[PATH]["status"]["startup"]["probeBudget"]["seconds"] == 600
    # the next rollout (an env change: same load key) follows the slower start
    put(api, {**spec, "env": [{"name": "A", "value": "1"}]}, None)
    assert template_revision(api.objects[DEP]) != first_rev
    assert applied_budget(api) == 1200
