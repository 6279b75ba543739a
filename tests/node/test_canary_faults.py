"""The canary's fault matrix on the real node (issue 32): a revision's canary fails, or what the
bake depends on fails, while a client streams through the Service the whole time and counts
its failed requests. Each row ends in a terminal phase or a named condition within a stated
bound; the figures (time to the verdict, failed client requests) are printed.

Rows (one CPU vLLM service, its stable pod started once; one canary per row):
1. the operator killed (SIGKILL) mid-bake and started again: the bake goes on from the status's
   record (startedAt unchanged), not from zero;
   Prometheus hung mid-bake (SIGSTOP: it accepts connections and never answers): the bake holds
   without a verdict and says why within the client timeout and the read budget; the operator
   keeps reconciling; Prometheus resumed: the bake is judged and the revision promoted;
   an abort annotation during Promoting: said in status.rollout.message, the promotion goes on.
2. the canary's pod deleted mid-bake: Failed, Aborted (the pod's problem quoted).
3. the canary hung mid-bake (its processes SIGSTOPped on the host: its readiness probe times
   out): Failed, Aborted; the requests the client had sent to it are the failures counted.
4. the canary answering every live request with a 5xx (a real server fault: vLLM's completion
   handler raising, vllm_fault.py, loaded through vLLM's --middleware once its benchmark has
   passed) while its /health stays up: Failed on its 5xx share, Aborted.
5. the canary's engine killed under live traffic (SIGKILL of its VLLM::EngineCore process, as
   the OOM killer does): Failed, Aborted ("stopped serving during the bake").
6. Prometheus stopped mid-bake (SIGKILL: connections refused): the bake says why and holds
   without a verdict past its end (two more reconciles counted on the operator's metrics);
   Prometheus started again on its TSDB: the bake is judged and the revision promoted.

Slow (several vLLM starts and benchmark runs: ~35 min on 2 cores), so not in `make test`:
`make test-faults` runs it (VLLM_OPERATOR_FAULTS=1). docs/progressive-delivery.md has the
matrix with the measured figures.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.node.conftest import namespace_with_model
from tests.node.test_canary_node import (
    CANARY,
    NAME,
    SERVER,
    StreamingClient,
    Watcher,
    _patch,
    _rollout,
    _service,
)
from tests.support import get, items, ready, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess
from vllm_operator.api.spec import MODEL_PVC_MOUNT

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(
        os.environ.get("VLLM_OPERATOR_FAULTS") != "1",
        reason="the fault matrix takes ~35 min: make test-faults (VLLM_OPERATOR_FAULTS=1)",
    ),
]

BENCH = {
    "scenarios": ["streaming"],
    "timeoutSeconds": 900,
    "onFailure": "Rollback",
    "args": ["--streaming-requests", "8", "--output-tokens", "16", "--warmup-requests", "1"],
    "thresholds": {"maxTtftP95Seconds": 120},
}


def _bake(seconds: int) -> dict[str, Any]:
    """Limits far from what two equal CPU pods measure: a verdict here comes from the fault."""
    return {
        "seconds": seconds,
        "minRequests": 5,
        "maxTtftP99Ratio": 20,
        "maxInterTokenP99Ratio": 20,
        "maxErrorRateIncrease": 0.5,
    }


def _status(lc: LocalCluster, ns: str) -> dict[str, Any]:
    return dict((get(lc, ns, "vllmservice", NAME) or {}).get("status") or {})


def _events(lc: LocalCluster, ns: str, reason: str) -> list[str]:
    out = json.loads(
        lc.kubectl("get", "events", "-n", ns, "-o", "json", "--field-selector", f"reason={reason}")
    )
    return [str(e.get("message", "")) for e in out.get("items", [])]


def _pod_pids(uid: str) -> list[int]:
    """The host pids of a pod's processes (its cgroup path names the pod's uid, with dashes
    under cgroupfs and underscores under systemd)."""
    marks = (f"pod{uid}", f"pod{uid.replace('-', '_')}")
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroup = (proc / "cgroup").read_text()
        except OSError:
            continue
        if any(m in cgroup for m in marks):
            pids.append(int(proc.name))
    return pids


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@pytest.fixture(scope="module")
def served(real_cluster: LocalCluster, host_operator: OperatorProcess) -> Iterator[tuple[str, str]]:
    """(namespace, the Service's URL): the one-replica CPU service, Ready."""
    lc = real_cluster
    with namespace_with_model(lc, "faults") as ns:
        lc.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(_service()))
        wait_for("the service Ready", lambda: ready(lc, ns, NAME), timeout=1200, every=5)
        svc = get(lc, ns, "service", NAME)
        assert svc is not None
        yield ns, f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"


