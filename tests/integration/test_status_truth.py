"""The status is the truth: the real operator against the local control plane, judged by the
API server's own audit log and by real denials (a ValidatingAdmissionPolicy, a ResourceQuota,
Pod Security), never by the operator's word."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import (
    WRITE_VERBS,
    apply,
    audit,
    condition,
    get,
    items,
    quiet_window,
    ready,
    reconciles_seen,
    sample,
    wait_for,
)
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster
POLICY_MESSAGE = "GPU workloads are not allowed in this namespace (test policy)"


def assert_quiet(operator: OperatorProcess, cluster: LocalCluster, namespace: str) -> None:
    """Three drift-timer reconciles of each service with zero writes, and proof that the
    reconciles ran (the audit log shows each one: support.quiet_window)."""
    names = [s["metadata"]["name"] for s in items(cluster, namespace, "vllmservices")]
    mine = quiet_window(cluster, operator.username, namespace, names, reconciles=3)
    writes = [(e["verb"], e["objectRef"]) for e in mine if e["verb"] in WRITE_VERBS]
    assert writes == []
    assert reconciles_seen(mine) >= 3, "the resyncs did not run"


def status(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    return dict((get(cluster, namespace, "vllmservice", name) or {}).get("status", {}))


def events(cluster: LocalCluster, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in items(cluster, namespace, "events")
        if e["involvedObject"].get("name") == name
        and e["involvedObject"].get("kind") == "VLLMService"
        and e["reason"] == reason
    ]


def posted(cluster: LocalCluster, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    """The events of `reason` once at least one is there: events are posted beside the
    reconciles (events.EventRecorder), a moment after the status write that caused them."""
    return wait_for(f"a {reason} event", lambda: events(cluster, namespace, name, reason) or None)


def patch_spec(cluster: LocalCluster, namespace: str, name: str, spec: dict[str, Any]) -> None:
    cluster.kubectl(
        "patch", "vsvc", name, "-n", namespace, "--type=merge", "-p", json.dumps({"spec": spec})
    )


# ---- 1. the status is exactly what the operator computed ---------------------------------


def publish_result(
    cluster: LocalCluster, namespace: str, name: str, tokens_per_second: float
) -> str:
    """Plays the benchmark runner: writes a result into the current revision's run."""
    rev = wait_for(
        "the run of the current revision",
        lambda: (
            (st := ready(cluster, namespace, name))
            and (b := st["status"].get("benchmark") or {}).get("state") == "Running"
            and b["revision"]
        ),
    )
    run = f"{name}-bench-{rev[:8]}"
    result = {
        "status": "ok",
        "finishedAt": "2030-01-01T00:00:00Z",
        "headline": {"outputTokensPerSecond": tokens_per_second, "ttftP95Seconds": 0.05},
    }
    cluster.kubectl(
        "patch",
        "configmap",
        run,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"data": {"result.json": json.dumps(result)}}),
    )
    return str(rev)


def publish_confirmation(
    cluster: LocalCluster, namespace: str, name: str, rev: str, tokens_per_second: float
) -> None:
    """Plays the runner of the run that confirms `rev`'s failed verdict (a second run of the
    same revision, named `<name>-bench-<rev>-<4 hex>`): one failed run never rolls back."""
    prefix = f"{name}-bench-{rev[:8]}-"
    runs = "app.kubernetes.io/component=benchmark"
    run = wait_for(
        "the confirmation run",
        lambda: next(
            (
                cm["metadata"]["name"]
                for cm in items(cluster, namespace, "configmaps", runs)
                if cm["metadata"]["name"].startswith(prefix)
            ),
            None,
        ),
    )
    result = {
        "status": "ok",
        "finishedAt": "2030-01-01T00:01:00Z",
        "headline": {"outputTokensPerSecond": tokens_per_second, "ttftP95Seconds": 0.05},
    }
    cluster.kubectl(
        "patch",
        "configmap",
        run,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"data": {"result.json": json.dumps(result)}}),
    )


