"""Deletion needs no operator: a VLLMService carries no finalizer, so deleting it while the
operator is down (or uninstalled) completes by garbage collection alone."""

from __future__ import annotations

import time

import pytest

from tests.support import apply, audit, get, ready, reconciles_seen, sample, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster


def test_a_service_deleted_while_the_operator_is_down_goes_with_its_children(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, sample("minimal"))
    wait_for("Ready", lambda: ready(cluster, namespace, "minimal"))
    since = time.time()
    # the drift timer ran meanwhile (in kopf, a timer is what brought a finalizer in)
    wait_for(
        "three reconciles",
        lambda: reconciles_seen(audit(cluster.audit_log, operator.username, namespace, since)) >= 3,
    )
    svc = get(cluster, namespace, "vllmservice", "minimal")
    assert svc is not None
    assert svc["metadata"].get("finalizers", []) == []
    operator.stop()
    try:
        cluster.kubectl("delete", "vsvc", "minimal", "-n", namespace, "--wait=false")
        wait_for(
            "the service to be gone",
            lambda: get(cluster, namespace, "vllmservice", "minimal") is None,
        )
        wait_for(
            "its children to be garbage-collected",
            lambda: (
                get(cluster, namespace, "deployment", "minimal") is None
                and get(cluster, namespace, "service", "minimal") is None
            ),
        )
    finally:
        operator.start()
