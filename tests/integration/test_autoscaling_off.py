"""Autoscaling switched off keeps the count the autoscaler chose until spec.replicas changes:
the real operator on the local cluster, the Deployment scaled as the HPA would scale it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support import apply, get, ready, sample, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster


def operator_owns_replicas(cluster: LocalCluster, namespace: str, name: str) -> bool:
    """Whether the operator's server-side apply entry owns the Deployment's spec.replicas."""
    dep: dict[str, Any] = json.loads(
        cluster.kubectl(
            "get", "deployment", name, "-n", namespace, "-o", "json", "--show-managed-fields"
        )
    )
    for entry in dep["metadata"].get("managedFields") or []:
        if entry.get("manager") == "vllm-operator" and entry.get("operation") == "Apply":
            return "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
    return False


def test_switching_autoscaling_off_keeps_the_hpa_count_until_spec_replicas_changes(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    m = sample("minimal")
    m["metadata"]["name"] = "scaled"
    m["spec"]["benchmark"] = {"enabled": False}
    m["spec"]["autoscaling"] = {"enabled": True, "minReplicas": 1, "maxReplicas": 6}
    apply(cluster, namespace, m)
    wait_for("scaled Ready", lambda: ready(cluster, namespace, "scaled"))
    # the positive control: created at minReplicas, replicas are the operator's
    assert operator_owns_replicas(cluster, namespace, "scaled")
    # what the HPA controller does when it scales: the Deployment's scale subresource
    cluster.kubectl("scale", "deployment", "scaled", "-n", namespace, "--replicas=4")
    wait_for(
        "4 replicas ready",
        lambda: (
            (get(cluster, namespace, "vllmservice", "scaled") or {})
            .get("status", {})
            .get("readyReplicas")
            == 4
        ),
    )
    # the hand-over: the operator's next apply leaves replicas out (the scale's manager owns
    # them), so no apply of a count read before a scale can undo it. Evidence that the apply
    # ran: the operator's own Apply entry changed from owning replicas to not owning them
    wait_for(
        "the operator's apply no longer owns spec.replicas",
        lambda: not operator_owns_replicas(cluster, namespace, "scaled"),
    )
    assert get(cluster, namespace, "deployment", "scaled")["spec"]["replicas"] == 4
    cluster.kubectl(
        "patch",
        "vsvc",
        "scaled",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"autoscaling": {"enabled": False}}}),
    )
    # evidence that the reconcile of the change ran: the HPA is pruned, the status caught up
    wait_for(
        "the HPA pruned",
        lambda: get(cluster, namespace, "hpa", "scaled") is None,
    )
    svc = wait_for(
        "the status of generation 2",
        lambda: (
            (s := get(cluster, namespace, "vllmservice", "scaled"))
            and s.get("status", {}).get("observedGeneration") == 2
            and s
        ),
    )
    dep = get(cluster, namespace, "deployment", "scaled")
    assert dep["spec"]["replicas"] == 4
    assert operator_owns_replicas(
        cluster, namespace, "scaled"
    )  # switched off: the operator holds the count itself
    assert svc["status"]["desiredReplicas"] == 4
    # the first change of spec.replicas applies
    cluster.kubectl("scale", "vsvc", "scaled", "-n", namespace, "--replicas=2")
    wait_for(
        "spec.replicas applied",
        lambda: get(cluster, namespace, "deployment", "scaled")["spec"]["replicas"] == 2,
    )
