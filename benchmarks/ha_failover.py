"""Takeover times of the operator's Lease-based leader election (numbers, not assertions).

Two replicas (vllm_localenv.ha.CandidateProcess: the operator's LeaderElector in a process
of its own beside a writer that patches one ConfigMap every 0.1 s while fence() allows it)
compete for one Lease on the local control plane, as the operator's ServiceAccount. Per
round and fault it measures, from the API server's audit log (every write names its replica
in the User-Agent) and the replicas' own event lines:

  * kill       SIGKILL of the leader -> the standby leads / its first write;
  * partition  the leader cut off from the API server (a TCP proxy that drops bytes) -> the
               leader's fence closes (its writer is refused) / the standby's first write;
  * graceful   SIGTERM of the leader (it releases the Lease) -> the standby's first write;
  * restart    the API server stopped for `--down` seconds under both -> the first write of
               the one leader after it is back;

and for each the gap between the old leader's last write and the new leader's first (never
negative: the writes of two replicas do not overlap). The `operator-*` faults do the same to
two real operator processes (`python -m vllm_operator`, the Lease `vllm-operator`) and apply a
VLLMService right after the fault: the standby's first write and that service's Ready.

Usage:
  .venv/bin/python benchmarks/ha_failover.py [--rounds 3] [--timings 15,10,2] [--down 12]
      [--out benchmarks/results/ha/x.json]

It starts its own cluster in .state/bench-ha-failover on free ports (no metrics pipeline) and
stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from vllm_localenv.cluster import REPO_ROOT, LocalCluster, Ports
from vllm_localenv.ha import (
    PROBE,
    CandidateProcess,
    Partition,
    audit_writes,
    kubeconfig_via,
    lease_rbac,
    restart_apiserver,
    write_runs,
)
from vllm_localenv.operator_process import (
    OPERATOR_ACCOUNT,
    OPERATOR_NAMESPACE,
    OperatorProcess,
    install,
)

STATE_DIR = REPO_ROOT / ".state" / "bench-ha-failover"
LEASE_RBAC = lease_rbac("vllm-operator-ha-bench")


def _wait(what: str, check: Callable[[], Any], timeout: float = 120) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise RoundFailedError(f"timed out waiting for {what}")


class RoundFailedError(RuntimeError):
    """A round that did not complete (recorded with its reason; the next round goes on)."""


class Bench:
    def __init__(
        self, cluster: LocalCluster, kubeconfig: Path, tmp: Path, timings: tuple[float, ...]
    ) -> None:
        self.cluster = cluster
        self.kubeconfig = kubeconfig
        self.tmp = tmp
        self.timings = (timings[0], timings[1], timings[2])
        self.started: list[CandidateProcess] = []  # all of them, killed at the end whatever fails

    def _pair(self, a_kubeconfig: Path | None = None) -> tuple[str, CandidateProcess, Any]:
        ns = f"ha-{uuid.uuid4().hex[:8]}"
        self.cluster.kubectl("create", "namespace", ns)
        self.cluster.kubectl("create", "configmap", PROBE, "-n", ns)

        def candidate(name: str, kubeconfig: Path) -> CandidateProcess:
            c = CandidateProcess(
                kubeconfig,
                ns,
                self.tmp / f"{ns}-{name}.log",
                lease_namespace=OPERATOR_NAMESPACE,
                lease_name=ns,
                timings=self.timings,
            )
            self.started.append(c)
            c.start()
            return c

        a = candidate("a", a_kubeconfig or self.kubeconfig)
        _wait("a to lead", a.leading)
        since = time.time()
        _wait("a's writes", lambda: len(self.writes(ns, since, a.identity)) >= 5)
        return ns, a, lambda: candidate("b", self.kubeconfig)

    def writes(self, ns: str, since: float, who: str | None = None) -> list[Any]:
        got = audit_writes(self.cluster.audit_log, ns, "configmaps", PROBE, since=since)
        return [w for w in got if who is None or w.replica == who]

    def _handover(
        self, ns: str, t0: float, old: CandidateProcess, new: CandidateProcess
    ) -> dict[str, float]:
        """Times after t0 (epoch seconds): the new leader's start and first write, and the gap
        after the old leader's last write."""
        first = _wait("the new leader's first write", lambda: self.writes(ns, t0, new.identity))
        started = [e["t"] for e in new.events() if e["event"] == "started"]
        last_old = [w.at for w in self.writes(ns, t0 - 30, old.identity)]
        runs = write_runs(self.writes(ns, 0))
        return {
            "leads_after_s": round(started[-1] - t0, 3) if started else float("nan"),
            "first_write_after_s": round(first[0].at - t0, 3),
            "gap_after_old_last_write_s": round(first[0].at - max(last_old), 3),
            "write_runs": len(runs),
        }

    def kill(self) -> dict[str, float]:
        ns, a, start_b = self._pair()
        b = start_b()
        time.sleep(1)
        t0 = time.time()
        a.kill()
        out = self._handover(ns, t0, a, b)
        b.kill()
        return out

    def graceful(self) -> dict[str, float]:
        ns, a, start_b = self._pair()
        b = start_b()
        time.sleep(1)
        t0 = time.time()
        a.kill(15)  # SIGTERM: the candidate stops its elector, which releases the Lease
        out = self._handover(ns, t0, a, b)
        b.kill()
        return out

    def partition(self) -> dict[str, float]:
        proxy = Partition(self.cluster.ports.apiserver)
        try:
            via = kubeconfig_via(self.kubeconfig, self.tmp / f"{uuid.uuid4().hex}.kc", proxy.port)
            ns, a, start_b = self._pair(via)
            b = start_b()
            time.sleep(1)
            t0 = time.time()
            proxy.cut()
            out = self._handover(ns, t0, a, b)
            fenced = [e["t"] for e in a.events() if e["event"] == "fenced" and e["t"] > t0]
            out["old_fenced_after_s"] = round(fenced[0] - t0, 3) if fenced else float("nan")
            a.kill()
            b.kill()
            return out
        finally:
            proxy.close()

    def restart(self, down: float) -> dict[str, float]:
        ns, a, start_b = self._pair()
        b = start_b()
        time.sleep(1)
        t0 = time.time()
        restart_apiserver(self.cluster, down_seconds=down)
        back = time.time()
        first = _wait("a write after the restart", lambda: self.writes(ns, back))
        leader = first[0].replica
        time.sleep(3 * self.timings[2])
        leaders = [c.identity for c in (a, b) if c.leading()]
        runs = write_runs(self.writes(ns, 0))
        out = {
            "apiserver_unavailable_s": round(back - t0, 3),
            "first_write_after_back_s": round(first[0].at - back, 3),
            "same_leader": float(leader == a.identity),
            "leaders_after": float(len(leaders)),
            "write_runs": float(len(runs)),
        }
        a.kill()
        b.kill()
        return out


