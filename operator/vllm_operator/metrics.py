"""The operator's own Prometheus metrics: the benchmark figures of every recorded run per
service and revision (so dashboards can show performance by rollout), reconcile counts and
durations, the work queue's depth, and the API requests the operator makes by verb.

Beside the stages rather than in one: write counts its requests and Events here, runtime its
reconciles and the published runs; neither imports the other for it."""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from vllm_operator.api.records import Run
from vllm_operator.decide.gates import FAILED, PASSED

LABELS = ("namespace", "service", "revision")
BENCH = {
    "output_tokens_per_second": Gauge(
        "vllm_operator_benchmark_output_tokens_per_second",
        "Output throughput under concurrent load, per revision",
        LABELS,
    ),
    "ttft_p50_seconds": Gauge(
        "vllm_operator_benchmark_ttft_p50_seconds", "Time to first token p50", LABELS
    ),
    "ttft_p95_seconds": Gauge(
        "vllm_operator_benchmark_ttft_p95_seconds", "Time to first token p95", LABELS
    ),
    "kv_cache_tokens": Gauge(
        "vllm_operator_benchmark_kv_cache_tokens", "KV-cache capacity in tokens", LABELS
    ),
    "max_concurrency": Gauge(
        "vllm_operator_benchmark_max_concurrency", "Sequences that fit at max-model-len", LABELS
    ),
    "batching_speedup": Gauge(
        "vllm_operator_benchmark_batching_speedup", "Concurrent over serial throughput", LABELS
    ),
    "prefix_ttft_speedup": Gauge(
        "vllm_operator_benchmark_prefix_ttft_speedup", "Cold over warm TTFT", LABELS
    ),
    "prefix_hit_rate": Gauge(
        "vllm_operator_benchmark_prefix_hit_rate", "Prefix-cache hit rate", LABELS
    ),
}
# the alerts of render/monitoring.py use the three gauges below
BENCHMARK_PASSED = Gauge(
    "vllm_operator_benchmark_passed",
    "1 when the newest benchmarked revision of the service passed its gates, 0 when it failed "
    "(absent while it is still measured)",
    LABELS,
)
ROLLBACK_ACTIVE = Gauge(
    "vllm_operator_rollback_active",
    "1 while the service runs the revision `revision` because the one its spec asks for "
    "failed its benchmark gates",
    LABELS,
)
AUTOSCALER_SCALING_ACTIVE = Gauge(
    "vllm_operator_autoscaler_scaling_active",
    "The HPA's ScalingActive condition: 1 True, 0 False or Unknown (it cannot get its metric); "
    "absent without autoscaling",
    ("namespace", "service"),
)
RECONCILES = Counter("vllm_operator_reconciles", "Reconciles by result", ("result",))
WRITES = Counter("vllm_operator_api_writes", "Writes to the Kubernetes API")
RECONCILE_DURATION = Histogram(
    "vllm_operator_reconcile_duration_seconds",
    "Wall time of one reconcile of one service (the fresh read of the service to the status)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
WORKQUEUE_DEPTH = Gauge(
    "vllm_operator_workqueue_depth",
    "Services waiting for a worker now (not counting delayed resyncs and back-offs)",
)
WORKQUEUE_RETRIES = Counter(
    "vllm_operator_workqueue_retries", "Reconciles re-queued with back-off after a failure"
)
API_REQUESTS = Counter(
    "vllm_operator_api_requests",
    "Requests to the Kubernetes API by verb (get, list, watch, create, patch, delete)",
    ("verb",),
)
EVENTS_DROPPED = Counter(
    "vllm_operator_events_dropped",
    "Kubernetes Events not posted because too many waited to be posted (events.EventRecorder)",
)
WATCH_EVENTS = Counter(
    "vllm_operator_watch_events",
    "Events the operator's child watches received, by kind (server-side label-selected)",
    ("kind",),
)

_published: dict[tuple[str, str], set[str]] = {}


def serve(port: int) -> None:
    if port:
        start_http_server(port)


def _only(gauge: Gauge, namespace: str, service: str, keep: tuple[str, ...] | None) -> None:
    """Removes the service's series of `gauge` other than the one labelled `keep`."""
    for labels in [tuple(s.labels.values()) for m in gauge.collect() for s in m.samples]:
        if labels[:2] == (namespace, service) and labels != keep:
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)


def record_gate(namespace: str, service: str, runs: tuple[Run, ...] | list[Run]) -> None:
    """vllm_operator_benchmark_passed for the newest run, once it has a recorded verdict."""
    newest = max(runs, key=lambda r: r.created, default=None)
    if newest is None or newest.verdict not in (PASSED, FAILED):
        _only(BENCHMARK_PASSED, namespace, service, None)
        return
    BENCHMARK_PASSED.labels(namespace, service, newest.revision).set(
        1.0 if newest.verdict == PASSED else 0.0
    )
    _only(BENCHMARK_PASSED, namespace, service, (namespace, service, newest.revision))


def record_rollback(namespace: str, service: str, rolled_back_to: str | None) -> None:
    """vllm_operator_rollback_active: 1 for the revision restored while a rollback is in
    effect; no series otherwise. Call after every reconcile with its rolled_back_to."""
    if rolled_back_to is None:
        _only(ROLLBACK_ACTIVE, namespace, service, None)
        return
    ROLLBACK_ACTIVE.labels(namespace, service, rolled_back_to).set(1.0)
    _only(ROLLBACK_ACTIVE, namespace, service, (namespace, service, rolled_back_to))


def record_autoscaler(namespace: str, service: str, scaling_active: str | None) -> None:
    """vllm_operator_autoscaler_scaling_active from the HPA's ScalingActive condition status
    ("True", "False", "Unknown"), or None (no HPA, or no such condition yet): no series."""
    if scaling_active is None:
        with contextlib.suppress(KeyError):
            AUTOSCALER_SCALING_ACTIVE.remove(namespace, service)
        return
    AUTOSCALER_SCALING_ACTIVE.labels(namespace, service).set(
        1.0 if scaling_active == "True" else 0.0
    )


def record_runs(namespace: str, service: str, runs: tuple[Run, ...] | list[Run]) -> None:
    """Publishes every completed run of a service (and the newest gate verdict); forgets
    pruned ones."""
    record_gate(namespace, service, runs)
    now = set()
    for run in runs:
        if run.state != "Complete":
            continue
        now.add(run.revision)
        headline = run.headline
        for field, gauge in BENCH.items():
            value = getattr(headline, field)
            if value is not None:
                gauge.labels(namespace, service, run.revision).set(float(value))
    for gone in _published.get((namespace, service), set()) - now:
        for gauge in BENCH.values():
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, service, gone)
    _published[(namespace, service)] = now


def forget_all() -> None:
    """Removes every per-service series: a replica that stops leading must not go on
    exporting what it last saw (VLLMRolledBack would keep firing from the deposed leader after
    the new leader cleared the rollback); the new leader publishes them afresh."""
    for gauge in (*BENCH.values(), BENCHMARK_PASSED, ROLLBACK_ACTIVE, AUTOSCALER_SCALING_ACTIVE):
        gauge.clear()
    _published.clear()


def forget(namespace: str, service: str) -> None:
    record_runs(namespace, service, [])
    record_rollback(namespace, service, None)
    record_autoscaler(namespace, service, None)
