"""Session fixtures: the real local control plane and a real vLLM server on CPU.

The cluster is started once per session in .state/test-cluster on free ports (so it never
collides with a developer's `make cluster-up`), each test gets a fresh namespace, and the
cluster is stopped at the end. The vLLM server is started once for the `vllm` tests.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.support import SESSION_OPERATORS
from vllm_localenv.cluster import REPO_ROOT, LocalCluster, Ports
from vllm_localenv.operator_process import OperatorProcess, install
from vllm_localenv.vllm_server import VllmServer, tiny_model

# VLLM_TEST_STATE_DIR: a separate test cluster per concurrent checkout/run on one machine
TEST_STATE_DIR = Path(
    os.environ.get("VLLM_TEST_STATE_DIR") or REPO_ROOT / ".state" / "test-cluster"
)


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    probe = LocalCluster(state_dir=TEST_STATE_DIR)
    if probe.running() and not all(probe.running().values()):
        probe.down()  # leftovers of an interrupted run: only processes that run started
    existing = probe.running()
    lc = LocalCluster(state_dir=TEST_STATE_DIR, ports=None if existing else Ports.free())
    with lc.session():
        yield lc


@pytest.fixture(scope="session")
def api_client(cluster: LocalCluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


@pytest.fixture
def namespace(api_client: client.ApiClient) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # pods are refused until the ServiceAccount controller has made "default" in it (seconds
    # on a loaded machine)
    deadline = time.monotonic() + 180
    while not core.list_namespaced_service_account(
        name, field_selector="metadata.name=default"
    ).items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in {name} after 180 s")
        time.sleep(0.2)
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return tiny_model()


@pytest.fixture(scope="session")
def vllm_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VllmServer]:
    server = VllmServer(model=tiny_model_dir, log_path=tmp_path_factory.mktemp("vllm") / "vllm.log")
    with server.running():
        yield server


@pytest.fixture(scope="session")
def installed(cluster: LocalCluster) -> LocalCluster:
    """The CRD and the operator's RBAC, installed once."""
    install(cluster)
    return cluster


@pytest.fixture(scope="session")
def operator(
    installed: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """The real operator, running as its own ServiceAccount with a 5 s drift timer."""
    proc = OperatorProcess(
        installed,
        tmp_path_factory.mktemp("operator") / "operator.log",
    )
    proc.start()
    SESSION_OPERATORS.append(proc)
    yield proc
    SESSION_OPERATORS.remove(proc)
    proc.stop()


@pytest.fixture
def no_other_operator() -> Iterator[None]:
    """The session's operator (below), when an earlier test started it, watches every
    namespace and would reconcile a test's service before the operator that test runs itself
    (the chart's, one under narrower RBAC): it is stopped for that test and started again
    after."""
    running = [op for op in SESSION_OPERATORS if op.pid is not None]
    for op in running:
        op.stop()
    yield
    for op in running:
        op.start()
