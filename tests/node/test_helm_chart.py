"""The Helm chart on the real node, nothing simulated: `helm install` with the images built
here (never pulled) brings up two operator replicas from the operator image, in
namespaced mode (Roles only, nothing cluster-scoped; leader election on a Lease), and the CPU
sample becomes Ready on the node in a namespace enforcing Pod Security "restricted", its
server running as uid 65532 (not root) with its caches in the HOME emptyDir, and serves;
`helm uninstall` leaves the service serving.

Run it alone, holding the host's real-node lock:
  flock /tmp/vllm-real-node.lock scripts/run-tests.sh tests/node/test_helm_chart.py
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.chart_support import CHART, helm, set_args
from tests.node.conftest import quiet_in_cluster_operator
from tests.node.test_pod_security_node import assert_serves_as_non_root
from tests.support import SAMPLES, ready, wait_for
from vllm_localenv import model_volume
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.node import NODE_NAME

pytestmark = [pytest.mark.node, pytest.mark.helm]


@pytest.fixture
def quiet_plain_operator(real_cluster: LocalCluster) -> Iterator[None]:
    """Only the chart's operator acts (conftest.quiet_in_cluster_operator)."""
    with quiet_in_cluster_operator(real_cluster):
        yield


@pytest.mark.timeout(1500)  # cluster start, image import, vLLM's start on CPU
def test_the_chart_runs_the_operator_image_and_a_sample_serves(
    real_cluster: LocalCluster, quiet_plain_operator: None
) -> None:
    lc = real_cluster
    ns, rel_ns, release = f"helm-{uuid.uuid4().hex[:6]}", "vllm-helm-system", "vllm-helm"
    lc.kubectl("create", "namespace", ns)
    # the vLLM pod runs under Pod Security "restricted" (non-root, the operator's default)
    lc.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
    model_volume.create(lc, ns)
    values = {
        "rbac": {"watchNamespaces": [ns]},
        "image": {"repository": "localhost/vllm-operator", "tag": "dev", "pullPolicy": "Never"},
        "settings": {
            "benchmarkImage": "localhost/vllm-bench:dev",
            "cpuImage": "localhost/vllm-cpu:0.32.0",
        },
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
    }
    adopt = []
    for crd in ("vllmservices.serving.vllm-operator.dev",):
        if lc.kubectl("get", "crd", crd, "--ignore-not-found", "-o", "name").strip():
            lc.kubectl("label", "--overwrite", "crd", crd, "app.kubernetes.io/managed-by=Helm")
            lc.kubectl(
                "annotate",
                "--overwrite",
                "crd",
                crd,
                f"meta.helm.sh/release-name={release}",
                f"meta.helm.sh/release-namespace={rel_ns}",
            )
            adopt = ["--force-conflicts"]
    try:
        t0 = time.monotonic()
        helm(
            "install",
            release,
            str(CHART),
            "-n",
            rel_ns,
            "--create-namespace",
            "--wait",
            "--timeout=300s",
            *adopt,
            *set_args(values),
            kubeconfig=lc.kubeconfig,
        )
        up_s = time.monotonic() - t0
        pods = json.loads(
            lc.kubectl(
                "get",
                "pods",
                "-n",
                rel_ns,
                "-l",
                f"app.kubernetes.io/instance={release}",
                "-o",
                "json",
            )
        )
        assert len(pods["items"]) == 2
        for p in pods["items"]:
            assert p["spec"]["nodeName"] == NODE_NAME
            assert p["spec"]["containers"][0]["image"] == "localhost/vllm-operator:dev"
            assert all(c["ready"] for c in p["status"]["containerStatuses"])
        lc.kubectl("apply", "-n", ns, "-f", str(SAMPLES / "tiny-cpu.yaml"))
        t1 = time.monotonic()
        try:
            wait_for("tiny-cpu Ready", lambda: ready(lc, ns, "tiny-cpu"), timeout=900, every=3)
        except AssertionError:
            for args in (
                ("get", "vsvc,deploy,pods", "-o", "wide"),
                ("get", "events", "--sort-by=.lastTimestamp"),
            ):
                print(lc.kubectl(*args, "-n", ns, check=False))
            print(
                lc.kubectl(
                    "get", "vsvc", "tiny-cpu", "-n", ns, "-o", "jsonpath={.status}", check=False
                )
            )
            raise
        ready_s = time.monotonic() - t1
        served = assert_serves_as_non_root(lc, ns, "tiny-cpu")
        # one of the two replicas leads, on the Lease in the release namespace (the chart's
        # Role for it; POD_NAMESPACE from the downward API)
        lease = json.loads(lc.kubectl("get", "lease", "vllm-operator", "-n", rel_ns, "-o", "json"))
        assert lease["spec"].get("holderIdentity"), lease
        helm("uninstall", release, "-n", rel_ns, "--wait", kubeconfig=lc.kubeconfig)
        assert ready(lc, ns, "tiny-cpu")
        print(
            f"\nchart operator up (2 replicas, real node) {up_s:.0f}s;"
            f" tiny-cpu Ready {ready_s:.0f}s; {served}"
        )
    finally:
        helm("uninstall", release, "-n", rel_ns, kubeconfig=lc.kubeconfig, check=False)
        for name in (ns, rel_ns):
            lc.kubectl("delete", "namespace", name, "--wait=false", check=False)
        model_volume.delete(lc, ns)
