"""Play the benchmark Job's container where kwok only simulates its pod.

kwok runs nothing inside pods. To get real numbers, the Job's command and arguments are read
from the API server and run here, under the Job's own ServiceAccount (a TokenRequest token:
the identity the pod would have), with one substitution: the Service's cluster DNS name, which
does not resolve outside a cluster, becomes a local vLLM server's URL. The exit code is then
relayed to kwok (a label), which finishes the pod as a kubelet would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from vllm_localenv.cluster import EXIT_LABEL, ClusterError, LocalCluster


def current_job(cluster: LocalCluster, namespace: str, service: str) -> dict[str, Any]:
    """The benchmark Job of the revision the service's status names."""
    svc = json.loads(cluster.kubectl("get", "vllmservice", service, "-n", namespace, "-o", "json"))
    rev = (svc.get("status") or {}).get("revision")
    if not rev:
        raise ClusterError(f"{namespace}/{service} has no revision in its status yet")
    name = f"{service}-bench-{rev[:8]}"
    out = cluster.kubectl("get", "job", name, "-n", namespace, "-o", "json", "--ignore-not-found")
    if not out.strip():
        raise ClusterError(f"no benchmark Job {name} (the rollout may not be complete)")
    return dict(json.loads(out))


def play(
    cluster: LocalCluster,
    namespace: str,
    job: dict[str, Any],
    url: str,
    workdir: Path,
    *,
    python: str = sys.executable,
) -> int:
    """Runs the Job's container command as its pod would; returns the exit code."""
    workdir.mkdir(parents=True, exist_ok=True)
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    if container["command"][:3] != ["python", "-m", "vllm_benchjob"]:
        raise ClusterError(f"unexpected benchmark command {container['command']}")
    args = list(container["args"])
    args[args.index("--url") + 1] = url
    args[args.index("--out") + 1] = str(workdir / "results")  # the pod's emptyDir
    kubeconfig = cluster.service_account_kubeconfig(
        namespace, pod["serviceAccountName"], workdir / "job.kubeconfig"
    )
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "POD_NAMESPACE": namespace,
        "MPLCONFIGDIR": str(workdir),
    }
    code = subprocess.run(
        [python, "-m", "vllm_benchjob", *args], env=env, timeout=3600, check=False
    ).returncode
    pods = json.loads(
        cluster.kubectl(
            "get",
            "pods",
            "-n",
            namespace,
            "-l",
            f"job-name={job['metadata']['name']}",
            "-o",
            "json",
        )
    )
    for p in pods["items"]:
        cluster.kubectl(
            "label",
            "pod",
            p["metadata"]["name"],
            "-n",
            namespace,
            f"{EXIT_LABEL}={code}",
            "--overwrite",
        )
    return code
