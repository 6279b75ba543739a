"""Benchmark before traffic, then a bake on live traffic, on the real node (issue 21, items 1-5),
nothing simulated: a one-replica CPU vLLM service serves a client that streams through the
Service the whole time.

1. A revision made slower on purpose (maxNumSeqs 2) whose gate it cannot meet starts as one
   canary pod outside the Service, is measured twice on that pod alone and is stopped there
   (Aborted): the serving pod is the same pod throughout, the canary's IP never appears in the
   Service's EndpointSlices, and the canary's own request counter holds no more requests than
   the two benchmark runs sent it (its client requests: 0).
2. A revision slower only under live load (maxNumSeqs 1: one request at a time; the benchmark's
   streaming run sends one at a time too, so it passes its gate) bakes on live traffic: the
   canary's pod joins the Service's endpoints, four more clients stream longer requests
   through the Service at once, the canary queues them, its live TTFT p99 (read from
   Prometheus) exceeds the stable pod's beyond the service's limit and the bake aborts it:
   the canary leaves the endpoints, the stable pod never stopped, and no client request
   failed. The detection time (the canary's IP among the endpoints -> Aborted) is printed.
3. A good revision (rollout.canary.bake) passes its benchmark on its canary, then bakes: the
   canary's pod joins the Service's endpoints beside the stable pod (the operator's
   EndpointSlice), the client's requests reach it, its live TTFT, inter-token latency and
   error rate are read from the node cluster's Prometheus and compared with the stable pod's
   over the window, and it is promoted: the serving pod is replaced by a surge pod (maxSurge
   1, maxUnavailable 0: the one-replica default) with the preStop drain. The streaming client
   sees no failed request over the whole test. (The promote and abort annotations take the
   same paths by hand: the unit tests show them.)

The operator runs on the host as its own ServiceAccount (conftest.host_operator)."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import get, items, ready, sample, stream_completion, wait_for
from vllm_localenv.cluster import LocalCluster

pytestmark = pytest.mark.node
NAMESPACE_PREFIX = "canary"  # conftest.model_namespace

NAME = "tiny-canary"
SERVER = f"serving.vllm-operator.dev/service={NAME},app.kubernetes.io/component=server"
CANARY = f"app.kubernetes.io/instance={NAME}-canary"
BENCH = {
    "scenarios": ["streaming"],
    "timeoutSeconds": 900,
    "onFailure": "Rollback",
    "args": ["--streaming-requests", "8", "--output-tokens", "16", "--warmup-requests", "1"],
}


# the good revision's bake: a minute of live traffic; limits far from what two equal CPU pods
# measure (the figures are the point here, an abort is the unit tests')
# the slow revision's bake: a long window (the abort comes when the figures say so, not at its
# end); TTFT only, 3 x the stable pod's (a CPU pod's p99 on a few requests is noisy: the
# queueing canary's is several times the stable one's)
SLOW_BAKE = {
    "seconds": 900,
    "minRequests": 5,
    "maxTtftP99Ratio": 3,
    "maxInterTokenP99Ratio": 100,
    "maxErrorRateIncrease": 1,
}
LOAD_CLIENTS, LOAD_TOKENS = 4, 48
BAKE = {
    "seconds": 60,
    "minRequests": 5,
    "maxTtftP99Ratio": 20,
    "maxInterTokenP99Ratio": 20,
    "maxErrorRateIncrease": 0.5,
}


def _service() -> dict[str, Any]:
    body = sample("tiny-cpu")
    body["metadata"]["name"] = NAME
    spec = body["spec"]
    spec["replicas"] = 1
    spec["resources"]["cpu"] = "700m"  # serving + canary + the Job's 500m fit on 2 CPUs
    spec["benchmark"] = {"enabled": False}
    return body


class StreamingClient:
    """Streaming completions through the Service, one after another, until stopped; every
    request that did not end with the stream's [DONE] is a failure."""

    def __init__(self, url: str, max_tokens: int = 16) -> None:
        self.url, self.max_tokens = url, max_tokens
        self.sent = self.ok = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            self.sent += 1
            try:
                stream_completion(self.url, self.max_tokens)
            except (OSError, http.client.HTTPException) as exc:  # (a stream cut: IncompleteRead)
                self.failures.append(f"{time.strftime('%H:%M:%S')} {exc}")
                time.sleep(0.2)
                continue
            self.ok += 1

    def __enter__(self) -> StreamingClient:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=150)


