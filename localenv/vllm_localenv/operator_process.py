"""Install the operator's manifests into the local cluster and run the real operator as a
process authenticated as its own ServiceAccount (exactly the RBAC in deploy/rbac.yaml)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from vllm_localenv.cluster import REPO_ROOT, ClusterError, LocalCluster
from vllm_localenv.vllm_server import free_port

CRD_FILES = (REPO_ROOT / "crds" / "vllmservices.yaml",)
RBAC_FILE = REPO_ROOT / "deploy" / "rbac.yaml"
# what RBAC cannot say (docs/permissions.md), held to the operator's account like a user's
# install: deploy_operator applies it, so the demo and the real-node tier run under it
ADMISSION_POLICY_FILE = REPO_ROOT / "deploy" / "admission-policy.yaml"
OPERATOR_NAMESPACE = "vllm-operator-system"
OPERATOR_ACCOUNT = "vllm-operator"


def install(cluster: LocalCluster) -> None:
    """The CRD (server-side apply, idempotent), then RBAC."""
    for crd in CRD_FILES:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    cluster.wait_crds_established("vllmservices.serving.vllm-operator.dev")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(RBAC_FILE))


LOCAL_OVERLAY = REPO_ROOT / "deploy" / "local"


def deploy_operator(cluster: LocalCluster, timeout_seconds: int = 300) -> None:
    """The operator in-cluster from its image (deploy/local over deploy/operator.yaml: the
    images built here, never pulled), after the CRDs, RBAC and admission policies (as the
    README's install has it); waits for its rollout."""
    install(cluster)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ADMISSION_POLICY_FILE))
    manifest = cluster.kubectl(
        "kustomize", "--load-restrictor=LoadRestrictionsNone", str(LOCAL_OVERLAY)
    )
    cluster.kubectl("apply", "-f", "-", stdin=manifest)
    cluster.kubectl(
        "rollout",
        "status",
        "deployment/vllm-operator",
        "-n",
        OPERATOR_NAMESPACE,
        f"--timeout={timeout_seconds}s",
        timeout=timeout_seconds + 30,
    )


@dataclass
class OperatorProcess:
    """The operator (`python -m vllm_operator`) as a child process."""

    cluster: LocalCluster
    log_path: Path
    resync_seconds: float = 5.0
    extra_env: dict[str, str] = field(default_factory=dict)
    detached: bool = False  # own session, survives the caller (the demo); recorded for `down`
    liveness_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def _scrape_file(self) -> Path:
        """Where the local Prometheus learns this operator's metrics address (file_sd)."""
        return self.cluster.host_operator_targets / f"{self.metrics_port}.json"

    def start(self, timeout: float = 60.0) -> None:
        kubeconfig = self.cluster.service_account_kubeconfig(
            OPERATOR_NAMESPACE, OPERATOR_ACCOUNT, self.log_path.with_suffix(".kubeconfig")
        )
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            # what the downward API gives the pod: the namespace of its leader-election Lease
            "POD_NAMESPACE": OPERATOR_NAMESPACE,
            "VLLM_OPERATOR_RESYNC_SECONDS": str(self.resync_seconds),
            "VLLM_OPERATOR_LIVENESS_ENDPOINT": f"http://127.0.0.1:{self.liveness_port}/healthz",
            "VLLM_OPERATOR_WATCH_TIMEOUT_SECONDS": "60",
            "VLLM_OPERATOR_METRICS_PORT": str(self.metrics_port),
            **self.extra_env,
        }
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "vllm_operator"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=REPO_ROOT,
                start_new_session=self.detached,
            )
        if self.detached:
            self.cluster.adopt("vllm-operator", self._proc)
        if self.cluster.host_operator_targets.is_dir():
            self._scrape_file.write_text(
                json.dumps([{"targets": [f"127.0.0.1:{self.metrics_port}"]}])
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
                raise ClusterError(f"the operator exited at start-up:\n{tail}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(
                    f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2
                ) as r,
            ):
                if r.status == 200:
                    return
            time.sleep(0.3)
        raise ClusterError(f"the operator's liveness endpoint did not answer; log: {self.log_path}")

    def stop(self, sig: int = signal.SIGTERM, grace: float = 15.0) -> None:
        proc, self._proc = self._proc, None
        self._scrape_file.unlink(missing_ok=True)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
