"""The demo's second half (make demo, scripts/demo.sh): the product's promise on the real node.

With the first revision serving (and benchmarked), a client streams completions through the
Service the whole time, and the service gets benchmark gates (onFailure: Rollback):

1. a revision that cannot pass its gate (maxNumSeqs 2 and a TTFT p95 gate of 0.1 ms): it
   starts as one canary pod outside the Service, is measured there twice (a failure is
   confirmed) and is stopped: Aborted; the stable pod never stopped serving;
2. a good revision (maxNumSeqs 8, a gate it meets): measured on its canary, then baked on live
   traffic (rollout.canary.bake: the canary joins the Service's endpoints beside the stable
   pod, its live TTFT, inter-token latency and 5xx share read from the local Prometheus
   against the stable pod's for a minute) and promoted, the serving pod replaced by a surge
   pod with the preStop drain.

For the bake the in-cluster operator reads the local cluster's Prometheus, which listens on
the host's loopback: the demo runs the operator's pod on the host's network
(reads_prometheus), a demo-only patch of deploy/local.

It prints each phase as the operator reports it (status.rollout), the verdicts with their
figures, the client's count of failed requests, and ends with one table: revision, phase,
tok/s, TTFT p95, verdict, requests its pods answered (vLLM's own counter, read at each pod).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from vllm_localenv.cluster import PROMETHEUS_SCRAPE_INTERVAL, LocalCluster
from vllm_localenv.operator_process import OPERATOR_NAMESPACE

REVISION_ANNOTATION = "serving.vllm-operator.dev/revision"
SERVICE_LABEL = "serving.vllm-operator.dev/service"
GATED = {
    "enabled": True,
    "onFailure": "Rollback",
    "scenarios": ["batching", "streaming"],  # (tok/s, TTFT p95: the table's columns)
    "timeoutSeconds": 900,
    "args": ["--streaming-requests", "8", "--output-tokens", "16", "--warmup-requests", "1"],
}
BAD = {
    "engine": {"maxNumSeqs": 2},
    "benchmark": {**GATED, "thresholds": {"maxTtftP95Seconds": 0.0001}},
}
# a minute on live traffic; limits far from what two equal CPU pods measure (an abort on live
# figures is the node tier's: tests/node/test_canary_node.py)
BAKE = {
    "seconds": 60,
    "minRequests": 5,
    "maxTtftP99Ratio": 20,
    "maxInterTokenP99Ratio": 20,
    "maxErrorRateIncrease": 0.5,
}
GOOD = {
    "engine": {"maxNumSeqs": 8},
    "benchmark": {**GATED, "thresholds": {"maxTtftP95Seconds": 30}},
    "rollout": {"canary": {"bake": BAKE}},
}


@dataclass
class Client:
    """Streaming completions through the Service, one after another; a request that does not
    end with the stream's [DONE] is a failure."""

    url: str
    model: str
    sent: int = 0
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def _one(self) -> None:
        body = {"model": self.model, "prompt": "Hello there", "max_tokens": 16, "stream": True}
        req = urllib.request.Request(
            f"{self.url}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            lines = r.read().decode().splitlines()
        if "data: [DONE]" not in lines:
            raise OSError(f"the stream ended without [DONE]: {lines[-2:]}")

    def run(self) -> None:
        while not self.stop.is_set():
            self.sent += 1
            try:
                self._one()
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {exc}")
                time.sleep(0.2)
                continue
            self.ok += 1


@dataclass
class Counter:
    """Every 2 s: the requests each of the service's pods answered (vllm:request_success_total
    at the pod's IP; the largest value seen), by the pod's revision."""

    cluster: LocalCluster
    namespace: str
    service: str
    answered: dict[str, tuple[str, float]] = field(default_factory=dict)  # pod -> (rev, n)
    stop: threading.Event = field(default_factory=threading.Event)

    def _revisions(self) -> dict[str, str]:
        """ReplicaSet -> the revision its Deployment ran (the Deployment controller copies the
        operator's revision annotation onto each ReplicaSet)."""
        sets = json.loads(self.cluster.kubectl("get", "rs", "-n", self.namespace, "-o", "json"))
        return {
            r["metadata"]["name"]: (r["metadata"].get("annotations") or {}).get(
                REVISION_ANNOTATION, ""
            )
            for r in sets["items"]
        }

    def look(self) -> None:
        revisions = self._revisions()
        pods = json.loads(
            self.cluster.kubectl(
                "get",
                "pods",
                "-n",
                self.namespace,
                "-l",
                f"{SERVICE_LABEL}={self.service}",
                "-o",
                "json",
            )
        )["items"]
        for pod in pods:
            ip = (pod.get("status") or {}).get("podIP")
            owner: dict[str, Any] = next(iter(pod["metadata"].get("ownerReferences") or []), {})
            rev = revisions.get(owner.get("name", ""), "")
            component = pod["metadata"].get("labels", {}).get("app.kubernetes.io/component")
            if not ip or component not in ("server", "canary"):
                continue
            try:
                with urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=10) as r:
                    text = r.read().decode()
            except OSError:
                continue
            n = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("vllm:request_success_total{")
            )
            name = pod["metadata"]["name"]
            self.answered[name] = (rev, max(n, self.answered.get(name, (rev, 0.0))[1]))

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):  # (a pod starting or gone: the next look)
                self.look()
            self.stop.wait(2.0)

    def by_revision(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for rev, n in self.answered.values():
            out[rev] = out.get(rev, 0.0) + n
        return out


@contextlib.contextmanager
def _running(*workers: Client | Counter) -> Iterator[None]:
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        for w in workers:
            w.stop.set()
        for t in threads:
            t.join(timeout=150)


def _status(cluster: LocalCluster, ns: str, name: str) -> dict[str, Any]:
    body = json.loads(cluster.kubectl("get", "vllmservice", name, "-n", ns, "-o", "json"))
    return dict(body.get("status") or {})


def _follow(
    cluster: LocalCluster, ns: str, name: str, client: Client, *, until: str, timeout: float
) -> dict[str, Any]:
    """Prints each new step of status.rollout (phase, revision, message) with the client's
    failures so far, until the phase is `until` (each step of the demo starts from another
    phase)."""
    seen: tuple[str, str, str] | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = _status(cluster, ns, name)
        r = st.get("rollout") or {}
        # a new phase, or a new step within one (the run, its confirmation, the roll)
        now = (r.get("phase", ""), r.get("revision", ""), r.get("message", "")[:60])
        if now != seen and now[0]:
            seen = now
            print(
                f"  {time.strftime('%H:%M:%S')} {now[0]:9s} revision {now[1]}: "
                f"{r.get('message', '')[:300]}\n"
                f"           client: {client.ok} streams answered, {len(client.failures)} failed",
                flush=True,
            )
        if now[0] == until:
            return st
        time.sleep(2)
    raise SystemExit(f"demo: the rollout did not reach {until} in {timeout:.0f} s: {seen}")


def _runs(cluster: LocalCluster, ns: str, name: str) -> dict[str, dict[str, Any]]:
    """Each revision's latest benchmark result: its verdict and headline."""
    cms = json.loads(
        cluster.kubectl(
            "get",
            "configmaps",
            "-n",
            ns,
            "-l",
            f"{SERVICE_LABEL}={name},app.kubernetes.io/component=benchmark",
            "-o",
            "json",
        )
    )["items"]
    out: dict[str, dict[str, Any]] = {}
    for cm in sorted(cms, key=lambda c: c["metadata"]["creationTimestamp"]):
        rev = cm["metadata"].get("labels", {}).get(REVISION_ANNOTATION, "")
        data = cm.get("data") or {}
        try:
            headline = json.loads(data.get("result.json") or "{}").get("headline") or {}
        except json.JSONDecodeError:
            headline = {}
        if rev and (headline or rev not in out):
            out[rev] = {"state": data.get("state", ""), "headline": headline}
    return out


def reads_prometheus(cluster: LocalCluster) -> None:
    """The in-cluster operator reads the local Prometheus (a bake's figures): its pod on the
    host's network, where Prometheus listens on the loopback; waits for its rollout."""
    env = [
        {"name": "VLLM_OPERATOR_PROMETHEUS_URL", "value": cluster.prometheus_url},
        {"name": "VLLM_OPERATOR_SCRAPE_INTERVAL", "value": PROMETHEUS_SCRAPE_INTERVAL},
    ]
    dep = json.loads(
        cluster.kubectl(
            "get", "deployment", "vllm-operator", "-n", OPERATOR_NAMESPACE, "-o", "json"
        )
    )
    container = dep["spec"]["template"]["spec"]["containers"][0]
    have = {e["name"]: e.get("value") for e in container.get("env") or []}
    pod = dep["spec"]["template"]["spec"]
    if pod.get("hostNetwork") and all(have.get(e["name"]) == e["value"] for e in env):
        return
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "containers": [{"name": container["name"], "env": env}],
                }
            }
        }
    }
    cluster.kubectl(
        "patch",
        "deployment",
        "vllm-operator",
        "-n",
        OPERATOR_NAMESPACE,
        "--type=strategic",
        "-p",
        json.dumps(patch),
    )
    cluster.kubectl(
        "rollout",
        "status",
        "deployment/vllm-operator",
        "-n",
        OPERATOR_NAMESPACE,
        "--timeout=300s",
        timeout=330,
    )
    print(f"the operator reads the local Prometheus ({cluster.prometheus_url}) for the bake\n")