def _baking(
    lc: LocalCluster,
    ns: str,
    seqs: int,
    seconds: int,
    watcher: Watcher,
    fault_plugin: bool = False,
) -> Any:
    """A new revision (maxNumSeqs `seqs`; with `fault_plugin`, vLLM loading vllm_fault.py from
    the model's claim) passes its benchmark on its canary and bakes: the rollout once its
    canary's IP is among the Service's endpoints and the status records the bake's start."""
    wait_for("no canary pod left", lambda: not items(lc, ns, "pods", CANARY), timeout=300)
    _patch(
        lc,
        ns,
        {
            # (null: a merge patch removes the field an earlier row set)
            "engine": {
                "maxNumSeqs": seqs,
                "extraArgs": ["--middleware", "vllm_fault.passthrough"] if fault_plugin else None,
            },
            "env": [{"name": "PYTHONPATH", "value": MODEL_PVC_MOUNT}] if fault_plugin else None,
            "benchmark": {**BENCH, "enabled": True},
            "rollout": {"canary": {"bake": _bake(seconds)}},
        },
    )

    def begun() -> Any:
        st = _status(lc, ns)
        r = st.get("rollout") or {}
        if r.get("phase") != "Baking" or not (r.get("bake") or {}).get("startedAt"):
            return None
        pods = items(lc, ns, "pods", CANARY)
        ip = pods[0].get("status", {}).get("podIP") if pods else None
        return (r, pods[0]) if ip and ip in watcher.current else None

    return wait_for("the canary baking among the endpoints", begun, timeout=1500, every=2)


@pytest.mark.timeout(2400)  # (with the module's service start) a bake, a promotion's roll
def test_the_operator_killed_and_prometheus_hung_mid_bake_then_an_abort_during_promoting(
    real_cluster: LocalCluster, host_operator: OperatorProcess, served: tuple[str, str]
) -> None:
    lc, (ns, url) = real_cluster, served
    with StreamingClient(url) as client, Watcher(lc, ns) as watcher:
        wait_for("the client's first answers", lambda: client.ok >= 3)
        rollout, _pod = _baking(lc, ns, 8, 150, watcher)
        rev, started = rollout["revision"], rollout["bake"]["startedAt"]

        # the operator killed mid-bake, started again: the bake goes on from its record (the
        # restarted operator's own writes below, the Prometheus message, prove it reconciles)
        host_operator.stop(sig=signal.SIGKILL)
        host_operator.start()
        after_restart = _status(lc, ns).get("rollout") or {}
        assert after_restart.get("phase") == "Baking", after_restart

        # Prometheus hung mid-bake: it accepts connections and never answers
        prom = lc.pid_of("prometheus")
        assert prom is not None
        os.kill(prom, signal.SIGSTOP)
        hung = time.monotonic()
        try:

            def says_why() -> Any:
                r = _status(lc, ns).get("rollout") or {}
                return r if "reading Prometheus failed" in str(r.get("message")) else None

            held = wait_for("the bake says Prometheus fails", says_why, timeout=180, every=2)
            said_s = time.monotonic() - hung
            assert held["phase"] == "Baking", held  # no verdict without figures
            assert (held.get("bake") or {}).get("verdict") in (None, ""), held
            # the record's start did not move through the restart and the failed reads
            assert held["bake"]["startedAt"] == started, (held, started)
        finally:
            os.kill(prom, signal.SIGCONT)
        resumed = time.monotonic()

        def promoting() -> Any:
            r = _status(lc, ns).get("rollout") or {}
            return r if r.get("revision") == rev and r.get("phase") == "Promoting" else None

        decided = wait_for("judged after Prometheus resumed", promoting, timeout=300, every=1)
        judged_s = time.monotonic() - resumed
        assert decided["bake"]["verdict"] == "Passed", decided

        # an abort annotation during Promoting: said, not ignored in silence
        lc.kubectl(
            "annotate",
            "vllmservice",
            NAME,
            "-n",
            ns,
            f"serving.vllm-operator.dev/abort={rev}",
            "--overwrite",
        )
        still_promoting = (_status(lc, ns).get("rollout") or {}).get("phase") == "Promoting"

        def said_too_late() -> Any:
            r = _status(lc, ns).get("rollout") or {}
            return (
                r if "came after the serving pods began to roll" in str(r.get("message")) else None
            )

        too_late = wait_for("the late abort said", said_too_late, timeout=120, every=1)
        assert too_late["phase"] in ("Promoting", "Promoted"), too_late
        wait_for("promoted", lambda: _rollout(lc, ns, "Promoted", rev), timeout=1200, every=3)
        wait_for("the service Ready", lambda: ready(lc, ns, NAME), timeout=300, every=3)
        lc.kubectl("annotate", "vllmservice", NAME, "-n", ns, "serving.vllm-operator.dev/abort-")
    print(
        f"\nfault matrix, revision {rev}: operator SIGKILLed mid-bake and restarted (the bake "
        f"went on, startedAt {started} kept); Prometheus "
        f"hung -> 'reading Prometheus failed' in {said_s:.0f} s, judged {judged_s:.0f} s after "
        f"it resumed (Passed); abort during Promoting said (annotated while Promoting: "
        f"{still_promoting}); client through the Service: {client.sent} sent, "
        f"{len(client.failures)} failed"
    )
    assert client.failures == [], client.failures[:5]