def test_no_stale_benchmark_keys_across_revisions_and_rollbacks_and_no_op_resyncs_write_nothing(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    m = sample("minimal")
    m["metadata"]["name"] = "truth"
    m["spec"]["benchmark"] = {
        "thresholds": {"minOutputTokensPerSecond": 10},
        "onFailure": "Rollback",
    }
    apply(cluster, namespace, m)
    rev_a = publish_result(cluster, namespace, "truth", 100.0)
    st = wait_for(
        "revision A passed",
        lambda: (s := status(cluster, namespace, "truth")).get("benchmark", {}).get("passed") and s,
    )
    assert st["benchmark"]["outputTokensPerSecond"] == 100
    assert_quiet(operator, cluster, namespace)

    # revision B: nothing of A's run may show, then B fails its gate and A comes back
    patch_spec(cluster, namespace, "truth", {"engine": {"maxNumSeqs": 8}})
    rev_b = publish_result(cluster, namespace, "truth", 1.0)
    assert rev_b != rev_a
    publish_confirmation(cluster, namespace, "truth", rev_b, 1.0)
    st = wait_for(
        "the rollback to A",
        lambda: (
            (s := status(cluster, namespace, "truth")).get("benchmark", {}).get("rolledBackTo")
            == rev_a
            and s
        ),
    )
    assert st["benchmark"]["revision"] == rev_b
    assert st["benchmark"]["passed"] is False
    assert st["benchmark"]["outputTokensPerSecond"] == 1
    assert_quiet(operator, cluster, namespace)

    # revision C: the rollback, the failures and B's numbers are gone from the status
    patch_spec(cluster, namespace, "truth", {"engine": {"maxNumSeqs": 16}})
    st = wait_for(
        "revision C running its benchmark",
        lambda: (
            (s := ready(cluster, namespace, "truth"))
            and s["status"].get("benchmark", {}).get("state") == "Running"
            and s["status"]
        ),
    )
    bench = st["benchmark"]
    assert bench["revision"] not in (rev_a, rev_b)
    # measured on its canary (the default with gates): A, restored, serves meanwhile
    assert (st["rollout"]["phase"], st["rollout"]["revision"]) == ("Canary", bench["revision"])
    assert st["revision"] == rev_a
    stale = {"rolledBackTo", "failures", "passed", "outputTokensPerSecond", "completedAt"}
    assert stale & set(bench) == set(), bench
    assert condition({"status": st}, "Degraded")["reason"] != "BenchmarkRollback"
    assert_quiet(operator, cluster, namespace)


def test_ready_is_announced_once_for_one_rollout(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, sample("minimal"))
    wait_for("Ready", lambda: ready(cluster, namespace, "minimal"))
    assert_quiet(operator, cluster, namespace)  # the reconciles ran, several times
    assert len(posted(cluster, namespace, "minimal", "Ready")) == 1


# ---- 2. failures reach the status -----------------------------------------------------------


def deny_in_namespace(
    cluster: LocalCluster,
    namespace: str,
    name: str,
    rule: dict[str, Any],
    message: str,
    probe: dict[str, Any],
) -> None:
    """A ValidatingAdmissionPolicy refusing requests matching `rule` in `namespace` with
    `message` (what a webhook or a policy engine does), bound as `name`; returns once a
    server-side dry run of `probe` is refused (the API server has loaded the policy)."""
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [rule]},
            "validations": [{"expression": "false", "message": message}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    for obj in (policy, binding):
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(obj))

    def denied() -> bool:
        out = cluster.kubectl(
            "apply", "--dry-run=server", "-f", "-", stdin=json.dumps(probe), check=False
        )
        return "created" not in out

    wait_for(f"the policy {name} to be in force", denied)


@pytest.fixture
def deny_deployments(cluster: LocalCluster, namespace: str) -> Iterator[str]:
    """A policy denying Deployments in this test's namespace; yields the binding's name
    (delete it to lift the denial)."""
    name = f"deny-deployments-{namespace}"
    deny_in_namespace(
        cluster,
        namespace,
        name,
        {
            "apiGroups": ["apps"],
            "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["deployments"],
        },
        POLICY_MESSAGE,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "probe", "namespace": namespace},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "x"}]},
                },
            },
        },
    )
    yield name
    cluster.kubectl("delete", "validatingadmissionpolicybinding", name, "--ignore-not-found")
    cluster.kubectl("delete", "validatingadmissionpolicy", name, "--ignore-not-found")


