"""The real node: a kubelet on this host next to kwok's simulated GPU nodes.

containerd (its own root, state and socket) + runc + the CNI bridge plugin on a bridge this
module creates (`vllmop0`, 10.85.0.1/24: node IP, pod gateway, kubelet and DNS address) +
kube-proxy (iptables mode) + CoreDNS (cluster.local only, nothing forwarded). Pods and Service
addresses live on the bridge; traffic leaving it for anything else is dropped, so pods only
ever talk to this host. What it changes host-wide (iptables, links, mounts, cgroups, sysctls)
is recorded before it starts (hoststate.py) and undone by `stop()` or, after a crash, by the
next start. One real node per host: a lock file in /run names the state directory that owns
it.

Facts behind the settings (cgroup v1 hybrid, no CAP_SYS_RESOURCE, containerd 1.6): see
../shared/notes/REAL-NODE.md and the comments next to each setting.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vllm_localenv import host_packages, hoststate, pki

BRIDGE = "vllmop0"
BRIDGE_IP = pki.BRIDGE_IP
POD_SUBNET = "10.85.0.0/24"
SERVICE_SUBNET = "10.0.0.0/24"
NODE_NAME = pki.NODE_NAME
CGROUP_ROOT = "vllm-local"
ISOLATE_CHAIN = "VLLMOP-ISOLATE"
GUARD_CHAIN = "VLLMOP-GUARD"
HOST_LOCK = Path(os.environ.get("VLLM_LOCALENV_NODE_LOCK", "/run/vllm-operator-node.json"))
NODE_COMPONENTS = ("containerd", "kubelet", "kube-proxy", "coredns")
PAUSE_IMAGE = "localhost/pause:local"


class NodeError(RuntimeError):
    """A failure of the real node a person can act on."""


@dataclass(frozen=True)
class NodeLock:
    state_dir: str
    before: hoststate.HostSnapshot

    def dump(self) -> str:
        return json.dumps({"state_dir": self.state_dir, "before": json.loads(self.before.dump())})

    @classmethod
    def read(cls) -> NodeLock | None:
        try:
            raw = json.loads(HOST_LOCK.read_text())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise NodeError(f"{HOST_LOCK} is unreadable ({exc}); remove it by hand") from exc
        return cls(raw["state_dir"], hoststate.HostSnapshot(**raw["before"]))


def missing_host_tools() -> list[str]:
    return host_packages.missing(("node",))


Spawn = Callable[[str, list[str], Path | None], subprocess.Popen[bytes]]


class RealNode:
    """The node's files live in `state_dir/node`; binaries come from `bin_dir`."""

    def __init__(
        self, state_dir: Path, bin_dir: Path, pki_dir: Path, image_index: Path, cache: Path
    ) -> None:
        self.state_dir = state_dir
        self.dir = state_dir / "node"
        self.bin_dir = bin_dir
        self.pki_dir = pki_dir
        self.image_index = image_index
        # containerd's content store is shared by every cluster of this host (one real node at
        # a time): the multi-GB vLLM image is imported once, not once per clone or test tier
        self.containerd_root = cache / "containerd-root"

    # ---- paths ---------------------------------------------------------------------------
    @property
    def containerd_socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.dir / "kubelet"

    def _roots(self) -> list[Path]:
        """Folders under which every mount the node makes lies."""
        return [self.dir, Path("/run/netns"), Path("/var/run/netns")]

    # ---- host ownership --------------------------------------------------------------------
    def owned_by_us(self) -> bool:
        lock = NodeLock.read()
        return lock is not None and Path(lock.state_dir) == self.state_dir

    def claim(self, others_alive: Callable[[str], bool]) -> None:
        """Takes the host's real node for this state directory: cleans what a crashed run of
        ours (or a crashed run of another state directory) left, then records the host."""
        problems = missing_host_tools()
        if problems:
            raise NodeError(
                "the real node needs: " + ", ".join(problems) + "; " + host_packages.install_hint()
            )
        self.undo_crashed(others_alive)
        before = hoststate.snapshot()
        HOST_LOCK.write_text(NodeLock(str(self.state_dir), before).dump())

    def undo_crashed(self, others_alive: Callable[[str], bool]) -> bool:
        """Undoes what a crashed run (of this state directory or another) left on the host;
        returns whether there was one. Refuses while the host's node belongs to a live
        cluster of another state directory."""
        lock = NodeLock.read()
        if lock is None:
            return False
        if Path(lock.state_dir) != self.state_dir and others_alive(lock.state_dir):
            raise NodeError(
                "the real node of this host belongs to the running cluster in "
                f"{lock.state_dir}; stop it first (one real node per host)"
            )
        self.cleanup(lock)  # a crash left it: undo what that run did
        return True

    # ---- start -----------------------------------------------------------------------------
    def prepare_host(self) -> None:
        """The bridge, the isolation rules and the cgroup root (recorded first by claim)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        run = hoststate.run
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        run("ip", "addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        # Pods only ever talk to this host: nothing is forwarded between the bridge and any
        # other interface (the bridge plugin turns ip_forward on host-wide).
        rules = (
            f"*filter\n:{ISOLATE_CHAIN} - [0:0]\n:{GUARD_CHAIN} - [0:0]\n"
            f"-A {ISOLATE_CHAIN} -i {BRIDGE} -o {BRIDGE} -j RETURN\n"
            f"-A {ISOLATE_CHAIN} -i {BRIDGE} -j DROP\n"
            f"-A {ISOLATE_CHAIN} -o {BRIDGE} -j DROP\n"
            # the apiserver listens on every address so that pods reach it on the bridge: only
            # loopback and the bridge may connect to the node's ports
            f"-A {GUARD_CHAIN} -i lo -j RETURN\n"
            f"-A {GUARD_CHAIN} -i {BRIDGE} -j RETURN\n"
            f"-A {GUARD_CHAIN} -d {BRIDGE_IP}/32 -j DROP\n"
            f"-A {GUARD_CHAIN} -p tcp -m multiport --dports {{ports}} -j DROP\n"
            f"-I FORWARD 1 -j {ISOLATE_CHAIN}\n"
            f"-I INPUT 1 -j {GUARD_CHAIN}\n"
            "COMMIT\n"
        )
        run("iptables-restore", "--noflush", stdin=rules.format(ports=self._guarded_ports))
        run(
            "ip6tables-restore",
            "--noflush",
            stdin=f"*filter\n:{ISOLATE_CHAIN} - [0:0]\n-A {ISOLATE_CHAIN} -i {BRIDGE} -j DROP\n"
            f"-A {ISOLATE_CHAIN} -o {BRIDGE} -j DROP\n-I FORWARD 1 -j {ISOLATE_CHAIN}\nCOMMIT\n",
        )
        for hierarchy in sorted(hoststate.CGROUP_FS.iterdir()):
            if hierarchy.is_symlink() or not hierarchy.is_dir() or hierarchy.name == "unified":
                continue
            target = hierarchy / CGROUP_ROOT
            target.mkdir(exist_ok=True)
            if hierarchy.name == "cpuset":  # a new cpuset is empty: copy the parent's
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (target / f).write_text((hierarchy / f).read_text())

    _guarded_ports = "1"  # set by the cluster: the apiserver's port

    def guard_ports(self, ports: list[int]) -> None:
        self._guarded_ports = ",".join(str(p) for p in ports)

    def write_configs(self, apiserver_port: int) -> None:
        d = self.dir
        for sub in (
            "cni/net.d",
            "cni/ipam",
            "containerd-state",
            "kubelet",
            "logs/pods",
        ):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "cni/net.d/10-vllmop.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "vllmop",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                # not /var/lib/cni: everything of the node stays in its folder
                                "dataDir": str(d / "cni/ipam"),
                                "ranges": [
                                    [
                                        {
                                            "subnet": POD_SUBNET,
                                            "rangeStart": "10.85.0.10",
                                            "gateway": BRIDGE_IP,
                                        }
                                    ]
                                ],
                                "routes": [{"dst": "0.0.0.0/0"}],
                            },
                        },
                        {"type": "portmap", "capabilities": {"portMappings": True}},
                    ],
                },
                indent=2,
            )
        )
        # containerd 1.6, CRI plugin. restrict_oom_score_adj: root lacks CAP_SYS_RESOURCE, so a
        # sandbox asking for a lower oom_score_adj than containerd's fails ("can't get final
        # child's PID from pipe"). SystemdCgroup false: there is no systemd.
        (d / "containerd.toml").write_text(
            f"""version = 2
