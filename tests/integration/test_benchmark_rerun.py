"""Re-running a benchmark, and what the Job may write: the real operator on the local cluster.

kwok plays the pods; the tests play the Job's container (vllm_localenv.benchjob) under the
Job's own ServiceAccount, against an address where nothing listens: the runner fails fast and
publishes a failed run, and kwok finishes the pod with its exit code, so the Job is finished
and lingers (ttlSecondsAfterFinished) as it would on a real cluster.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support import apply, get, items, ready, sample, wait_for
from vllm_localenv import benchjob
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster
NOWHERE = "http://127.0.0.1:9"  # the discard port: connection refused


def finished(job: dict[str, Any] | None) -> bool:
    conds = ((job or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conds)


def test_the_rerun_annotation_starts_a_fresh_run_despite_the_finished_job(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    m = sample("minimal")
    m["metadata"]["name"] = "rerun"
    m["spec"]["benchmark"] = {"args": ["--requests", "2"]}
    apply(cluster, namespace, m)
    svc = wait_for("rerun Ready", lambda: ready(cluster, namespace, "rerun"))
    first_name = f"rerun-bench-{svc['status']['revision'][:8]}"
    first = wait_for("the first Job", lambda: get(cluster, namespace, "job", first_name))
    assert benchjob.play(cluster, namespace, first, NOWHERE, tmp_path / "1") != 0
    wait_for("the first Job finished", lambda: finished(get(cluster, namespace, "job", first_name)))

    # the Job's own identity may patch its run's ConfigMap, never the operator's record
    kubeconfig = cluster.service_account_kubeconfig(
        namespace, "rerun-bench", tmp_path / "sa.kubeconfig"
    )
    denied = subprocess.run(
        [
            str(cluster.bin_dir / "kubectl"),
            f"--kubeconfig={kubeconfig}",
            "patch",
            "configmap",
            f"{first_name}-record",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"data": {"verdict": "Passed"}}',
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()

    cluster.kubectl(
        "annotate",
        "vsvc",
        "rerun",
        "-n",
        namespace,
        "serving.vllm-operator.dev/rerun-benchmark=2030-05-01",
        "--overwrite",
    )

    def second_job() -> dict[str, Any] | None:
        return next(
            (
                j
                for j in items(cluster, namespace, "jobs")
                if j["metadata"]["name"].startswith(f"{first_name}-")
            ),
            None,
        )

    second = wait_for("a fresh Job for the re-run", second_job)
    assert get(cluster, namespace, "job", first_name) is not None  # still lingering
    status = wait_for(
        "the status on the re-run",
        lambda: (
            (get(cluster, namespace, "vllmservice", "rerun") or {})
            .get("status", {})
            .get("benchmark", {})
            if (get(cluster, namespace, "vllmservice", "rerun") or {})
            .get("status", {})
            .get("benchmark", {})
            .get("job")
            == second["metadata"]["name"]
            else None
        ),
    )
    assert status["state"] == "Running"
    # the earlier run stays in the history
    assert get(cluster, namespace, "configmap", first_name) is not None
