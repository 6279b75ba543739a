"""Part of the "observe" step: live traffic figures from Prometheus, through
prometheus-api-client (read-only; the one place the operator reads Prometheus).

A bake (rollout.canary.bake) compares the canary's pod with the stable pods over the window
since the canary joined the Service's endpoints. What vLLM exports, per pod (the scrape
configs and PodMonitors label each series with `namespace`, `pod` and `service`, the pods'
`app.kubernetes.io/instance`: `<name>` for the serving pods, `<name>-canary` for the canary):

- requests finished: `vllm:e2e_request_latency_seconds_count`;
- time to first token and inter-token latency: the histograms
  `vllm:time_to_first_token_seconds` and `vllm:inter_token_latency_seconds`, p99 over the
  window: the buckets' increase, read by `le`, and the quantile computed here as
  `histogram_quantile` does (`quantile()`), with the lower bound of the bucket that holds it
  (the p99 is known only to lie in that bucket: vLLM's TTFT buckets jump from 100 to 250 ms,
  so a few requests past 100 ms move an interpolated p99 from 100 to 220 ms; decide/bake.py
  aborts only on a bucket wholly above its limit);
- errors: the API server's `http_requests_total{handler=~"/v1/.*"}`, of them `status="5xx"`.

The workload shape (`workload()`): where an objective names no inputTokens/outputTokens, a
revision's benchmark sends what the service's live traffic looks like: the mean prompt and
generation tokens per request of its serving pods over the last hour, or since its last
benchmark run ended if that is sooner (the run's own requests are not live traffic; under
MIN_WORKLOAD_WINDOW_SECONDS: not read), from `vllm:request_prompt_tokens` and
`vllm:request_generation_tokens` (histograms: _sum / _count), once at least MIN_LIVE_REQUESTS
requests finished in it; read when a revision's run is about to start, never more.

The window is at least four scrape intervals (60 s at the default 15 s, the operator's
scrapeInterval setting): fewer samples make no increase. Until the bake is that old, the
window reaches back before the bake began (the canary's benchmark run, its start), so those
figures are shown but decide no abort (decide/bake.py).
"""

from __future__ import annotations

import logging
import math
import re
import time
from typing import Any, Protocol

from vllm_operator.api.records import LiveWorkload
from vllm_operator.observe.state import LiveFigures

log = logging.getLogger("vllm_operator")

MIN_WINDOW_SECONDS = 60
_DURATION = re.compile(r"^(\d+)(ms|s|m|h)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def min_window_seconds(scrape_interval: str) -> int:
    """Four scrape intervals (a Prometheus duration: 15s, 1m, 500ms), at least 4 s; an
    interval that does not parse: MIN_WINDOW_SECONDS."""
    m = _DURATION.match(scrape_interval.strip())
    if not m:
        return MIN_WINDOW_SECONDS
    return max(4, math.ceil(4 * int(m[1]) * _UNIT_SECONDS[m[2]]))


class LiveReader(Protocol):
    """What observe() reads live figures through (a test hands its own)."""

    # the shortest window its figures can cover (a read of a shorter one covers this)
    min_window_seconds: int

    def figures(
        self, namespace: str, selector: str, window_seconds: int, deadline: float | None = None
    ) -> LiveFigures:
        """The figures of the pods `selector` picks; `deadline` (time.monotonic()): raise
        LiveBudgetError rather than start a query past it (a reconcile's budget for its reads)."""
        ...

    def idle(self, namespace: str, service: str, window_seconds: int) -> bool | None:
        """Whether the service had no request in the last `window_seconds` (None: not known)."""
        ...

    def workload(
        self, namespace: str, service: str, window_seconds: int, deadline: float | None = None
    ) -> LiveWorkload | None:
        """The service's live traffic shape over the last `window_seconds` (None: fewer than
        MIN_LIVE_REQUESTS requests in it, or no such metrics)."""
        ...


class LiveBudgetError(Exception):
    """The reads of one reconcile ran past their budget (READ_BUDGET_SECONDS)."""


# a client timeout on each query (the socket's connect and each read: a Prometheus that accepts
# and never answers costs this much, not a worker forever), no retries (the next reconcile is
# the retry), and a budget for all the reads of one reconcile of a baking service (at most 4
# figures() calls of 5 queries: QUERIES_PER_READ x 4 = 20): past it the reads stop and the bake
# says why, deciding nothing meanwhile
CLIENT_TIMEOUT_SECONDS = 5.0
READ_BUDGET_SECONDS = 15.0
QUERIES_PER_READ = 5


def _scalar(result: list[dict[str, Any]]) -> float | None:
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) else value


