"""The one pod a benchmark run measures, with the real operator on the local control plane
(kwok plays two replicas; nothing runs in the Job's pod): the run's record, the Job and the
status name the oldest Ready pod and the Job's --url is its IP; when that pod is deleted
mid-run, the run fails with TargetPodGone and its Job is stopped (issue 10, item 7). The
measurement itself on two real replicas: tests/node/test_one_pod.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import apply, get, items, ready, sample, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess

pytestmark = pytest.mark.cluster

NAME = "two"
SERVER = f"serving.vllm-operator.dev/service={NAME},app.kubernetes.io/component=server"


def _bench(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    svc = get(cluster, namespace, "vllmservice", NAME) or {}
    return dict(svc.get("status", {}).get("benchmark") or {})


def test_the_run_measures_the_oldest_ready_pod_and_fails_when_it_goes_away(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    body = sample("minimal")
    body["metadata"]["name"] = NAME
    body["spec"]["replicas"] = 2
    apply(cluster, namespace, body)
    wait_for("the service Ready", lambda: ready(cluster, namespace, NAME))
    bench = wait_for(
        "the run's pod in the status",
        lambda: (b := _bench(cluster, namespace)).get("targetPod") and b,
    )
    pods = items(cluster, namespace, "pods", SERVER)
    assert len(pods) == 2
    oldest = min(pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
    target, ip = oldest["metadata"]["name"], oldest["status"]["podIP"]
    assert (bench["state"], bench["targetPod"], bench["targetPodIP"]) == ("Running", target, ip)
    record = get(cluster, namespace, "configmap", f"{bench['job']}-record")
    assert record is not None
    assert (record["data"]["targetPod"], record["data"]["targetPodIP"]) == (target, ip)
    job = get(cluster, namespace, "job", bench["job"])
    assert job is not None
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[len(args) - 1 - args[::-1].index("--url") + 1] == f"http://{ip}:8000"

    # the measured pod goes away mid-run (kwok never finishes the Job's pod: still running)
    cluster.kubectl("delete", "pod", target, "-n", namespace, "--wait=false")
    failed = wait_for(
        "the run failed",
        lambda: (b := _bench(cluster, namespace)).get("state") == "Failed" and b,
    )
    svc = get(cluster, namespace, "vllmservice", NAME)
    complete = next(c for c in svc["status"]["conditions"] if c["type"] == "BenchmarkComplete")
    assert complete["reason"] == "BenchmarkFailed"
    assert complete["message"].startswith(f"TargetPodGone: the measured pod {target} ({ip}) "), (
        complete
    )
    assert failed["targetPod"] == target
    wait_for(
        "the run's Job stopped",
        lambda: get(cluster, namespace, "job", bench["job"]) is None,
    )
    # the service itself stays Ready (the Deployment replaces the pod)
    wait_for("the service Ready again", lambda: ready(cluster, namespace, NAME))
