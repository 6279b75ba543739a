"""Autoscaling switched off keeps the count the autoscaler chose until spec.replicas changes:
the real operator on the local cluster, the Deployment scaled as the HPA would scale it."""

from __future__ import annotations

import json

import pytest

from tests.support import apply, get, ready, sample, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster


def test_switching_autoscaling_off_keeps_the_hpa_count_until_spec_replicas_changes(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    m = sample("minimal")
    m["metadata"]["name"] = "scaled"
    m["spec"]["benchmark"] = {"enabled": False}
    m["spec"]["autoscaling"] = {"enabled": True, "minReplicas": 1, "maxReplicas": 6}
    apply(cluster, namespace, m)
    wait_for("scaled Ready", lambda: ready(cluster, namespace, "scaled"), timeout=90)
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
        timeout=90,
    )
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
        timeout=60,
    )
    svc = wait_for(
        "the status of generation 2",
        lambda: (
            (s := get(cluster, namespace, "vllmservice", "scaled"))
            and s.get("status", {}).get("observedGeneration") == 2
            and s
        ),
        timeout=60,
    )
    assert get(cluster, namespace, "deployment", "scaled")["spec"]["replicas"] == 4
    assert svc["status"]["desiredReplicas"] == 4
    # the first change of spec.replicas applies
    cluster.kubectl("scale", "vsvc", "scaled", "-n", namespace, "--replicas=2")
    wait_for(
        "spec.replicas applied",
        lambda: get(cluster, namespace, "deployment", "scaled")["spec"]["replicas"] == 2,
        timeout=60,
    )