def quantile(q: float, buckets: dict[float, float]) -> tuple[float, float] | None:
    """The q-quantile of a histogram's cumulative `buckets` (upper bound `le` -> count,
    +Inf among them), as Prometheus's histogram_quantile computes it (promql/quantile.go:
    linear interpolation within the bucket that holds the rank, counts made monotonic, a rank
    in the +Inf bucket answered with the largest finite bound), and the lower bound of that
    bucket; None where histogram_quantile answers NaN (no +Inf bucket, no observation)."""
    bounds = sorted(buckets)
    if len(bounds) < 2 or not math.isinf(bounds[-1]):
        return None
    counts, top = [], 0.0
    for le in bounds:  # (increase() of each series apart can break monotonicity)
        top = max(top, buckets[le])
        counts.append(top)
    total = counts[-1]
    if total <= 0:
        return None
    rank = q * total
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(bounds) - 1:
        return bounds[-2], bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0], bounds[0]
    start, count = 0.0, counts[b]
    if b > 0:
        start, count, rank = bounds[b - 1], count - counts[b - 1], rank - counts[b - 1]
    return start + (bounds[b] - start) * (rank / count), start


def _buckets(result: list[dict[str, Any]]) -> dict[float, float]:
    return {float(r["metric"]["le"]): float(r["value"][1]) for r in result if "le" in r["metric"]}


def queries(
    namespace: str,
    selector: str,
    window_seconds: int,
    min_window: int = MIN_WINDOW_SECONDS,
) -> dict[str, str]:
    """The PromQL of each figure, for the pods that `selector` (PromQL label matchers, e.g.
    'pod="x"' or 'service="y"') picks in `namespace`, over `window_seconds` (at least
    `min_window`)."""
    w = f"{max(window_seconds, min_window)}s"
    sel = f'namespace="{namespace}",{selector}'

    def buckets(histogram: str) -> str:
        return f"sum by (le) (increase({histogram}_bucket{{{sel}}}[{w}]))"

    http = f'http_requests_total{{{sel},handler=~"/v1/.*"}}'
    return {
        "requests": f"sum(increase(vllm:e2e_request_latency_seconds_count{{{sel}}}[{w}]))",
        "http_requests": f"sum(increase({http}[{w}]))",
        "http_errors": f'sum(increase({http[:-1]},status="5xx"}}[{w}]))',
        "ttft_buckets": buckets("vllm:time_to_first_token_seconds"),
        "itl_buckets": buckets("vllm:inter_token_latency_seconds"),
    }


WORKLOAD_WINDOW_SECONDS = 3600
# shorter than this since the service's last benchmark run ended: not read (too little traffic
# to trust, and a window reaching into the run would read its requests as live traffic)
MIN_WORKLOAD_WINDOW_SECONDS = 300
MIN_LIVE_REQUESTS = 100


