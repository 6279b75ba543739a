"""What the real node changes on this host, read and undone.

`snapshot()` reads the host-wide state a kubelet node touches: the iptables rules (v4 and v6,
through iptables-save) and the nftables tables they live in, the network links, the mounts,
the cgroup directories of every hierarchy, and the sysctls the kubelet and the CNI bridge
plugin set. The real node records one before it changes anything; `cluster-down` (or the next
`cluster-up` after a crash) undoes what it added and a test compares a snapshot taken after
with the one taken before.

Undoing touches only what is recognisably the node's: iptables chains named KUBE-*, CNI-* and
VLLMOP-* (and the rules that jump to them), links that are the node's bridge or attached to it,
mounts under the node's own directories or the network namespaces its containerd made, cgroups
under the node's cgroup root, and the recorded sysctls, set back to their recorded values.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
# Host-wide kernel settings the node's parts write: the CNI bridge plugin turns on forwarding,
# the kubelet "tunes" the kernel (setupKernelTunables) unless protectKernelDefaults is set.
SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
)
OUR_CHAINS = re.compile(r"^(KUBE-|CNI-|VLLMOP-)")
# Folders that a node's parts create at fixed host paths even when pointed elsewhere.
HOST_DIRS = (
    Path("/run/netns"),
    Path("/run/containerd"),
    Path("/var/run/netns"),
    Path("/var/lib/cni"),
    Path("/var/log/pods"),
    Path("/var/log/containers"),
    Path("/etc/cni"),
)


def run(*args: str, check: bool = True, stdin: str | None = None) -> str:
    res = subprocess.run(
        list(args), input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
    return res.stdout


def _iptables_save(family: str) -> str:
    """The ruleset without comments and counters (they change by themselves)."""
    exe = "iptables-save" if family == "ipv4" else "ip6tables-save"
    if shutil.which(exe) is None:
        return ""
    out = run(exe, check=False)
    lines = []
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        lines.append(re.sub(r" \[\d+:\d+\]$", "", line))
    return "\n".join(lines)


def _nft_tables() -> list[str]:
    if shutil.which("nft") is None:
        return []
    out = run("nft", "list", "tables", check=False)
    return sorted(line.strip() for line in out.splitlines() if line.strip())


def _links() -> list[str]:
    return sorted(link["ifname"] for link in json.loads(run("ip", "-j", "link", "show") or "[]"))


def _mounts() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        points.append(line.split()[4].replace("\\040", " "))
    return sorted(points)


def _cgroups() -> list[str]:
    """Every cgroup directory of every hierarchy, relative to /sys/fs/cgroup."""
    found: list[str] = []
    if not CGROUP_FS.is_dir():
        return found
    for hierarchy in sorted(CGROUP_FS.iterdir()):
        if hierarchy.is_symlink() or not hierarchy.is_dir():
            continue
        for root, dirs, _files in os.walk(hierarchy):
            dirs.sort()
            found.append(str(Path(root).relative_to(CGROUP_FS)))
    return found


def _sysctls() -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        with contextlib.suppress(OSError):
            values[name] = Path("/proc/sys", name).read_text().strip()
    return values


@dataclass(frozen=True)
class HostSnapshot:
    iptables: str = ""
    ip6tables: str = ""
    nft_tables: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    cgroups: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    dirs: list[str] = field(default_factory=list)

    def dump(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def load(cls, text: str) -> HostSnapshot:
        return cls(**json.loads(text))

    def differences(self, other: HostSnapshot) -> dict[str, object]:
        """What differs between two snapshots, per aspect (empty when the host is the same)."""
        out: dict[str, object] = {}
        for key, mine in asdict(self).items():
            theirs = asdict(other)[key]
            if mine == theirs:
                continue
            if isinstance(mine, str):
                a, b = set(mine.splitlines()), set(theirs.splitlines())
                out[key] = {"gone": sorted(a - b), "new": sorted(b - a)}
            elif isinstance(mine, list):
                out[key] = {
                    "gone": sorted(set(mine) - set(theirs)),
                    "new": sorted(set(theirs) - set(mine)),
                }
            else:
                out[key] = {"before": mine, "after": theirs}
        return out


def snapshot() -> HostSnapshot:
    return HostSnapshot(
        iptables=_iptables_save("ipv4"),
        ip6tables=_iptables_save("ipv6"),
        nft_tables=_nft_tables(),
        links=_links(),
        mounts=_mounts(),
        cgroups=_cgroups(),
        sysctls=_sysctls(),
        dirs=sorted(str(d) for d in HOST_DIRS if d.exists()),
    )


# ---- undo ------------------------------------------------------------------------------------
def _without_our_chains(saved: str) -> str:
    """An iptables-save text with the node's chains, and every rule in or jumping to one of
    them, left out; what remains is restored as it was."""
    keep = []
    for line in saved.splitlines():
        if line.startswith(":") and OUR_CHAINS.match(line[1:]):
            continue
        if line.startswith("-A "):
            parts = line.split()
            chain = parts[1]
            target = parts[parts.index("-j") + 1] if "-j" in parts else ""
            goto = parts[parts.index("-g") + 1] if "-g" in parts else ""
            if OUR_CHAINS.match(chain) or OUR_CHAINS.match(target) or OUR_CHAINS.match(goto):
                continue
        keep.append(line)
    return "\n".join(keep) + "\n"


def remove_our_rules() -> None:
    for family, save, restore in (
        ("ipv4", "iptables-save", "iptables-restore"),
        ("ipv6", "ip6tables-save", "ip6tables-restore"),
    ):
        if shutil.which(save) is None:
            continue
        current = run(save, check=False)
        if not re.search(r"(KUBE-|CNI-|VLLMOP-)", current):
            continue
        cleaned = _without_our_chains(current)
        try:
            run(restore, stdin=cleaned)
        except RuntimeError as exc:
            raise RuntimeError(
                f"restoring the {family} rules without the node's chains: {exc}"
            ) from exc


def drop_new_empty_tables(before: HostSnapshot) -> None:
    """iptables-nft leaves the tables it created (with only empty built-in chains) behind;
    delete those that did not exist before and hold no rule."""
    if shutil.which("nft") is None:
        return
    for table in set(_nft_tables()) - set(before.nft_tables):
        listing = run("nft", "list", *table.split(), check=False)
        if re.search(r"^\s+(?!type |policy |chain |\}|table )\S", listing, re.MULTILINE):
            continue  # it holds rules: not ours to delete
        run("nft", "delete", *table.split(), check=False)


def remove_links(bridge: str) -> None:
    """The bridge and every link attached to it (pods' veth ends)."""
    with contextlib.suppress(RuntimeError, ValueError):
        for link in json.loads(
            run("ip", "-j", "link", "show", "master", bridge, check=False) or "[]"
        ):
            run("ip", "link", "delete", link["ifname"], check=False)
    if bridge in _links():
        run("ip", "link", "delete", bridge, check=False)


def unmount_under(roots: list[Path], before: HostSnapshot) -> None:
    """Unmounts every mount below one of roots that was not there before, deepest first."""
    prefixes = [str(r).rstrip("/") + "/" for r in roots]
    for _attempt in range(3):
        mine = [
            m
            for m in _mounts()
            if m not in before.mounts and any((m + "/").startswith(p) for p in prefixes)
        ]
        if not mine:
            return
        for point in sorted(set(mine), key=len, reverse=True):
            run("umount", "-l", point, check=False)


def kill_and_remove_cgroups(root_name: str, before: HostSnapshot) -> None:
    """SIGKILLs the processes left in the node's cgroups (its pods' processes, started by its
    containerd) and removes every cgroup under root_name that did not exist before."""
    # a killed vLLM pod can take many seconds to give back gigabytes of memory and exit
    for _attempt in range(300):
        remaining = [c for c in _cgroups() if c not in before.cgroups and _under(c, root_name)]
        if not remaining:
            return
        for rel in sorted(remaining, key=lambda c: c.count("/"), reverse=True):
            path = CGROUP_FS / rel
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(pid), signal.SIGKILL)
            with contextlib.suppress(OSError):
                path.rmdir()
        time.sleep(0.2)
    left = [c for c in _cgroups() if c not in before.cgroups and _under(c, root_name)]
    if left:
        raise RuntimeError(f"cgroups still in use after cleanup: {left[:5]}")


def _under(rel: str, root_name: str) -> bool:
    parts = rel.split("/")
    return len(parts) >= 2 and parts[1] == root_name


def restore_sysctls(before: HostSnapshot) -> None:
    now = _sysctls()
    for name, value in before.sysctls.items():
        if now.get(name) != value:
            with contextlib.suppress(OSError):
                Path("/proc/sys", name).write_text(value)


def remove_new_dirs(before: HostSnapshot) -> None:
    for d in HOST_DIRS:
        if str(d) in before.dirs or not d.exists() or d.is_symlink():
            continue
        # only folders the node's parts made; a mount below it was already undone
        with contextlib.suppress(OSError):
            shutil.rmtree(d)
