"""Two operator replicas, one writer: leader election on a Lease (runtime/leader.py). The standby
makes no write at all; when the leader is SIGKILLed the standby takes the Lease after it
expired and reconciles, and the API server's audit log shows the writes of the two replicas
(told apart by User-Agent) one after the other, never interleaved."""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import apply, ready, sample, through_renewals, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.ha import Partition, audit_writes, kubeconfig_via, restart_apiserver, write_runs
from vllm_localenv.operator_process import OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, OperatorProcess

pytestmark = pytest.mark.cluster

DURATION, DEADLINE, RETRY = 6.0, 4.0, 1.0
TIMINGS = {
    "VLLM_OPERATOR_LEADER_ELECTION": "true",
    "VLLM_OPERATOR_LEASE_DURATION_SECONDS": str(DURATION),
    "VLLM_OPERATOR_RENEW_DEADLINE_SECONDS": str(DEADLINE),
    "VLLM_OPERATOR_RETRY_PERIOD_SECONDS": str(RETRY),
}
# a standby leads at most lease duration + a retry period (+ a request) after the holder's
# last renewal; the rest is slack for a loaded 2-core machine (a wait: it ends at the takeover)
TAKEOVER_BOUND = DURATION + 2 * RETRY + 60

# a write in flight at the kill or the cut completes at the API server (its audit stamp) a
# moment after it: up to seconds on a loaded 2-core machine
IN_FLIGHT = 3.0


def _create(cluster: LocalCluster, namespace: str, name: str) -> None:
    m = sample("minimal")
    m["metadata"]["name"] = name
    apply(cluster, namespace, m)


def _identity(op: OperatorProcess) -> str:
    found = re.search(r"leader election: (\S+) competes", op.log_path.read_text())
    return found.group(1) if found else ""


def _leads(op: OperatorProcess) -> bool:
    text = op.log_path.read_text()
    return text.rfind("started leading") > text.rfind("stopped leading")


def _stopped_leading_at(op: OperatorProcess) -> list[float]:
    """When the replica's elector said it stopped leading (its log's wall-clock stamps)."""
    out = []
    for line in op.log_path.read_text().splitlines():
        if "stopped leading" in line and line.startswith("["):
            stamp = dt.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f")
            out.append(stamp.timestamp())  # the log stamps local time
    return out


def _lease(cluster: LocalCluster) -> dict[str, Any]:
    out = cluster.kubectl("get", "lease", "vllm-operator", "-n", OPERATOR_NAMESPACE, "-o", "json")
    return dict(json.loads(out)["spec"])


def _lease_transitions(cluster: LocalCluster) -> int:
    return int(_lease(cluster).get("leaseTransitions", 0))


@pytest.fixture
def alone(installed: LocalCluster, no_other_operator: None) -> None:
    """The CRDs and RBAC installed, the session's operators stopped (releasing the Lease)
    and started again afterwards (conftest's no_other_operator)."""


