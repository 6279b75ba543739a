"""End to end on kind, for machines with a Docker engine; skipped cleanly elsewhere."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

pytestmark = pytest.mark.e2e


def _docker_engine() -> bool:
    if not shutil.which("docker") or not shutil.which("kind"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not _docker_engine(), reason="needs a running Docker engine and kind")
def test_kind_cluster_answers() -> None:
    name = f"vllm-op-e2e-{uuid.uuid4().hex[:6]}"
    subprocess.run(["kind", "create", "cluster", "--name", name, "--wait", "120s"], check=True)
    try:
        out = subprocess.run(
            ["kubectl", "--context", f"kind-{name}", "get", "nodes", "-o", "name"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.strip().startswith("node/")
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", name], check=False)
