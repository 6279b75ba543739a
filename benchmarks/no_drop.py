"""No request dropped, on the real node (issue 21, item 3): streaming clients through a
two-replica CPU vLLM service's Service while the operator rolls it N times (a pod template
change each) and scales it in M times (2 -> 1 -> 2 replicas, as an autoscaler's scale-in
removes a pod); every request that does not end with the stream's [DONE] is a failure.

    .venv/bin/python benchmarks/no_drop.py [--rollouts 3] [--scale-ins 3] [--clients 2]
        [--cpu 500m] [--out benchmarks/results/no-drop/<date>.json]

It starts the node tier's cluster (.state/node-cluster, the real node) and this checkout's
operator on the host, as the node tests do (hold the host: no node test at the same time),
and prints, per rollout and per scale-in, the requests sent, answered and failed.
What makes 0 possible: the pods' preStop drain (`drainSeconds`: the endpoints go before the
server stops; in-flight streams finish within the grace period) and the readiness probe on
/health (a new pod takes requests once it answers).
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the node tier's fixtures (tests/node/conftest.py), reused

from tests.node.conftest import namespace_with_model, node_cluster, sweep_leftovers  # noqa: E402
from tests.support import items, ready, sample, stream_completion, wait_for  # noqa: E402

from vllm_localenv.cluster import LocalCluster  # noqa: E402
from vllm_localenv.operator_process import OperatorProcess, install  # noqa: E402

NAME = "no-drop"
SERVER = f"serving.vllm-operator.dev/service={NAME},app.kubernetes.io/component=server"


class Clients:
    """`n` threads streaming completions through the Service, one request after another;
    counts per phase (the phase a request started in)."""

    def __init__(self, url: str, n: int) -> None:
        self.url, self.phase = url, "warm-up"
        self.counts: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def _count(self, phase: str, key: str, failure: str = "") -> None:
        with self.lock:
            c = self.counts.setdefault(phase, {"sent": 0, "ok": 0, "failed": 0, "failures": []})
            c[key] += 1
            if failure and len(c["failures"]) < 10:
                c["failures"].append(failure)

    def _run(self) -> None:
        while not self.stop.is_set():
            phase = self.phase
            self._count(phase, "sent")
            try:
                stream_completion(self.url)
            except (OSError, http.client.HTTPException) as exc:
                self._count(phase, "failed", f"{time.strftime('%H:%M:%S')} {exc}")
                time.sleep(0.2)
                continue
            self._count(phase, "ok")

    def __enter__(self) -> Clients:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=150)


def _patch(lc: LocalCluster, ns: str, spec: dict[str, Any]) -> None:
    lc.kubectl(
        "patch", "vllmservice", NAME, "-n", ns, "--type=merge", "-p", json.dumps({"spec": spec})
    )


def _settled(lc: LocalCluster, ns: str, replicas: int) -> bool:
    """The Deployment rolled out at `replicas`, every pod of it Ready, no other pod left."""
    dep = json.loads(lc.kubectl("get", "deployment", NAME, "-n", ns, "-o", "json"))
    st, spec = dep.get("status", {}), dep["spec"]
    done = (
        st.get("observedGeneration") == dep["metadata"]["generation"]
        and spec["replicas"] == replicas
        and st.get("updatedReplicas") == st.get("readyReplicas") == st.get("replicas") == replicas
    )
    return done and len(items(lc, ns, "pods", SERVER)) == replicas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--scale-ins", type=int, default=3)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--cpu", default="500m", help="each vLLM pod's CPU (2 pods + 1 spare)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or REPO / "benchmarks" / "results" / "no-drop" / f"{time.strftime('%F')}.json"

    lc = node_cluster()
    with lc.session():
        sweep_leftovers(lc)
        install(lc)
        op = OperatorProcess(
            lc,
            lc.state_dir / "no-drop-operator.log",
            resync_seconds=5,
            extra_env={"VLLM_OPERATOR_CPU_IMAGE": "localhost/vllm-cpu:0.32.0"},
        )
        op.start()
        try:
            with namespace_with_model(lc, "nodrop") as ns:
                result = _run(lc, ns, args)
        finally:
            op.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["total"]), f"-> {out}")


def _run(lc: LocalCluster, ns: str, args: argparse.Namespace) -> dict[str, Any]:
    body = sample("tiny-cpu")
    body["metadata"]["name"] = NAME
    spec = body["spec"]
    spec.update(replicas=2, benchmark={"enabled": False})
    spec["resources"]["cpu"] = args.cpu
    lc.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(body))
    wait_for("the service Ready", lambda: ready(lc, ns, NAME), timeout=1500, every=5)
    wait_for("both pods Ready", lambda: _settled(lc, ns, 2), timeout=900, every=3)
    svc = json.loads(lc.kubectl("get", "service", NAME, "-n", ns, "-o", "json"))
    url = f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"
    phases: list[dict[str, Any]] = []
    with Clients(url, args.clients) as clients:
        wait_for("the clients' first answers", lambda: clients.counts, timeout=120)
        for i in range(args.rollouts):
            clients.phase = phase = f"rollout-{i + 1}"
            t0 = time.monotonic()
            _patch(lc, ns, {"env": [{"name": "NO_DROP_ROLLOUT", "value": str(i + 1)}]})
            time.sleep(3)  # the operator's write, the Deployment's new generation
            wait_for(phase, lambda: _settled(lc, ns, 2), timeout=1500, every=3)
            phases.append({"phase": phase, "seconds": round(time.monotonic() - t0)})
            print(f"{phase}: {phases[-1]['seconds']} s {clients.counts.get(phase)}", flush=True)
        for j in range(args.scale_ins):
            clients.phase = phase = f"scale-in-{j + 1}"
            t0 = time.monotonic()
            _patch(lc, ns, {"replicas": 1})
            time.sleep(3)
            wait_for(phase, lambda: _settled(lc, ns, 1), timeout=600, every=2)
            phases.append({"phase": phase, "seconds": round(time.monotonic() - t0)})
            print(f"{phase}: {phases[-1]['seconds']} s {clients.counts.get(phase)}", flush=True)
            clients.phase = f"scale-out-{j + 1}"
            _patch(lc, ns, {"replicas": 2})
            time.sleep(3)
            wait_for(f"scale-out-{j + 1}", lambda: _settled(lc, ns, 2), timeout=1500, every=3)
        clients.phase = "after"
        time.sleep(5)
    for p in phases:
        p.update(clients.counts.get(p["phase"], {}))
    total = {k: sum(c[k] for c in clients.counts.values()) for k in ("sent", "ok", "failed")}
    return {
        "when": time.strftime("%FT%TZ", time.gmtime()),
        "rollouts": args.rollouts,
        "scaleIns": args.scale_ins,
        "clients": args.clients,
        "cpuPerPod": args.cpu,
        "phases": phases,
        "byPhase": clients.counts,
        "total": total,
    }


if __name__ == "__main__":
    main()
