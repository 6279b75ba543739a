"""The real node leaves the host exactly as it found it: after `down`, and after a crash
followed by the next `up` (which cleans up first). Runs before the tier's shared cluster
starts (file order), since a host has one real node."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tests.node.conftest import node_cluster
from tests.support import wait_for
from vllm_localenv import hoststate
from vllm_localenv.cluster import LocalCluster, _State
from vllm_localenv.node import BRIDGE, CGROUP_ROOT, PAUSE_IMAGE

pytestmark = pytest.mark.node


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
        timeout=120,
    )


def test_down_and_crash_recovery_leave_the_host_as_found() -> None:
    lc = node_cluster()
    if lc.running():
        pytest.fail("the node tier's cluster is already running; stop it (make cluster-down)")
    before = hoststate.snapshot()

    lc.up()
    _run_pod(lc, "probe-a")
    during = hoststate.snapshot()
    changed = before.differences(during)
    # positive control: a running pod did change the host in every aspect we compare
    assert BRIDGE in during.links
    assert any(CGROUP_ROOT in c for c in during.cgroups)
    assert {"iptables", "links", "mounts", "cgroups"} <= changed.keys(), changed.keys()
    assert "KUBE-SERVICES" in during.iptables  # kube-proxy's rules

    # a clean stop
    lc.down()
    assert before.differences(hoststate.snapshot()) == {}

    # a crash: every process of the cluster killed at once, the pod's processes left running
    lc.up()
    _run_pod(lc, "probe-b")
    state = _State.load((lc.state_dir / "cluster.json").read_text())
    for proc in state.procs:
        os.kill(proc.pid, signal.SIGKILL)
    assert before.differences(hoststate.snapshot()) != {}  # the crash left its traces
    again = node_cluster()
    again.up()  # cleans what the crash left, then starts afresh
    again.down()
    assert before.differences(hoststate.snapshot()) == {}
