"""The real node leaves the host exactly as it found it: after `down`, and after a crash
followed by the next `up` (which cleans up first). Runs before the tier's shared cluster
starts (file order), since a host has one real node."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest

from tests.node.conftest import node_cluster
from tests.support import wait_for
from vllm_localenv import hoststate
from vllm_localenv.cluster import LocalCluster, _State
from vllm_localenv.node import BRIDGE, CGROUP_ROOT, PAUSE_IMAGE

pytestmark = pytest.mark.node

# Other tenants of a developer's machine change the host meanwhile: the sandbox puts each
# command it runs in a cgroup of its own, and a concurrent `buildah bud` (make images) makes
# cgroups and overlay mounts. They are not the node's; everything else must match exactly.
OTHER_TENANTS = ("/process_api/", "buildah-", "/buildah/storage/")


def _leftovers(before: hoststate.HostSnapshot) -> dict[str, object]:
    diff = before.differences(hoststate.snapshot())
    out: dict[str, object] = {}
    for aspect, change in diff.items():
        if aspect in ("cgroups", "mounts") and isinstance(change, dict):
            kept = {
                side: [e for e in entries if not any(t in e for t in OTHER_TENANTS)]
                for side, entries in change.items()
            }
            if any(kept.values()):
                out[aspect] = kept
            continue
        out[aspect] = change
    return out


def _run_pod(lc: LocalCluster, name: str) -> None:
    lc.kubectl(
        "run", name, f"--image={PAUSE_IMAGE}", "--image-pull-policy=Never", "--restart=Never"
    )
    wait_for(
        f"pod {name} Running on the real node",
        lambda: (
            json.loads(lc.kubectl("get", "pod", name, "-o", "json"))["status"].get("phase")
            == "Running"
        ),
    )


def test_down_and_crash_recovery_leave_the_host_as_found() -> None:
    lc = node_cluster()
    if lc.running():
        pytest.fail("the node tier's cluster is already running; stop it (make cluster-down)")
    # A run killed half-way (of this checkout or another: CI's clone, a developer's) leaves the
    # host changed and its lock behind; `up` undoes that first. Undo it before the reference
    # snapshot too, or the reference holds the crashed run's traces and the clean `down` below
    # (which removes them) reads as a difference.
    lc.node.undo_crashed(lambda d: any(LocalCluster(Path(d)).running().values()))
    before = hoststate.snapshot()
    assert BRIDGE not in before.links, "the host has a real node's bridge but no lock: clean it"

    try:
        lc.up()
        _run_pod(lc, f"probe-{uuid.uuid4().hex[:6]}")
        during = hoststate.snapshot()
        changed = before.differences(during)
        # positive control: a running pod did change the host in every aspect we compare
        assert BRIDGE in during.links
        assert any(CGROUP_ROOT in c for c in during.cgroups)
        assert {"iptables", "links", "mounts", "cgroups"} <= changed.keys(), changed.keys()
        assert "KUBE-SERVICES" in during.iptables  # kube-proxy's rules

        # a clean stop
        lc.down()
        assert _leftovers(before) == {}

        # a crash: every process of the cluster killed at once, the pod's processes left running
        lc.up()
        _run_pod(lc, f"probe-{uuid.uuid4().hex[:6]}")
        state = _State.load((lc.state_dir / "cluster.json").read_text())
        for proc in state.procs:
            os.kill(proc.pid, signal.SIGKILL)
        assert _leftovers(before) != {}  # the crash left its traces
        again = node_cluster()
        again.up()  # cleans what the crash left, then starts afresh
        again.down()
    finally:
        node_cluster().down()  # whatever an assertion above left running (no-op otherwise)
    assert _leftovers(before) == {}
