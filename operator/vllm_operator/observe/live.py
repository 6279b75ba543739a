"""Part of the "observe" step: live traffic figures from Prometheus, through
prometheus-api-client (read-only; the one place the operator reads Prometheus).

A bake (rollout.canary.bake) compares the canary's pod with the stable pods over the window
since the canary joined the Service's endpoints. What vLLM exports, per pod (the scrape
configs and PodMonitors label each series with `namespace`, `pod` and `service`, the pods'
`app.kubernetes.io/instance`: `<name>` for the serving pods, `<name>-canary` for the canary):

- requests finished: `vllm:e2e_request_latency_seconds_count`;
- time to first token and inter-token latency: the histograms
  `vllm:time_to_first_token_seconds` and `vllm:inter_token_latency_seconds`, p99 over the
  window (`histogram_quantile` of the buckets' increase);
- errors: the API server's `http_requests_total{handler=~"/v1/.*"}`, of them `status="5xx"`.

The window is at least 60 s (four samples at the default 15 s scrape interval).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Protocol

from vllm_operator.observe.state import LiveFigures

log = logging.getLogger("vllm_operator")

MIN_WINDOW_SECONDS = 60


class LiveReader(Protocol):
    """What observe() reads live figures through (a test hands its own)."""

    def figures(self, namespace: str, selector: str, window_seconds: int) -> LiveFigures: ...


def _scalar(result: list[dict[str, Any]]) -> float | None:
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) else value  # NaN (no sample in a quantile): None


def queries(namespace: str, selector: str, window_seconds: int) -> dict[str, str]:
    """The PromQL of each figure, for the pods that `selector` (PromQL label matchers, e.g.
    'pod="x"' or 'service="y"') picks in `namespace`."""
    w = f"{max(window_seconds, MIN_WINDOW_SECONDS)}s"
    sel = f'namespace="{namespace}",{selector}'

    def p99(histogram: str) -> str:
        return f"histogram_quantile(0.99, sum by (le) (increase({histogram}_bucket{{{sel}}}[{w}])))"

    http = f'http_requests_total{{{sel},handler=~"/v1/.*"}}'
    return {
        "requests": f"sum(increase(vllm:e2e_request_latency_seconds_count{{{sel}}}[{w}]))",
        "http_requests": f"sum(increase({http}[{w}]))",
        "http_errors": f'sum(increase({http[:-1]},status="5xx"}}[{w}]))',
        "ttft_p99": p99("vllm:time_to_first_token_seconds"),
        "itl_p99": p99("vllm:inter_token_latency_seconds"),
    }


class PrometheusLive:
    """LiveReader over a Prometheus's HTTP API (prometheus-api-client's PrometheusConnect)."""

    def __init__(self, url: str, timeout_seconds: float = 10) -> None:
        # imported here: only an operator configured with a Prometheus pays for it
        from prometheus_api_client import PrometheusConnect  # noqa: PLC0415

        self.url = url
        self._prom = PrometheusConnect(url=url, disable_ssl=False)
        self._timeout = timeout_seconds

    def figures(self, namespace: str, selector: str, window_seconds: int) -> LiveFigures:
        got = {
            key: _scalar(self._prom.custom_query(q, params={"timeout": f"{self._timeout:g}s"}))
            for key, q in queries(namespace, selector, window_seconds).items()
        }
        return LiveFigures(
            requests=got["requests"] or 0.0,
            http_requests=got["http_requests"] or 0.0,
            http_errors=got["http_errors"] or 0.0,
            ttft_p99=got["ttft_p99"],
            itl_p99=got["itl_p99"],
        )


_readers: dict[str, PrometheusLive] = {}


def live_reader(url: str) -> LiveReader | None:
    """The operator's reader of `url` (one per URL; None: no Prometheus configured)."""
    if not url:
        return None
    if url not in _readers:
        _readers[url] = PrometheusLive(url)
    return _readers[url]
