"""The Helm chart, offline: helm lint, the helm-unittest suites, the values schema, every
operator setting reachable from values, and the generated files matching their sources."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from tests.chart_support import CHART, find, helm, set_args, template
from vllm_localenv.cluster import REPO_ROOT
from vllm_operator.api.settings import OperatorSettings

pytestmark = pytest.mark.helm
# settings the chart derives from other values instead of exposing them twice
DERIVED = {
    "namespaces": "rbac.watchNamespaces",
    "namespace": "rbac.watchNamespaces (the legacy single namespace; the chart sets `namespaces`)",
    "liveness_endpoint": "healthPort",
    "metrics_port": "metrics.enabled / metrics.port",
}
# settings the chart never sets (a newer one replaces them)
LEGACY = {"namespace"}


def test_helm_lint_strict() -> None:
    out = helm("lint", "--strict", str(CHART)).stdout
    assert "0 chart(s) failed" in out


def test_helm_unittest_suites() -> None:
    res = helm("unittest", "--strict", str(CHART), check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    suites = sorted(p.name for p in (CHART / "tests").glob("*_test.yaml"))
    assert re.search(rf"Test Suites: {len(suites)} passed, {len(suites)} total", res.stdout), (
        res.stdout
    )


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"replicaCount": "two"}, "replicaCount"),
        ({"unknownKey": True}, "unknownKey"),
        ({"settings": {"resyncSecs": 5}}, "resyncSecs"),
        ({"settings": {"logJson": "yes"}}, "logJson"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"rbac": {"watchNamespaces": ["Not_A_Namespace"]}}, "watchNamespaces"),
        ({"metrics": {"port": 70000}}, "port"),
        ({"settings": {"vllmPodSecurity": "privileged"}}, "vllmPodSecurity"),
        ({"rbac": {"watchNamespaces": ["a", "a"]}}, "watchNamespaces"),
        ({"settings": {"leaseName": "Not A Name"}}, "leaseName"),
        # retired: leader election is the one HA mode (docs/design/runtime.md)
        ({"settings": {"leaderElection": False}}, "leaderElection"),
        ({"settings": {"standalone": True}}, "standalone"),
    ],
)
def test_the_schema_rejects_wrong_types_and_unknown_keys(
    values: dict[str, Any], complaint: str
) -> None:
    res = helm("template", "x", str(CHART), *set_args(values), check=False)
    assert res.returncode != 0
    assert complaint in res.stderr


def test_every_operator_setting_is_a_value_or_derived_from_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    camel = {re.sub(r"_(\w)", lambda m: m[1].upper(), f) for f in OperatorSettings.model_fields}
    exposed = set(values["settings"])
    derived = {re.sub(r"_(\w)", lambda m: m[1].upper(), f) for f in DERIVED}
    assert camel == exposed | derived, (camel - exposed - derived, exposed - camel)
    # and every one set reaches the container as the variable pydantic-settings reads
    typed: dict[str, Any] = {
        "resyncSeconds": 7.5,
        "replicasHoldSeconds": 120,
        "slowStartFactor": 2.5,
        "workers": 48,
        "watchTimeoutSeconds": 9,
        "scrapeInterval": "30s",
        "prometheusUrl": "http://prometheus.monitoring.svc:9090",
        "leaseDurationSeconds": 20,
        "renewDeadlineSeconds": 12,
        "retryPeriodSeconds": 3,
        "vllmPodSecurity": "baseline",
    }
    probe: dict[str, Any] = {
        "monitoringLabels": {"release": "prom"},
        **{k: "x" for k, v in values["settings"].items() if v is None and k not in typed},
        **typed,
    }
    values_set = {"settings": probe, "rbac": {"watchNamespaces": ["team-a", "team-b"]}}
    dep = find(template(values_set), "Deployment")
    env = {
        e["name"]: e["value"]
        for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in e
    }
    prefix = OperatorSettings.model_config.get("env_prefix", "")
    names = {f"{prefix}{f.upper()}" for f in OperatorSettings.model_fields if f not in LEGACY}
    assert names <= set(env), names - set(env)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    settings = OperatorSettings()
    assert settings.resync_seconds == 7.5
    assert settings.replicas_hold_seconds == 120
    assert settings.workers == 48
    assert settings.monitoring_labels == {"release": "prom"}
    assert settings.watched_namespaces() == ("team-a", "team-b")
    assert settings.metrics_port == 8081
    assert settings.lease_duration_seconds == 20
    assert settings.vllm_pod_security == "baseline"


def test_every_values_key_is_documented() -> None:
    """A comment directly above every key of values.yaml (free-form Kubernetes structures
    under resources/securityContext excepted: their keys are the API's own)."""
    free_form = ("resources", "podSecurityContext", "securityContext")
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented: list[str] = []
    parents: list[str] = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)([A-Za-z][\w]*):", line)
        if not m:
            continue
        depth = len(m[1]) // 2
        parents = [*parents[:depth], m[2]]
        if parents[0] in free_form and depth > 0:
            continue
        if not lines[i - 1].strip().startswith("#"):
            undocumented.append(".".join(parents))
    assert not undocumented


