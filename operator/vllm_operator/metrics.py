"""The operator's own Prometheus metrics: the benchmark figures of every recorded run per
service and revision (so dashboards can show performance by rollout), and reconcile counts."""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge, start_http_server

from vllm_operator.gates import Run

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
RECONCILES = Counter("vllm_operator_reconciles", "Reconciles by result", ("result",))
WRITES = Counter("vllm_operator_api_writes", "Writes to the Kubernetes API")

_published: dict[tuple[str, str], set[str]] = {}


def serve(port: int) -> None:
    if port:
        start_http_server(port)


def record_runs(namespace: str, service: str, runs: tuple[Run, ...] | list[Run]) -> None:
    """Publishes every completed run of a service; forgets pruned ones."""
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


def forget(namespace: str, service: str) -> None:
    record_runs(namespace, service, [])
