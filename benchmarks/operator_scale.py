"""Operator benchmark on the local control plane (numbers, not assertions).

Measures, with the real operator running as its ServiceAccount:
  * apply -> Ready=True for 1 service (several rounds) and for N services applied at once
    (p50 / p95 / max, seconds),
  * API writes and reads per service per no-op resync, from the API server's audit log,
  * the operator's resident memory with 0 and with N services.

Usage: .venv/bin/python benchmarks/operator_scale.py [--services 100] [--rounds 5]
It starts its own cluster in .state/bench-cluster on free ports (13 fake 8-GPU nodes, so 100
one-GPU services fit) and stops it at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from vllm_localenv.cluster import REPO_ROOT, GpuNode, LocalCluster, Ports
from vllm_localenv.operator_process import OperatorProcess, install

GROUP, VERSION, PLURAL = "serving.vllm-operator.dev", "v1alpha1", "vllmservices"


def manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VLLMService",
        "metadata": {"name": name},
        "spec": {"model": {"id": "Qwen/Qwen2.5-0.5B-Instruct"}},
    }


class ReadyWatcher:
    """Records, from a watch on VLLMServices, when each became Ready=True."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.ready_at: dict[str, float] = {}
        self._api = client.CustomObjectsApi(api)
        self._namespace = namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            for ev in w.stream(
                self._api.list_namespaced_custom_object,
                GROUP,
                VERSION,
                self._namespace,
                PLURAL,
                timeout_seconds=5,
            ):
                obj = ev["object"]
                conds = {
                    c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])
                }
                name = obj["metadata"]["name"]
                if conds.get("Ready") == "True" and name not in self.ready_at:
                    self.ready_at[name] = time.monotonic()
                if self._stop.is_set():
                    w.stop()

    def wait(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not all(n in self.ready_at for n in names):
            time.sleep(0.05)
        missing = [n for n in names if n not in self.ready_at]
        if missing:
            raise SystemExit(f"not Ready after {timeout}s: {missing[:5]} ({len(missing)} in all)")

    def stop(self) -> None:
        self._stop.set()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def audit_counts(
    cluster: LocalCluster, username: str, namespace: str, since: float
) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in cluster.audit_log.read_text().splitlines():
        e = json.loads(line)
        if e.get("user", {}).get("username") != username:
            continue
        if e.get("objectRef", {}).get("namespace") != namespace:
            continue
        t = dt.datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")).timestamp()
        if t >= since:
            counts[e["verb"]] = counts.get(e["verb"], 0) + 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--services", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--resync", type=float, default=10.0, help="drift timer interval (s)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()

    nodes = tuple(GpuNode(f"gpu-node-{i}") for i in range((args.services + 7) // 8 + 1))
    cluster = LocalCluster(
        state_dir=REPO_ROOT / ".state" / "bench-cluster", ports=Ports.free(), nodes=nodes
    )
    cluster.reset()
    results: dict[str, Any] = {"services": args.services, "nodes": len(nodes)}
    with cluster.session():
        install(cluster)
        api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        op = OperatorProcess(cluster, cluster.log_dir / "operator.log", resync_seconds=args.resync)
        op.start()
        time.sleep(2)
        results["operator_rss_mib_idle"] = round(rss_mib(op.pid or 0), 1)
        try:
            # --- 1 service, several rounds --------------------------------------------
            cluster.kubectl("create", "namespace", "bench-one")
            watcher = ReadyWatcher(api, "bench-one")
            singles = []
            for i in range(args.rounds):
                name = f"one-{i}"
                t0 = time.monotonic()
                cluster.kubectl(
                    "apply", "-n", "bench-one", "-f", "-", stdin=json.dumps(manifest(name))
                )
                watcher.wait([name], 120)
                singles.append(watcher.ready_at[name] - t0)
            watcher.stop()
            results["one_service_seconds"] = {
                "p50": round(statistics.median(singles), 2),
                "max": round(max(singles), 2),
                "samples": [round(s, 2) for s in singles],
            }

            # --- N services at once -----------------------------------------------------
            ns = "bench-many"
            cluster.kubectl("create", "namespace", ns)
            watcher = ReadyWatcher(api, ns)
            names = [f"svc-{i:03d}" for i in range(args.services)]
            doc = {"apiVersion": "v1", "kind": "List", "items": [manifest(n) for n in names]}
            t0 = time.monotonic()
            cluster.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(doc))
            applied = time.monotonic() - t0
            watcher.wait(names, 900)
            watcher.stop()
            many = [watcher.ready_at[n] - t0 for n in names]
            results["many_services_seconds"] = {
                "apply_call": round(applied, 2),
                "p50": round(pct(many, 50), 2),
                "p95": round(pct(many, 95), 2),
                "max": round(max(many), 2),
            }

            # --- no-op resync ---------------------------------------------------------------
            time.sleep(args.resync + 5)  # settle: the last status writes land
            results["operator_rss_mib_with_services"] = round(rss_mib(op.pid or 0), 1)
            periods = 3
            since = time.time()
            time.sleep(args.resync * periods)
            counts = audit_counts(cluster, op.username, ns, since)
            writes = sum(
                v for k, v in counts.items() if k in ("create", "update", "patch", "delete")
            )
            results["noop_resync"] = {
                "window_seconds": args.resync * periods,
                "writes": writes,
                "writes_per_service_per_resync": round(writes / (args.services * periods), 3),
                "deployment_reads_per_service_per_resync": round(
                    counts.get("get", 0) / (args.services * periods), 2
                ),
            }
            results["operator_rss_mib_after"] = round(rss_mib(op.pid or 0), 1)
        finally:
            op.stop()
    cluster.reset()
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
