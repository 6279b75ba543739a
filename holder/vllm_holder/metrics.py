"""The holder's Prometheus metrics, on a registry of its own (served on the admin port)."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# what became of a request that reached a service's port
OUTCOMES = (
    "forwarded",  # the upstream answered and the answer was relayed (whatever its status)
    "rejected_queue_full",  # 429: `queue` requests were already held
    "timed_out",  # 503 (or an SSE error event): held longer than holdTimeoutSeconds
    "client_gone",  # the client closed its connection before its answer was complete
    "upstream_error",  # the upstream could not be reached or broke off mid-answer
    "shutdown",  # still held when the grace period after SIGTERM ended: 503
    "rejected_too_large",  # 413: a body over --max-body-bytes (held bodies are in memory)
    "internal_error",  # a defect of the holder (500)
)
# hold times run from a probe's round trip to a cold GPU start (minutes)
HOLD_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 90, 120, 180, 240, 300, 450, 600, 900, 1800)


class HolderMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.held = Gauge(
            "vllm_holder_requests_held",
            "Requests held now, waiting for a Ready replica",
            ["service"],
            registry=self.registry,
        )
        self.requests = Counter(
            "vllm_holder_requests",
            "Requests that reached the holder, by what became of them",
            ["service", "outcome"],
            registry=self.registry,
        )
        self.hold_seconds = Histogram(
            "vllm_holder_hold_seconds",
            "How long a held request was held (until forwarded, answered 503, or gone)",
            ["service"],
            buckets=HOLD_BUCKETS,
            registry=self.registry,
        )
        self.wake_requests = Counter(
            "vllm_holder_wake_requests",
            "Wake requests (the VLLMService's wake annotation patched), by result",
            ["service", "result"],
            registry=self.registry,
        )
        self.backend_ready = Gauge(
            "vllm_holder_backend_ready",
            "1 when the service's backend last answered GET /health with 200",
            ["service"],
            registry=self.registry,
        )
        self.config_reloads = Counter(
            "vllm_holder_config_reloads",
            "Configuration documents read (ok) or refused (invalid: the previous one stays)",
            ["result"],
            registry=self.registry,
        )

    def forget(self, service: str) -> None:
        """A service left the configuration: its gauges go (the counters stay, monotonic)."""
        for gauge in (self.held, self.backend_ready):
            with contextlib.suppress(KeyError):
                gauge.remove(service)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