def canary(cluster: LocalCluster, ns: str, name: str) -> int:
    """The demo's canary half (module docstring); returns the client's failed requests."""
    reads_prometheus(cluster)
    svc = json.loads(cluster.kubectl("get", "service", name, "-n", ns, "-o", "json"))
    url = f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"
    spec = json.loads(cluster.kubectl("get", "vllmservice", name, "-n", ns, "-o", "json"))["spec"]
    first = _status(cluster, ns, name).get("revision", "")
    client = Client(url, spec["model"].get("servedModelName") or "tiny")
    counter = Counter(cluster, ns, name)
    # revision -> (phase, verdict of its gates)
    phases: dict[str, tuple[str, str]] = {first: ("Served", "no gates")}
    with _running(client, counter):
        while client.ok < 3 and not client.failures:
            time.sleep(0.5)
        print(f"a client streams completions through Service {name} ({url}) from now on\n")
        steps = (
            (
                (
                    "1. a revision that cannot pass its gate (maxNumSeqs 2, TTFT p95 <= 0.1 ms): "
                    "measured on a canary outside the Service"
                ),
                BAD,
                "Aborted",
                "failed",
            ),
            (
                (
                    "2. a good revision (maxNumSeqs 8, a gate it meets): measured on its canary, "
                    "baked a minute on live traffic beside the stable pod, then promoted"
                ),
                GOOD,
                "Promoted",
                "passed",
            ),
        )
        for title, spec_change, until, verdict in steps:
            print(title)
            _patch(cluster, ns, name, spec_change)
            st = _follow(cluster, ns, name, client, until=until, timeout=1800)
            baked = (st["rollout"].get("bake") or {}).get("verdict")
            phases[st["rollout"]["revision"]] = (
                until,
                f"{verdict}, bake {baked.lower()}" if baked else verdict,
            )
            print(
                f"\n   revision {st.get('revision')} serves; client failures so far: "
                f"{len(client.failures)}\n"
            )
    with contextlib.suppress(Exception):  # (the new pod's counter, once more after the end)
        counter.look()
    runs = _runs(cluster, ns, name)
    served = counter.by_revision()
    print(
        f"\n{'REVISION':18s} {'PHASE':9s} {'TOK/S':>7s} {'TTFT P95':>9s} "
        f"{'VERDICT':20s} {'ANSWERED':>8s}"
    )
    for rev, (phase, verdict) in phases.items():
        h = runs.get(rev, {}).get("headline") or {}
        tps, ttft = h.get("outputTokensPerSecond"), h.get("ttftP95Seconds")
        print(
            f"{rev:18s} {phase:9s} {'-' if tps is None else f'{tps:.1f}':>7s} "
            f"{'-' if ttft is None else f'{ttft * 1000:.0f} ms':>9s} "
            f"{verdict:20s} {served.get(rev, 0):>8.0f}"
        )
    print(
        "(TOK/S, TTFT P95: each revision's benchmark, the first one's full run, the canaries' a "
        "short batching and streaming run of 16 tokens; ANSWERED: requests its pods answered, "
        "benchmark runs included: an aborted canary's are its two runs' only)"
    )
    print(
        f"\nclient: {client.sent} streams sent through the Service, {client.ok} answered, "
        f"{len(client.failures)} failed" + (f": {client.failures[:3]}" if client.failures else "")
    )
    return len(client.failures)


def _patch(cluster: LocalCluster, ns: str, name: str, spec: dict[str, Any]) -> None:
    cluster.kubectl(
        "patch", "vllmservice", name, "-n", ns, "--type=merge", "-p", json.dumps({"spec": spec})
    )
