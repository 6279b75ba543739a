"""The local Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, all on 127.0.0.1, with fake GPU nodes.

Built by scripts/build-control-plane.sh; started and stopped here. The state directory holds
the PKI, the admin kubeconfig, logs, etcd's data and `cluster.json`, which records the
processes this module started (pid plus kernel start time), so `down` only ever signals
processes it started itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from vllm_localenv import monitoring, pki
from vllm_localenv import node as realnode

REPO_ROOT = Path(__file__).resolve().parents[2]
# how often the local Prometheus scrapes (an operator reading it for a bake is told so:
# VLLM_OPERATOR_SCRAPE_INTERVAL, the shortest window of its figures)
PROMETHEUS_SCRAPE_INTERVAL = "2s"
# outside the clone, so every checkout and CI run on this machine shares one build
DEFAULT_CACHE = Path(
    os.environ.get("VLLM_OPERATOR_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm-operator"
)
DEFAULT_BIN_DIR = DEFAULT_CACHE / "bin"


def pinned_versions() -> dict[str, str]:
    """The pins in scripts/versions.env (one source for the build scripts and this code)."""
    pins = {}
    for line in (REPO_ROOT / "scripts" / "versions.env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            pins[key.strip()] = value.strip()
    return pins


DEFAULT_STATE_DIR = REPO_ROOT / ".state" / "cluster"

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# every request (reads and refusals too) of the ServiceAccounts in this namespace is audited:
# a test that must see each 403 of an operator runs it as an account here
AUDITED_NAMESPACE = "vllm-audited"

# The controllers users of the operator rely on; everything else stays off to save CPU.
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "job-controller",
    "ttl-after-finished-controller",
    "horizontal-pod-autoscaler-controller",
    "disruption-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "namespace-controller",
    "node-lifecycle-controller",  # lifts the not-ready taint the apiserver puts on new nodes
    "endpointslice-controller",
    "persistentvolume-binder-controller",  # model claims bound to local volumes
    "persistentvolume-protection-controller",
    "persistentvolumeclaim-protection-controller",
    "resourcequota-controller",  # fills in quota usage, from which quotas are enforced
)

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# the metrics pipeline (issue 9): Debian's Prometheus, the pod discovery that stands in for its
# missing Kubernetes discovery (targets.py), prometheus-adapter serving custom.metrics.k8s.io
MONITORING_COMPONENTS = ("prometheus", "pod-targets", "prometheus-adapter")


# Simulation rules for pods kwok plays (see _kwok_stages).
HELD_LABEL = "app.kubernetes.io/component"
HELD_VALUE = "benchmark"
EXIT_LABEL = "localenv.vllm-operator.dev/exit-code"
HELD_SELECTOR_ANCHOR = """    matchExpressions:
"""
HELD_EXCLUSION = f"""    - key: '.metadata.labels["{HELD_LABEL}"]'
      operator: 'NotIn'
      values:
      - '{HELD_VALUE}'
