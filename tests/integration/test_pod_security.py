"""Pod Security admission on the local control plane: the pods the operator renders (vLLM on
GPU and on CPU, the benchmark Job's) are admitted in a namespace that enforces "restricted"
(and so "baseline"); the API server's own admission decides, through a server-side dry run of
each pod and through the real controllers creating them for a real operator.

Positive controls: a deliberately privileged pod is refused under both levels, and the vLLM pod
as the "baseline" setting renders it (the image's own user, perhaps root) is refused under
"restricted" and admitted under "baseline". (That the CPU image really starts and serves as
non-root with the restricted context is tests/node/test_pod_security_node.py, on the real node.)
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import get, items, ready, sample, wait_for
from tests.unit.builders import service
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.render.benchmark import render_job
from vllm_operator.render.deployment import render_deployment

pytestmark = [pytest.mark.cluster]
RESTRICTED = OperatorSettings()
BASELINE = OperatorSettings(vllm_pod_security="baseline")


@pytest.fixture
def pss_namespace(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace enforcing the Pod Security level `request.param` (latest version)."""
    name = f"pss-{request.param}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl(
        "label",
        "namespace",
        name,
        f"pod-security.kubernetes.io/enforce={request.param}",
        "pod-security.kubernetes.io/enforce-version=latest",
    )
    # pods are refused until the ServiceAccount controller has made "default" (seconds, on a
    # loaded machine: CI saw "serviceaccount default not found")
    wait_for(
        f"the default ServiceAccount of {name}",
        lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False),
    )
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


def as_pod(template: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": template["metadata"]["labels"],
        },
        "spec": template["spec"],
    }


def create_dry_run(cluster: LocalCluster, pod: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """The API server's admission of `pod` (Pod Security included), nothing stored."""
    return subprocess.run(
        [
            str(cluster.bin_dir / "kubectl"),
            f"--kubeconfig={cluster.kubeconfig}",
            "create",
            "--dry-run=server",
            "-f",
            "-",
        ],
        input=json.dumps(pod),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def rendered_pods(settings: OperatorSettings, namespace: str) -> dict[str, dict[str, Any]]:
    gpu = service("minimal")
    cpu = service("tiny-cpu")
    return {
        "vllm-gpu": as_pod(render_deployment(gpu, settings)["spec"]["template"], "gpu", namespace),
        "vllm-cpu": as_pod(render_deployment(cpu, settings)["spec"]["template"], "cpu", namespace),
        "benchmark": as_pod(
            render_job(gpu, settings, "0123456789abcdef")["spec"]["template"], "bench", namespace
        ),
    }


PRIVILEGED = {
    "containers": [
        {"name": "c", "image": "busybox", "securityContext": {"privileged": True}},
    ]
}


@pytest.mark.parametrize("pss_namespace", ["restricted", "baseline"], indirect=True)
def test_the_rendered_pods_are_admitted(cluster: LocalCluster, pss_namespace: str) -> None:
    # the pods name accounts that admission checks exist: the default one and the Job's
    cluster.kubectl("create", "serviceaccount", "minimal-bench", "-n", pss_namespace)
    for what, pod in rendered_pods(RESTRICTED, pss_namespace).items():
        res = create_dry_run(cluster, pod)
        assert res.returncode == 0, f"{what}: {res.stderr}"
        assert "PodSecurity" not in res.stderr, f"{what}: {res.stderr}"  # not even a warning
    # positive control: the same admission refuses a privileged pod
    bad = {**as_pod({"metadata": {"labels": {}}, "spec": PRIVILEGED}, "bad", pss_namespace)}
    res = create_dry_run(cluster, bad)
    assert res.returncode != 0
    assert f'violates PodSecurity "{pss_namespace.split("-")[1]}:latest"' in res.stderr
    assert "privileged" in res.stderr


@pytest.mark.parametrize("pss_namespace", ["restricted"], indirect=True)
def test_the_baseline_setting_is_refused_by_restricted(
    cluster: LocalCluster, pss_namespace: str
) -> None:
    """What "restricted" adds over "baseline" is what the operator's restricted context
    carries: the image's own user (settings.vllmPodSecurity: baseline) is refused."""
    for what in ("vllm-gpu", "vllm-cpu"):
        res = create_dry_run(cluster, rendered_pods(BASELINE, pss_namespace)[what])
        assert res.returncode != 0, what
        assert "runAsNonRoot != true" in res.stderr, res.stderr


@pytest.mark.parametrize("pss_namespace", ["baseline"], indirect=True)
def test_the_baseline_setting_passes_baseline(cluster: LocalCluster, pss_namespace: str) -> None:
    for what in ("vllm-gpu", "vllm-cpu"):
        res = create_dry_run(cluster, rendered_pods(BASELINE, pss_namespace)[what])
        assert res.returncode == 0, f"{what}: {res.stderr}"


@pytest.mark.parametrize("pss_namespace", ["restricted"], indirect=True)
def test_the_operator_runs_a_service_in_a_restricted_namespace(
    cluster: LocalCluster, operator: OperatorProcess, pss_namespace: str
) -> None:
    """End to end: the ReplicaSet and Job controllers create the operator's pods in a
    namespace enforcing "restricted" (kwok plays them): Ready, and the benchmark pod exists."""
    ns = pss_namespace
    svc = sample("minimal")
    cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(svc))
    live = wait_for("minimal Ready", lambda: ready(cluster, ns, "minimal"))
    job = f"minimal-bench-{live['status']['revision'][:8]}"
    wait_for(f"job {job}", lambda: get(cluster, ns, "job", job))
    pods = wait_for("the benchmark pod", lambda: items(cluster, ns, "pods", f"job-name={job}"))
    assert pods[0]["spec"]["securityContext"]["runAsNonRoot"] is True
    vllm = items(cluster, ns, "pods", "app.kubernetes.io/name=vllm")
    assert vllm
    assert vllm[0]["spec"]["securityContext"]["runAsUser"] == 65532
    # nothing refused on the way (the ReplicaSet would record FailedCreate)
    events = json.loads(cluster.kubectl("get", "events", "-n", ns, "-o", "json"))["items"]
    assert not [e for e in events if e.get("reason") == "FailedCreate"], events