class OperatorBench:
    """The same faults with two real operator processes (`python -m vllm_operator`, its
    ServiceAccount, the Lease `vllm-operator`): a VLLMService applied right after the fault,
    and when it is Ready."""

    def __init__(self, cluster: LocalCluster, tmp: Path, timings: tuple[float, ...]) -> None:
        self.cluster = cluster
        self.tmp = tmp
        self.env = {
            "VLLM_OPERATOR_LEADER_ELECTION": "true",
            "VLLM_OPERATOR_LEASE_DURATION_SECONDS": str(timings[0]),
            "VLLM_OPERATOR_RENEW_DEADLINE_SECONDS": str(timings[1]),
            "VLLM_OPERATOR_RETRY_PERIOD_SECONDS": str(timings[2]),
        }
        self.started: list[OperatorProcess] = []

    def _operator(self, name: str, extra: dict[str, str] | None = None) -> OperatorProcess:
        op = OperatorProcess(
            self.cluster,
            self.tmp / f"{uuid.uuid4().hex[:6]}-{name}.log",
            extra_env={**self.env, **(extra or {})},
        )
        self.started.append(op)
        op.start()
        return op

    def _service(self, ns: str, name: str) -> None:
        manifest = yaml.safe_load((REPO_ROOT / "crds" / "samples" / "minimal.yaml").read_text())
        manifest["metadata"]["name"] = name
        self.cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(manifest))

    def _ready(self, ns: str, name: str) -> bool:
        out = self.cluster.kubectl("get", "vllmservice", name, "-n", ns, "-o", "json")
        svc = json.loads(out)
        conds = {c["type"]: c for c in svc.get("status", {}).get("conditions", [])}
        return bool(
            conds.get("Ready", {}).get("status") == "True"
            and svc["status"].get("observedGeneration") == svc["metadata"]["generation"]
        )

    def run(self, fault: str) -> dict[str, float]:
        ns = f"ha-op-{uuid.uuid4().hex[:8]}"
        self.cluster.kubectl("create", "namespace", ns)
        proxy = Partition(self.cluster.ports.apiserver) if fault == "partition" else None
        extra = {}
        if proxy is not None:
            account = self.cluster.service_account_kubeconfig(
                OPERATOR_NAMESPACE, OPERATOR_ACCOUNT, self.tmp / f"{ns}.kubeconfig"
            )
            via = kubeconfig_via(account, self.tmp / f"{ns}-proxied.kubeconfig", proxy.port)
            extra = {"KUBECONFIG": str(via)}
        try:
            a = self._operator("a", extra)
            _wait("a to lead", lambda: _leads(a))
            b = self._operator("b")
            self._service(ns, "before")
            _wait("before Ready", lambda: self._ready(ns, "before"))
            time.sleep(1)
            t0 = time.time()
            if fault == "kill":
                a.stop(sig=signal.SIGKILL)
            elif fault == "graceful":
                a.stop()
            else:
                assert proxy is not None
                proxy.cut()
            self._service(ns, "during")
            _wait("during Ready", lambda: self._ready(ns, "during"), timeout=180)
            ready_at = time.time()
            writes = audit_writes(self.cluster.audit_log, ns, since=t0, username=a.username)
            ids = {_op_identity(a), _op_identity(b)}
            runs = write_runs(audit_writes(self.cluster.audit_log, ns, username=a.username))
            return {
                "first_write_of_standby_after_s": round(
                    min(w.at for w in writes if w.replica == _op_identity(b)) - t0, 3
                ),
                "service_ready_after_s": round(ready_at - t0, 3),
                "write_runs": float(len(runs)),
                "writes_of_unknown_replica": float(sum(1 for w in writes if w.replica not in ids)),
            }
        finally:
            for op in self.started:
                op.stop()
            self.started.clear()
            if proxy is not None:
                proxy.close()
            # its services hold simulated GPUs: the next round's must fit
            self.cluster.kubectl("delete", "namespace", ns, "--wait=false")