def _the_serving_pod(lc: LocalCluster, ns: str) -> dict[str, Any]:
    """The one serving pod, once an earlier row's rollout has finished rolling (its old pod
    gone, the new one Ready)."""

    def one() -> Any:
        pods = items(lc, ns, "pods", SERVER)
        if len(pods) != 1 or pods[0]["metadata"].get("deletionTimestamp"):
            return None
        conditions = pods[0].get("status", {}).get("conditions") or []
        up = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        return pods[0] if up else None

    return dict(wait_for("one Ready serving pod", one, timeout=600, every=2))


def _aborted_after(
    lc: LocalCluster, ns: str, rev: str, fault_at: float, bound: float
) -> tuple[dict[str, Any], float]:
    aborted = wait_for(
        "the canary aborted", lambda: _rollout(lc, ns, "Aborted", rev), timeout=bound, every=1
    )
    return aborted["status"], time.monotonic() - fault_at


def _failed_and_aborted(
    lc: LocalCluster,
    ns: str,
    st: dict[str, Any],
    rev: str,
    stable_pod: dict[str, Any],
    why: str,
) -> None:
    """The bake Failed for `why` (in its message), a RolloutAborted event names the revision,
    and the stable pod that served before the row serves still (the same pod)."""
    assert st["rollout"]["bake"]["verdict"] == "Failed", st["rollout"]
    assert why in st["rollout"]["message"], st["rollout"]
    assert any(rev in m for m in _events(lc, ns, "RolloutAborted")), "no RolloutAborted event"
    (still,) = items(lc, ns, "pods", SERVER)
    assert still["metadata"]["uid"] == stable_pod["metadata"]["uid"]


@pytest.mark.timeout(1500)  # a canary's start, its benchmark run, its bake
def test_a_canary_pod_deleted_mid_bake_fails_its_bake(
    real_cluster: LocalCluster, served: tuple[str, str]
) -> None:
    lc, (ns, url) = real_cluster, served
    stable_pod = _the_serving_pod(lc, ns)
    with StreamingClient(url) as client, Watcher(lc, ns) as watcher:
        wait_for("the client's first answers", lambda: client.ok >= 3)
        rollout, pod = _baking(lc, ns, 7, 900, watcher)
        rev = rollout["revision"]
        sent_before = client.sent
        lc.kubectl("delete", "pod", pod["metadata"]["name"], "-n", ns, "--wait=false")
        st, took = _aborted_after(lc, ns, rev, time.monotonic(), 180)
        wait_for("the canary out of the endpoints", lambda: pod["status"]["podIP"] in watcher.left)
    _failed_and_aborted(lc, ns, st, rev, stable_pod, "stopped serving during the bake")
    print(
        f"\nfault matrix, canary pod deleted mid-bake: Aborted in {took:.0f} s "
        f"({st['rollout']['message'][:200]}); client: {client.sent} sent "
        f"({client.sent - sent_before} after the delete), {len(client.failures)} failed: "
        f"{client.failures[:3]}"
    )
    # the deleted pod drains in its preStop while the operator takes its slice away: at most
    # the stream it was serving as it stopped is cut (one client, one request at a time)
    assert len(client.failures) <= 1, client.failures


