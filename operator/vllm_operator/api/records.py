"""The benchmark history's record types: one run as its ConfigMaps record it (`Run`), the
numbers of its result (`Headline`) and the one pod it measures (`Target`).

Shared by every stage, so they sit at the bottom: render writes the records (render/benchmark.py),
observe reads them back into these (observe/read.py history), decide judges and aims them
(decide/gates.py, decide/target_pod.py), write and the metrics publish them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Target:
    """The pod a run measures (decide/target_pod.py chooses it)."""

    pod: str
    uid: str
    ip: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"http://{host}:{self.port}"


# result.json's `headline`: each key the operator reads and the Headline field it is read into.
# The one list of them: observe's validating model (observe/benchresult.ResultHeadline) is built
# from it, with the types the status schema declares (HEADLINE_COUNTS are integers, the rest
# numbers), so a key added here is read, checked and carried in one place.
HEADLINE_KEYS: dict[str, str] = {
    "kv_cache_tokens": "kvCacheTokens",
    "max_concurrency": "maxConcurrencyAtMaxModelLen",
    "output_tokens_per_second": "outputTokensPerSecond",
    "batching_speedup": "batchingSpeedup",
    "prefix_ttft_speedup": "prefixTtftSpeedup",
    "prefix_hit_rate": "prefixHitRate",
    "ttft_p50_seconds": "ttftP50Seconds",
    "ttft_p95_seconds": "ttftP95Seconds",
    "request_latency_p99_seconds": "requestLatencyP99Seconds",
}
HEADLINE_COUNTS = frozenset({"kv_cache_tokens"})


@dataclass(frozen=True)
class Headline:
    """The numbers the status, the printer columns and the gates use (HEADLINE_KEYS: where
    each is read from)."""

    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    output_tokens_per_second: float | None = None
    batching_speedup: float | None = None
    prefix_ttft_speedup: float | None = None
    prefix_hit_rate: float | None = None
    ttft_p50_seconds: float | None = None
    ttft_p95_seconds: float | None = None
    request_latency_p99_seconds: float | None = None

    @classmethod
    def from_result(cls, result: dict[str, Any]) -> Headline:
        h = result.get("headline") or {}
        return cls(**{name: h.get(key) for name, key in HEADLINE_KEYS.items()})


# the fields and the key list are one set (checked as the module loads: a field without a key,
# or a key without a field, is a programming error, not a run's)
assert set(HEADLINE_KEYS) == {f.name for f in fields(Headline)}, "HEADLINE_KEYS != Headline"


@dataclass(frozen=True)
class LiveWorkload:
    """The service's live traffic shape as vLLM's own histograms recorded it (observe/live.py:
    the mean prompt and generation tokens per request of its serving pods over `window`): the
    workload a revision's benchmark sends where the objective names none. Recorded with the
    run (its record), so that the capacity says what it was measured for."""

    input_tokens: int
    output_tokens: int
    requests: int  # the requests the means are of (about: Prometheus's increase() extrapolates)
    window: str  # a Prometheus duration: 1h

    def dump(self) -> str:
        return json.dumps(
            {
                "inputTokens": self.input_tokens,
                "outputTokens": self.output_tokens,
                "requests": self.requests,
                "window": self.window,
            },
            sort_keys=True,
        )

    @classmethod
    def load(cls, text: str) -> LiveWorkload | None:
        """None for "" or anything not written by dump() (a record is input)."""
        try:
            raw = json.loads(text) if text else None
            if not isinstance(raw, dict):
                return None
            values = (raw["inputTokens"], raw["outputTokens"], raw["requests"])
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
                return None
            return cls(*values, window=str(raw["window"])[:16])
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        return (
            f"live traffic: {self.input_tokens} prompt / {self.output_tokens} output tokens, "
            f"the mean of about {self.requests} requests over {self.window}"
        )


@dataclass(frozen=True)
class Run:
    """One benchmark run as recorded in its result ConfigMap (the history)."""

    revision: str
    name: str
    created: str
    state: str  # Running, Complete, Failed
    spec_json: str
    result: dict[str, Any] | None = None
    message: str = ""
    verdict: str | None = None  # gates.PASSED or FAILED, recorded when the result arrived
    verdict_failures: str = ""
    target: Target | None = None  # the one pod the run measures (its record; decide/target_pod.py)
    confirmation: str = ""  # a Failed verdict: the run that measures the revision again
    served_before: str = ""  # the revision rolled out before this one, as the run started
    spec_hash: str = ""  # the record's hash of spec_json ("": recorded by an earlier version)
    summary: str = ""  # the summary its record lacks, to write (observe.history): "" if none
    # the live traffic shape it was sent (its record; None: the objective's or the runner's)
    live_workload: LiveWorkload | None = None

    @property
    def headline(self) -> Headline:
        return Headline.from_result(self.result or {})


@dataclass(frozen=True)
class Capacity:
    """What one revision's benchmark says a pod of it serves within the service's latency
    objective (decide/capacity.py derives it from the run's batching ladder): what the
    autoscaler targets while that revision serves, and status.capacity."""

    revision: str
    run: str
    measured_at: str  # the run's creation time (its record's)
    # the highest concurrency per pod at which both latencies still meet the objective
    # (interpolated between the ladder's levels); 0: not even one request at a time does
    concurrency_per_pod: float
    requests_per_second: float | None  # per pod at that concurrency
    output_tokens_per_second: float | None  # per pod at that concurrency
    prefill_tokens_per_second: float | None  # one request alone: prompt tokens / TTFT p50
    kv_cache_tokens: int | None
    bound_by: str  # what ended it: "ttft", "tpot", or "ladderTop" (still met at the top)
    input_tokens: float | None  # the workload measured: mean prompt tokens, output tokens
    output_tokens: int | None
    workload_source: str  # "objective" (the spec's), "liveTraffic" or "runnerDefault"
    levels: tuple[tuple[int, float | None, float | None], ...] = ()  # (c, ttft, tpot) at p
    workload_from: str = ""  # the workload in words (the live traffic's: what and how much)

    @property
    def at_least(self) -> bool:
        """The ladder's top level still met the objective: the capacity is at least this."""
        return self.bound_by == "ladderTop"
