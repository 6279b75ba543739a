"""End to end on kind, for machines with a Docker engine; skipped cleanly elsewhere.

The same flow as tests/node/test_e2e.py on a kind cluster: the three images built with Docker
from images/ (public bases), loaded into kind, the operator installed from crds/ and deploy/,
the tiny model handed to the CPU sample through a PVC bound to a local volume (a kind
extraMount), the service Ready, its Service answering and its rollout benchmarked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from vllm_localenv.cluster import REPO_ROOT
from vllm_localenv.vllm_server import tiny_model

pytestmark = pytest.mark.e2e

IMAGES = {
    "localhost/vllm-operator:dev": "images/operator/Dockerfile",
    "localhost/vllm-bench:dev": "images/benchmark/Dockerfile",
    "localhost/vllm-cpu:0.32.0": "images/vllm-cpu/Dockerfile",
}


def _docker_engine() -> bool:
    if not shutil.which("docker") or not shutil.which("kind") or not shutil.which("kubectl"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


def _run(*args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        list(args), input=stdin, capture_output=True, text=True, check=True, timeout=1800
    ).stdout


@pytest.mark.skipif(not _docker_engine(), reason="needs a running Docker engine and kind")
def test_kind_serves_and_benchmarks_a_cpu_service(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model(), model)
    for path in [model, *model.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    for ref, dockerfile in IMAGES.items():
        _run("docker", "build", "-f", str(REPO_ROOT / dockerfile), "-t", ref, str(REPO_ROOT))
    name = f"vllm-op-e2e-{uuid.uuid4().hex[:6]}"
    config = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "nodes": [
            {
                "role": "control-plane",
                "extraMounts": [{"hostPath": str(model), "containerPath": "/models/tiny"}],
            }
        ],
    }
    (tmp_path / "kind.json").write_text(json.dumps(config))
    _run(
        "kind",
        "create",
        "cluster",
        "--name",
        name,
        "--config",
        str(tmp_path / "kind.json"),
        "--wait",
        "180s",
    )
    ctx = f"kind-{name}"

    def kubectl(*args: str, stdin: str | None = None) -> str:
        return _run("kubectl", "--context", ctx, *args, stdin=stdin)

    try:
        for ref in IMAGES:
            _run("kind", "load", "docker-image", ref, "--name", name)
        kubectl("apply", "--server-side", "-f", str(REPO_ROOT / "crds" / "vllmservices.yaml"))
        # not `kubectl wait --for=condition=Established`: it errors on a CRD without a status yet
        jsonpath = '{.status.conditions[?(@.type=="Established")].status}'
        deadline = time.monotonic() + 120
        while (
            kubectl(
                "get", "crd/vllmservices.serving.vllm-operator.dev", "-o", f"jsonpath={jsonpath}"
            )
            != "True"
        ):
            assert time.monotonic() < deadline, "the VLLMService CRD was not Established in 120 s"
            time.sleep(0.5)
        kubectl("apply", "--server-side", "-f", str(REPO_ROOT / "deploy" / "rbac.yaml"))
        overlay = kubectl(
            "kustomize",
            "--load-restrictor=LoadRestrictionsNone",
            str(REPO_ROOT / "deploy" / "local"),
        )
        kubectl("apply", "-f", "-", stdin=overlay)
        kubectl(
            "rollout",
            "status",
            "-n",
            "vllm-operator-system",
            "deployment/vllm-operator",
            "--timeout=300s",
        )
        node = json.loads(kubectl("get", "nodes", "-o", "json"))["items"][0]["metadata"]["name"]
        volume: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "tiny-model"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "local-models",
                "local": {"path": "/models/tiny"},
                "claimRef": {"namespace": "default", "name": "tiny-model"},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [node],
                                    }
                                ]
                            }
                        ]
                    }
                },
            },
        }
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "tiny-model", "namespace": "default"},
            "spec": {
                "accessModes": ["ReadOnlyMany"],
                "storageClassName": "local-models",
                "volumeName": "tiny-model",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [volume, claim]}),
        )
        kubectl("apply", "-f", str(REPO_ROOT / "crds" / "samples" / "tiny-cpu.yaml"))
        kubectl("wait", "--for=condition=Ready", "vllmservice/tiny-cpu", "--timeout=900s")
        deadline = time.monotonic() + 1200
        bench: dict[str, Any] = {}
        while time.monotonic() < deadline:
            svc = json.loads(kubectl("get", "vllmservice", "tiny-cpu", "-o", "json"))
            bench = svc.get("status", {}).get("benchmark", {})
            if bench.get("state") in ("Complete", "Failed"):
                break
            time.sleep(5)
        assert bench.get("state") == "Complete", bench
        assert bench["outputTokensPerSecond"] > 0
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", name], check=False)
