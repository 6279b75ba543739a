"""Queue-depth autoscaling on the real node, nothing simulated: the benchmark runner's load
against a real vLLM server (the tiny model on CPU) fills `vllm:num_requests_waiting`; the
cluster's own pipeline (Debian's Prometheus scraping the pod on the bridge, the shipped band
recording rules, prometheus-adapter behind the aggregation layer) feeds the operator's HPA,
which reports ScalingActive=True and scales the Deployment up; once the load is gone it scales
down after the (test-shortened) stabilization window. The same run's `--prometheus-url`
result carries the server's view from that Prometheus.

The operator runs on the host as its own ServiceAccount (OperatorProcess): the test checks
the status written by this checkout's code, without rebuilding the operator image.

Sizes: the node has 2 CPUs; each vLLM pod gets 800m (requests = limits), so two fit beside
whatever else runs there; maxNumSeqs 2 makes requests queue.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.utils import parse_quantity

from tests.support import ready, sample, wait_for
from vllm_localenv.cluster import REPO_ROOT, LocalCluster
from vllm_localenv.node import NODE_NAME

pytestmark = pytest.mark.node
NAMESPACE_PREFIX = "scale"  # conftest.model_namespace

NAME = "tiny-scale"
# the lab's band, the defaults: the local Prometheus evaluates the shipped generic rules file,
# whose band recording rules carry the default thresholds (per-service thresholds reach a
# Prometheus through the rendered PrometheusRule, i.e. the Prometheus Operator)
TARGET = 20  # targetQueueDepth: scale up above 20 waiting per pod
LOW = 2  # scaleDownQueueDepth: scale down only at or below 2 for the whole window
WINDOW = 30  # scaleDownStabilizationSeconds, shortened from 300
SERVER = f"serving.vllm-operator.dev/service={NAME},app.kubernetes.io/component=server"


def _json(lc: LocalCluster, *args: str) -> Any:
    return json.loads(lc.kubectl(*args, "-o", "json"))


def _scaled_service() -> dict[str, Any]:
    body = sample("tiny-cpu")
    body["metadata"]["name"] = NAME
    spec = body["spec"]
    spec["engine"]["maxNumSeqs"] = 2
    spec["resources"]["cpu"] = "800m"
    spec["benchmark"] = {"enabled": False}
    spec["autoscaling"] = {
        "enabled": True,
        "minReplicas": 1,
        "maxReplicas": 2,
        "scaleDownStabilizationSeconds": WINDOW,
    }
    return body


@dataclass
class Timeline:
    """When the first pod's own /metrics first showed a queue above the target, and when the
    service's average queue as Prometheus recorded it was last above the scale-down bound
    (monotonic seconds)."""

    prometheus: str
    namespace: str
    queue_above: float | None = None
    avg_last_above_low: float | None = None
    peak_queue: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)


def _waiting(pod_ip: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://{pod_ip}:8000/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_waiting{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def _watch_queue(pod_ip: str, timeline: Timeline) -> None:
    avg = f'namespace_service:vllm_queue_depth:avg{{namespace="{timeline.namespace}"}}'
    while not timeline.stop.is_set():
        value = _waiting(pod_ip)
        if value is not None:
            timeline.peak_queue = max(timeline.peak_queue, value)
            if value > TARGET and timeline.queue_above is None:
                timeline.queue_above = time.monotonic()
        try:
            recorded = _query(timeline.prometheus, avg, timeout=10)  # (the watcher keeps pace)
        except OSError:
            recorded = []
        if recorded and float(recorded[0]["value"][1]) > LOW:
            timeline.avg_last_above_low = time.monotonic()
        time.sleep(0.25)


def _hpa(lc: LocalCluster, ns: str) -> dict[str, Any]:
    return dict(_json(lc, "get", "hpa", NAME, "-n", ns))


def _scaling_active(hpa: dict[str, Any]) -> dict[str, Any]:
    conds = hpa.get("status", {}).get("conditions", [])
    return next((c for c in conds if c["type"] == "ScalingActive"), {})


def _query(prometheus: str, promql: str, timeout: float = 60) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return list(json.load(r)["data"]["result"])


def _epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _last_above(prometheus: str, ns: str, bound: float, until: float, span: float) -> float | None:
    """The last second up to `until` at which Prometheus's recorded average queue of the
    namespace's service was above `bound` (None: never within `span` seconds before)."""
    promql = f'namespace_service:vllm_queue_depth:avg{{namespace="{ns}"}}'
    query = urllib.parse.urlencode(
        {"query": promql, "start": f"{until - span:.3f}", "end": f"{until:.3f}", "step": "1"}
    )
    with urllib.request.urlopen(f"{prometheus}/api/v1/query_range?{query}", timeout=30) as r:
        series = json.load(r)["data"]["result"]
    above = [float(t) for s in series for t, v in s["values"] if float(v) > bound]
    return max(above) if above else None