@pytest.mark.timeout(1500)  # a canary's start, its benchmark run, its bake
def test_a_canary_that_hangs_mid_bake_fails_its_bake(
    real_cluster: LocalCluster, served: tuple[str, str]
) -> None:
    lc, (ns, url) = real_cluster, served
    stable_pod = _the_serving_pod(lc, ns)
    with StreamingClient(url) as client, Watcher(lc, ns) as watcher:
        wait_for("the client's first answers", lambda: client.ok >= 3)
        rollout, pod = _baking(lc, ns, 6, 900, watcher)
        rev = rollout["revision"]
        pids = _pod_pids(pod["metadata"]["uid"])
        assert pids, f"no host process of pod {pod['metadata']['name']}"
        _signal_all(pids, signal.SIGSTOP)
        hung = time.monotonic()
        try:
            st, took = _aborted_after(lc, ns, rev, hung, 300)
            wait_for(
                "the canary out of the endpoints",
                lambda: pod["status"]["podIP"] in watcher.left,
            )
        finally:
            _signal_all(pids, signal.SIGCONT)
        # the streams the client had sent to the hung canary end at its 120 s timeout: wait
        # for the client to be past them (a request answered after the abort)
        answered = client.ok
        wait_for("the client answered again", lambda: client.ok > answered + 3, timeout=300)
    _failed_and_aborted(lc, ns, st, rev, stable_pod, "stopped serving during the bake")
    print(
        f"\nfault matrix, canary hung mid-bake (SIGSTOP): Aborted in {took:.0f} s "
        f"({st['rollout']['message'][:200]}); client: {client.sent} sent, "
        f"{len(client.failures)} failed (the requests it had in flight to the hung canary): "
        f"{client.failures[:3]}"
    )
    # a hung canary holds the requests it took: one client, one request at a time, at most a
    # few reach it before its endpoint goes
    assert len(client.failures) <= 3, client.failures


def _model_dir(lc: LocalCluster, ns: str) -> Path:
    """The host directory behind the namespace's model claim (model_volume.create), mounted
    read-only at MODEL_PVC_MOUNT in every pod of the service."""
    return lc.state_dir / "models" / f"{ns}-tiny-model"


def _reconciles(op: OperatorProcess) -> float:
    """The operator's reconcile counter, every result (its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "vllm_operator_reconciles_total"
    )


def _recovered(client: StreamingClient, watcher: Watcher, ip: str) -> int:
    """Once the canary has left the Service's endpoints, the client answered five more: the
    failures counted by then (the service serves again)."""
    wait_for("the canary out of the endpoints", lambda: ip in watcher.left, timeout=120)
    answered = client.ok
    wait_for("the client answered again", lambda: client.ok >= answered + 5, timeout=300)
    return len(client.failures)


@pytest.mark.timeout(1500)  # a canary's start, its benchmark run, its bake
def test_a_canary_answering_5xx_to_live_requests_fails_its_bake(
    real_cluster: LocalCluster, served: tuple[str, str]
) -> None:
    lc, (ns, url) = real_cluster, served
    stable_pod = _the_serving_pod(lc, ns)
    plugin = _model_dir(lc, ns) / "vllm_fault.py"
    trigger = plugin.with_name("fault-5xx")
    shutil.copyfile(Path(__file__).with_name("vllm_fault.py"), plugin)
    plugin.chmod(0o644)
    try:
        with StreamingClient(url) as client, Watcher(lc, ns) as watcher:
            wait_for("the client's first answers", lambda: client.ok >= 3)
            rollout, pod = _baking(lc, ns, 5, 900, watcher, fault_plugin=True)
            rev, ip = rollout["revision"], pod["status"]["podIP"]
            # from now on the canary's vLLM answers every request with its own 500
            trigger.touch()
            st, took = _aborted_after(lc, ns, rev, time.monotonic(), 300)
            failed = _recovered(client, watcher, ip)
    finally:
        trigger.unlink(missing_ok=True)
        plugin.unlink(missing_ok=True)
    _failed_and_aborted(lc, ns, st, rev, stable_pod, "5xx share")
    print(
        f"\nfault matrix, canary answering 5xx to every live request: Aborted in {took:.0f} s "
        f"({st['rollout']['message'][:240]}); client: {client.sent} sent, {failed} failed "
        f"until the canary left the endpoints (HTTP 500 from the canary), "
        f"{len(client.failures) - failed} after: {client.failures[:2]}"
    )
    # the fault reached live traffic (the row tests what it says): the client's failures are
    # the canary's 500s, and nothing else failed
    assert failed >= 1, "no live request reached the faulty canary"
    assert all("500" in f for f in client.failures), client.failures


def _engine_core(pids: list[int]) -> list[int]:
    """The pod's vLLM engine-core process (its title: VLLM::EngineCore)."""
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if b"EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