def test_generated_files_match_their_sources() -> None:
    """What `make generate` copies into the chart (make check-generated catches a stale commit;
    this catches a stale working tree)."""
    pairs = {
        "files/crds/vllmservices.yaml": "crds/vllmservices.yaml",
    }
    for f in (CHART / "files" / "monitoring").glob("*.yaml"):
        pairs[f"files/monitoring/{f.name}"] = f"deploy/monitoring/{f.name}"
    for chart_file, source in pairs.items():
        assert (CHART / chart_file).read_text() == (REPO_ROOT / source).read_text(), chart_file


def test_the_chart_crd_is_the_generated_crd_plus_the_keep_policy() -> None:
    crd = find(template(), "CustomResourceDefinition", "vllmservices.serving.vllm-operator.dev")
    generated = yaml.safe_load((REPO_ROOT / "crds" / "vllmservices.yaml").read_text())
    assert crd["spec"] == generated["spec"]
    assert crd["metadata"]["annotations"] == {
        "helm.sh/resource-policy": "keep",
        "argocd.argoproj.io/sync-options": "Delete=false",
    }


def test_the_default_render_matches_the_plain_manifests() -> None:
    """The chart's defaults and deploy/ (the chart rendered with plain-values.yaml,
    tests/unit/localenv/test_deploygen.py) grant the same permissions (cluster-wide mode, leader
    election): the ClusterRole, and the leader-election Role in the operator's namespace."""
    plain = list(yaml.safe_load_all((REPO_ROOT / "deploy" / "rbac.yaml").read_text()))
    docs = template()
    key = lambda r: json.dumps(r, sort_keys=True)  # noqa: E731
    plain_role = next(d for d in plain if d["kind"] == "ClusterRole")
    assert sorted(map(key, find(docs, "ClusterRole")["rules"])) == sorted(
        map(key, plain_role["rules"])
    )
    plain_lease = next(d for d in plain if d["kind"] == "Role")
    chart_lease = find(docs, "Role", "vllm-operator-leader-election")
    assert plain_lease["rules"] == chart_lease["rules"]
    assert (plain_lease["metadata"]["name"], plain_lease["metadata"]["namespace"]) == (
        "vllm-operator-leader-election",
        "vllm-operator-system",
    )


def test_the_admission_policies_match_the_plain_manifests() -> None:
    """deploy/admission-policy.yaml holds the policies the chart's defaults render."""
    plain = [
        d
        for d in yaml.safe_load_all((REPO_ROOT / "deploy" / "admission-policy.yaml").read_text())
        if d
    ]
    chart = [d for d in template() if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert [(d["kind"], d["metadata"]["name"], d["spec"]) for d in plain] == [
        (d["kind"], d["metadata"]["name"], d["spec"]) for d in chart
    ]
    # each policy's first condition is about the operator's own account: its writes, or
    # (benchmark-results) everyone's but its own
    users = {
        d["spec"]["matchConditions"][0]["expression"]
        for d in chart
        if d["kind"] == "ValidatingAdmissionPolicy"
    }
    account = "'system:serviceaccount:vllm-operator-system:vllm-operator'"
    assert users == {
        f"request.userInfo.username == {account}",
        f"request.userInfo.username != {account}",
    }


def test_an_old_values_file_with_the_retired_defaults_still_installs() -> None:
    """A values file copied from an earlier chart (kopf peering's keys at their defaults)
    renders; the operator ignores those keys with a warning (test_settings)."""
    old = {
        "settings": {
            "leaderElection": True,
            "standalone": False,
            "peeringName": "vllm-operator",
            "priority": None,
            "finalizer": None,
        }
    }
    res = helm("template", "x", str(CHART), *set_args(old), check=False)
    assert res.returncode == 0, res.stderr
    assert "ClusterKopfPeering" not in res.stdout
