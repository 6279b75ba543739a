"""Pod Security "restricted" on the real node, nothing simulated: in a namespace that enforces
it, the operator (this checkout's code, on the host) runs the CPU vLLM image with the
restricted securityContext it renders, and the real server starts, passes its probes and
serves, as user 65532 (not root) with its caches in the HOME emptyDir.

Run it alone, holding the host's real-node lock:
  flock /tmp/vllm-real-node.lock scripts/run-tests.sh tests/node/test_pod_security_node.py
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import items, sample
from vllm_localenv import model_volume
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess, install

pytestmark = pytest.mark.node
NAME = "tiny-restricted"


@pytest.fixture
def restricted_namespace(
    real_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalCluster, str]]:
    lc = real_cluster
    install(lc)
    op = OperatorProcess(
        lc,
        tmp_path_factory.mktemp("operator") / "operator.log",
        extra_env={"VLLM_OPERATOR_CPU_IMAGE": "localhost/vllm-cpu:0.32.0"},
    )
    ns = f"pss-{uuid.uuid4().hex[:8]}"
    lc.kubectl("create", "namespace", ns)
    lc.kubectl(
        "label",
        "namespace",
        ns,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )
    model_volume.create(lc, ns)
    op.start()
    try:
        yield lc, ns
    finally:
        op.stop()
        lc.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        model_volume.delete(lc, ns)


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return dict(json.load(r))


@pytest.mark.timeout(1200)  # cluster start, vLLM's start on a busy 2-core machine
def test_the_cpu_image_serves_as_non_root_under_restricted(
    restricted_namespace: tuple[LocalCluster, str],
) -> None:
    lc, ns = restricted_namespace
    body = sample("tiny-cpu")
    body["metadata"]["name"] = NAME
    body["spec"]["benchmark"] = {"enabled": False}  # the server is the point here
    lc.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(body))
    lc.kubectl(
        "wait",
        "-n",
        ns,
        f"vllmservice/{NAME}",
        "--for=condition=Ready",
        "--timeout=600s",
        timeout=660,
    )

    (pod,) = items(lc, ns, "pods", f"serving.vllm-operator.dev/service={NAME}")
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    status = pod["status"]["containerStatuses"][0]
    assert status["ready"], status
    assert status["restartCount"] == 0, status
    # who the server runs as, and where its caches went, seen from inside the pod
    probe = (
        "import os, pathlib; h = pathlib.Path(os.environ['HOME']); "
        "print(os.getuid(), os.getgid(), h, os.access(h, os.W_OK), "
        "sorted(p.name for p in h.iterdir()))"
    )
    out = lc.kubectl("exec", "-n", ns, pod["metadata"]["name"], "--", "python3", "-c", probe)
    uid, gid, home, writable, listing = out.strip().split(maxsplit=4)
    assert (uid, gid, home, writable) == ("65532", "65532", "/root", "True"), out
    # PID 1 (the server) too, not only the exec'd probe
    status_1 = lc.kubectl("exec", "-n", ns, pod["metadata"]["name"], "--", "cat", "/proc/1/status")
    uids = next(line for line in status_1.splitlines() if line.startswith("Uid:")).split()[1:]
    assert set(uids) == {"65532"}, uids

    service = json.loads(lc.kubectl("get", "service", NAME, "-n", ns, "-o", "json"))
    base = f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"
    done = _post(f"{base}/v1/completions", {"model": "tiny", "prompt": "Hello", "max_tokens": 8})
    assert done["usage"]["completion_tokens"] == 8
    print(f"\nserved as uid {uid} under restricted; HOME {home} holds {listing}")
