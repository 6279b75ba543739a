"""The alerts' names and hold times, defined once.

The rules (render/monitoring.py, and through it deploy/monitoring/) and the API's field
descriptions (api/spec.py, and through it the generated CRD) both name the alerts; render imports
spec, so the names live here, where both can import them (issue 22: the CRD named six alerts
that did not exist). tests/unit/api/test_alert_names.py keeps the CRD, docs/monitoring.md, the
runbooks and the rules naming the same alerts.
"""

from __future__ import annotations

from dataclasses import dataclass

_UNITS = {"s": ("second", 1), "m": ("minute", 60), "h": ("hour", 3600)}


@dataclass(frozen=True)
class AlertName:
    """An alert's name and its `for` (how long the condition holds before it fires)."""

    name: str
    for_: str  # a Prometheus duration of one unit: "2m", "0s"

    @property
    def held(self) -> str:
        """The `for` in words: "for 2 minutes", "for 1 minute", "at once"."""
        count, unit = int(self.for_[:-1]), _UNITS[self.for_[-1]][0]
        if count == 0:
            return "at once"
        return f"for {count} {unit}{'' if count == 1 else 's'}"


# the reference lab's alerts, on vLLM's metrics (thresholds: spec.monitoring.alerts)
KV_CACHE_USAGE_HIGH = AlertName("VLLMKVCacheUsageHigh", "2m")
E2E_LATENCY_P99_HIGH = AlertName("VLLME2ELatencyP99High", "5m")
TTFT_P99_HIGH = AlertName("VLLMTTFTP99High", "2m")
TPOT_P99_HIGH = AlertName("VLLMTPOTP99High", "2m")
REQUESTS_WAITING_HIGH = AlertName("VLLMRequestsWaitingHigh", "1m")
# the lab gives the threshold; the 5 minutes are the project's choice
PREEMPTIONS_HIGH = AlertName("VLLMPreemptionsHigh", "5m")

# the operator's own alerts, on its gauges (vllm_operator.metrics)
BENCHMARK_GATE_FAILED = AlertName("VLLMBenchmarkGateFailed", "0s")
ROLLED_BACK = AlertName("VLLMRolledBack", "0s")
AUTOSCALER_METRIC_UNAVAILABLE = AlertName("VLLMAutoscalerMetricUnavailable", "5m")
