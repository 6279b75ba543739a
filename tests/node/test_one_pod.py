"""The benchmark measures one pod of the new revision, on the real node (issue 10, item 7).

A VLLMService with two replicas serves the tiny model on CPU; another client sends requests
through the Service (load-balanced over both pods) for the whole run. The operator (on the
host, this checkout's code) starts the benchmark Job with the pod IP of the oldest Ready pod
as its --url, so:
- only that pod's request counter grew by the runner's requests: the other pod served the
  other client's requests and nothing else (exact counts from both pods' /metrics);
- the prefix scenario's warm requests hit that pod's prefix cache: its prefix_cache_hits grew
  by what the runner measured, the other pod's not at all (the other client's prompts share
  no prefix);
- the other client's requests that reached the measured pod during the run are in the
  result's liveLoad (foreign requests), and its summary in the service's status.

Sizes: the node has 2 CPUs; two vLLM pods of 700m and the Job's 500m fit beside each other.
"""

from __future__ import annotations

import json
import random
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import get, items, ready, sample, wait_for
from vllm_localenv.cluster import LocalCluster

pytestmark = pytest.mark.node
NAMESPACE_PREFIX = "onepod"  # conftest.model_namespace

NAME = "tiny-two"
SERVER = f"serving.vllm-operator.dev/service={NAME},app.kubernetes.io/component=server"
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india")


def _service(benchmark: bool) -> dict[str, Any]:
    body = sample("tiny-cpu")
    body["metadata"]["name"] = NAME
    spec = body["spec"]
    spec["replicas"] = 2
    spec["resources"]["cpu"] = "700m"
    spec["benchmark"] = {
        "enabled": benchmark,
        "scenarios": ["prefix", "streaming"],
        "timeoutSeconds": 900,
        "args": [
            "--prefix-requests", "3", "--prefix-tokens", "512", "--streaming-requests", "24",
            "--output-tokens", "16", "--warmup-requests", "2",
        ],
    }  # fmt: skip
    return body


def _counters(ip: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {"requests": 0.0, "prefixHits": 0.0}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "vllm:request_success_total":
                out["requests"] += s.value
            elif s.name == "vllm:prefix_cache_hits_total":
                out["prefixHits"] += s.value
    return out


class OtherClient:
    """Requests through the Service, `lanes` at a time, each prompt random from its first
    word (no prefix shared with anything), until stopped; counts those that completed."""

    def __init__(self, url: str, lanes: int = 2) -> None:
        self.url = url
        self.done = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._lane, args=(i,)) for i in range(lanes)]
        self._lock = threading.Lock()

    def _lane(self, seed: int) -> None:
        rng = random.Random(seed)
        while not self.stop.is_set():
            prompt = " ".join(rng.choice(WORDS) + str(rng.randrange(10**6)) for _ in range(40))
            body = {"model": "tiny", "prompt": prompt, "max_tokens": 16, "ignore_eos": True}
            req = urllib.request.Request(
                f"{self.url}/v1/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    json.load(r)
            except OSError as exc:
                self.errors.append(str(exc))
                continue
            with self._lock:
                self.done += 1

    def __enter__(self) -> OtherClient:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def _bench_status(lc: LocalCluster, ns: str) -> dict[str, Any] | None:
    svc = get(lc, ns, "vllmservice", NAME) or {}
    bench = dict(svc.get("status", {}).get("benchmark") or {})
    if bench.get("state") == "Failed":
        raise AssertionError(f"the benchmark failed: {json.dumps(svc['status'])[:3000]}")
    return bench if bench.get("state") == "Complete" else None


# two CPU vLLM starts under 700m each on a busy machine, then the run
@pytest.mark.timeout(2400)
def test_the_benchmark_measures_one_pod_and_records_the_load_of_others(
    real_cluster: LocalCluster, model_namespace: str, tmp_path: Path
) -> None:
    lc, ns = real_cluster, model_namespace
    lc.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(_service(benchmark=False)))
    wait_for("the service Ready with 2 pods", lambda: ready(lc, ns, NAME), timeout=1200, every=5)
    pods = items(lc, ns, "pods", SERVER)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
    before = {name: _counters(ip) for name, ip in ips.items()}
    svc = get(lc, ns, "service", NAME)
    assert svc is not None
    service_url = f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"

    with OtherClient(service_url) as other:
        # benchmark on: the current revision, already rolled out, gets its run
        lc.kubectl(
            "patch", "vllmservice", NAME, "-n", ns, "--type=merge",
            "-p", json.dumps({"spec": {"benchmark": {"enabled": True}}}),
        )  # fmt: skip
        bench = wait_for("the benchmark Complete", lambda: _bench_status(lc, ns), 1200, every=5)
    assert not other.errors[:1], other.errors[:3]
    after = {name: _counters(ip) for name, ip in ips.items()}

    # the target: the oldest Ready pod, in the record, the status and the Job's --url
    oldest = min(pods, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
    target = oldest["metadata"]["name"]
    (other_pod,) = set(ips) - {target}
    record = get(lc, ns, "configmap", f"{bench['job']}-record")
    assert record is not None
    assert record["data"]["targetPod"] == target
    assert record["data"]["targetPodIP"] == ips[target]
    assert bench["targetPod"] == target
    assert bench["targetPodIP"] == ips[target]
    job = get(lc, ns, "job", bench["job"])
    assert job is not None
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[len(args) - 1 - args[::-1].index("--url") + 1] == f"http://{ips[target]}:8000"

    cm = get(lc, ns, "configmap", bench["job"])
    assert cm is not None
    result = json.loads(cm["data"]["result.json"])
    (tmp_path / "result.json").write_text(json.dumps(result, indent=2))
    assert result["status"] == "ok", result["errors"]
    live = result["liveLoad"]
    own = live["ownRequests"] + result["environment"]["warmup"]["requests"]
    grown = {name: after[name]["requests"] - before[name]["requests"] for name in ips}
    summary = {k: v for k, v in live.items() if k != "scenarios"}
    print(
        f"\nrequests: {other.done} of the other client through the Service; per pod {grown}; "
        f"the runner's {own}; liveLoad {json.dumps(summary)}"
    )
    # the other pod served the other client and nothing of the runner's; the measured pod
    # served every request of the runner's and the rest of the other client's
    assert grown[other_pod] < other.done
    assert grown[target] == own + (other.done - grown[other_pod])
    assert grown[other_pod] > 0, "the Service sent the other pod nothing: no evidence"
    # the prefix warm requests hit the measured pod's cache, and only it
    prefix = result["scenarios"]["prefix"]["summary"]
    assert prefix["prefixCacheHitsDelta"] > 0, prefix
    hits = {name: after[name]["prefixHits"] - before[name]["prefixHits"] for name in ips}
    assert hits[target] >= prefix["prefixCacheHitsDelta"]
    assert hits[other_pod] == 0, hits
    # the other client's requests on the measured pod during the scenarios: foreign load
    assert 0 < live["foreignRequests"] <= other.done - grown[other_pod]
    assert live["quiet"] is False
    assert bench["liveLoad"]["foreignRequests"] == live["foreignRequests"]
    assert bench["liveLoad"]["quiet"] is False
