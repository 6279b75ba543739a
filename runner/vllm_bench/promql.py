"""Optional: the server's own view of the run's time window, from a Prometheus server that
scrapes it (--prometheus-url), through prometheus-api-client: its latency histograms and its
state (queue, running requests, KV-cache usage, preemptions).

Client-side numbers include the network and the client; these are what vLLM itself saw.
Quantiles are histogram_quantile over the increase of the buckets across the window. Gauges
are the highest and mean sample of any one server pod across the window (max_over_time /
avg_over_time per series, then max / avg over the pods); preemptions are the increase of the
counter summed over the pods.
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


STATE = {
    "requestsWaiting": "vllm:num_requests_waiting",
    "requestsRunning": "vllm:num_requests_running",
    "kvCacheUsage": "vllm:kv_cache_usage_perc",
}
PREEMPTIONS = "vllm:num_preemptions_total"


def state_queries(model: str, window_seconds: float) -> dict[str, dict[str, str]]:
    """PromQL of the server state over the last `window_seconds`: {key: {stat: query}}."""
    window = f"{max(1, math.ceil(window_seconds))}s"
    out = {
        key: {
            "max": f'max(max_over_time({metric}{{model_name="{model}"}}[{window}]))',
            "mean": f'avg(avg_over_time({metric}{{model_name="{model}"}}[{window}]))',
        }
        for key, metric in STATE.items()
    }
    out["preemptions"] = {
        "total": f'sum(increase({PREEMPTIONS}{{model_name="{model}"}}[{window}]))'
    }
    return out


def _query(prom: Any, url: str, query: str, at: float) -> float | None:
    try:
        res = prom.custom_query(query, params={"time": at})
    except Exception as exc:  # the library raises requests' and its own errors
        raise BenchError("prometheus", f"query to {url} failed: {exc}") from exc
    value = float(res[0]["value"][1]) if res else None
    return value if value is None or math.isfinite(value) else None


def server_state(url: str, model: str, start: float, end: float) -> dict[str, Any]:
    """{requestsWaiting|requestsRunning|kvCacheUsage: {max, mean}, preemptions: {total}}
    evaluated at `end` over [start, end] (Unix seconds); None where no series exists."""
    from prometheus_api_client import PrometheusConnect  # noqa: PLC0415 - optional feature

    prom = PrometheusConnect(url=url, disable_ssl=False)
    return {
        key: {stat: _query(prom, url, q, end) for stat, q in stats.items()}
        for key, stats in state_queries(model, end - start).items()
    }


def server_histograms(url: str, model: str, start: float, end: float) -> dict[str, Any]:
    """{histogram: {p50, p95, p99}} evaluated at `end` over [start, end] (Unix seconds)."""
    from prometheus_api_client import PrometheusConnect  # noqa: PLC0415 - optional feature

    prom = PrometheusConnect(url=url, disable_ssl=False)
    out: dict[str, Any] = {}
    for key, metric in HISTOGRAMS.items():
        out[key] = {}
        for q in QUANTILES:
            query = quantile_query(metric, q, model, end - start)
            out[key][f"p{round(q * 100)}"] = _query(prom, url, query, end)
    return out