class Watcher:
    """Every second: the Service's endpoint IPs, the canary pods' IPs, and the largest request
    counter each canary pod reported (read at its pod IP while it runs)."""

    def __init__(self, lc: LocalCluster, ns: str) -> None:
        self.lc, self.ns = lc, ns
        self.endpoints: set[str] = set()
        self.canary_ips: set[str] = set()
        self.canary_requests: dict[str, float] = {}
        self.current: set[str] = set()  # the endpoints' addresses at the last look
        self.joined: dict[str, float] = {}  # address -> when first among the endpoints
        self.left: dict[str, float] = {}  # address -> when no longer among them
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _look(self) -> None:
        slices = items(self.lc, self.ns, "endpointslices", f"kubernetes.io/service-name={NAME}")
        now, current = time.monotonic(), set[str]()
        for s in slices:
            for e in s.get("endpoints") or []:
                current.update(e.get("addresses") or [])
        for ip in current - self.current:
            self.joined.setdefault(ip, now)
        for ip in self.current - current:
            self.left[ip] = now
        self.current = current
        self.endpoints.update(current)
        for pod in items(self.lc, self.ns, "pods", CANARY):
            ip = pod.get("status", {}).get("podIP")
            if not ip:
                continue
            self.canary_ips.add(ip)
            try:
                with urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=15) as r:
                    text = r.read().decode()
            except OSError:
                continue
            total = sum(
                s.value
                for f in text_string_to_metric_families(text)
                for s in f.samples
                if s.name == "vllm:request_success_total"
            )
            name = pod["metadata"]["name"]
            self.canary_requests[name] = max(total, self.canary_requests.get(name, 0.0))

    def _run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):  # (a read during a restart: the next look)
                self._look()
            self.stop.wait(1.0)

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def _rollout(lc: LocalCluster, ns: str, phase: str, revision: str | None = None) -> Any:
    svc = get(lc, ns, "vllmservice", NAME) or {}
    r = svc.get("status", {}).get("rollout") or {}
    if r.get("phase") == phase and revision in (None, r.get("revision")):
        return svc
    return None


def _patch(lc: LocalCluster, ns: str, spec: dict[str, Any]) -> None:
    lc.kubectl(
        "patch", "vllmservice", NAME, "-n", ns, "--type=merge", "-p", json.dumps({"spec": spec})
    )


def _own_requests(lc: LocalCluster, ns: str, run: str) -> int:
    """The requests a benchmark run sent (its result: its own requests and its warm-up)."""
    cm = get(lc, ns, "configmap", run)
    assert cm is not None
    result = json.loads(cm["data"]["result.json"])
    return int(result["liveLoad"]["ownRequests"]) + int(result["environment"]["warmup"]["requests"])