def duration(seconds: int) -> str:
    """A window as Prometheus and people read it: 1h, 25m, 290s."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def workload_queries(namespace: str, service: str, window: str) -> dict[str, str]:
    """The PromQL of the live workload's figures: the serving pods' (never a canary's)."""
    sel = f'namespace="{namespace}",service="{service}"'  # (a canary's: service <name>-canary)

    def total(series: str) -> str:
        return f"sum(increase({series}{{{sel}}}[{window}]))"

    return {
        "requests": total("vllm:request_prompt_tokens_count"),
        "prompt": total("vllm:request_prompt_tokens_sum"),
        "generation": total("vllm:request_generation_tokens_sum"),
        "generated": total("vllm:request_generation_tokens_count"),
    }


def shape(
    got: dict[str, float | None], window: str, min_requests: int = MIN_LIVE_REQUESTS
) -> LiveWorkload | None:
    """The means of what workload_queries() answered (None: too few requests to trust)."""
    requests, generated = got.get("requests"), got.get("generated")
    prompt, generation = got.get("prompt"), got.get("generation")
    if not requests or not generated or prompt is None or generation is None:
        return None
    if requests < min_requests or generated < min_requests:
        return None
    return LiveWorkload(
        input_tokens=max(1, round(prompt / requests)),
        output_tokens=max(1, round(generation / generated)),
        requests=round(requests),
        window=window,
    )


class PrometheusLive:
    """LiveReader over a Prometheus's HTTP API (prometheus-api-client's PrometheusConnect)."""

    def __init__(
        self,
        url: str,
        timeout_seconds: float = CLIENT_TIMEOUT_SECONDS,
        min_window: int = MIN_WINDOW_SECONDS,
        min_requests: int = MIN_LIVE_REQUESTS,
    ) -> None:
        # imported here: only an operator configured with a Prometheus pays for it
        from prometheus_api_client import PrometheusConnect  # noqa: PLC0415
        from urllib3.util.retry import Retry  # noqa: PLC0415

        self.url = url
        self.min_window_seconds = min_window
        self.min_requests = min_requests
        # `timeout`: the HTTP client's (requests': connect, and each read of the answer); the
        # query's own `timeout` parameter below is PromQL's, on the server's side
        self._prom = PrometheusConnect(
            url=url, disable_ssl=False, timeout=timeout_seconds, retry=Retry(total=0)
        )
        self._timeout = timeout_seconds

    def figures(
        self, namespace: str, selector: str, window_seconds: int, deadline: float | None = None
    ) -> LiveFigures:
        got = {}
        for key, q in queries(namespace, selector, window_seconds, self.min_window_seconds).items():
            if deadline is not None and time.monotonic() > deadline:
                raise LiveBudgetError(f"the reads ran past their {READ_BUDGET_SECONDS:g} s budget")
            got[key] = self._prom.custom_query(q, params={"timeout": f"{self._timeout:g}s"})
        ttft = quantile(0.99, _buckets(got["ttft_buckets"]))
        itl = quantile(0.99, _buckets(got["itl_buckets"]))
        return LiveFigures(
            requests=_scalar(got["requests"]) or 0.0,
            http_requests=_scalar(got["http_requests"]) or 0.0,
            http_errors=_scalar(got["http_errors"]) or 0.0,
            ttft_p99=ttft[0] if ttft else None,
            itl_p99=itl[0] if itl else None,
            ttft_p99_floor=ttft[1] if ttft else None,
            itl_p99_floor=itl[1] if itl else None,
        )

    def idle(self, namespace: str, service: str, window_seconds: int) -> bool | None:
        """Whether the service had no request in the last `window_seconds` (is_idle())."""
        got = {
            key: _scalar(self._prom.custom_query(q, params={"timeout": f"{self._timeout:g}s"}))
            for key, q in idle_queries(namespace, service, duration(window_seconds)).items()
        }
        return is_idle(got)

    def workload(
        self, namespace: str, service: str, window_seconds: int, deadline: float | None = None
    ) -> LiveWorkload | None:
        window = duration(window_seconds)
        got: dict[str, float | None] = {}
        for key, q in workload_queries(namespace, service, window).items():
            if deadline is not None and time.monotonic() > deadline:
                raise LiveBudgetError(f"the reads ran past their {READ_BUDGET_SECONDS:g} s budget")
            answer = self._prom.custom_query(q, params={"timeout": f"{self._timeout:g}s"})
            got[key] = _scalar(answer)
        return shape(got, window, self.min_requests)


_readers: dict[tuple[str, str], PrometheusLive] = {}


def live_reader(url: str, scrape_interval: str = "15s") -> LiveReader | None:
    """The operator's reader of `url` (one per URL and interval; None: no Prometheus
    configured); `scrape_interval`: how often Prometheus scrapes vLLM (its figures' grain)."""
    if not url:
        return None
    key = (url, scrape_interval)
    if key not in _readers:
        _readers[key] = PrometheusLive(url, min_window=min_window_seconds(scrape_interval))
    return _readers[key]


def idle_queries(namespace: str, service: str, window: str) -> dict[str, str]:
    """Whether the service's serving pods had any request in `window` (scale to zero): the
    requests finished in it, and those running or waiting now."""
    sel = f'namespace="{namespace}",service="{service}"'
    return {
        "finished": f"sum(increase(vllm:request_success_total{{{sel}}}[{window}]))",
        "busy": f"sum(vllm:num_requests_running{{{sel}}})"
        f" + sum(vllm:num_requests_waiting{{{sel}}})",
    }


def is_idle(got: dict[str, float | None]) -> bool | None:
    """No request finished, running or waiting (None: Prometheus has no series of the service:
    not known, so not idle)."""
    finished, busy = got.get("finished"), got.get("busy")
    if finished is None or busy is None:
        return None
    return finished < 0.5 and busy < 0.5  # (increase() extrapolates: not exactly 0)
