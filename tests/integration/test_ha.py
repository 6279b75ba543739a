"""High availability with fencing, on the local control plane: two replicas compete for one
Lease (leader.LeaderElector, each in a process of its own beside a writer that writes only
while `fence()` allows); the leader is SIGKILLed, cut off from the API server, or the API
server restarts under both. The API server's audit log is the witness: every write names its
replica in the User-Agent, and the writes of two replicas never interleave."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import through_renewals, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.ha import (
    PROBE,
    CandidateProcess,
    Partition,
    Write,
    audit_writes,
    kubeconfig_via,
    lease_rbac,
    restart_apiserver,
    write_runs,
)
from vllm_localenv.operator_process import OPERATOR_ACCOUNT, OPERATOR_NAMESPACE

pytestmark = pytest.mark.cluster

DURATION, DEADLINE, RETRY = 6.0, 4.0, 1.0
# a standby leads at most lease duration + a retry period (+ a request) after the holder's
# last renewal; the rest is slack for a loaded 2-core machine (a wait: it ends at the takeover)
TAKEOVER_BOUND = DURATION + 2 * RETRY + 60

# a write in flight at the kill or the cut completes at the API server (its audit stamp) a
# moment after it: up to seconds on a loaded 2-core machine
IN_FLIGHT = 3.0

LEASE_RBAC = lease_rbac("vllm-operator-ha-test")


@pytest.fixture(scope="module")
def account_kubeconfig(installed: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The operator's ServiceAccount, with a Role for Leases in its namespace."""
    installed.kubectl("apply", "-f", "-", stdin=LEASE_RBAC)
    path = tmp_path_factory.mktemp("ha") / "sa.kubeconfig"
    return installed.service_account_kubeconfig(OPERATOR_NAMESPACE, OPERATOR_ACCOUNT, path)


@pytest.fixture
def probe(cluster: LocalCluster, namespace: str) -> str:
    cluster.kubectl("create", "configmap", PROBE, "-n", namespace)
    return namespace


@pytest.fixture
def candidates() -> Iterator[list[CandidateProcess]]:
    started: list[CandidateProcess] = []
    yield started
    for c in started:
        c.kill()


def _candidate(
    started: list[CandidateProcess],
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    name: str,
    *,
    fenced: bool = True,
) -> CandidateProcess:
    c = CandidateProcess(
        kubeconfig,
        namespace,
        tmp_path / f"{name}.log",
        lease_namespace=OPERATOR_NAMESPACE,
        lease_name=f"ha-{namespace}",
        timings=(DURATION, DEADLINE, RETRY),
        fenced=fenced,
    )
    c.start()
    started.append(c)
    return c


def _lease(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "lease", f"ha-{namespace}", "-n", OPERATOR_NAMESPACE, "-o", "json")
    return dict(json.loads(out)["spec"])


def _writes(cluster: LocalCluster, namespace: str, since: float) -> list[Write]:
    return audit_writes(cluster.audit_log, namespace, "configmaps", PROBE, since=since)


def _writes_of(cluster: LocalCluster, namespace: str, since: float, who: str) -> list[Write]:
    return [w for w in _writes(cluster, namespace, since) if w.replica == who]


def _leading_alone(a: CandidateProcess, b: CandidateProcess) -> CandidateProcess | None:
    leaders = [c for c in (a, b) if c.alive and c.leading()]
    return leaders[0] if len(leaders) == 1 else None


def test_a_killed_leader_is_replaced_and_never_overlaps(
    cluster: LocalCluster,
    account_kubeconfig: Path,
    probe: str,
    candidates: list[CandidateProcess],
    tmp_path: Path,
) -> None:
    since = time.time()
    a = _candidate(candidates, account_kubeconfig, probe, tmp_path, "a")
    wait_for("a to lead", a.leading)
    b = _candidate(candidates, account_kubeconfig, probe, tmp_path, "b")
    wait_for("a's writes", lambda: len(_writes_of(cluster, probe, since, a.identity)) >= 10)
    # b is running and competing (its elector read the Lease), yet has not written
    wait_for("b to stand by", lambda: "competes" in b.log_path.read_text())

    killed_at = time.time()
    a.kill()
    wait_for("b to lead", b.leading, timeout=TAKEOVER_BOUND)
    wait_for("b's writes", lambda: len(_writes_of(cluster, probe, killed_at, b.identity)) >= 5)

    runs = write_runs(_writes(cluster, probe, since))
    assert [r.replica for r in runs] == [a.identity, b.identity]
    assert runs[0].writes >= 10
    assert runs[0].last < runs[1].first
    assert runs[0].last <= killed_at + IN_FLIGHT  # a SIGKILLed process writes nothing more
    # the takeover waited out the lease on b's own clock after a's last renewal
    assert runs[1].first - killed_at >= DURATION - DEADLINE
    assert _lease(cluster, probe)["holderIdentity"] == b.identity


