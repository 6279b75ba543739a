"""High-availability harness: faults between operator replicas and the API server, and the
evidence that two replicas never wrote at the same time.

- `Partition`: a TCP proxy between one client and the API server that a test cuts (bytes are
  dropped both ways, connections held open: a silent network partition, not a refusal) and
  restores (the held connections are reset, new ones forward again). TLS goes through it
  untouched; the client's kubeconfig points at the proxy's port.
- `restart_apiserver`: stops the local cluster's kube-apiserver and starts it again on the
  same port, under running clients.
- `CandidateProcess` (`python -m vllm_localenv.ha`): the operator's `LeaderElector` in a
  process of its own beside a writer that patches one ConfigMap every `interval` seconds
  while `fence()` lets it (the stand-in for the operator's reconciles); a test SIGKILLs it.
- `audit_writes` / `write_runs`: every write of the replicas as the API server's audit log
  records it, told apart by User-Agent (the elector puts the replica's identity there).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_localenv.cluster import REPO_ROOT, ClusterError, LocalCluster
from vllm_localenv.operator_process import OPERATOR_ACCOUNT, OPERATOR_NAMESPACE

# ---- the partition --------------------------------------------------------------------


class Partition:
    """A TCP proxy on 127.0.0.1 to `target_port` that can be cut and restored."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._cut = threading.Event()
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket | None]] = []
        self.dropped_bytes = 0
        self.forwarded_bytes = 0  # evidence that a client talked through it
        self._thread = threading.Thread(target=self._accept, name="partition", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        """From now on nothing passes either way; connections stay open (a silent network)."""
        self._cut.set()

    def restore(self) -> None:
        """Resets the connections that lived through the cut; new ones forward again."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self._cut.clear()
        for a, b in pairs:
            _close(a)
            if b is not None:
                _close(b)

    def close(self) -> None:
        self._closing.set()
        _close(self._listener)
        self.restore()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            upstream: socket.socket | None = None
            if not self._cut.is_set():
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                except OSError:
                    _close(conn)
                    continue
            with self._lock:
                self._pairs.append((conn, upstream))
            threading.Thread(target=self._pump, args=(conn, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket | None) -> None:
        socks = [a] if b is None else [a, b]
        while True:
            try:
                readable, _, _ = select.select(socks, [], [], 0.5)
            except (OSError, ValueError):
                break
            if self._closing.is_set() or any(s.fileno() < 0 for s in socks):
                break
            done = False
            for s in readable:
                try:
                    data = s.recv(65536)
                except OSError:
                    done = True
                    break
                if not data:
                    done = True
                    break
                if self._cut.is_set() or b is None:
                    self.dropped_bytes += len(data)  # the partition swallows it
                    continue
                other = b if s is a else a
                self.forwarded_bytes += len(data)
                try:
                    other.sendall(data)
                except OSError:
                    done = True
                    break
            if done:
                break
        _close(a)
        if b is not None:
            _close(b)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()


def kubeconfig_via(source: Path, dest: Path, port: int) -> Path:
    """A copy of kubeconfig `source` whose server is 127.0.0.1:`port` (a Partition)."""
    cfg = json.loads(source.read_text())
    for c in cfg["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{port}"
    dest.write_text(json.dumps(cfg, indent=2))
    dest.chmod(0o600)
    return dest


# ---- restarting the API server ---------------------------------------------------------


def restart_apiserver(cluster: LocalCluster, down_seconds: float = 0.0) -> float:
    """Stops the cluster's kube-apiserver (SIGTERM), waits `down_seconds`, starts it again
    on the same port; returns how long it was unavailable."""
    state = cluster._read_state()  # the cluster's own records: only the process it started
    if state is None:
        raise ClusterError("the local cluster is not running")
    old = [p for p in state.procs if p.name == "kube-apiserver"]
    t0 = time.monotonic()
    cluster._kill(old)
    state.procs = [p for p in state.procs if p.name != "kube-apiserver"]
    time.sleep(down_seconds)
    cluster._start_apiserver(state, time.monotonic() + 120)
    return time.monotonic() - t0


# ---- the audit log ---------------------------------------------------------------------

AGENT_PREFIX = "vllm-operator ("
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


@dataclass(frozen=True)
class Write:
    at: float  # the API server's stageTimestamp (epoch seconds)
    replica: str  # the identity in the User-Agent
    verb: str
    code: int


def audit_writes(
    audit_log: Path,
    namespace: str,
    resource: str | None = None,
    name: str | None = None,
    *,
    since: float = 0.0,
    username: str | None = None,
) -> list[Write]:
    """Successful writes in `namespace` (to one kind, one object), in the API server's order.
    Writes by `username` (the replicas' ServiceAccount) without a replica's User-Agent are
    listed too, as replica "?": nobody can tell whose they were."""
    out = []
    for line in audit_log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            ref = event.get("objectRef", {})
            if ref.get("namespace") != namespace or event.get("verb") not in WRITE_VERBS:
                continue
            if (resource and ref.get("resource") != resource) or (name and ref.get("name") != name):
                continue
            agent = str(event.get("userAgent", ""))
            if agent.startswith(AGENT_PREFIX):
                replica = agent[len(AGENT_PREFIX) :].rstrip(")")
            elif username and event.get("user", {}).get("username") == username:
                replica = "?"
            else:
                continue
            code = int(event.get("responseStatus", {}).get("code", 0))
            stamp = dt.datetime.fromisoformat(event["stageTimestamp"].replace("Z", "+00:00"))
            if stamp.timestamp() >= since and 200 <= code < 300:
                out.append(Write(stamp.timestamp(), replica, event["verb"], code))
    return sorted(out, key=lambda w: w.at)


@dataclass(frozen=True)
class Run:
    """Consecutive writes of one replica, with nobody else's in between."""

    replica: str
    first: float
    last: float
    writes: int


def write_runs(writes: list[Write]) -> list[Run]:
    runs: list[Run] = []
    for w in writes:
        if runs and runs[-1].replica == w.replica:
            r = runs[-1]
            runs[-1] = Run(r.replica, r.first, w.at, r.writes + 1)
        else:
            runs.append(Run(w.replica, w.at, w.at, 1))
    return runs


# ---- a candidate: the elector and a fenced writer in a process of its own --------------

PROBE = "ha-probe"  # the ConfigMap the candidates write


@dataclass
class CandidateProcess:
    """`python -m vllm_localenv.ha` as a child: one replica competing for the Lease."""

    kubeconfig: Path
    namespace: str  # where the writer's ConfigMap lives
    log_path: Path
    lease_namespace: str
    lease_name: str = "ha-test"
    timings: tuple[float, float, float] = (6.0, 4.0, 1.0)  # duration, deadline, retry
    interval: float = 0.1
    fenced: bool = True  # False: the positive control, writes whatever the elector says
    _proc: subprocess.Popen[bytes] | None = None
    identity: str = field(default="")

    def start(self) -> None:
        duration, deadline, retry = self.timings
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "VLLM_OPERATOR_LEASE_NAME": self.lease_name,
            "VLLM_OPERATOR_LEASE_NAMESPACE": self.lease_namespace,
            "VLLM_OPERATOR_LEASE_DURATION_SECONDS": str(duration),
            "VLLM_OPERATOR_RENEW_DEADLINE_SECONDS": str(deadline),
            "VLLM_OPERATOR_RETRY_PERIOD_SECONDS": str(retry),
            "PYTHONPATH": str(REPO_ROOT / "operator"),
        }
        args = [sys.executable, "-m", "vllm_localenv.ha", self.namespace]
        args += ["--interval", str(self.interval)]
        if not self.fenced:
            args.append("--unfenced")
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        deadline_at = time.monotonic() + 30
        while not self.identity:
            for e in self.events():
                if e["event"] == "identity":
                    self.identity = str(e["identity"])
            if self._proc.poll() is not None or time.monotonic() > deadline_at:
                raise ClusterError(f"the candidate did not start; log {self.log_path}")
            time.sleep(0.1)

    def events(self) -> list[dict[str, Any]]:
        """The candidate's JSON event lines (identity, started/stopped leading, fenced)."""
        out = []
        with contextlib.suppress(OSError):
            for line in self.log_path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        out.append(json.loads(line))
        return out

    def leading(self) -> bool:
        state = [e["event"] for e in self.events() if e["event"] in ("started", "stopped")]
        return bool(state) and state[-1] == "started"

    def kill(self, sig: int = signal.SIGKILL, grace: float = 30.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None


def _emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)  # noqa: T201


def candidate_main(argv: list[str] | None = None) -> int:
    """One replica: the elector, and a writer that patches ConfigMap ha-probe while fenced."""
    import logging  # noqa: PLC0415 (only the candidate process logs)

    from kubernetes import client, config  # noqa: PLC0415

    from vllm_operator.api.settings import OperatorSettings  # noqa: PLC0415
    from vllm_operator.runtime.leader import LeaderElector, NotLeaderError  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m vllm_localenv.ha")
    parser.add_argument("namespace")
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--unfenced", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config.load_kube_config()  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    elector = LeaderElector(
        api,
        OperatorSettings(),
        on_started_leading=lambda: _emit("started"),
        on_stopped_leading=lambda: _emit("stopped"),
    )
    _emit("identity", identity=elector.identity)
    # a flag, not a threading.Event: Event.set() in a signal handler can deadlock on the lock
    # the interrupted Event.wait() of the same (main) thread holds
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    elector.start()
    core = client.CoreV1Api(api)
    body = {"metadata": {"name": PROBE}, "data": {}}
    n = 0
    fenced_since: float | None = None
    while not stopping:
        try:
            left = 5.0 if args.unfenced else elector.fence()
        except NotLeaderError:
            if fenced_since is None:
                fenced_since = time.time()
                _emit("fenced")
            time.sleep(args.interval)
            continue
        fenced_since = None
        n += 1
        body["data"] = {"writer": elector.identity, "n": str(n)}
        try:
            # the write may not outlive this replica's right to write
            core.patch_namespaced_config_map(
                PROBE, args.namespace, body, _request_timeout=max(0.1, min(left, 5.0))
            )
        except Exception as exc:  # noqa: BLE001 (report and go on: a replica survives errors)
            _emit("write-failed", error=f"{type(exc).__name__}: {str(exc)[:200]}")
        time.sleep(args.interval)
    elector.stop()
    _emit("exit")
    return 0


if __name__ == "__main__":
    sys.exit(candidate_main())


def lease_rbac(name: str) -> str:
    """A Role + RoleBinding (both `name`) letting the operator's ServiceAccount hold Leases in
    the operator's namespace: what candidates started outside the chart need."""
    return f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {name}, namespace: {OPERATOR_NAMESPACE}}}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {name}, namespace: {OPERATOR_NAMESPACE}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}
subjects:
  - {{kind: ServiceAccount, name: {OPERATOR_ACCOUNT}, namespace: {OPERATOR_NAMESPACE}}}
"""