@pytest.mark.timeout(1500)  # a canary's start, its benchmark run, its bake
def test_a_canary_whose_engine_dies_under_live_traffic_fails_its_bake(
    real_cluster: LocalCluster, served: tuple[str, str]
) -> None:
    lc, (ns, url) = real_cluster, served
    stable_pod = _the_serving_pod(lc, ns)
    with StreamingClient(url) as client, Watcher(lc, ns) as watcher:
        wait_for("the client's first answers", lambda: client.ok >= 3)
        rollout, pod = _baking(lc, ns, 4, 900, watcher)
        rev, ip = rollout["revision"], pod["status"]["podIP"]
        engine = _engine_core(_pod_pids(pod["metadata"]["uid"]))
        assert engine, f"no engine-core process of pod {pod['metadata']['name']}"
        # the engine killed as the kernel's OOM killer kills it under load
        _signal_all(engine, signal.SIGKILL)
        st, took = _aborted_after(lc, ns, rev, time.monotonic(), 300)
        failed = _recovered(client, watcher, ip)
    _failed_and_aborted(lc, ns, st, rev, stable_pod, "stopped serving during the bake")
    print(
        f"\nfault matrix, canary's engine killed under live traffic (SIGKILL): Aborted in "
        f"{took:.0f} s ({st['rollout']['message'][:240]}); client: {client.sent} sent, "
        f"{failed} failed until the canary left the endpoints, "
        f"{len(client.failures) - failed} after: {client.failures[:3]}"
    )
    # the stream the canary was serving as its engine died, and those its API server answered
    # (500, engine dead) until its readiness probe failed and its endpoint went (periodSeconds x
    # the failure threshold): one client, one request at a time
    assert len(client.failures) <= 20, client.failures


@pytest.mark.timeout(2400)  # a canary's start, its benchmark run, its bake, a promotion's roll
def test_prometheus_stopped_mid_bake_holds_the_verdict_until_it_is_back(
    real_cluster: LocalCluster, host_operator: OperatorProcess, served: tuple[str, str]
) -> None:
    lc, (ns, url) = real_cluster, served
    _the_serving_pod(lc, ns)
    with StreamingClient(url) as client, Watcher(lc, ns) as watcher:
        wait_for("the client's first answers", lambda: client.ok >= 3)
        rollout, _pod = _baking(lc, ns, 3, 60, watcher)
        rev, started = rollout["revision"], rollout["bake"]["startedAt"]
        lc.stop_prometheus()
        stopped = time.monotonic()
        try:

            def says_why() -> Any:
                r = _status(lc, ns).get("rollout") or {}
                return r if "reading Prometheus failed" in str(r.get("message")) else None

            held = wait_for("the bake says Prometheus fails", says_why, timeout=180, every=2)
            said_s = time.monotonic() - stopped
            ends = dt.datetime.fromisoformat(held["bake"]["endsAt"].replace("Z", "+00:00"))
            # past the bake's end, two reconciles of the operator (its counter): no verdict
            # without figures, whatever the clock says
            wait_for(
                "the bake's end passed",
                lambda: dt.datetime.now(dt.UTC) > ends + dt.timedelta(seconds=2),
                timeout=180,
            )
            counted = _reconciles(host_operator)
            wait_for(
                "two more reconciles",
                lambda: _reconciles(host_operator) >= counted + 2,
                timeout=120,
            )
            past = _status(lc, ns).get("rollout") or {}
            assert past.get("phase") == "Baking", past
            assert (past.get("bake") or {}).get("verdict") in (None, ""), past
            assert past["bake"]["startedAt"] == started, (past, started)
        finally:
            lc.start_prometheus()
        down_s = time.monotonic() - stopped
        resumed = time.monotonic()

        def promoting() -> Any:
            r = _status(lc, ns).get("rollout") or {}
            return r if r.get("revision") == rev and r.get("phase") == "Promoting" else None

        decided = wait_for("judged after Prometheus is back", promoting, timeout=300, every=1)
        judged_s = time.monotonic() - resumed
        assert decided["bake"]["verdict"] == "Passed", decided
        wait_for("promoted", lambda: _rollout(lc, ns, "Promoted", rev), timeout=1200, every=3)
        wait_for("the service Ready", lambda: ready(lc, ns, NAME), timeout=300, every=3)
    print(
        f"\nfault matrix, Prometheus stopped (SIGKILL) mid-bake: 'reading Prometheus failed' in "
        f"{said_s:.0f} s, no verdict past the bake's end ({past['message'][:200]}); Prometheus "
        f"down {down_s:.0f} s, judged {judged_s:.0f} s after it was back (Passed, promoted); "
        f"client through the Service: {client.sent} sent, {len(client.failures)} failed"
    )
    assert client.failures == [], client.failures[:5]
