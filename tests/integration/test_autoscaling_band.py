"""The autoscaling band, live: a real HPA controller (kube-controller-manager, 5 s sync) acting
on `vllm_operator:queue_depth_band` served by prometheus-adapter v0.12.0 through the API
server's aggregation layer, recorded by Debian's Prometheus from the shipped rules file.

The Deployment and HPA are the operator's renderings of the TinyLlama sample (target 20,
scale down at <= 2, scale-down window shortened to 30 s). Its pods are kwok's (simulated), so a
host exporter stands in for vLLM's /metrics: a total queue Q spread evenly over the running
pods, as a load balancer would. Prometheus finds the pods through a file_sd file written from
the API's pod list (Debian's Prometheus has no Kubernetes discovery).

It runs its own small cluster (free ports, own state directory): registering
custom.metrics.k8s.io must not change what the shared test cluster's other tests see.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from tests.prometheus_support import query
from tests.support import wait_for
from tests.unit.builders import service
from vllm_localenv.cluster import DEFAULT_BIN_DIR, LocalCluster, Ports
from vllm_localenv.monitoring import (
    adapter_args,
    adapter_registration,
    prometheus_config,
    rules_file,
)
from vllm_operator.api.quantity import parse_quantity
from vllm_operator.api.records import Capacity, Run
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.decide import capacity
from vllm_operator.render.autoscaling import render_hpa
from vllm_operator.render.deployment import render_deployment
from vllm_operator.render.monitoring import IN_FLIGHT_METRIC, LIVE_TTFT_METRIC

pytestmark = pytest.mark.cluster

NS, NAME = "band", "llama"
WINDOW = 30  # scaleDownStabilizationSeconds, shortened from 300 for the test


# vLLM's TTFT histogram, cut to the buckets the guard test needs
TTFT_BUCKETS = ("0.25", "0.5", "0.75", "1", "+Inf")


@dataclass
class Load:
    total: float = 0.0  # the service's total queue, spread over the running pods
    running: float = 0.0  # the requests its pods run (vllm:num_requests_running), spread too
    pods: list[str] = field(default_factory=list)
    # requests finishing per second on each pod, every one with a TTFT in the bucket whose upper
    # bound is ttft_le (None: no requests); ttft_counts are the cumulative bucket counts
    ttft_le: str | None = None
    ttft_per_second: float = 10.0
    ttft_counts: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TTFT_BUCKETS, 0.0))

    def tick(self, dt: float) -> None:
        if self.ttft_le is None:
            return
        first = TTFT_BUCKETS.index(self.ttft_le)
        for le in TTFT_BUCKETS[first:]:
            self.ttft_counts[le] += self.ttft_per_second * dt


@dataclass
class Rig:
    cluster: LocalCluster
    load: Load
    auto: client.AutoscalingV2Api
    prometheus: str  # its URL


def _handler(load: Load) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            pods = max(1, len(load.pods))
            per_pod, running = load.total / pods, load.running / pods
            counts = dict(load.ttft_counts)
            histogram = "".join(
                f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="m"}}'
                f" {counts[le]}\n"
                for le in TTFT_BUCKETS
            )
            body = (
                f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {per_pod}\n'
                f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n' + histogram
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    prometheus = shutil.which("prometheus")
    adapter = DEFAULT_BIN_DIR / "prometheus-adapter"
    if prometheus is None or not adapter.exists():
        pytest.fail("prometheus or prometheus-adapter missing: run `make monitoring`")
    tmp = tmp_path_factory.mktemp("band")
    # its own stand-ins for what the cluster's pipeline would scrape: no Prometheus of its own
    lc = LocalCluster(state_dir=tmp / "cluster", ports=Ports.free(), monitoring=False)
    procs: list[subprocess.Popen[bytes]] = []
    stop = threading.Event()
    load = Load()
    exporter = ThreadingHTTPServer(("127.0.0.1", 0), _handler(load))
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    with lc.session():
        api = config.new_client_from_config(config_file=str(lc.kubeconfig))
        core = client.CoreV1Api(api)
        targets = tmp / "pods.json"
        targets.write_text("[]")
        address = f"127.0.0.1:{exporter.server_address[1]}"

        def refresh() -> None:  # what Kubernetes discovery would do, every second
            while not stop.is_set():
                with_label = f"app.kubernetes.io/instance={NAME}"
                pods = core.list_namespaced_pod(NS, label_selector=with_label).items
                load.pods = sorted(
                    p.metadata.name
                    for p in pods
                    if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
                )
                groups = [
                    {
                        "targets": [address],
                        "labels": {
                            "__metrics_path__": f"/pods/{pod}",
                            "namespace": NS,
                            "pod": pod,
                            "service": NAME,
                        },
                    }
                    for pod in load.pods
                ]
                (tmp / "pods.tmp").write_text(json.dumps(groups))
                (tmp / "pods.tmp").replace(targets)
                stop.wait(1)

        def ticker() -> None:  # the requests the pods finish, into the TTFT histogram
            last = time.monotonic()
            while not stop.wait(0.2):
                now = time.monotonic()
                load.tick(now - last)
                last = now

        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
        threading.Thread(target=refresh, daemon=True).start()
        threading.Thread(target=ticker, daemon=True).start()
        free = Ports.free()
        cfg = tmp / "prometheus.yml"
        cfg.write_text(
            prometheus_config(
                lc.kubeconfig,
                [rules_file()],
                pod_targets_file=targets,
                scrape_interval="1s",
                evaluation_interval="1s",
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    prometheus,
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{free.etcd_client}",
                ],
                stdout=(tmp / "prometheus.log").open("wb"),
                stderr=subprocess.STDOUT,
            )
        )
        procs.append(
            subprocess.Popen(
                adapter_args(
                    str(adapter),
                    lc.kubeconfig,
                    prometheus_url=f"http://127.0.0.1:{free.etcd_client}",
                    secure_port=free.etcd_peer,
                    cert_dir=tmp / "adapter-certs",
                    relist_interval="2s",
                ),
                stdout=(tmp / "adapter.log").open("wb"),
                stderr=subprocess.STDOUT,
            )
        )
        try:
            lc.kubectl(
                "apply", "-f", "-", stdin=yaml.safe_dump_all(adapter_registration(free.etcd_peer))
            )
            svc = service(
                "tinyllama", {"autoscaling": {"scaleDownStabilizationSeconds": WINDOW}}
            ).model_copy(update={"name": NAME, "namespace": NS})
            settings = OperatorSettings()
            manifests = [render_deployment(svc, settings), render_hpa(svc, settings)]
            for m in manifests:
                assert m is not None
                m["metadata"].pop("ownerReferences")  # no VLLMService object here
            lc.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(manifests))
            yield Rig(
                lc, load, client.AutoscalingV2Api(api), f"http://127.0.0.1:{free.etcd_client}"
            )
        finally:
            stop.set()
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
            exporter.shutdown()


@dataclass(frozen=True)
class HpaView:
    current: int
    desired: int
    scaling_active: str
    metric: str  # its current per-pod value
    name: str = ""  # the metric's name


def hpa(rig: Rig) -> HpaView:
    h = rig.auto.read_namespaced_horizontal_pod_autoscaler(NAME, NS)
    conds = {c.type: c for c in h.status.conditions or []}
    active = conds.get("ScalingActive")
    current = next((m.pods for m in h.status.current_metrics or [] if m.pods), None)
    return HpaView(
        h.status.current_replicas or 0,
        h.status.desired_replicas or 0,
        f"{active.status}/{active.reason}" if active else "",
        str(current.current.average_value) if current else "",
        current.metric.name if current else "",
    )


def wait(rig: Rig, what: str, ok: Any, timeout: float) -> tuple[float, HpaView]:
    t0 = time.monotonic()
    view = hpa(rig)
    while time.monotonic() - t0 < timeout:
        view = hpa(rig)
        if ok(view):
            return time.monotonic() - t0, view
        time.sleep(0.5)
    pytest.fail(f"{what} within {timeout}s; last HPA state {view}")


def test_band_scales_up_above_holds_inside_and_scales_down_after_the_window(rig: Rig) -> None:
    # no queue: band 0, the HPA sits at minReplicas with a valid metric
    rig.load.total = 0
    _, view = wait(
        rig,
        "ScalingActive=True at 2 replicas",
        lambda v: v.scaling_active == "True/ValidMetricFound" and v.current == 2,
        timeout=180,
    )
    # 100 queued over 2 pods (50 each, above 20): scale up to ceil(2 x 50 / 20) = 5
    rig.load.total = 100
    up, view = wait(rig, "a scale-up decision", lambda v: v.desired > 2, timeout=180)
    assert view.desired == 5, view
    print(f"\nsustained queue -> scale-up decision: {up:.1f} s (HPA sync 5 s)")
    _, view = wait(rig, "5 pods at the target", lambda v: v.current == 5 and v.metric == "20", 180)
    # 60 queued over 5 pods (12 each, inside (2, 20]): the band metric stays at the target, so
    # the HPA holds (on the raw queue it would go to ceil(5 x 12 / 20) = 3). The hold is timed
    # from when Prometheus holds the new queue (the band's input changed: the positive control)
    rig.load.total = 60
    wait_for(
        "Prometheus to record the queue of 60",
        lambda: [
            r
            for r in query(rig.prometheus, f'sum(vllm:num_requests_waiting{{namespace="{NS}"}})')
            if float(r["value"][1]) == 60
        ],
    )
    t0 = time.monotonic()
    while time.monotonic() - t0 < WINDOW + 15:
        view = hpa(rig)
        assert (view.current, view.desired) == (5, 5), view
        time.sleep(1)
    assert view.metric == "20", view
    # 5 queued (1 per pod, at or below 2): down only once the whole window saw it
    rig.load.total = 5
    down, view = wait(rig, "a scale-down decision", lambda v: v.desired < v.current, timeout=180)
    # the rendered scale-down policy: past the window, up to half the pods a minute (at least
    # one): from 5, the HPA allows int(5 x 0.5) = 2, which is minReplicas (the queue's wish)
    assert view.desired == 2, view
    assert down >= WINDOW - 2, f"scaled down after {down:.1f} s, before the {WINDOW} s window"
    print(f"queue at/below 2 -> scale-down decision: {down:.1f} s (window {WINDOW} s)")


def test_with_an_objective_the_hpa_follows_the_measured_capacity(rig: Rig) -> None:
    """The capacity policy (issue 33), live: the HPA the operator renders for a service with a
    latency objective, from a revision whose ladder meets TTFT p95 <= 0.5 s up to 9 requests
    at once per pod (target 9 less 20% headroom = 7.2 in flight per pod), acting on
    vllm_operator:requests_in_flight (the shipped recording rule: running + waiting) served by
    prometheus-adapter. Runs after the band test (the same rig): from its replicas on."""
    svc = service(
        "tinyllama",
        {
            "autoscaling": {"scaleDownStabilizationSeconds": WINDOW},
            "objective": {"ttftSeconds": 0.5, "percentile": 95},
        },
    ).model_copy(update={"name": NAME, "namespace": NS})
    points = [
        {
            "concurrency": c,
            "requestsPerSecond": float(c),
            "outputTokensPerSecond": 30.0 * c,
            "promptTokensMean": 128.0,
            "ttftP95Seconds": 0.05 + 0.05 * c,
        }
        for c in (1, 2, 4, 8, 16)
    ]
    run = Run(
        "r1",
        "llama-bench-r1",
        "2030-01-01T00:00:00Z",
        "Complete",
        "{}",
        {"scenarios": {"batching": {"summary": {"ladder": points}}}},
    )
    measured = capacity.derive(svc.spec.objective, run)  # type: ignore[arg-type]
    assert isinstance(measured, Capacity)
    target = capacity.hpa_target(svc, measured)
    assert target == pytest.approx(7.2)
    manifest = render_hpa(svc, OperatorSettings(), target)
    assert manifest is not None
    manifest["metadata"].pop("ownerReferences")
    rig.cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(manifest))
    # 40 requests in flight in all (36 running, 4 waiting): ceil(40 / 7.2) = 6 pods, whatever
    # the pods now (the HPA's proportional rule on the per-pod average)
    rig.load.total, rig.load.running = 4, 36
    wait_for(
        "Prometheus to record 40 in flight",
        lambda: [
            r
            for r in query(rig.prometheus, f'sum({IN_FLIGHT_METRIC}{{namespace="{NS}"}})')
            if abs(float(r["value"][1]) - 40) < 0.01
        ],
    )
    up, view = wait(
        rig,
        "the HPA on the capacity metric wanting 6 pods",
        lambda v: v.name == IN_FLIGHT_METRIC and v.desired == 6,
        timeout=180,
    )
    print(f"\n40 in flight at a 7.2 target -> {view.desired} pods wanted in {up:.1f} s")
    _, view = wait(rig, "6 pods running", lambda v: v.current == 6, timeout=180)
    # at 6 pods the per-pod value is 40 / 6 = 6.67, inside the HPA's tolerance of 7.2: it holds
    assert 6.0 <= float(parse_quantity(view.metric)) <= 7.2, view


def test_the_live_latency_guard_adds_replicas_while_ttft_breaks_the_objective(rig: Rig) -> None:
    """The live latency guard (issue 33), live: the same HPA (objective p95 TTFT <= 0.5 s) also
    targets vllm_operator:live_ttft_seconds{quantile="0.95"} (the shipped rule over vLLM's TTFT
    histogram) at 0.5 s. With the 40 in flight of the capacity test (6 pods hold at 7.2) and
    every request's TTFT now in (0.5, 0.75] s, the service's p95 is 0.5 + 0.95 x 0.25 = 0.7375
    s: the guard wants ceil(6 x 0.7375 / 0.5) = 9 pods and the HPA follows the larger wish.
    Runs after the capacity test (the same rig, from its 6 pods)."""
    auto = rig.auto
    _, view = wait(rig, "6 pods at the capacity target", lambda v: v.current == 6, timeout=180)

    def guard_value() -> float | None:
        h = auto.read_namespaced_horizontal_pod_autoscaler(NAME, NS)
        for m in h.status.current_metrics or []:
            if m.pods and m.pods.metric.name == LIVE_TTFT_METRIC:
                return float(parse_quantity(m.pods.current.average_value))
        return None

    # idle (no request has finished yet): the guard reads 0, not missing, and wants nothing
    wait_for("the HPA to read the idle guard as 0", lambda: guard_value() == 0.0)
    assert hpa(rig).desired == 6
    rig.load.ttft_le = "0.75"
    t0 = time.monotonic()
    wait_for(
        "the HPA to read a live p95 TTFT of 0.7375 s",
        lambda: (v := guard_value()) is not None and abs(v - 0.7375) < 0.005,
    )
    _, view = wait(rig, "the guard's scale-up", lambda v: v.desired > 6, timeout=120)
    up = time.monotonic() - t0
    assert view.desired == 9, view
    assert view.name == IN_FLIGHT_METRIC  # the main metric still reads 40 / 6 in flight per pod
    print(
        f"\np95 TTFT 0.7375 s at a 0.5 s objective -> {view.desired} pods wanted {up:.1f} s "
        "after the first slow request (1 s scrape, 1 s rules, 2 s adapter relist, 5 s HPA sync)"
    )
    rig.load.ttft_le = None