def test_a_partitioned_leader_stops_writing_before_the_standby_starts(
    cluster: LocalCluster,
    account_kubeconfig: Path,
    probe: str,
    candidates: list[CandidateProcess],
    tmp_path: Path,
) -> None:
    proxy = Partition(cluster.ports.apiserver)
    try:
        via_proxy = kubeconfig_via(account_kubeconfig, tmp_path / "proxied.kubeconfig", proxy.port)
        since = time.time()
        a = _candidate(candidates, via_proxy, probe, tmp_path, "a")
        wait_for("a to lead", a.leading)
        b = _candidate(candidates, account_kubeconfig, probe, tmp_path, "b")
        wait_for("a's writes", lambda: len(_writes_of(cluster, probe, since, a.identity)) >= 10)

        cut_at = time.time()
        proxy.cut()
        wait_for("b to lead", b.leading, timeout=TAKEOVER_BOUND)
        wait_for("b's writes", lambda: len(_writes_of(cluster, probe, cut_at, b.identity)) >= 5)
        b_first = _writes_of(cluster, probe, cut_at, b.identity)[0].at
        # a's own word: its writer met the closed fence before b's first write
        fenced = [e["t"] for e in a.events() if e["event"] == "fenced" and e["t"] > cut_at]
        assert fenced, "a's fence never closed"
        assert fenced[0] < b_first
        # it closes at the renew deadline (+ the writer's next look, late on a loaded machine)
        assert fenced[0] - cut_at <= DEADLINE + 3

        # the partition heals: a reaches the API server again (bytes pass through the proxy:
        # its elector reads the Lease) and sees b holding it, so it still writes nothing
        proxy.restore()
        healed_at = time.time()
        through = proxy.forwarded_bytes
        wait_for("a to reach the API server", lambda: proxy.forwarded_bytes > through + 10_000)
        # rounds of a's elector after the heal, each seen through the proxy (only its Lease
        # reads pass: its writer is fenced)
        wait_for("more rounds of a's elector", lambda: proxy.forwarded_bytes > through + 20_000)
        assert not a.leading()
        assert a.alive

        writes = _writes(cluster, probe, since)
        runs = write_runs(writes)
        assert [r.replica for r in runs] == [a.identity, b.identity]
        assert runs[0].last < cut_at + IN_FLIGHT  # nothing of a's got through after the cut
        assert not [w for w in writes if w.replica == a.identity and w.at >= healed_at]
        assert _lease(cluster, probe)["holderIdentity"] == b.identity
    finally:
        proxy.close()


def test_exactly_one_leader_after_the_api_server_restarts_under_both(
    cluster: LocalCluster,
    account_kubeconfig: Path,
    probe: str,
    candidates: list[CandidateProcess],
    tmp_path: Path,
) -> None:
    since = time.time()
    a = _candidate(candidates, account_kubeconfig, probe, tmp_path, "a")
    wait_for("a to lead", a.leading)
    b = _candidate(candidates, account_kubeconfig, probe, tmp_path, "b")
    wait_for("a's writes", lambda: len(_writes_of(cluster, probe, since, a.identity)) >= 10)
    transitions_before = int(_lease(cluster, probe).get("leaseTransitions", 0))

    # down for longer than the renew deadline: the leader must close its fence meanwhile
    restart_apiserver(cluster, down_seconds=DEADLINE + 2)
    restarted_at = time.time()
    leader = wait_for("a leader after the restart", lambda: _leading_alone(a, b))
    assert leader is not None
    wait_for(
        "the leader's writes after the restart",
        lambda: len(_writes_of(cluster, probe, restarted_at, leader.identity)) >= 5,
    )

    # a few more rounds of both electors: still exactly one
    def one_leader() -> None:
        assert _leading_alone(a, b) is leader

    through_renewals(lambda: _lease(cluster, probe), 3, one_leader, RETRY / 4)
    assert _lease(cluster, probe)["holderIdentity"] == leader.identity
    transitions = int(_lease(cluster, probe).get("leaseTransitions", 0)) - transitions_before

    runs = write_runs(_writes(cluster, probe, since))
    # each handover of the Lease starts one run of writes, never more: interleaved writes
    # of two replicas would make many short runs (the control test below shows they do)
    assert len(runs) <= transitions + 1
    assert runs[-1].replica == leader.identity


def test_control_unfenced_writers_do_overlap(
    cluster: LocalCluster,
    account_kubeconfig: Path,
    probe: str,
    candidates: list[CandidateProcess],
    tmp_path: Path,
) -> None:
    """Positive control: the same audit check catches two replicas writing at once when the
    writers ignore the fence (the Lease itself still has one holder)."""
    since = time.time()
    a = _candidate(candidates, account_kubeconfig, probe, tmp_path, "a", fenced=False)
    b = _candidate(candidates, account_kubeconfig, probe, tmp_path, "b", fenced=False)
    wait_for("a leader", lambda: _leading_alone(a, b))
    wait_for(
        "writes of both",
        lambda: {w.replica for w in _writes(cluster, probe, since)} == {a.identity, b.identity},
    )
    wait_for("interleaved writes", lambda: len(write_runs(_writes(cluster, probe, since))) > 5)
    assert int(_lease(cluster, probe).get("leaseTransitions", 0)) == 0
