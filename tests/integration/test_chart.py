"""The Helm chart against the local control plane: every rendering passes the API server's
strict validation, and install -> upgrade (a changed CRD) -> uninstall behaves as README says.

kwok plays the pods, so the operator pod the chart deploys is simulated. The operator under
test runs here instead, as the chart's ServiceAccount (a TokenRequest token) with exactly the
environment the chart renders into its container: the chart's RBAC and settings are the ones
in force. Run it in its own cluster (VLLM_TEST_STATE_DIR=.state/test-cluster-helm): the CRDs
are adopted into the release, as a user moving from `kubectl apply` to Helm would.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart_support import CHART, find, helm, set_args, template
from tests.support import SAMPLES, condition, get, items, ready, wait_for, wait_reconciled
from vllm_localenv.cluster import REPO_ROOT, ClusterError, LocalCluster
from vllm_localenv.vllm_server import free_port

pytestmark = [pytest.mark.cluster, pytest.mark.helm]
CRD = "vllmservices.serving.vllm-operator.dev"
KWOK = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
PROM_CRDS = REPO_ROOT / "tests" / "data" / "prometheus-operator-crds"
# vendored like those, from the same module and version (example/prometheus-operator-crd/)
SERVICE_MONITOR_CRD = (
    REPO_ROOT / "tests" / "data" / "chart" / "monitoring.coreos.com_servicemonitors.yaml"
)


def kubectl_apply_dry_run(cluster: LocalCluster, manifest: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(cluster.bin_dir / "kubectl"),
            f"--kubeconfig={cluster.kubeconfig}",
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=chart-test",
            "--dry-run=server",
            "--validate=strict",
            "-f",
            "-",
        ],
        input=manifest,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture(scope="module")
def prom_crds(cluster: LocalCluster) -> Iterator[None]:
    """The Prometheus Operator's CRDs (v0.85.0) the monitoring options need, removed after:
    the other tests expect a cluster without the Prometheus Operator."""
    files = [*sorted(PROM_CRDS.glob("*.yaml")), SERVICE_MONITOR_CRD]
    for f in files:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
    cluster.wait_crds_established(
        "servicemonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"
    )
    yield
    for f in files:
        cluster.kubectl("delete", "-f", str(f), "--ignore-not-found", "--wait=true")


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"rbac": {"watchNamespaces": ["team-a"]}},
        {
            "monitoring": {
                "rules": {"enabled": True, "kind": "PrometheusRule"},
                "dashboard": {"enabled": True},
                "adapterConfig": {"enabled": True},
            },
            "settings": {"monitoringLabels": {"release": "prometheus"}},
            "image": {"repository": "localhost/vllm-operator", "tag": "dev", "pullPolicy": "Never"},
            "podAntiAffinity": "hard",
            "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        },
        {
            "monitoring": {"rules": {"enabled": True}},
            "metrics": {"enabled": False},
            "replicaCount": 1,
            "crds": {"install": False},
        },
    ],
    ids=["defaults", "namespaced", "everything-on", "minimal"],
)
def test_every_rendering_passes_strict_server_side_validation(
    cluster: LocalCluster, prom_crds: None, values: dict[str, Any]
) -> None:
    """`helm template | kubectl apply --dry-run=server`: Helm itself lets unknown fields pass."""
    for ns in ("vllm-operator-system", "team-a"):
        cluster.kubectl("create", "namespace", ns, check=False)
    out = helm(
        "template",
        "vllm-operator",
        str(CHART),
        "--include-crds",
        "-n",
        "vllm-operator-system",
        *set_args(values),
    ).stdout
    res = kubectl_apply_dry_run(cluster, out)
    assert res.returncode == 0, res.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(out) if d]
    assert res.stdout.count("serverside-applied (server dry run)") == len(kinds), res.stdout


def test_the_dry_run_catches_what_helm_misses(cluster: LocalCluster) -> None:
    """An unknown field in a rendered object (here through extraEnv, which the schema leaves
    free-form like the Pod API) passes helm, and the API server rejects it."""
    cluster.kubectl("create", "namespace", "vllm-operator-system", check=False)
    out = helm(
        "template",
        "x",
        str(CHART),
        "-n",
        "vllm-operator-system",
        *set_args({"extraEnv": [{"name": "A", "value": "1", "valeu": "typo"}]}),
    ).stdout
    res = kubectl_apply_dry_run(cluster, out)
    assert res.returncode != 0
    assert "valeu" in res.stderr


# ---------------------------------------------------------------- install / upgrade / uninstall


def previous_chart(tmp: Path) -> tuple[Path, dict[str, Any]]:
    """The chart as the previous CRD change left it: today's templates with the CRD from before
    the last commit that changed it, and an older chart version."""
    last = subprocess.run(
        ["git", "log", "-n", "1", "--format=%H", "--", "crds/vllmservices.yaml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    old = subprocess.run(
        ["git", "show", f"{last}^:crds/vllmservices.yaml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    chart = tmp / "vllm-operator"
    shutil.copytree(CHART, chart)
    (chart / "files" / "crds" / "vllmservices.yaml").write_text(old)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["version"] = "0.0.1-previous"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    return chart, dict(yaml.safe_load(old))


def adopt_crds(cluster: LocalCluster, release: str, namespace: str) -> list[str]:
    """Helm's documented adoption of objects created outside it (kubectl apply of crds/);
    returns the flags the first install then needs (README: migrating)."""
    adopted = False
    names = [CRD, "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"]
    for name in names:
        if not cluster.kubectl("get", "crd", name, "--ignore-not-found", "-o", "name").strip():
            continue
        adopted = True
        cluster.kubectl("label", "--overwrite", "crd", name, "app.kubernetes.io/managed-by=Helm")
        cluster.kubectl(
            "annotate",
            "--overwrite",
            "crd",
            name,
            f"meta.helm.sh/release-name={release}",
            f"meta.helm.sh/release-namespace={namespace}",
        )
    # fields that `kubectl apply --server-side` owns are taken over by Helm's server-side apply
    return ["--force-conflicts"] if adopted else []


class ChartOperator:
    """The operator process with the rendered container's env and the release's identity."""

    def __init__(self, cluster: LocalCluster, deployment: dict[str, Any], log: Path) -> None:
        self.cluster, self.log = cluster, log
        pod = deployment["spec"]["template"]["spec"]
        self.namespace = deployment["metadata"]["namespace"]
        self.account = pod["serviceAccountName"]
        self.username = f"system:serviceaccount:{self.namespace}:{self.account}"
        # values, and the downward API's namespace as the pod would see it
        self.env = {e["name"]: e.get("value", self.namespace) for e in pod["containers"][0]["env"]}
        assert all(
            "value" in e or e["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
            for e in pod["containers"][0]["env"]
        )
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        kubeconfig = self.cluster.service_account_kubeconfig(
            self.namespace, self.account, self.log.with_suffix(".kubeconfig")
        )
        env = {
            **os.environ,
            **self.env,
            "KUBECONFIG": str(kubeconfig),
            # host ports instead of the container's; a short drift timer and watch for tests
            "VLLM_OPERATOR_LIVENESS_ENDPOINT": f"http://127.0.0.1:{self.port}/healthz",
            "VLLM_OPERATOR_METRICS_PORT": str(free_port()),
            "VLLM_OPERATOR_RESYNC_SECONDS": "3",
            "VLLM_OPERATOR_WATCH_TIMEOUT_SECONDS": "60",
        }
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "vllm_operator"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=REPO_ROOT,
            )
        deadline = time.monotonic() + 180  # (an import-heavy start on a loaded machine)
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ClusterError(f"operator exited: {self.log.read_text()[-3000:]}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.3)
        raise ClusterError(f"operator not live; log {self.log}")

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        self._proc = None


@contextlib.contextmanager
def watching_ready(cluster: LocalCluster, namespace: str, name: str) -> Iterator[list[str]]:
    """Records every moment the service was not Ready while the block runs."""
    gaps: list[str] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            svc = get(cluster, namespace, "vllmservice", name)
            c = condition(svc, "Ready")
            if c.get("status") != "True":
                gaps.append(f"{time.strftime('%X')} Ready={c}")
            stop.wait(0.5)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    try:
        yield gaps
    finally:
        stop.set()
        t.join(10)


def vllm_pods(cluster: LocalCluster, namespace: str) -> dict[str, int]:
    return {
        p["metadata"]["uid"]: sum(
            c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])
        )
        for p in items(cluster, namespace, "pods", "app.kubernetes.io/name=vllm")
    }


RELEASE = "vllm-helm"


def uninstall_release(cluster: LocalCluster) -> None:
    """Any install of RELEASE a failed run left behind (the cluster's etcd outlives a run)."""
    listed = helm(
        "list", "-A", "-o", "json", "--filter", f"^{RELEASE}$", kubeconfig=cluster.kubeconfig
    ).stdout
    for r in json.loads(listed or "[]"):
        helm("uninstall", RELEASE, "-n", r["namespace"], "--wait", kubeconfig=cluster.kubeconfig)


@pytest.fixture
def no_leftover_release(cluster: LocalCluster) -> Iterator[None]:
    uninstall_release(cluster)
    yield
    uninstall_release(cluster)


@pytest.mark.usefixtures("no_leftover_release", "no_other_operator")
def test_install_upgrade_with_a_changed_crd_and_uninstall(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> None:
    release, rel_ns = RELEASE, f"{namespace}-op"
    values = {
        # namespaced mode: Roles in the service namespace only, nothing cluster-scoped
        "rbac": {"watchNamespaces": [namespace]},
        # its own field manager: the objects show that this operator, configured by the
        # chart, wrote them (and not another operator running in the same cluster)
        "settings": {"fieldManager": "vllm-helm"},
        "image": {"repository": "localhost/vllm-operator", "tag": "dev", "pullPolicy": "Never"},
        "tolerations": KWOK,  # so kwok "runs" the chart's own operator pods
    }
    kubeconfig = cluster.kubeconfig
    old_chart, old_crd = previous_chart(tmp_path)
    adopt_flags = adopt_crds(cluster, release, rel_ns)

    # install the previous chart
    t0 = time.monotonic()
    helm(
        "install",
        release,
        str(old_chart),
        "-n",
        rel_ns,
        "--create-namespace",
        *adopt_flags,
        "--wait",
        "--timeout=180s",
        *set_args(values),
        kubeconfig=kubeconfig,
    )
    install_s = time.monotonic() - t0
    live_crd = json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json"))
    assert live_crd["spec"]["versions"] == old_crd["spec"]["versions"]
    dep = find(template(values, release=release, namespace=rel_ns, chart=old_chart), "Deployment")
    rollout = json.loads(
        cluster.kubectl("get", "deployment", dep["metadata"]["name"], "-n", rel_ns, "-o", "json")
    )
    assert rollout["status"].get("readyReplicas") == 2

    op = ChartOperator(cluster, dep, tmp_path / "operator.log")
    op.start()
    try:
        cluster.kubectl("apply", "-n", namespace, "-f", str(SAMPLES / "minimal.yaml"))
        t1 = time.monotonic()
        wait_for("minimal Ready", lambda: ready(cluster, namespace, "minimal"))
        ready_s = time.monotonic() - t1
        pods_before = vllm_pods(cluster, namespace)
        vdep_before = get(cluster, namespace, "deployment", "minimal")
        assert vdep_before is not None
        shown = cluster.kubectl(
            "get", "deployment", "minimal", "-n", namespace, "--show-managed-fields", "-o", "json"
        )
        managers = {f["manager"] for f in json.loads(shown)["metadata"]["managedFields"]}
        assert "vllm-helm" in managers, managers
        assert pods_before
        assert vdep_before

        # upgrade to the current chart: the CRD changes; the operator pods roll (simulated
        # here: the operator process restarts, as a new operator pod would start)
        with watching_ready(cluster, namespace, "minimal") as gaps:
            t2 = time.monotonic()
            helm(
                "upgrade",
                release,
                str(CHART),
                "-n",
                rel_ns,
                "--wait",
                "--timeout=180s",
                *set_args(values),
                kubeconfig=kubeconfig,
            )
            upgrade_s = time.monotonic() - t2
            op.stop()
            restarted = time.time()
            op.start()
            # a few drift-timer reconciles by the new operator (3 s), seen in the audit log
            wait_reconciled(cluster, op.username, namespace, ["minimal"], 3, restarted)
        assert not gaps, gaps
        live_crd = json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json"))
        current = yaml.safe_load((REPO_ROOT / "crds" / "vllmservices.yaml").read_text())
        assert live_crd["spec"]["versions"] == current["spec"]["versions"]
        assert live_crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert ready(cluster, namespace, "minimal")
        vdep_after = get(cluster, namespace, "deployment", "minimal")
        assert vdep_after is not None
        # no vLLM restart the user did not ask for: same pods, no new rollout of their template
        assert vllm_pods(cluster, namespace) == pods_before
        assert vdep_after["metadata"]["generation"] == vdep_before["metadata"]["generation"]
        revisions = helm(
            "history", release, "-n", rel_ns, "-o", "json", kubeconfig=kubeconfig
        ).stdout
        assert [r["chart"] for r in json.loads(revisions)] == [
            "vllm-operator-0.0.1-previous",
            f"vllm-operator-{yaml.safe_load((CHART / 'Chart.yaml').read_text())['version']}",
        ]
    finally:
        op.stop()

    # uninstall: the operator and its RBAC go; the CRD and the users' services stay
    helm("uninstall", release, "-n", rel_ns, "--wait", kubeconfig=kubeconfig)
    assert cluster.kubectl("get", "crd", CRD, "-o", "name").strip()
    assert get(cluster, namespace, "vllmservice", "minimal") is not None
    assert get(cluster, namespace, "deployment", "minimal") is not None
    assert not cluster.kubectl(
        "get", "role", "-n", namespace, "-l", f"app.kubernetes.io/instance={release}", "-o", "name"
    ).strip()
    cluster.kubectl("delete", "namespace", rel_ns, "--wait=false")
    print(
        f"\nhelm install --wait {install_s:.1f}s, "
        f"sample Ready {ready_s:.1f}s after apply, helm upgrade --wait {upgrade_s:.1f}s"
    )
