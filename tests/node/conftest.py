"""The real-node tier: a local cluster whose kubelet runs pods on this host (node.py).

One real node per host, so this tier has its own cluster in .state/node-cluster (kept between
runs: containerd's imported images stay cached there), started once per session and stopped at
the end. Tests here need root, the Debian packages of scripts/install-node-deps.sh and the
images of scripts/build-images.sh.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict

import pytest

from vllm_localenv.cluster import REPO_ROOT, LocalCluster, Ports

NODE_STATE_DIR = REPO_ROOT / ".state" / "node-cluster"


PORTS_FILE = NODE_STATE_DIR / "ports.json"


def _ports() -> Ports:
    """The same ports for every start of this state directory: etcd keeps the `kubernetes`
    Service's endpoints, and a restarted apiserver on another port leaves in-cluster clients
    (the operator pod) dialling the old one. Chosen free once, then reused."""
    if PORTS_FILE.exists():
        return Ports(**json.loads(PORTS_FILE.read_text()))
    ports = Ports.free()
    NODE_STATE_DIR.mkdir(parents=True, exist_ok=True)
    PORTS_FILE.write_text(json.dumps(asdict(ports)))
    return ports


def node_cluster() -> LocalCluster:
    probe = LocalCluster(state_dir=NODE_STATE_DIR, real_node=True)
    running = probe.running()
    if running and not all(running.values()):
        probe.down()  # leftovers of an interrupted run: only what that run started
    return LocalCluster(
        state_dir=NODE_STATE_DIR, ports=None if probe.running() else _ports(), real_node=True
    )


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[LocalCluster]:
    lc = node_cluster()
    with lc.session():
        yield lc