"""
EXIT_STAGE = f"""apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-exit-on-label
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Running'
    - key: '.metadata.labels["{EXIT_LABEL}"]'
      operator: 'Exists'
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      {{{{ $code := index .metadata.labels "{EXIT_LABEL}" }}}}
      containerStatuses:
      {{{{ range $index, $item := .spec.containers }}}}
      - image: {{{{ $item.image | Quote }}}}
        name: {{{{ $item.name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {{{{ $code }}}}
            finishedAt: {{{{ $now | Quote }}}}
            reason: {{{{ if eq $code "0" }}}}Completed{{{{ else }}}}Error{{{{ end }}}}
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: {{{{ if eq $code "0" }}}}Succeeded{{{{ else }}}}Failed{{{{ end }}}}
"""


class ClusterError(RuntimeError):
    """A failure a person can act on; the message names the cause."""


@dataclass(frozen=True)
class Ports:
    etcd_client: int = 23790
    etcd_peer: int = 23800
    apiserver: int = 16443
    kwok: int = 10247
    # added later: a state file of an older cluster lacks them and gets these defaults
    prometheus: int = 19090
    adapter: int = 16444

    @classmethod
    def free(cls) -> Ports:
        """Ports the kernel says are free now (for test clusters next to a dev cluster)."""
        socks = []
        try:
            for _ in fields(cls):
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                socks.append(s)
            nums = [s.getsockname()[1] for s in socks]
        finally:
            for s in socks:
                s.close()
        return cls(*nums)

    def named(self) -> dict[str, int]:
        return {
            "etcd client": self.etcd_client,
            "etcd peer": self.etcd_peer,
            "kube-apiserver": self.apiserver,
            "kwok": self.kwok,
            "prometheus": self.prometheus,
            "prometheus-adapter": self.adapter,
        }


@dataclass(frozen=True)
class GpuNode:
    name: str
    gpus: int = 8
    product: str = "NVIDIA-H100-80GB-HBM3"
    cpu: str = "96"
    memory: str = "1000Gi"


DEFAULT_NODES = (GpuNode("gpu-node-0"), GpuNode("gpu-node-1"))


@dataclass
class _Proc:
    name: str
    pid: int
    start_ticks: int
    exe: str


@dataclass
class _State:
    ports: Ports
    procs: list[_Proc] = field(default_factory=list)

    def dump(self) -> str:
        return json.dumps({"ports": asdict(self.ports), "procs": [asdict(p) for p in self.procs]})

    @classmethod
    def load(cls, text: str) -> _State:
        raw = json.loads(text)
        return cls(Ports(**raw["ports"]), [_Proc(**p) for p in raw["procs"]])


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when it no longer exists."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces; fields after the last ')' are fixed
    return int(stat.rsplit(")", 1)[1].split()[19])


def _is_ours(proc: _Proc) -> bool:
    """True only when pid still names the very process we started (pids get reused)."""
    if _start_ticks(proc.pid) != proc.start_ticks:
        return False
    with contextlib.suppress(OSError):
        return str(Path(f"/proc/{proc.pid}/exe").readlink()) == proc.exe
    return False


def _signal(pid: int, sig: int) -> None:
    """Signals a process this module started (verified by the caller) and, as every one of
    them leads the session it was started in, its group: vLLM's engine-core children too."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _port_in_use(port: int) -> bool:
    with socket.socket() as s:
        # like the servers themselves: connections lingering in TIME_WAIT do not block a bind
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class LocalCluster:
    """One local control plane living in `state_dir`."""

    def __init__(
        self,
        state_dir: Path = DEFAULT_STATE_DIR,
        bin_dir: Path = DEFAULT_BIN_DIR,
        ports: Ports | None = None,
        nodes: tuple[GpuNode, ...] = DEFAULT_NODES,
        *,
        real_node: bool = False,
        monitoring: bool = True,
        extra_args: Mapping[str, Sequence[str]] | None = None,
        audit_rules: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self.state_dir = state_dir
        # flags appended to a component's command line by its name (a flag given twice: the
        # later one wins), e.g. a larger service range or controller-manager rates for a fleet
        self.extra_args = {name: list(args) for name, args in (extra_args or {}).items()}
        # the API server's audit policy rules (audit.k8s.io/v1) instead of the default ones
        self.audit_rules = [dict(rule) for rule in audit_rules] if audit_rules else None
        self.bin_dir = bin_dir
        self.nodes = nodes
        self._ports = ports
        # a kubelet on this host beside the simulated GPU nodes (node.py); one per host
        self.real_node = real_node
        # Prometheus + prometheus-adapter; off only for a test that brings its own stand-ins
        self.monitoring = monitoring
        self.node = realnode.RealNode(
            state_dir,
            bin_dir,
            state_dir / "pki",
            DEFAULT_CACHE / "images" / "index.json",
            DEFAULT_CACHE,
        )
        self._started: list[tuple[_Proc, subprocess.Popen[bytes]]] = []

    @property
    def components(self) -> tuple[str, ...]:
        return (
            COMPONENTS
            + (MONITORING_COMPONENTS if self.monitoring else ())
            + (realnode.NODE_COMPONENTS if self.real_node else ())
        )

    # ---- paths -------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def pki_dir(self) -> Path:
        return self.state_dir / "pki"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def _state_file(self) -> Path:
        return self.state_dir / "cluster.json"

    @property
    def ports(self) -> Ports:
        state = self._read_state()
        if state is not None:
            return state.ports
        return self._ports or Ports()

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.prometheus}"

    @property
    def prometheus_dir(self) -> Path:
        """prometheus.yml, its file_sd files (targets.py) and its TSDB."""
        return self.state_dir / "prometheus"

    @property
    def host_operator_targets(self) -> Path:
        """file_sd files of operators running on the host (OperatorProcess writes one each)."""
        return self.prometheus_dir / "host-operators"

    # ---- state -------------------------------------------------------------------------
    def _read_state(self) -> _State | None:
        try:
            return _State.load(self._state_file.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise ClusterError(f"{self._state_file} is unreadable ({exc}); run `reset`") from exc

    def pid_of(self, component: str) -> int | None:
        """The pid of a component this cluster started (prometheus, kube-apiserver, ...), while
        it is the very process started (a fault test stops and resumes it); None otherwise."""
        state = self._read_state()
        for p in state.procs if state is not None else []:
            if p.name == component and _is_ours(p):
                return p.pid
        return None

    def running(self) -> dict[str, bool]:
        """Which recorded components are still alive (empty when nothing was started)."""
        state = self._read_state()
        if state is None:
            return {}
        return {p.name: _is_ours(p) for p in state.procs}

    # ---- up ----------------------------------------------------------------------------
    def up(self, timeout: float = 120.0, log: Callable[[str], None] = lambda _m: None) -> bool:
        """Starts the cluster; returns False (and starts nothing) when it is already running."""
        alive = self.running()
        # running: everything it was started with is alive (it may have been started with
        # other options, e.g. without the real node, or by an older version without the
        # metrics pipeline: `down` and `up` again to change that)
        if alive and all(alive.values()) and set(COMPONENTS) <= alive.keys():
            return False
        if any(alive.values()):
            dead = ", ".join(n for n, ok in alive.items() if not ok) or "some components"
            raise ClusterError(
                f"a local cluster in {self.state_dir} is partly running ({dead} exited); "
                "run `down` first (it stops only what it started)"
            )
        self._check_binaries()
        ports = self._ports or Ports()
        for what, port in ports.named().items():
            if _port_in_use(port):
                raise ClusterError(
                    f"port {port} on 127.0.0.1 ({what}) is already in use by another process; "
                    "stop that process or choose other ports (VLLM_LOCALENV_PORTS=free)"
                )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        pki.generate(self.pki_dir)  # only what is missing
        self._write_kubeconfig(ports)
        state = _State(ports)
        self._ports = ports
        deadline = time.monotonic() + timeout
        try:
            if self.real_node:
                # first, before anything host-wide: undo a crashed run, record the host
                self.node.claim(lambda d: any(LocalCluster(Path(d)).running().values()))
                self.node.guard_ports([ports.apiserver, ports.etcd_client, ports.etcd_peer, 10250])
                self.node.prepare_host()
            self._start_etcd(state, deadline)
            log("etcd ready")
            self._start_apiserver(state, deadline)
            log("kube-apiserver ready")
            self._start_rest(state)
            self._register_nodes()
            self._wait_ready(deadline)
            log("controller-manager, scheduler, kwok ready; GPU nodes Ready")
            if self.monitoring:
                self._start_monitoring(state, deadline)
                log(f"Prometheus at {self.prometheus_url}; custom.metrics.k8s.io Available")
            if self.real_node:
                self._start_node(state, deadline, log)
        except BaseException:
            self._kill([p for p, _ in self._started])
            self._state_file.unlink(missing_ok=True)
            if self.real_node and self.node.owned_by_us():
                self.node.cleanup()
            raise
        return True

    def _start_node(self, state: _State, deadline: float, log: Callable[[str], None]) -> None:
        """containerd, images, kubelet, kube-proxy and CoreDNS; waits for the node to be
        Ready and cluster DNS to answer."""
        self.node.write_configs(state.ports.apiserver)

        def spawn(name: str, args: list[str], _cwd: Path | None) -> subprocess.Popen[bytes]:
            return self._spawn(state, name, args, exe=self._node_exe(name))

        t0 = time.monotonic()
        self.node.start_containerd(spawn)
        self.node.import_images(log)
        log(f"containerd ready, images in place ({time.monotonic() - t0:.0f}s)")
        self.kubectl(
            "create",
            "clusterrolebinding",
            "vllm-localenv:kube-proxy",
            "--clusterrole=system:node-proxier",
            "--user=system:kube-proxy",
            check=False,
        )
        procs = {
            "kubelet": self.node.start_kubelet(spawn),
            "kube-proxy": self.node.start_kube_proxy(spawn),
            "coredns": self.node.start_coredns(spawn),
        }

        def node_ready() -> bool:
            out = json.loads(
                self.kubectl("get", "node", realnode.NODE_NAME, "-o", "json", check=False) or "{}"
            )
            conds = {c["type"]: c["status"] for c in out.get("status", {}).get("conditions", [])}
            return conds.get("Ready") == "True"

        # a first import of the vLLM image takes minutes: the node's own start gets its budget
        node_deadline = time.monotonic() + 120
        self._wait("kubelet", procs["kubelet"], node_ready, node_deadline)
        self._wait("coredns", procs["coredns"], self.node.dns_ready, node_deadline)
        if procs["kube-proxy"].poll() is not None:
            self._wait("kube-proxy", procs["kube-proxy"], lambda: False, node_deadline)
        log(f"real node {realnode.NODE_NAME} Ready ({time.monotonic() - t0:.0f}s)")

    def _start_monitoring(self, state: _State, deadline: float) -> None:
        """Prometheus (the shipped rules file; vLLM pods and the operator through file_sd
        files that the pod-targets process keeps current), then prometheus-adapter, registered
        through the aggregation layer; waits for the APIServices to be Available."""
        d = self.prometheus_dir
        self.host_operator_targets.mkdir(parents=True, exist_ok=True)
        config = d / "prometheus.yml"
        config.write_text(
            monitoring.prometheus_config(
                self.kubeconfig,
                [monitoring.rules_file()],
                pod_targets_file=d / "pods.json",
                operator_targets_files=[d / "operator.json", self.host_operator_targets / "*.json"],
                scrape_interval=PROMETHEUS_SCRAPE_INTERVAL,
                evaluation_interval=PROMETHEUS_SCRAPE_INTERVAL,
            )
        )
        for name in ("pods.json", "operator.json"):
            if not (d / name).exists():
                (d / name).write_text("[]")
        prom = self._spawn_prometheus(state)
        self._spawn(
            state,
            "pod-targets",
            ["-m", "vllm_localenv.targets", str(self.state_dir)],
            exe=sys.executable,
        )
        self._wait("prometheus", prom, self._prometheus_ready(state.ports.prometheus), deadline)
        adapter = self._spawn(
            state,
            "prometheus-adapter",
            monitoring.adapter_args(
                str(self.bin_dir / "prometheus-adapter"),
                self.kubeconfig,
                prometheus_url=f"http://127.0.0.1:{state.ports.prometheus}",
                secure_port=state.ports.adapter,
                cert_dir=d / "adapter-certs",
                relist_interval="5s",
            )[1:],
        )
        self.kubectl(
            "apply",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(monitoring.adapter_registration(state.ports.adapter)),
        )

        def api_services_available() -> bool:
            out = json.loads(self.kubectl("get", "apiservices", "-o", "json"))
            mine = [i for i in out["items"] if i["spec"].get("group") == "custom.metrics.k8s.io"]
            return bool(mine) and all(
                any(
                    c["type"] == "Available" and c["status"] == "True"
                    for c in i.get("status", {}).get("conditions", [])
                )
                for i in mine
            )

        self._wait("prometheus-adapter", adapter, api_services_available, deadline)

    def _spawn_prometheus(self, state: _State) -> subprocess.Popen[bytes]:
        """Prometheus on the config _start_monitoring wrote, its TSDB and its port."""
        d, exe = self.prometheus_dir, self._prometheus_exe()
        args = monitoring.prometheus_args(
            exe, d / "prometheus.yml", d / "tsdb", state.ports.prometheus
        )
        return self._spawn(state, "prometheus", args[1:], exe=exe)

    @staticmethod
    def _prometheus_ready(port: int) -> Callable[[], bool]:
        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
                return bool(r.status == 200)

        return ready

    @staticmethod
    def _prometheus_exe() -> str:
        """Debian's prometheus (2.42), whatever else PATH holds (an opt-in 3.x build lives in
        the bin directory): the pipeline is built for what every machine here has."""
        found = shutil.which("prometheus", path="/usr/bin:/usr/local/bin:/bin")
        if found is None:
            raise ClusterError(
                "prometheus is not installed: run `make monitoring` (scripts/build-monitoring.sh "
                "installs Debian's prometheus and builds prometheus-adapter)"
            )
        return found

    def _node_exe(self, name: str) -> str:
        """containerd comes from Debian; kubelet, kube-proxy and CoreDNS from our build."""
        if name == "containerd":
            found = shutil.which("containerd")
            if found is None:
                raise ClusterError("containerd is not installed: run scripts/install-node-deps.sh")
            return found
        return str(self.bin_dir / name)

    def _check_binaries(self) -> None:
        wanted = [*COMPONENTS, *(("kubelet", "kube-proxy", "coredns") if self.real_node else ())]
        missing = [c for c in wanted if not (self.bin_dir / c).is_file()]
        if missing:
            raise ClusterError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)}; "
                "build them with `make control-plane` (scripts/build-control-plane.sh, "
                "scripts/build-node.sh)"
            )
        if self.monitoring:
            self._prometheus_exe()
            if not (self.bin_dir / "prometheus-adapter").is_file():
                raise ClusterError(
                    f"prometheus-adapter is missing in {self.bin_dir}: build it with "
                    "`make monitoring` (scripts/build-monitoring.sh)"
                )

    def _spawn(
        self, state: _State, name: str, args: list[str], exe: str | None = None
    ) -> subprocess.Popen[bytes]:
        exe = exe or str(self.bin_dir / name)
        logf = (self.log_dir / f"{name}.log").open("ab")
        # its own session: a Ctrl-C in the terminal that ran `up` does not kill the cluster
        proc = subprocess.Popen(
            [exe, *args, *self.extra_args.get(name, ())],
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.state_dir,
        )
        logf.close()
        ticks = _start_ticks(proc.pid)
        rec = _Proc(name, proc.pid, ticks or 0, os.path.realpath(exe))
        self._started.append((rec, proc))
        state.procs.append(rec)
        self._state_file.write_text(state.dump())
        return proc

    def _wait(
        self, name: str, proc: subprocess.Popen[bytes], check: Callable[[], bool], deadline: float
    ) -> None:
        while True:
            if proc.poll() is not None:
                raise ClusterError(
                    f"{name} exited with code {proc.returncode} during start-up; "
                    f"last lines of {self.log_dir / (name + '.log')}:\n"
                    f"{_tail(self.log_dir / f'{name}.log')}"
                )
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
                if check():
                    return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{name} did not become ready in time; last lines of its log:\n"
                    f"{_tail(self.log_dir / f'{name}.log')}"
                )
            time.sleep(0.2)

    def _start_etcd(self, state: _State, deadline: float) -> None:
        p = state.ports
        peer = f"http://127.0.0.1:{p.etcd_peer}"
        client = f"http://127.0.0.1:{p.etcd_client}"
        proc = self._spawn(
            state,
            "etcd",
            [
                "--name=local",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=local={peer}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes=2147483648",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            with urllib.request.urlopen(f"{client}/health", timeout=2) as r:  # noqa: S310
                return bool(json.load(r).get("health") == "true")

        self._wait("etcd", proc, healthy, deadline)

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki_dir / "ca.crt"))
        ctx.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))
        return ctx

    def get(self, path: str, timeout: float = 5) -> bytes:
        """GET an apiserver path as the admin (for health checks and metrics)."""
        with urllib.request.urlopen(  # noqa: S310 (https to our own loopback apiserver)
            f"{self.server}{path}", context=self._ssl(), timeout=timeout
        ) as r:
            return bytes(r.read())

    def _start_apiserver(self, state: _State, deadline: float) -> None:
        k = self.pki_dir
        proc = self._spawn(
            state,
            "kube-apiserver",
            [
                f"--etcd-servers=http://127.0.0.1:{state.ports.etcd_client}",
                *(
                    # pods reach it on the bridge (node.py's guard chain drops other interfaces)
                    ["--bind-address=0.0.0.0", f"--advertise-address={realnode.BRIDGE_IP}"]
                    if self.real_node
                    else ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"]
                ),
                f"--secure-port={state.ports.apiserver}",
                # kubectl logs/exec: reach kubelets by IP, not through the host's DNS
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-client-certificate={k / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={k / 'apiserver-kubelet-client.key'}",
                f"--kubelet-certificate-authority={k / 'ca.crt'}",
                # the aggregation layer (custom.metrics.k8s.io through prometheus-adapter)
                f"--requestheader-client-ca-file={k / 'front-proxy-ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={k / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={k / 'front-proxy-client.key'}",
                f"--tls-cert-file={k / 'apiserver.crt'}",
                f"--tls-private-key-file={k / 'apiserver.key'}",
                f"--client-ca-file={k / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={k / 'sa.pub'}",
                f"--service-account-signing-key-file={k / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                f"--audit-policy-file={self._audit_policy()}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=200",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait("kube-apiserver", proc, lambda: self.get("/readyz", 2) == b"ok", deadline)

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log: one JSON line per write (who, verb, resource, code).
        Tests count an operator's writes here rather than trusting the operator's word."""
        return self.log_dir / "audit.log"

    def _audit_policy(self) -> Path:
        policy = {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": self.audit_rules
            or [
                {
                    "level": "Metadata",
                    "userGroups": [f"system:serviceaccounts:{AUDITED_NAMESPACE}"],
                },
                {
                    "level": "Metadata",
                    "verbs": ["create", "update", "patch", "delete", "deletecollection"],
                },
                # reads of Deployments too: proof that a reconcile ran when it wrote nothing
                {
                    "level": "Metadata",
                    "verbs": ["get"],
                    "resources": [{"group": "apps", "resources": ["deployments"]}],
                },
                {"level": "None"},
            ],
        }
        path = self.state_dir / "audit-policy.json"
        path.write_text(json.dumps(policy))
        return path

    def _start_rest(self, state: _State) -> None:
        kc = str(self.kubeconfig)
        k = self.pki_dir
        self._spawn(
            state,
            "kube-controller-manager",
            [
                f"--kubeconfig={kc}",
                "--leader-elect=false",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--service-account-private-key-file={k / 'sa.key'}",
                f"--root-ca-file={k / 'ca.crt'}",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                # quicker feedback than the 15 s default; still far below a user's scale-down window
                "--horizontal-pod-autoscaler-sync-period=5s",
                "--v=1",
            ],
        )
        self._spawn(
            state,
            "kube-scheduler",
            [
                f"--kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--v=1",
            ],
        )
        self._spawn(
            state,
            "kwok",
            [
                f"--kubeconfig={kc}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--server-address=127.0.0.1:{state.ports.kwok}",
                "--cidr=10.244.0.0/16",
                "--node-ip=127.0.0.1",
                f"--config={self._kwok_stages()}",
            ],
        )

    def _kwok_stages(self) -> Path:
        """kwok v0.8 needs stage definitions: upstream's 'fast' node and pod stages plus the
        node heartbeat (the lease variant would also need --node-lease-duration-seconds)."""
        stages = self.bin_dir / "kwok-stages"
        wanted = [
            path
            for folder in ("node/fast", "node/heartbeat", "pod/fast")
            for path in sorted((stages / folder).glob("*.yaml"))
            if path.name != "kustomization.yaml"
        ]
        if not wanted:
            raise ClusterError(f"no kwok stage files under {stages}; rerun `make control-plane`")
        texts = [p.read_text() for p in wanted]
        # Pods that in a real cluster run for minutes (the benchmark Job) must not complete
        # the instant kwok sees them: they are held Running until whoever plays their
        # container (a test, the demo) labels them with the exit code it got.
        texts = [
            t.replace(HELD_SELECTOR_ANCHOR, HELD_SELECTOR_ANCHOR + HELD_EXCLUSION, 1)
            if "name: pod-complete" in t
            else t
            for t in texts
        ]
        if not any(HELD_EXCLUSION in t for t in texts):
            raise ClusterError("kwok's pod-complete stage changed shape; update HELD_EXCLUSION")
        texts.append(EXIT_STAGE)
        out = self.state_dir / "kwok-stages.yaml"
        out.write_text("\n---\n".join(texts))
        return out

    def _write_kubeconfig(self, ports: Ports) -> None:
        k = self.pki_dir
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "vllm-local",
            "clusters": [
                {
                    "name": "vllm-local",
                    "cluster": {
                        "server": f"https://127.0.0.1:{ports.apiserver}",
                        "certificate-authority": str(k / "ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(k / "admin.crt"),
                        "client-key": str(k / "admin.key"),
                    },
                }
            ],
            "contexts": [
                {"name": "vllm-local", "context": {"cluster": "vllm-local", "user": "admin"}}
            ],
        }
        self.kubeconfig.write_text(json.dumps(cfg, indent=2))
        self.kubeconfig.chmod(0o600)

    # ---- nodes -------------------------------------------------------------------------
    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120
    ) -> str:
        """Runs the pinned kubectl against this cluster and returns stdout."""
        res = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and res.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {res.stderr.strip()}")
        return res.stdout

    def wait_crds_established(self, *crds: str, timeout: float = 120) -> None:
        """Waits until each CRD (`name.group`) is Established and its resource is served.

        Not `kubectl wait --for=condition=Established`: on a CRD the apiserver has not yet
        given a status, that errors (`.status.conditions accessor error: <nil>`) instead of
        waiting. Here the CRD's own conditions are read until Established is True, then the
        resource is listed through discovery, which is what the callers need."""
        deadline = time.monotonic() + timeout
        for crd in crds:
            name = crd.removeprefix("crd/")
            plural, _, group = name.partition(".")
            while True:
                res = subprocess.run(
                    [
                        str(self.bin_dir / "kubectl"),
                        f"--kubeconfig={self.kubeconfig}",
                        "get",
                        f"crd/{name}",
                        "-o",
                        "json",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                )
                established = False
                if res.returncode == 0:
                    conditions = json.loads(res.stdout).get("status", {}).get("conditions") or []
                    established = any(
                        c.get("type") == "Established" and c.get("status") == "True"
                        for c in conditions
                    )
                if established:
                    served = subprocess.run(
                        [
                            str(self.bin_dir / "kubectl"),
                            f"--kubeconfig={self.kubeconfig}",
                            "get",
                            f"{plural}.{group}",
                            "-A",
                            "--request-timeout=10s",
                            "-o",
                            "name",
                        ],
                        capture_output=True,
                        text=True,
                        timeout=30,
                        check=False,
                    )
                    if served.returncode == 0:
                        break
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"crd/{name} was not Established and served within {timeout:.0f}s: "
                        f"{(res.stderr or res.stdout)[-400:].strip()}"
                    )
                time.sleep(0.5)

    def _register_nodes(self) -> None:
        docs = []
        for n in self.nodes:
            resources = {
                "cpu": n.cpu,
                "memory": n.memory,
                "pods": "110",
                "ephemeral-storage": "2Ti",
                GPU_RESOURCE: str(n.gpus),
            }
            docs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": n.name,
                        "annotations": {
                            KWOK_NODE_ANNOTATION: "fake",
                            "node.alpha.kubernetes.io/ttl": "0",
                        },
                        "labels": {
                            "kubernetes.io/hostname": n.name,
                            "kubernetes.io/os": "linux",
                            "kubernetes.io/arch": "amd64",
                            "type": "kwok",
                            GPU_PRODUCT_LABEL: n.product,
                            "nvidia.com/gpu.count": str(n.gpus),
                            "nvidia.com/gpu.present": "true",
                        },
                    },
                    # beside a real node, only pods that tolerate GPU nodes land here (the
                    # operator renders that toleration for GPU pods; common on GPU clusters)
                    "spec": {
                        "taints": [
                            {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
                        ]
                        if self.real_node
                        else []
                    },
                    "status": {
                        "capacity": resources,
                        "allocatable": resources,
                    },
                }
            )
        self.kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
        )

    def _wait_ready(self, deadline: float) -> None:
        procs = {p.name: proc for p, proc in self._started}

        def nodes_ready() -> bool:
            """Ready, and the apiserver's not-ready taint lifted, so pods can schedule."""
            out = json.loads(self.kubectl("get", "nodes", "-o", "json"))
            ready = set()
            for item in out["items"]:
                conds = {c["type"]: c["status"] for c in item["status"].get("conditions", [])}
                taints = [t["key"] for t in item["spec"].get("taints", [])]
                if conds.get("Ready") == "True" and "node.kubernetes.io/not-ready" not in taints:
                    ready.add(item["metadata"]["name"])
            return {n.name for n in self.nodes} <= ready

        def default_sa() -> bool:  # proves the controller-manager is working
            return (
                self.kubectl(
                    "get", "serviceaccount", "default", "-n", "default", "-o", "name", check=False
                ).strip()
                != ""
            )

        for name, check in (("kwok", nodes_ready), ("kube-controller-manager", default_sa)):
            self._wait(name, procs[name], check, deadline)
        if procs["kube-scheduler"].poll() is not None:
            self._wait("kube-scheduler", procs["kube-scheduler"], lambda: False, deadline)

    def adopt(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        """Records a process started next to the cluster (e.g. the demo's operator) so that
        `down` stops it too, with the same pid + start-time identity check."""
        state = self._read_state()
        if state is None:
            raise ClusterError("the local cluster is not running")
        exe = str(Path(f"/proc/{proc.pid}/exe").readlink())
        state.procs = [p for p in state.procs if p.name != name]
        state.procs.append(_Proc(name, proc.pid, _start_ticks(proc.pid) or 0, exe))
        self._state_file.write_text(state.dump())

    # ---- down / reset --------------------------------------------------------------------
    def _kill(self, procs: list[_Proc], grace: float = 10.0) -> None:
        mine = [p for p in reversed(procs) if _is_ours(p)]
        for p in mine:
            _signal(p.pid, signal.SIGTERM)
        end = time.monotonic() + grace
        for p in mine:
            while _is_ours(p) and time.monotonic() < end:
                self._reap(p.pid)
                time.sleep(0.1)
            if _is_ours(p):
                _signal(p.pid, signal.SIGKILL)
            self._reap(p.pid)

    @staticmethod
    def _reap(pid: int) -> None:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)

    def down(self) -> list[str]:
        """Stops exactly the processes recorded as started here; returns their names."""
        state = self._read_state()
        if state is None:
            if self.node.owned_by_us():  # a start that failed half-way
                self.node.cleanup()
            return []
        stopped = [p.name for p in state.procs if _is_ours(p)]
        self._kill(state.procs)
        if self.node.owned_by_us():
            self.node.cleanup()
        # scrape files of operators that ran on the host (stopped above when `down` started them)
        shutil.rmtree(self.host_operator_targets, ignore_errors=True)
        self._state_file.unlink(missing_ok=True)
        self._started.clear()
        return stopped

    def reset(self) -> None:
        """Stops the cluster and deletes its state (PKI, etcd data, logs)."""
        self.down()
        if self.node.owned_by_us():  # crashed earlier: nothing ran, host state remains
            self.node.cleanup()
        if self.state_dir.exists():
            shutil.rmtree(self.state_dir)

    # ---- helpers for tests -------------------------------------------------------------
    def stop_prometheus(self, timeout: float = 30.0) -> None:
        """Kills Prometheus (SIGKILL: as a crash or an OOM kill, no clean shutdown) and returns
        once its port refuses connections: a fault test's "Prometheus stopped". The rest of the
        cluster runs on; start_prometheus() brings it back on the same TSDB."""
        state = self._read_state()
        procs = [p for p in (state.procs if state is not None else []) if p.name == "prometheus"]
        mine = [p for p in procs if _is_ours(p)]
        if not mine:
            raise ClusterError("prometheus is not running (no process of ours)")
        for p in mine:
            _signal(p.pid, signal.SIGKILL)
            self._reap(p.pid)
        assert state is not None
        end = time.monotonic() + timeout
        while _port_in_use(state.ports.prometheus):
            if time.monotonic() > end:
                raise ClusterError(f"prometheus's port {state.ports.prometheus} is still open")
            for p in mine:
                self._reap(p.pid)
            time.sleep(0.1)

    def start_prometheus(self, timeout: float = 120.0) -> int:
        """Prometheus started again as `up` starts it (the same config, TSDB and port), after
        stop_prometheus(); returns its pid once it says it is ready."""
        state = self._read_state()
        if state is None:
            raise ClusterError(f"no local cluster in {self.state_dir}")
        if self.pid_of("prometheus") is not None:
            raise ClusterError("prometheus is running: stop_prometheus() first")
        state.procs = [p for p in state.procs if p.name != "prometheus"]
        prom = self._spawn_prometheus(state)
        ready = self._prometheus_ready(state.ports.prometheus)
        self._wait("prometheus", prom, ready, time.monotonic() + timeout)
        return prom.pid

    def service_account_kubeconfig(self, namespace: str, name: str, path: Path) -> Path:
        """A kubeconfig that authenticates as a ServiceAccount (a TokenRequest token), so a
        process runs with exactly that account's RBAC instead of as cluster admin."""
        token = self.kubectl("create", "token", name, "-n", namespace, "--duration=24h").strip()
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": name,
            "clusters": [
                {
                    "name": "vllm-local",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.pki_dir / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": name, "user": {"token": token}}],
            "contexts": [
                {
                    "name": name,
                    "context": {"cluster": "vllm-local", "user": name, "namespace": namespace},
                }
            ],
        }
        path.write_text(json.dumps(cfg, indent=2))
        path.chmod(0o600)
        return path

    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.kubeconfig), "PATH": f"{self.bin_dir}:{os.environ['PATH']}"}

    @contextlib.contextmanager
    def session(self) -> Iterator[LocalCluster]:
        """Starts the cluster unless running and stops it at the end if this started it."""
        started = self.up()
        try:
            yield self
        finally:
            if started:
                self.down()
