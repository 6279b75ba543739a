"""The real-node tier: a local cluster whose kubelet runs pods on this host (node.py).

One real node per host, so this tier has its own cluster in .state/node-cluster (kept between
runs: containerd's imported images stay cached there), started once per session and stopped at
the end. Tests here need root, the Debian packages of scripts/install-node-deps.sh and the
images of scripts/build-images.sh.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict

import pytest

from vllm_localenv import model_volume
from vllm_localenv.cluster import (
    PROMETHEUS_SCRAPE_INTERVAL,
    REPO_ROOT,
    ClusterError,
    LocalCluster,
    Ports,
)
from vllm_localenv.operator_process import OPERATOR_NAMESPACE, OperatorProcess, install

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


# the namespaces this tier makes (namespace_with_model): `<prefix>-<8 hex>`
TEST_NAMESPACE = re.compile(r"^[a-z]+-[0-9a-f]{8}$")


def sweep_leftovers(lc: LocalCluster) -> list[str]:
    """Deletes test namespaces an earlier run left in the kept state directory (an
    interrupted run, a failed delete): their vLLM pods would hold the one node's CPUs and
    starve this run's pods. Waits (bounded) until their pods are gone. Returns their names."""
    names = [
        n
        for n in lc.kubectl("get", "namespaces", "-o", "name").split()
        if TEST_NAMESPACE.match(n.removeprefix("namespace/"))
    ]
    for name in names:
        lc.kubectl("delete", name, "--wait=false", check=False)
    deadline = time.monotonic() + 300
    while names and time.monotonic() < deadline:
        left = [n for n in lc.kubectl("get", "namespaces", "-o", "name").split() if n in names]
        if not left:
            break
        time.sleep(2)
    return [n.removeprefix("namespace/") for n in names]


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[LocalCluster]:
    lc = node_cluster()
    with lc.session():
        swept = sweep_leftovers(lc)
        if swept:
            print(f"\nnode tier: deleted the namespaces an earlier run left: {swept}")
        yield lc


@contextmanager
def quiet_in_cluster_operator(lc: LocalCluster) -> Iterator[None]:
    """The in-cluster operator that test_e2e deploys (deploy/local) and leaves running watches
    every namespace and takes the same Lease as a host operator: with its own settings (no
    Prometheus, no holder image) it would be the one acting on a later test's service. It is
    scaled to 0 meanwhile (its pod gone before the caller goes on), then back."""
    name = "deployment/vllm-operator"
    found = lc.kubectl(
        "get", name, "-n", OPERATOR_NAMESPACE, "--ignore-not-found", "-o", "name"
    ).strip()
    if found:
        lc.kubectl("scale", name, "-n", OPERATOR_NAMESPACE, "--replicas=0")
        lc.kubectl(
            "wait",
            "--for=delete",
            "pod",
            "-n",
            OPERATOR_NAMESPACE,
            "-l",
            "app.kubernetes.io/name=vllm-operator",
            "--timeout=120s",
            timeout=150,
        )
    try:
        yield
    finally:
        if found:
            lc.kubectl("scale", name, "-n", OPERATOR_NAMESPACE, "--replicas=1")


@pytest.fixture(scope="module")
def host_operator(
    real_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """This checkout's operator on the host, as its own ServiceAccount (the status a test
    reads is written by this code without rebuilding the operator image), with the images
    built here for the benchmark Job and CPU services. One per test module."""
    install(real_cluster)
    op = OperatorProcess(
        real_cluster,
        tmp_path_factory.mktemp("operator") / "operator.log",
        resync_seconds=5,
        extra_env={
            "VLLM_OPERATOR_BENCHMARK_IMAGE": "localhost/vllm-bench:dev",
            "VLLM_OPERATOR_CPU_IMAGE": "localhost/vllm-cpu:0.32.0",
            "VLLM_OPERATOR_HOLDER_IMAGE": "localhost/vllm-holder:dev",
            # a canary's bake reads the node cluster's Prometheus (rollout.canary.bake)
            "VLLM_OPERATOR_PROMETHEUS_URL": real_cluster.prometheus_url,
            "VLLM_OPERATOR_SCRAPE_INTERVAL": PROMETHEUS_SCRAPE_INTERVAL,
        },
    )
    with quiet_in_cluster_operator(real_cluster):
        op.start()
        yield op
        op.stop()


@contextmanager
def namespace_with_model(lc: LocalCluster, prefix: str) -> Iterator[str]:
    """A fresh namespace holding the tiny model on a local PersistentVolume (model_volume:
    the PVC `tiny-model`); deleted afterwards."""
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    lc.kubectl("create", "namespace", ns)
    model_volume.create(lc, ns)
    try:
        yield ns
    finally:
        # (its pods hold the node's CPUs: a failed delete is tried again, and the next
        # session sweeps what is left, sweep_leftovers)
        for attempt in range(3):
            try:
                lc.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")
                break
            except (ClusterError, subprocess.TimeoutExpired):
                time.sleep(2 * (attempt + 1))
        model_volume.delete(lc, ns)


@pytest.fixture
def model_namespace(
    request: pytest.FixtureRequest, real_cluster: LocalCluster, host_operator: OperatorProcess
) -> Iterator[str]:
    """namespace_with_model for a test of the host operator, named after the test module's
    NAMESPACE_PREFIX."""
    with namespace_with_model(
        real_cluster, getattr(request.module, "NAMESPACE_PREFIX", "node")
    ) as ns:
        yield ns