def _op_identity(op: OperatorProcess) -> str:
    found = re.search(r"leader election: (\S+) competes", op.log_path.read_text())
    return found.group(1) if found else ""


def _leads(op: OperatorProcess) -> bool:
    text = op.log_path.read_text()
    return text.rfind("started leading") > text.rfind("stopped leading")


def _summary(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    keys = sorted({k for r in rows for k in r})
    out = {}
    for k in keys:
        vals = [r[k] for r in rows if k in r and r[k] == r[k]]
        if vals:
            out[k] = {
                "min": min(vals),
                "p50": round(statistics.median(vals), 3),
                "max": max(vals),
            }
    return out


def _measure(
    bench: Bench, operators: OperatorBench, args: argparse.Namespace, results: dict[str, Any]
) -> None:
    for fault in args.faults.split(","):
        rows = []
        for i in range(args.rounds):
            run: Callable[[], dict[str, float]] = {
                "kill": bench.kill,
                "partition": bench.partition,
                "graceful": bench.graceful,
                "restart": lambda: bench.restart(args.down),
                "operator-kill": lambda: operators.run("kill"),
                "operator-partition": lambda: operators.run("partition"),
                "operator-graceful": lambda: operators.run("graceful"),
            }[fault]
            try:
                row = run()
            except RoundFailedError as exc:
                results["failed_rounds"].append({"fault": fault, "round": i + 1, "why": str(exc)})
                print(f"{fault} round {i + 1}: FAILED: {exc}", flush=True)
                for c in bench.started:
                    c.kill()
                continue
            rows.append(row)
            print(f"{fault} round {i + 1}: {json.dumps(row)}", flush=True)
        results["faults"][fault] = {"rounds": rows, "summary": _summary(rows)}
        if args.out:  # after every fault: a later failure keeps what was measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2) + "\n")
        for key, s in results["faults"][fault]["summary"].items():
            print(
                f"  {fault:18} {key:32} min {s['min']:7.2f}  p50 {s['p50']:7.2f}  "
                f"max {s['max']:7.2f}",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--timings", default="15,10,2", help="lease duration, renew deadline, retry (s)"
    )
    parser.add_argument("--down", type=float, default=12.0, help="API server down time (s)")
    parser.add_argument(
        "--faults",
        # the API server restarts last: kwok (the simulated nodes) does not always take up its
        # pods again after one, and the operator faults need a pod to become Ready
        default="kill,partition,graceful,operator-kill,operator-partition,operator-graceful,restart",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    timings = tuple(float(x) for x in args.timings.split(","))
    if len(timings) != 3:
        raise SystemExit("--timings: three numbers, e.g. 15,10,2")

    cluster = LocalCluster(state_dir=STATE_DIR, ports=Ports.free(), monitoring=False)
    cluster.reset()  # a fresh etcd: the services of an earlier run would hold the GPUs
    tmp = Path(tempfile.mkdtemp(prefix="ha-bench-"))
    results: dict[str, Any] = {
        "timings": dict(
            zip(("lease_duration", "renew_deadline", "retry_period"), timings, strict=True)
        ),
        "load": os.getloadavg(),
        "faults": {},
        "failed_rounds": [],
    }
    with cluster.session():
        install(cluster)
        cluster.kubectl("apply", "-f", "-", stdin=LEASE_RBAC)
        kc = cluster.service_account_kubeconfig(
            OPERATOR_NAMESPACE, OPERATOR_ACCOUNT, tmp / "sa.kubeconfig"
        )
        bench = Bench(cluster, kc, tmp, timings)
        operators = OperatorBench(cluster, tmp, timings)
        try:
            _measure(bench, operators, args, results)
        finally:
            for c in bench.started:
                c.kill()
            for op in operators.started:
                op.stop()
    results["load_after"] = os.getloadavg()
    shutil.rmtree(tmp, ignore_errors=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