root = "{self.containerd_root}"
state = "{d / "containerd-state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.grpc.v1.opt"]
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{d / "cni/net.d"}"
"""
        )
        k = self.pki_dir
        server = f"https://127.0.0.1:{apiserver_port}"
        for name, cert in (("kubelet", "node"), ("kube-proxy", "kube-proxy"), ("admin", "admin")):
            (d / f"{name}.kubeconfig").write_text(
                json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Config",
                        "current-context": "local",
                        "clusters": [
                            {
                                "name": "local",
                                "cluster": {
                                    "server": server,
                                    "certificate-authority": str(k / "ca.crt"),
                                },
                            }
                        ],
                        "users": [
                            {
                                "name": "u",
                                "user": {
                                    "client-certificate": str(k / f"{cert}.crt"),
                                    "client-key": str(k / f"{cert}.key"),
                                },
                            }
                        ],
                        "contexts": [
                            {"name": "local", "context": {"cluster": "local", "user": "u"}}
                        ],
                    }
                )
            )
        (d / "resolv.conf").write_text("")  # pods get cluster DNS only, never the host's
        (d / "kubelet.yaml").write_text(
            json.dumps(
                {
                    "apiVersion": "kubelet.config.k8s.io/v1beta1",
                    "kind": "KubeletConfiguration",
                    "failCgroupV1": False,  # this host has cgroups v1 (hybrid)
                    "cgroupDriver": "cgroupfs",
                    "cgroupRoot": f"/{CGROUP_ROOT}",
                    "address": BRIDGE_IP,
                    "port": 10250,
                    "readOnlyPort": 0,
                    "healthzBindAddress": "127.0.0.1",
                    "healthzPort": 0,
                    "tlsCertFile": str(k / "kubelet-serving.crt"),
                    "tlsPrivateKeyFile": str(k / "kubelet-serving.key"),
                    "authentication": {
                        "anonymous": {"enabled": False},
                        "webhook": {"enabled": True},
                        "x509": {"clientCAFile": str(k / "ca.crt")},
                    },
                    "authorization": {"mode": "Webhook"},
                    "clusterDNS": [BRIDGE_IP],
                    "clusterDomain": "cluster.local",
                    "resolvConf": str(d / "resolv.conf"),
                    "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
                    "podLogsDir": str(d / "logs/pods"),
                    "failSwapOn": False,
                    "protectKernelDefaults": False,
                    "makeIPTablesUtilChains": False,
                    "localStorageCapacityIsolation": False,
                    "serializeImagePulls": False,
                    "imageGCHighThresholdPercent": 100,
                    "imageGCLowThresholdPercent": 99,
                    "evictionHard": {"memory.available": "200Mi"},
                    "maxPods": 32,
                    "nodeStatusReportFrequency": "10s",
                    "nodeStatusUpdateFrequency": "5s",
                    "syncFrequency": "10s",
                    "fileCheckFrequency": "10s",
                    "registerWithTaints": [],
                    "volumeStatsAggPeriod": "0s",
                }
            )
        )
        (d / "kube-proxy.yaml").write_text(
            json.dumps(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "mode": "iptables",
                    "clientConnection": {"kubeconfig": str(d / "kube-proxy.kubeconfig")},
                    "hostnameOverride": NODE_NAME,
                    "bindAddress": BRIDGE_IP,
                    "healthzBindAddress": "127.0.0.1:10256",
                    "metricsBindAddress": "127.0.0.1:10249",
                    "clusterCIDR": POD_SUBNET,
                    "nodePortAddresses": [f"{BRIDGE_IP}/32"],
                    # cannot set sysctls here (no CAP_SYS_RESOURCE): leave conntrack as it is
                    "conntrack": {"maxPerCore": 0, "min": 0},
                    # a pod reaching a Service backed by a pod on the same bridge gets its reply
                    # back through the host (no br_netfilter dependence)
                    "iptables": {
                        "masqueradeAll": True,
                        "localhostNodePorts": False,
                        "syncPeriod": "10s",
                        "minSyncPeriod": "1s",
                    },
                }
            )
        )
        (d / "Corefile").write_text(
            f"""cluster.local:53 in-addr.arpa:53 {{
    bind {BRIDGE_IP}
    errors
    kubernetes cluster.local in-addr.arpa {{
        kubeconfig {d / "admin.kubeconfig"} local
        pods insecure
        ttl 5
    }}
    cache 5
}}
.:53 {{
    bind {BRIDGE_IP}
    errors
    # nothing is forwarded: pods only ever talk to this host
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""
        )

    def start_containerd(self, spawn: Spawn) -> subprocess.Popen[bytes]:
        proc = spawn("containerd", ["--config", str(self.dir / "containerd.toml")], None)
        deadline = time.monotonic() + 60
        while not self._ctr_ok():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise NodeError(
                    f"containerd did not start; see {self.state_dir / 'logs/containerd.log'}"
                )
            time.sleep(0.2)
        return proc

    def _ctr(self, *args: str, check: bool = True, timeout: float = 900) -> str:
        res = subprocess.run(
            ["ctr", "--address", str(self.containerd_socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and res.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)} failed: {res.stderr.strip()}")
        return res.stdout

    def _ctr_ok(self) -> bool:
        if not self.containerd_socket.exists():
            return False
        try:
            self._ctr("version", timeout=5)
        except (NodeError, subprocess.TimeoutExpired):
            return False
        return True

    def import_images(self, log: Callable[[str], None]) -> None:
        """Imports the images scripts/build-images.sh built (its index.json: ref -> archive,
        content key) unless containerd already holds that build; the pause image is required."""
        try:
            index = json.loads(self.image_index.read_text())["images"]
        except FileNotFoundError as exc:
            raise NodeError(
                f"no images built ({self.image_index} is missing): run `make images`"
            ) from exc
        stamps = self.containerd_root.parent / "containerd-imported.json"
        done: dict[str, str] = json.loads(stamps.read_text()) if stamps.exists() else {}
        present = self._ctr("images", "ls", "-q").split()
        if PAUSE_IMAGE not in index:
            raise NodeError(f"{self.image_index} has no {PAUSE_IMAGE}: run `make images`")
        for ref, entry in sorted(index.items()):
            if done.get(ref) == entry["key"] and ref in present:
                continue
            t0 = time.monotonic()
            self._ctr("images", "import", entry["archive"])
            done[ref] = entry["key"]
            stamps.write_text(json.dumps(done))
            log(f"imported {ref} in {time.monotonic() - t0:.0f}s")

    def start_kubelet(self, spawn: Spawn) -> subprocess.Popen[bytes]:
        return spawn(
            "kubelet",
            [
                f"--config={self.dir / 'kubelet.yaml'}",
                f"--kubeconfig={self.dir / 'kubelet.kubeconfig'}",
                f"--root-dir={self.kubelet_root}",
                f"--cert-dir={self.dir / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={BRIDGE_IP}",
                "--node-labels=vllm-operator.dev/real-node=true,node.kubernetes.io/instance-type=cpu",
                "--v=1",
            ],
            None,
        )

    def start_kube_proxy(self, spawn: Spawn) -> subprocess.Popen[bytes]:
        return spawn("kube-proxy", [f"--config={self.dir / 'kube-proxy.yaml'}", "--v=1"], None)

    def start_coredns(self, spawn: Spawn) -> subprocess.Popen[bytes]:
        return spawn("coredns", ["-conf", str(self.dir / "Corefile")], None)

    def dns_ready(self) -> bool:
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(1)
            # a minimal query for kubernetes.default.svc.cluster.local A
            labels = b"".join(
                bytes([len(p)]) + p for p in b"kubernetes.default.svc.cluster.local".split(b".")
            )
            s.sendto(
                b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
                + labels
                + b"\x00\x00\x01\x00\x01",
                (BRIDGE_IP, 53),
            )
            reply = s.recv(512)
            return reply[:2] == b"\x12\x34" and reply[3] & 0x0F == 0 and reply[7] >= 1
        return False

    # ---- stop ------------------------------------------------------------------------------
    def cleanup(self, lock: NodeLock | None = None) -> None:
        """Undoes everything the node did on this host (idempotent). Processes of the node's
        components were stopped by the cluster; what remains are its pods' processes (in its
        cgroups) and containerd's shims (started with its socket)."""
        lock = lock or NodeLock.read()
        if lock is None:
            return
        state_dir = Path(lock.state_dir)
        node_dir = state_dir / "node"
        self._kill_shims(node_dir)
        hoststate.kill_and_remove_cgroups(CGROUP_ROOT, lock.before)
        hoststate.unmount_under([node_dir, Path("/run/netns"), Path("/var/run/netns")], lock.before)
        kube_proxy = self.bin_dir / "kube-proxy"
        if kube_proxy.exists():
            subprocess.run(
                [str(kube_proxy), "--cleanup"], capture_output=True, timeout=60, check=False
            )
        hoststate.remove_our_rules()
        hoststate.remove_links(BRIDGE)
        hoststate.drop_new_empty_tables(lock.before)
        hoststate.restore_sysctls(lock.before)
        hoststate.remove_new_dirs(lock.before)
        HOST_LOCK.unlink(missing_ok=True)

    @staticmethod
    def _kill_shims(node_dir: Path) -> None:
        """containerd-shim processes daemonize away from containerd; ours carry its socket."""
        marker = str(node_dir / "containerd.sock")
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
                if (
                    cmdline
                    and b"containerd-shim" in cmdline[0]
                    and marker.encode() in b" ".join(cmdline)
                ):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(proc.name), signal.SIGKILL)
