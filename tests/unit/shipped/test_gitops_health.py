"""GitOps, offline: the Argo CD health check (deploy/argocd/health.lua under Debian's lua5.1)
and kstatus's rules on VLLMService objects captured from the real operator
(tests/data/vllmservice-status, written by tests/integration/test_gitops.py with
VLLM_CAPTURE_DIR), and the Argo CD / Flux examples in docs/ against the real chart."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart_support import (
    CHART,
    HEALTH_LUA,
    argocd_health,
    find,
    kstatus,
    template,
)
from tests.support import condition
from vllm_localenv.cluster import REPO_ROOT

CAPTURED = REPO_ROOT / "tests" / "data" / "vllmservice-status"
DOCS = REPO_ROOT / "docs"


def captured() -> list[Path]:
    return sorted(CAPTURED.glob("*.json"))


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((CAPTURED / f"{name}.json").read_text()))


@pytest.mark.parametrize("path", captured(), ids=lambda p: p.stem)
def test_argocd_health_of_captured_objects(path: Path) -> None:
    obj = json.loads(path.read_text())
    expected = path.stem.split("-")[0].capitalize()
    status, message = argocd_health(obj)
    assert status == expected
    if status == "Degraded":
        degraded = condition(obj, "Degraded")
        assert message == f"{degraded['reason']}: {degraded['message']}"
    # kstatus waits only for the operator to observe the generation (the chart README, GitOps)
    unobserved = obj["status"]["observedGeneration"] != obj["metadata"]["generation"]
    assert kstatus(obj) == ("InProgress" if unobserved else "Current")


def test_every_health_state_was_captured() -> None:
    states = {p.stem.split("-")[0] for p in captured()}
    assert {"healthy", "progressing", "suspended", "degraded"} <= states


def test_a_status_for_an_older_generation_is_progressing_for_both_tools() -> None:
    obj = copy.deepcopy(load("healthy"))
    obj["metadata"]["generation"] += 1  # a spec change the operator has not seen yet
    assert argocd_health(obj)[0] == "Progressing"
    assert kstatus(obj) == "InProgress"
    del obj["status"]
    assert argocd_health(obj)[0] == "Progressing"


def test_a_benchmark_rollback_is_degraded_with_its_message() -> None:
    """Ready (the previous revision serves) but rolled back: Degraded, saying why. The
    condition has the shape status.compute_status writes on a rollback (a live capture needs
    the vLLM tier: tests/integration/test_benchmark_rollout.py)."""
    obj = copy.deepcopy(load("healthy"))
    message = (
        "revision 5f1c2e9a failed its benchmark gates (output tokens/s 412 < 1e+09); "
        "rolled back to revision 9a8b7c6d until the spec changes"
    )
    conditions = [c for c in obj["status"]["conditions"] if c["type"] != "Degraded"]
    obj["status"]["conditions"] = [
        *conditions,
        {
            "type": "Degraded",
            "status": "True",
            "reason": "BenchmarkRollback",
            "message": message,
            "observedGeneration": obj["metadata"]["generation"],
            "lastTransitionTime": "2026-11-30T12:00:00Z",
        },
    ]
    assert argocd_health(obj) == ("Degraded", f"BenchmarkRollback: {message}")


# ------------------------------------------------------------------------------- docs examples


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DOCS / name).read_text()) if d]


def chart_values_of(name: str) -> dict[str, Any]:
    for d in docs(name):
        if d["kind"] == "Application":
            return dict(d["spec"]["source"]["helm"]["valuesObject"])
        if d["kind"] == "HelmRelease":
            return dict(d["spec"]["values"])
    raise AssertionError(f"no chart values in {name}")


@pytest.mark.parametrize("name", ["argocd-application.yaml", "flux-helmrelease.yaml"])
def test_gitops_examples_use_real_chart_values(name: str) -> None:
    values = chart_values_of(name)
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.validate(values, schema)  # unknown keys and wrong types fail here
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())

    def known(v: dict[str, Any], d: dict[str, Any], at: str) -> None:
        for k, sub in v.items():
            assert k in d, f"{name}: {at}{k} is not a chart value"
            if isinstance(sub, dict) and isinstance(d[k], dict) and d[k]:
                known(sub, d[k], f"{at}{k}.")

    known(values, defaults, "")


@pytest.mark.helm
@pytest.mark.parametrize("name", ["argocd-application.yaml", "flux-helmrelease.yaml"])
def test_gitops_examples_render(name: str) -> None:
    docs_out = template(chart_values_of(name))
    assert find(docs_out, "Deployment")


def test_argocd_example_points_at_the_chart_and_carries_the_health_check() -> None:
    app = next(d for d in docs("argocd-application.yaml") if d["kind"] == "Application")
    assert app["apiVersion"] == "argoproj.io/v1alpha1"
    assert app["spec"]["source"]["path"] == "charts/vllm-operator"
    assert (REPO_ROOT / app["spec"]["source"]["path"] / "Chart.yaml").exists()
    cm = next(d for d in docs("argocd-application.yaml") if d["kind"] == "ConfigMap")
    key = "resource.customizations.health.serving.vllm-operator.dev_VLLMService"
    assert cm["data"][key].strip() == HEALTH_LUA.read_text().strip()


def test_flux_example_points_at_the_chart_and_waits_for_ready() -> None:
    objs = {d["kind"]: d for d in docs("flux-helmrelease.yaml")}
    assert set(objs) == {"GitRepository", "HelmRelease", "Kustomization"}
    hr = objs["HelmRelease"]
    assert hr["apiVersion"] == "helm.toolkit.fluxcd.io/v2"
    assert (REPO_ROOT / hr["spec"]["chart"]["spec"]["chart"] / "Chart.yaml").exists()
    assert (
        hr["spec"]["chart"]["spec"]["sourceRef"]["name"]
        == objs["GitRepository"]["metadata"]["name"]
    )
    checks = objs["Kustomization"]["spec"]["healthCheckExprs"]
    assert [(c["apiVersion"], c["kind"]) for c in checks] == [
        ("serving.vllm-operator.dev/v1alpha1", "VLLMService")
    ]
    assert "Ready" in checks[0]["current"]
    assert "Degraded" in checks[0]["failed"]