# five CPU vLLM starts (the serving pod, three canaries, the surge pod), four benchmark runs
@pytest.mark.timeout(4200)
def test_a_slow_revision_stops_at_the_canary_and_a_good_one_is_promoted_without_errors(
    real_cluster: LocalCluster, model_namespace: str
) -> None:
    lc, ns = real_cluster, model_namespace
    lc.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(_service()))
    wait_for("the service Ready", lambda: ready(lc, ns, NAME), timeout=1200, every=5)
    (stable_pod,) = items(lc, ns, "pods", SERVER)
    svc = get(lc, ns, "service", NAME)
    assert svc is not None
    url = f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"

    with StreamingClient(url) as client, Watcher(lc, ns) as watcher:
        wait_for("the client's first answers", lambda: client.ok >= 3)
        # 1. slower on purpose, and a gate it cannot meet
        _patch(
            lc,
            ns,
            {
                "engine": {"maxNumSeqs": 2},
                "benchmark": {
                    **BENCH,
                    "enabled": True,
                    "thresholds": {"maxTtftP95Seconds": 0.0001},
                },
            },
        )
        canary = wait_for("the canary phase", lambda: _rollout(lc, ns, "Canary"))
        bad = canary["status"]["rollout"]["revision"]
        stable = canary["status"]["rollout"]["stableRevision"]
        aborted = wait_for(
            "the canary stopped (two failed runs)",
            lambda: _rollout(lc, ns, "Aborted", bad),
            timeout=1800,
            every=3,
        )
        st = aborted["status"]
        # (the stable revision was never measured: nothing to roll back to, it is held)
        assert (st["revision"], st["rollout"]["stableRevision"]) == (stable, stable), st
        assert "served no request" in st["rollout"]["message"], st["rollout"]
        degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
        assert (degraded["status"], degraded["reason"]) == ("True", "CanaryAborted"), degraded
        runs = [
            cm["metadata"]["name"]
            for cm in items(lc, ns, "configmaps", "app.kubernetes.io/component=benchmark")
            if cm["metadata"]["labels"].get("serving.vllm-operator.dev/revision") == bad
        ]
        assert len(runs) == 2, runs  # the failure confirmed by a second run
        own = sum(_own_requests(lc, ns, r) for r in runs)
        # the serving pod never stopped: the same pod, and the Deployment at the stable revision
        (still,) = items(lc, ns, "pods", SERVER)
        assert still["metadata"]["uid"] == stable_pod["metadata"]["uid"]
        dep = get(lc, ns, "deployment", NAME)
        assert dep is not None
        assert dep["metadata"]["annotations"]["serving.vllm-operator.dev/revision"] == stable
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[args.index("--max-num-seqs") + 1] == "16", args  # the sample's, not 1
        # what the failing revision's canary pod answered: its runs' requests, no one else's
        wait_for("a scrape of the canary", lambda: watcher.canary_requests)
        bad_served = max(watcher.canary_requests.values())

        bad_ips, bad_endpoints = set(watcher.canary_ips), set(watcher.endpoints)
        wait_for("the canary's pod gone", lambda: not items(lc, ns, "pods", CANARY), timeout=300)

        # 2. slower only under live load: passes its benchmark, fails its bake
        _patch(
            lc,
            ns,
            {
                "engine": {"maxNumSeqs": 1},
                "benchmark": {**BENCH, "enabled": True, "thresholds": {"maxTtftP95Seconds": 120}},
                "rollout": {"canary": {"bake": SLOW_BAKE}},
            },
        )
        slow_baking = wait_for(
            "the slow canary baking",
            lambda: _rollout(lc, ns, "Baking"),
            timeout=1500,
            every=3,
        )
        slow = slow_baking["status"]["rollout"]["revision"]
        assert slow not in (bad, stable)
        (slow_pod,) = items(lc, ns, "pods", CANARY)
        slow_ip = slow_pod["status"]["podIP"]
        loads = [StreamingClient(url, LOAD_TOKENS) for _ in range(LOAD_CLIENTS)]
        for load in loads:
            load.__enter__()
        try:
            wait_for(
                "the slow canary among the Service's endpoints",
                lambda: slow_ip in watcher.joined,
            )
            slow_aborted = wait_for(
                "the bake's abort",
                lambda: _rollout(lc, ns, "Aborted", slow),
                timeout=SLOW_BAKE["seconds"],
                every=2,
            )
            detected = time.monotonic() - watcher.joined[slow_ip]
            wait_for(
                "the slow canary out of the endpoints",
                lambda: slow_ip in watcher.left,
            )
            out_after = watcher.left[slow_ip] - watcher.joined[slow_ip]
        finally:
            for load in loads:
                load.__exit__()
        slow_st = slow_aborted["status"]
        assert slow_st["rollout"]["bake"]["verdict"] == "Failed", slow_st["rollout"]
        assert "TTFT p99" in slow_st["rollout"]["message"], slow_st["rollout"]
        assert slow_st["revision"] == stable, slow_st
        (still,) = items(lc, ns, "pods", SERVER)
        assert still["metadata"]["uid"] == stable_pod["metadata"]["uid"]  # it never stopped
        load_sent = sum(c.sent for c in loads)
        load_failures = [f for c in loads for f in c.failures]
        slow_served = watcher.canary_requests.get(slow_pod["metadata"]["name"], 0.0)
        print(
            f"\nslow-under-load revision {slow}: its canary among the endpoints -> Aborted "
            f"{detected:.0f} s, -> out of the endpoints {out_after:.0f} s; it answered "
            f"{slow_served:.0f} requests; {slow_st['rollout']['message']}; load clients sent "
            f"{load_sent}, failed {len(load_failures)}"
        )
        assert load_failures == [], load_failures[:5]
        assert slow_served > 0

        # 3. a good revision: measured on its canary, baked on live traffic, promoted (once
        # the aborted canary's pod is gone: the node has room for one more pod, not two)
        wait_for("the canary's pod gone", lambda: not items(lc, ns, "pods", CANARY), timeout=300)
        changed = time.monotonic()
        _patch(
            lc,
            ns,
            {
                "engine": {"maxNumSeqs": 8},
                "benchmark": {**BENCH, "enabled": True, "thresholds": {"maxTtftP95Seconds": 120}},
                "rollout": {"canary": {"bake": BAKE}},
            },
        )
        baking = wait_for(
            "the canary baking on live traffic",
            lambda: _rollout(lc, ns, "Baking"),
            timeout=1500,
            every=3,
        )
        good = baking["status"]["rollout"]["revision"]
        assert good not in (bad, slow, stable)
        (canary_pod,) = items(lc, ns, "pods", CANARY)
        canary_ip = canary_pod["status"]["podIP"]
        wait_for(
            "the canary's IP among the Service's endpoints",
            lambda: canary_ip in watcher.endpoints,
        )
        (good_run,) = [
            cm["metadata"]["name"]
            for cm in items(lc, ns, "configmaps", "app.kubernetes.io/component=benchmark")
            if cm["metadata"]["labels"].get("serving.vllm-operator.dev/revision") == good
        ]
        last_baking: dict[str, Any] = {}

        def bake_decided() -> dict[str, Any] | None:
            """The rollout once the bake decided (the last look while baking kept: its
            figures; the verdict stays in the status with the revision)."""
            r = (get(lc, ns, "vllmservice", NAME) or {}).get("status", {}).get("rollout") or {}
            if r.get("phase") == "Baking":
                last_baking.update(r)
            return r if r.get("revision") == good and r.get("phase") != "Baking" else None

        baked = wait_for(
            "the bake's verdict",
            bake_decided,
            timeout=BAKE["seconds"] + 300,
            every=2,
        )
        baked_s = time.monotonic() - changed
        promoted = wait_for(
            "the good revision promoted",
            lambda: _rollout(lc, ns, "Promoted", good),
            timeout=1200,
            every=3,
        )
        to_promoted = time.monotonic() - changed
        wait_for("the service Ready again", lambda: ready(lc, ns, NAME), timeout=300, every=3)
        good_own = _own_requests(lc, ns, good_run)
        # the client's answers from the promoted pod, beyond its run's, as the watcher's
        # scrapes of it count them (an event to wait for, not a pause)
        good_name = canary_pod["metadata"]["name"]
        wait_for(
            "the canary's client answers in its counter",
            lambda: watcher.canary_requests.get(good_name, 0.0) > good_own,
        )
        good_served = watcher.canary_requests.get(good_name, 0.0)

    # the failing revision's canary IPs were never the Service's; it served the benchmark only
    assert bad_ips, "no canary pod was seen"
    assert bad_endpoints, "no endpoint of the Service was seen"
    assert not bad_ips & bad_endpoints, (bad_ips, bad_endpoints)
    assert 0 < bad_served <= own, (bad_served, own)  # (0: the scrape never saw its runs)
    # the good one baked on the client's requests, and Prometheus's figures say so
    assert baked["phase"] in ("Promoting", "Promoted"), baked
    assert baked["bake"]["verdict"] == "Passed", baked
    figures = last_baking["bake"]
    assert figures["canaryRequests"] > 0, last_baking  # client requests reached it
    assert figures["canaryTtftP99Seconds"] > 0, last_baking
    assert figures["stableTtftP99Seconds"] > 0, last_baking
    assert good_served > good_own, (good_served, good_own)
    print(
        f"\nfailing revision {bad}: its canary answered {bad_served:.0f} requests, its two runs "
        f"sent {own}; good revision {good}: its canary answered {good_served:.0f} requests "
        f"(its run sent {good_own}); bake: {json.dumps(last_baking['bake'])}; spec change -> bake "
        f"verdict {baked_s:.0f} s, -> Promoted {to_promoted:.0f} s; client requests through "
        f"the Service {client.sent}, failed {len(client.failures)}"
    )
    assert client.failures == [], client.failures[:5]
    assert client.ok > 10, client.ok
    new_pods = items(lc, ns, "pods", SERVER)
    assert [p["metadata"]["uid"] for p in new_pods] != [stable_pod["metadata"]["uid"]]
    assert promoted["status"]["rollout"]["stableRevision"] == stable
