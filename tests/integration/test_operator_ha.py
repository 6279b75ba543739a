"""Two operator replicas are safe: kopf peering lets exactly one of them work, and the
other takes over when it goes away."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support import apply, ready, sample, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster


def _create(cluster: LocalCluster, namespace: str, name: str) -> None:
    m = sample("minimal")
    m["metadata"]["name"] = name
    apply(cluster, namespace, m)


def test_a_second_replica_stands_by_and_takes_over(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    # the session operator has priority 1000; this one is lower, so it must stay paused
    standby = OperatorProcess(
        cluster, tmp_path / "standby.log", extra_env={"VLLM_OPERATOR_PRIORITY": "1"}
    )
    standby.start()
    try:
        time.sleep(3)
        _create(cluster, namespace, "peered")
        wait_for("peered Ready", lambda: ready(cluster, namespace, "peered"), timeout=60)
        log = standby.log_path.read_text()
        assert "peered" not in log  # the standby did not touch it
        assert "Resuming operations" not in log
        assert "peered" in operator.log_path.read_text()

        operator.stop()  # a graceful stop removes the leader from the peering object
        wait_for(
            "the standby to resume",
            lambda: "Resuming operations" in standby.log_path.read_text(),
            timeout=60,
        )
        _create(cluster, namespace, "failover")
        wait_for("failover Ready", lambda: ready(cluster, namespace, "failover"), timeout=60)
        assert "failover" in standby.log_path.read_text()
    finally:
        standby.stop()
        if operator.pid is None:
            operator.start()