def test_a_denied_apply_is_in_the_status_with_one_event_and_retried_with_back_off(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, deny_deployments: str
) -> None:
    apply(cluster, namespace, sample("minimal"))
    ready_cond = wait_for(
        "Ready=False/ApplyFailed",
        lambda: (
            (c := condition(get(cluster, namespace, "vllmservice", "minimal"), "Ready")).get(
                "reason"
            )
            == "ApplyFailed"
            and c
        ),
    )
    assert ready_cond["status"] == "False"
    assert POLICY_MESSAGE in ready_cond["message"]
    svc = get(cluster, namespace, "vllmservice", "minimal")
    assert svc is not None
    assert svc["status"]["observedGeneration"] == svc["metadata"]["generation"]
    assert condition(svc, "Ready")["observedGeneration"] == svc["metadata"]["generation"]
    # the operator keeps trying (the API server's record), yet the event is posted once
    since = time.time() - 120

    def denied_patches() -> list[dict[str, Any]]:
        return [
            e
            for e in audit(cluster.audit_log, operator.username, namespace, since)
            if e["verb"] == "patch"
            and e["objectRef"]["resource"] == "deployments"
            and e.get("responseStatus", {}).get("code", 200) >= 400
        ]

    wait_for("three denied attempts", lambda: len(denied_patches()) >= 3)
    failed = posted(cluster, namespace, "minimal", "ApplyFailed")
    assert len(failed) == 1, [e["message"] for e in failed]
    assert failed[0]["type"] == "Warning"
    assert POLICY_MESSAGE in failed[0]["message"]
    assert get(cluster, namespace, "deployment", "minimal") is None
    # the denial lifted: the next attempt succeeds and the status says so
    cluster.kubectl("delete", "validatingadmissionpolicybinding", deny_deployments)
    svc = wait_for("Ready", lambda: ready(cluster, namespace, "minimal"))
    assert condition(svc, "Degraded")["status"] == "False"
    assert len(posted(cluster, namespace, "minimal", "Ready")) == 1


POD_POLICY_MESSAGE = "pods of this namespace are refused by a test's admission policy"


def deny_pods(cluster: LocalCluster, namespace: str) -> None:
    """A policy refusing every Pod in `namespace`. Pod Security no longer serves as the
    barrier: the operator's pods pass "restricted" (tests/integration/test_pod_security.py)."""
    deny_in_namespace(
        cluster,
        namespace,
        f"deny-pods-{namespace}",
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
        POD_POLICY_MESSAGE,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        },
    )


@pytest.mark.parametrize("barrier", ["resource-quota", "admission-policy"])
def test_pods_that_cannot_be_created_are_reported(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, barrier: str
) -> None:
    if barrier == "resource-quota":
        quota = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-gpus", "namespace": namespace},
            "spec": {"hard": {"requests.nvidia.com/gpu": "0"}},
        }
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(quota))
        # the quota is enforced from its status, which the resourcequota controller fills in
        wait_for(
            "the resourcequota controller to fill in the quota's status",
            lambda: (
                (get(cluster, namespace, "resourcequota", "no-gpus") or {}).get("status") or {}
            ).get("used"),
        )
        expected = "exceeded quota"
    else:
        deny_pods(cluster, namespace)
        expected = POD_POLICY_MESSAGE
    apply(cluster, namespace, sample("minimal"))

    def failed_create() -> dict[str, Any] | None:
        svc = get(cluster, namespace, "vllmservice", "minimal")
        return svc if condition(svc, "Ready").get("reason") == "FailedCreate" else None

    try:
        svc = wait_for("Ready=False/FailedCreate", failed_create)
    except AssertionError as exc:  # say what the Deployment saw
        dep = get(cluster, namespace, "deployment", "minimal") or {}
        raise AssertionError(f"{exc}; the Deployment's status: {dep.get('status')}") from exc
    ready_cond = condition(svc, "Ready")
    assert ready_cond["status"] == "False"
    assert expected in ready_cond["message"]
    degraded = condition(svc, "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "FailedCreate")
    assert condition(svc, "Progressing")["status"] == "False"
    assert len(posted(cluster, namespace, "minimal", "FailedCreate")) == 1
