"""No request dropped, on the real node (issue 21, item 3): streaming clients through a
two-replica CPU vLLM service's Service while the operator rolls it N times (a pod template
change each) and scales it in M times (2 -> 1 -> 2 replicas, as an autoscaler's scale-in
removes a pod); every request that does not end with the stream's [DONE] is a failure.

    .venv/bin/python benchmarks/no_drop.py [--rollouts 3] [--scale-ins 3] [--clients 2]
        [--replicas 2] [--cpu 500m] [--bake SECONDS] [--out benchmarks/results/no-drop/<date>.json]

With `--bake SECONDS` every rollout goes through the progressive flow (issue 21, item 2): a
canary of the new revision, its benchmark run (loose gates), a bake of SECONDS on the clients'
live traffic with the default limits (rollout.canary.bake: TTFT and inter-token p99 within
1.5 x the stable pods', minRequests 20), then the promotion. The revision is unchanged in
substance (an env var), so every abort is a false one: the result counts them
(`bakes`: each rollout's verdict and the bake's figures).

It starts the node tier's cluster (.state/node-cluster, the real node) and this checkout's
operator on the host, as the node tests do (hold the host: no node test at the same time),
and prints, per rollout and per scale-in, the requests sent, answered and failed.
What makes 0 possible: the pods' preStop drain (`drainSeconds`: the endpoints go before the
server stops; in-flight streams finish within the grace period) and the readiness probe on
/health (a new pod takes requests once it answers).
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the node tier's fixtures (tests/node/conftest.py), reused

from tests.node.conftest import namespace_with_model, node_cluster, sweep_leftovers  # noqa: E402
from tests.support import (  # noqa: E402
    CPU_BENCH,
    items,
    ready,
    sample,
    stream_completion,
    wait_for,
)

from vllm_localenv.cluster import PROMETHEUS_SCRAPE_INTERVAL, LocalCluster  # noqa: E402
from vllm_localenv.operator_process import OperatorProcess, install  # noqa: E402

NAME = "no-drop"
SERVER = f"serving.vllm-operator.dev/service={NAME},app.kubernetes.io/component=server"
CANARY = f"app.kubernetes.io/instance={NAME}-canary"


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


def _rollout_status(lc: LocalCluster, ns: str) -> dict[str, Any]:
    svc = json.loads(lc.kubectl("get", "vllmservice", NAME, "-n", ns, "-o", "json"))
    return dict(svc.get("status", {}).get("rollout") or {})


class BakeWatch:
    """Per rollout: the last status.rollout seen while Baking (the figures) and the end."""

    def __init__(self, lc: LocalCluster, ns: str) -> None:
        self.lc, self.ns = lc, ns
        self.last_baking: dict[str, Any] = {}
        self.baking_since: float | None = None

    def look(self) -> dict[str, Any]:
        r = _rollout_status(self.lc, self.ns)
        if r.get("phase") == "Baking":
            self.last_baking = r
            if self.baking_since is None:
                self.baking_since = time.monotonic()
        return r


BENCH = CPU_BENCH


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=3)
    parser.add_argument("--scale-ins", type=int, default=3)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--cpu", default="500m", help="each vLLM pod's CPU (2 pods + 1 spare)")
    parser.add_argument(
        "--bake",
        type=int,
        default=0,
        help="rollouts through a canary, its benchmark and a bake of this many seconds (0: "
        "plain rolling updates)",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or REPO / "benchmarks" / "results" / "no-drop" / f"{time.strftime('%F')}.json"
    args.partial = out.with_suffix(".partial.json")  # after each rollout (an interrupted run)

    # a stopped run (SIGTERM) stops its operator too (the finally below): an operator left
    # behind would go on reconciling the next run's service beside that run's own
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    lc = node_cluster()
    with lc.session():
        sweep_leftovers(lc)
        install(lc)
        op = OperatorProcess(
            lc,
            lc.state_dir / "no-drop-operator.log",
            resync_seconds=5,
            extra_env={
                "VLLM_OPERATOR_BENCHMARK_IMAGE": "localhost/vllm-bench:dev",
                "VLLM_OPERATOR_CPU_IMAGE": "localhost/vllm-cpu:0.32.0",
                "VLLM_OPERATOR_PROMETHEUS_URL": lc.prometheus_url,  # the bakes' figures
                "VLLM_OPERATOR_SCRAPE_INTERVAL": PROMETHEUS_SCRAPE_INTERVAL,
            },
        )
        op.start()
        try:
            with namespace_with_model(lc, "nodrop") as ns:
                result = _run(lc, ns, args)
        finally:
            op.stop()
    _write(out, result)
    print(json.dumps(result["total"]), json.dumps(result.get("falseAborts")), f"-> {out}")


def _write(out: Path, result: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


def _rollout_done(
    lc: LocalCluster, ns: str, watch: BakeWatch, replicas: int, revision_before: str
) -> dict[str, Any] | None:
    """A progressive rollout ended: promoted and rolled out, or aborted."""
    r = watch.look()
    if r.get("revision") in (None, revision_before):
        return None
    if r.get("phase") == "Aborted":
        return r
    if r.get("phase") == "Promoted" and _settled(lc, ns, replicas):
        return r
    return None


def _run(lc: LocalCluster, ns: str, args: argparse.Namespace) -> dict[str, Any]:
    body = sample("tiny-cpu")
    body["metadata"]["name"] = NAME
    spec = body["spec"]
    spec.update(replicas=args.replicas, benchmark={"enabled": False})
    spec["resources"]["cpu"] = args.cpu
    if args.bake:
        spec["benchmark"] = BENCH
        spec["rollout"] = {"canary": {"bake": {"seconds": args.bake}}}
    lc.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(body))
    wait_for("the service Ready", lambda: ready(lc, ns, NAME), timeout=1500, every=5)
    wait_for("every pod Ready", lambda: _settled(lc, ns, args.replicas), timeout=900, every=3)
    if args.bake:  # the first revision's own run (it promotes nothing)
        wait_for(
            "the first revision measured",
            lambda: (
                json.loads(lc.kubectl("get", "vllmservice", NAME, "-n", ns, "-o", "json"))
                .get("status", {})
                .get("benchmark", {})
                .get("state")
                in ("Complete", "Failed")
            ),
            timeout=900,
            every=5,
        )
    svc = json.loads(lc.kubectl("get", "service", NAME, "-n", ns, "-o", "json"))
    url = f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"
    phases: list[dict[str, Any]] = []
    bakes: list[dict[str, Any]] = []
    with Clients(url, args.clients) as clients:
        wait_for("the clients' first answers", lambda: clients.counts, timeout=120)
        for i in range(args.rollouts):
            clients.phase = phase = f"rollout-{i + 1}"
            t0 = time.monotonic()
            before = _rollout_status(lc, ns).get("revision") or ""
            _patch(lc, ns, {"env": [{"name": "NO_DROP_ROLLOUT", "value": str(i + 1)}]})
            time.sleep(3)  # the operator's write, the Deployment's new generation
            if args.bake:
                watch = BakeWatch(lc, ns)
                end = wait_for(
                    phase,
                    functools.partial(_rollout_done, lc, ns, watch, args.replicas, before),
                    timeout=2400,
                    every=3,
                )
                bakes.append(
                    {
                        "rollout": i + 1,
                        "phase": end.get("phase"),
                        "verdict": (end.get("bake") or {}).get("verdict"),
                        "message": end.get("message"),
                        "lastBakingLook": watch.last_baking.get("bake"),
                        "secondsToEnd": round(time.monotonic() - t0),
                    }
                )
                print(f"{phase}: {json.dumps(bakes[-1])}", flush=True)
                if end.get("phase") == "Aborted":  # (next: the same env again rolls anew)
                    wait_for(
                        "the aborted canary gone",
                        lambda: not items(lc, ns, "pods", CANARY),
                        timeout=300,
                    )
            else:
                wait_for(phase, lambda: _settled(lc, ns, args.replicas), timeout=1500, every=3)
            phases.append({"phase": phase, "seconds": round(time.monotonic() - t0)})
            print(f"{phase}: {phases[-1]['seconds']} s {clients.counts.get(phase)}", flush=True)
            _write(args.partial, {"phases": phases, "bakes": bakes, "byPhase": clients.counts})
        for j in range(args.scale_ins if args.replicas >= 2 else 0):
            clients.phase = phase = f"scale-in-{j + 1}"
            t0 = time.monotonic()
            _patch(lc, ns, {"replicas": args.replicas - 1})
            time.sleep(3)
            wait_for(phase, lambda: _settled(lc, ns, args.replicas - 1), timeout=600, every=2)
            phases.append({"phase": phase, "seconds": round(time.monotonic() - t0)})
            print(f"{phase}: {phases[-1]['seconds']} s {clients.counts.get(phase)}", flush=True)
            clients.phase = f"scale-out-{j + 1}"
            _patch(lc, ns, {"replicas": args.replicas})
            time.sleep(3)
            wait_for(
                f"scale-out-{j + 1}",
                lambda: _settled(lc, ns, args.replicas),
                timeout=1500,
                every=3,
            )
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
        "replicas": args.replicas,
        "cpuPerPod": args.cpu,
        "bakeSeconds": args.bake,
        "bakes": bakes,
        "falseAborts": (
            {
                "aborted": sum(b["phase"] == "Aborted" for b in bakes),
                "of": len(bakes),
                "verdicts": [b["verdict"] for b in bakes],
            }
            if args.bake
            else None
        ),
        "phases": phases,
        "byPhase": clients.counts,
        "total": total,
    }


if __name__ == "__main__":
    main()