# a first start under 800m (~3 min), the load (~4 min), the window and a pod's start
@pytest.mark.timeout(1500)
def test_vllm_queue_scales_the_deployment_up_and_back_down(
    real_cluster: LocalCluster, model_namespace: str, tmp_path: Path
) -> None:
    lc, ns = real_cluster, model_namespace
    lc.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(_scaled_service()))
    # kubectl() itself gives up after 120 s; a first start under 800m takes longer
    wait_for(
        "the service Ready",
        lambda: ready(lc, ns, NAME) or None,
        timeout=600,
        every=3,
    )
    pod = _json(lc, "get", "pods", "-n", ns, "-l", SERVER)["items"][0]
    assert pod["spec"]["nodeName"] == NODE_NAME

    # the pipeline sees the real pod: scraped by Prometheus, the band recorded, served by the
    # adapter, and the HPA reads it
    prom = lc.prometheus_url
    wait_for(
        "Prometheus scraping the vLLM pod",
        lambda: _query(prom, f'vllm:num_requests_waiting{{namespace="{ns}"}}'),
    )
    wait_for(
        "the HPA's ScalingActive=True",
        lambda: _scaling_active(_hpa(lc, ns)).get("status") == "True",
    )
    assert _scaling_active(_hpa(lc, ns))["reason"] == "ValidMetricFound"
    assert _hpa(lc, ns)["status"]["desiredReplicas"] == 1

    svc = _json(lc, "get", "service", NAME, "-n", ns)
    url = f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"
    timeline = Timeline(prom, ns)
    watcher = threading.Thread(target=_watch_queue, args=(pod["status"]["podIP"], timeline))
    watcher.start()
    out = tmp_path / "bench"
    load = subprocess.Popen(
        [
            str(REPO_ROOT / ".venv" / "bin" / "vllm-bench"),
            "run",
            f"--url={url}",
            "--model=tiny",
            "--scenarios=batching",
            # the queue must pass 20 per pod at once: 64 warm-up requests submitted together
            # (the batching scenario's own phases reach 32 in flight only at the top of its
            # ladder, minutes later on a loaded machine: a CI run saw 14 waiting at most and
            # no scale-up within 400 s), and 24 at once in its concurrent phase
            "--warmup-requests=64",
            "--requests=24",
            "--max-concurrency=32",
            "--output-tokens=96",
            "--max-duration-seconds=420",
            f"--prometheus-url={prom}",
            f"--out={out}",
            "--no-report",
        ],
        stdout=(tmp_path / "bench.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        # scale-up: the HPA's decision, then the Deployment and a second pod on the node
        hpa = wait_for(
            "a scale-up decision",
            lambda: (h := _hpa(lc, ns))["status"].get("desiredReplicas", 1) > 1 and h,
            timeout=400,
            every=0.5,
        )
        decided = time.monotonic()
        assert _scaling_active(hpa)["status"] == "True", hpa["status"]
        assert hpa["status"]["desiredReplicas"] == 2
        assert timeline.queue_above is not None, "the HPA scaled before the queue rose"
        to_decision = decided - timeline.queue_above
        print(f"\nqueue > {TARGET} on the pod -> HPA scale-up decision: {to_decision:.1f} s")
        dep = wait_for(
            "the Deployment at 2 replicas",
            lambda: (
                (d := _json(lc, "get", "deployment", NAME, "-n", ns))["spec"]["replicas"] == 2 and d
            ),
        )
        assert dep["spec"]["replicas"] == 2
        where: list[str] = []

        def second_pod() -> bool:
            items = _json(lc, "get", "pods", "-n", ns, "-l", SERVER)["items"]
            # where each pod is, and why the scheduler has not placed one (for the failure)
            where[:] = [
                f"{p['metadata']['name']} node={p['spec'].get('nodeName')} "
                f"phase={p.get('status', {}).get('phase')} "
                + "; ".join(
                    f"{c.get('type')}={c.get('status')} {c.get('reason', '')} "
                    f"{c.get('message', '')}"
                    for c in p.get("status", {}).get("conditions", [])
                    if c.get("status") != "True"
                )
                for p in items
            ]
            return len([p for p in items if p["spec"].get("nodeName") == NODE_NAME]) >= 2

        # (an unschedulable pod is retried within the scheduler's back-off)
        try:
            wait_for("a second vLLM pod on the node", second_pod, timeout=180)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the pods: {where}") from None

        # the service tells the truth about its autoscaler (the operator's 5 s drift timer)
        def scaled_up_status() -> dict[str, Any] | None:
            st = dict(_json(lc, "get", "vllmservice", NAME, "-n", ns)["status"])
            return st if st.get("autoscaling", {}).get("desiredReplicas") == 2 else None

        status = wait_for("status.autoscaling at 2", scaled_up_status)
        active = next(c for c in status["conditions"] if c["type"] == "AutoscalingActive")
        assert (active["status"], active["reason"]) == ("True", "ValidMetricFound"), active
        assert status["autoscaling"]["metric"] == "vllm_operator:queue_depth_band"
        assert parse_quantity(status["autoscaling"]["currentAverageValue"]) > TARGET, status
        print(f"status.autoscaling while scaled up: {status['autoscaling']}")

        # the load's job is to keep the queue full until the scale-up is seen: it may end at
        # its own deadline (exit 3, `deadline`) when a loaded 2-core machine serves fewer
        # requests than it has to send (0.58/s in a CI run beside the other tiers); any other
        # failure of the runner fails the test
        code = load.wait(timeout=480)
        log_tail = (tmp_path / "bench.log").read_text()[-3000:]
        if code != 0:
            errors = json.loads((out / "result.json").read_text()).get("errors") or []
            assert code == 3, log_tail
            assert errors, log_tail
            assert all(e["kind"] == "deadline" for e in errors), errors
        print(f"peak queue on the first pod: {timeline.peak_queue:.0f}")

        # load gone: down to 1 only once the recorded average stayed <= 2 for the window
        hpa = wait_for(
            "a scale-down decision",
            lambda: (h := _hpa(lc, ns))["status"].get("desiredReplicas", 2) < 2 and h,
            timeout=WINDOW + 180,
            every=0.5,
        )
        decided_down = time.monotonic()
    finally:
        timeline.stop.set()
        watcher.join()
        if load.poll() is None:
            load.kill()
            load.wait()
    # When the HPA decided, from its own status (the API server's clock, whole seconds), and
    # when the service's average queue was last above the bound before that, from what
    # Prometheus recorded (one sample a second over the rule evaluations): the window is
    # measured on the series the HPA's band comes from, not on what this test's polling saw.
    # After the decision the average may rise again: the pod scaled away may have held the
    # shorter queue (abandoned requests stay queued on the other), which a watcher sampling
    # up to the moment it notices the decision counted as "above the bound" (a CI run: 0.1 s).
    scaled_at = _epoch(hpa["status"]["lastScaleTime"])
    last_above = _last_above(prom, ns, LOW, until=scaled_at, span=WINDOW + 600)
    assert last_above is not None, "Prometheus recorded no average queue above the bound"
    down = scaled_at - last_above
    watched = (
        f"{decided_down - timeline.avg_last_above_low:.1f} s"
        if timeline.avg_last_above_low is not None
        else "never above"
    )
    print(
        f"average queue last > {LOW} -> scale-down decision: {down:.1f} s (window {WINDOW} s; "
        f"as this test's watcher saw it up to noticing the decision: {watched})"
    )
    # the HPA samples every 5 s (--horizontal-pod-autoscaler-sync-period): its last high
    # recommendation may predate the last high sample by up to one period; lastScaleTime is
    # truncated to the second
    assert down >= WINDOW - 6, f"scaled down {down:.1f} s after the queue, inside the window"
    assert hpa["status"]["desiredReplicas"] == 1
    wait_for(
        "the Deployment back at 1 replica",
        lambda: _json(lc, "get", "deployment", NAME, "-n", ns)["spec"]["replicas"] == 1,
    )

    # the runner's result carries the server's own view, from the cluster's Prometheus
    result = json.loads((out / "result.json").read_text())
    state = result["serverState"]
    assert state["requestsWaiting"]["max"] > TARGET, state
    assert state["kvCacheUsage"]["max"] > 0, state
    assert state["preemptions"]["total"] is not None, state
    assert result["serverHistograms"]["timeToFirstTokenSeconds"]["p50"] is not None
    print(f"serverState: {json.dumps(state)}")
