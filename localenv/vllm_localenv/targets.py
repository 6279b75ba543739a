"""The local Prometheus's pod discovery: `python -m vllm_localenv.targets STATE_DIR`.

Debian's Prometheus 2.42 is built without Kubernetes discovery, so this small process stands
in for it: every second it lists the cluster's pods (as the admin of the local cluster) and
rewrites two file_sd files that Prometheus re-reads by itself:

    <state>/prometheus/pods.json       the operator's vLLM server pods (monitoring.pod_targets:
                                       the selection and labels shipped to users)
    <state>/prometheus/operator.json   the in-cluster operator's pods (container port `metrics`)

Files are replaced atomically and only when their content changes. The cluster starts it
(`LocalCluster.up`) and records it like its other processes, so `down` stops it.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from vllm_localenv.monitoring import operator_targets, pod_targets

# the server pods and the canaries' (a bake compares them: observe/live.py)
VLLM_SELECTOR = (
    "app.kubernetes.io/managed-by=vllm-operator,app.kubernetes.io/component in (server,canary)"
)
OPERATOR_SELECTOR = "app.kubernetes.io/name=vllm-operator"


class Lister:
    """GETs pod lists from the API server with the kubeconfig's (JSON) client certificate."""

    def __init__(self, kubeconfig: Path) -> None:
        cfg = json.loads(kubeconfig.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        self.server = cluster["server"]
        self.ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self.ctx.load_cert_chain(user["client-certificate"], user["client-key"])

    def pods(self, selector: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"labelSelector": selector})
        with urllib.request.urlopen(  # noqa: S310 (https to the local cluster's apiserver)
            f"{self.server}/api/v1/pods?{query}", context=self.ctx, timeout=10
        ) as r:
            return list(json.load(r).get("items") or [])


def write_if_changed(path: Path, groups: list[dict[str, Any]]) -> bool:
    text = json.dumps(groups, indent=1, sort_keys=True)
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)  # atomic: Prometheus never reads half a file
    return True


def refresh(lister: Lister, out_dir: Path) -> None:
    write_if_changed(out_dir / "pods.json", pod_targets(lister.pods(VLLM_SELECTOR)))
    write_if_changed(out_dir / "operator.json", operator_targets(lister.pods(OPERATOR_SELECTOR)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vllm_localenv.targets", description=__doc__)
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    out_dir = args.state_dir / "prometheus"
    out_dir.mkdir(parents=True, exist_ok=True)
    lister = Lister(args.state_dir / "kubeconfig")
    while True:
        try:
            refresh(lister, out_dir)
        except (OSError, urllib.error.URLError, ValueError) as exc:  # apiserver restarting
            sys.stderr.write(f"pod list failed: {exc}\n")
            sys.stderr.flush()
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
