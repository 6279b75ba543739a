"""Optional: the server's own latency histograms over the run's time window, from a
Prometheus server that scrapes it (--prometheus-url), through prometheus-api-client.

Client-side numbers include the network and the client; these are what vLLM itself saw.
Quantiles are histogram_quantile over the increase of the buckets across the window.
"""

from __future__ import annotations

import math
from typing import Any

from vllm_bench.client import BenchError

HISTOGRAMS = {
    "timeToFirstTokenSeconds": "vllm:time_to_first_token_seconds",
    "interTokenLatencySeconds": "vllm:inter_token_latency_seconds",
    "e2eRequestLatencySeconds": "vllm:e2e_request_latency_seconds",
    "requestQueueTimeSeconds": "vllm:request_queue_time_seconds",
}
QUANTILES = (0.5, 0.95, 0.99)


def quantile_query(metric: str, quantile: float, model: str, window_seconds: float) -> str:
    """PromQL for one quantile of a histogram over the last `window_seconds`."""
    window = f"{max(1, math.ceil(window_seconds))}s"
    selector = f'{metric}_bucket{{model_name="{model}"}}'
    return f"histogram_quantile({quantile}, sum by (le) (increase({selector}[{window}])))"


def server_histograms(url: str, model: str, start: float, end: float) -> dict[str, Any]:
    """{histogram: {p50, p95, p99}} evaluated at `end` over [start, end] (Unix seconds)."""
    from prometheus_api_client import PrometheusConnect  # noqa: PLC0415 - optional feature

    prom = PrometheusConnect(url=url, disable_ssl=False)
    out: dict[str, Any] = {}
    for key, metric in HISTOGRAMS.items():
        out[key] = {}
        for q in QUANTILES:
            query = quantile_query(metric, q, model, end - start)
            try:
                res = prom.custom_query(query, params={"time": end})
            except Exception as exc:  # the library raises requests' and its own errors
                raise BenchError("prometheus", f"query to {url} failed: {exc}") from exc
            value = float(res[0]["value"][1]) if res else None
            out[key][f"p{round(q * 100)}"] = (
                value if value is None or math.isfinite(value) else None
            )
    return out