def test_the_standby_writes_nothing_and_takes_over_a_killed_leader(
    alone: None, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    a = OperatorProcess(cluster, tmp_path / "a.log", extra_env=TIMINGS)
    b = OperatorProcess(cluster, tmp_path / "b.log", extra_env=TIMINGS)
    try:
        since = time.time()
        a.start()
        wait_for("a to lead", lambda: _leads(a))
        b.start()
        wait_for("b to compete", lambda: _identity(b))
        _create(cluster, namespace, "first")
        wait_for("first Ready", lambda: ready(cluster, namespace, "first"))
        assert not _leads(b)

        killed_at = time.time()
        a.stop(sig=signal.SIGKILL)
        wait_for("b to lead", lambda: _leads(b), timeout=TAKEOVER_BOUND)
        _create(cluster, namespace, "second")
        wait_for("second Ready", lambda: ready(cluster, namespace, "second"))

        writes = audit_writes(cluster.audit_log, namespace, since=since, username=a.username)
        ids = {_identity(a), _identity(b)}
        assert {w.replica for w in writes} == ids  # no write of theirs without a replica's name
        runs = write_runs(writes)
        # a wrote (the first service), then b (the second): one handover, no interleaving
        assert [r.replica for r in runs] == [_identity(a), _identity(b)]
        assert runs[0].last <= killed_at + IN_FLIGHT
        assert runs[1].first - killed_at >= DURATION - DEADLINE  # b waited the Lease out
    finally:
        b.stop()
        a.stop()


def test_a_leader_cut_off_from_the_api_server_stops_before_the_standby_starts(
    alone: None, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    proxy = Partition(cluster.ports.apiserver)
    account = cluster.service_account_kubeconfig(
        OPERATOR_NAMESPACE, OPERATOR_ACCOUNT, tmp_path / "sa.kubeconfig"
    )
    proxied = kubeconfig_via(account, tmp_path / "proxied.kubeconfig", proxy.port)
    a = OperatorProcess(
        cluster, tmp_path / "a.log", extra_env={**TIMINGS, "KUBECONFIG": str(proxied)}
    )
    b = OperatorProcess(cluster, tmp_path / "b.log", extra_env=TIMINGS)
    try:
        since = time.time()
        a.start()
        wait_for("a to lead", lambda: _leads(a))
        b.start()
        wait_for("b to compete", lambda: _identity(b))
        _create(cluster, namespace, "first")
        wait_for("first Ready", lambda: ready(cluster, namespace, "first"))

        cut_at = time.time()
        proxy.cut()
        wait_for("b to lead", lambda: _leads(b), timeout=TAKEOVER_BOUND)
        _create(cluster, namespace, "second")
        wait_for("second Ready", lambda: ready(cluster, namespace, "second"))
        writes = audit_writes(cluster.audit_log, namespace, since=since, username=a.username)
        b_first = min(w.at for w in writes if w.replica == _identity(b))
        # a's elector closed its fence (it logs the moment) before b's first write
        stopped = [t for t in _stopped_leading_at(a) if t > cut_at]
        assert stopped, "a never stopped leading"
        assert stopped[0] < b_first

        # the partition heals: a talks to the API server again (its watches and its elector,
        # through the proxy) and stands by; still no write of a's after the cut
        proxy.restore()
        through = proxy.forwarded_bytes
        wait_for("a to reach the API server", lambda: proxy.forwarded_bytes > through + 10_000)

        def a_stands_by() -> None:
            assert not _leads(a)

        # rounds of a's elector after the heal: three of b's renewals (the same period)
        through_renewals(lambda: _lease(cluster), 3, a_stands_by, RETRY / 4)
        writes = audit_writes(cluster.audit_log, namespace, since=since, username=a.username)
        assert {w.replica for w in writes} == {_identity(a), _identity(b)}
        runs = write_runs(writes)
        assert [r.replica for r in runs] == [_identity(a), _identity(b)]
        assert runs[0].last < cut_at + IN_FLIGHT
    finally:
        b.stop()
        a.stop()
        proxy.close()


def test_one_leader_after_the_api_server_restarts_under_both_operators(
    alone: None, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    a = OperatorProcess(cluster, tmp_path / "a.log", extra_env=TIMINGS)
    b = OperatorProcess(cluster, tmp_path / "b.log", extra_env=TIMINGS)
    try:
        since = time.time()
        a.start()
        wait_for("a to lead", lambda: _leads(a))
        b.start()
        wait_for("b to compete", lambda: _identity(b))
        _create(cluster, namespace, "first")
        wait_for("first Ready", lambda: ready(cluster, namespace, "first"))
        transitions = _lease_transitions(cluster)

        # down for longer than the renew deadline: the leader closes its fence meanwhile
        restart_apiserver(cluster, down_seconds=DEADLINE + 2)
        wait_for("one leader", lambda: [_leads(a), _leads(b)].count(True) == 1)
        _create(cluster, namespace, "second")
        wait_for("second Ready", lambda: ready(cluster, namespace, "second"))

        def one_leader() -> None:
            assert [_leads(a), _leads(b)].count(True) == 1

        through_renewals(
            lambda: _lease(cluster), 3, one_leader, RETRY / 4
        )  # more rounds of both electors: still one

        writes = audit_writes(cluster.audit_log, namespace, since=since, username=a.username)
        assert {w.replica for w in writes} <= {_identity(a), _identity(b)}
        # one run of writes per term of the Lease, never more (interleaved writes would make
        # many short runs: tests/integration/test_ha.py's control shows the check sees them)
        assert len(write_runs(writes)) <= _lease_transitions(cluster) - transitions + 1
    finally:
        b.stop()
        a.stop()
