"""Reading a vLLM server's Prometheus /metrics with prometheus_client's text parser, and
polling it during a phase (peak queue depth, running requests, KV-cache usage).

Counter samples keep their `_total` suffix here (the parser strips it only from family
names); `MetricsSnapshot.counter` accepts either spelling. Metric names are those of the
vLLM V1 engine (0.32): see FACTS.md; the names used by the runner are the constants below.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

CACHE_CONFIG_INFO = "vllm:cache_config_info"
REQUESTS_WAITING = "vllm:num_requests_waiting"
REQUESTS_RUNNING = "vllm:num_requests_running"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits"
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries"
PREEMPTIONS = "vllm:num_preemptions"
GENERATION_TOKENS = "vllm:generation_tokens"
POLLED = (REQUESTS_WAITING, REQUESTS_RUNNING, KV_CACHE_USAGE)  # what MetricsPoller records


@dataclass(frozen=True)
class MetricsSnapshot:
    """The samples of one /metrics scrape, optionally restricted to one served model (by
    the `model_name` label; samples without that label always match)."""

    samples: tuple[Sample, ...]
    model: str | None = None
    taken_at: float = field(default_factory=time.time)

    def _matching(self, name: str) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.name == name
            and (self.model is None or s.labels.get("model_name", self.model) == self.model)
        ]

    def has(self, name: str) -> bool:
        return bool(self._matching(name) or self._matching(f"{name}_total"))

    def gauge(self, name: str) -> float | None:
        """The sum over engines of a gauge, None when the server does not export it."""
        found = self._matching(name)
        return sum(s.value for s in found) if found else None

    def counter(self, name: str) -> float | None:
        """The sum over engines of a counter, with or without its `_total` suffix."""
        base = name.removesuffix("_total")
        return self.gauge(f"{base}_total") if self._matching(f"{base}_total") else self.gauge(base)

    def info_labels(self, name: str) -> dict[str, str] | None:
        """The labels of an info-style gauge (such as vllm:cache_config_info) without the
        per-engine label; None when absent."""
        found = self._matching(name)
        if not found:
            return None
        return {k: v for k, v in sorted(found[0].labels.items()) if k != "engine"}


def parse_metrics(
    text: str, model: str | None = None, only: Collection[str] | None = None
) -> MetricsSnapshot:
    """Parses Prometheus text exposition format (what vLLM's /metrics serves). `only`: the
    metric families to keep; the lines of other families are dropped before parsing, which
    makes a scrape of vLLM's ~700 lines about 50 times cheaper for a poller."""
    if only is not None:
        text = "\n".join(line for line in text.splitlines() if _family_of(line) in only)
    samples = tuple(s for family in text_string_to_metric_families(text) for s in family.samples)
    return MetricsSnapshot(samples=samples, model=model)


def _family_of(line: str) -> str:
    """The metric name a line of the text format is about ("# HELP name ...", "# TYPE name
    ...", or "name{labels} value"), without a counter's _total suffix."""
    if line.startswith("#"):
        parts = line.split(" ", 3)
        name = parts[2] if len(parts) > 2 else ""
    else:
        name = line.split("{", 1)[0].split(" ", 1)[0]
    return name.removesuffix("_total")


def counter_delta(before: MetricsSnapshot, after: MetricsSnapshot, name: str) -> float | None:
    """How much a counter grew between two snapshots; None if either lacks it."""
    a, b = before.counter(name), after.counter(name)
    return None if a is None or b is None else b - a


@dataclass
class MetricsPoller:
    """Scrapes /metrics every `interval` seconds while a phase runs and keeps a timeline of
    queue depth, running requests and KV-cache usage. Scrape failures are counted, not
    raised: the phase's own requests report a server that is really gone."""

    fetch: Callable[[], Awaitable[MetricsSnapshot]]
    interval: float = 0.25
    timeline: list[dict[str, float | None]] = field(default_factory=list)
    failures: int = 0
    _t0: float = field(default_factory=time.perf_counter)

    @property
    def peak_waiting(self) -> float | None:
        values = [p["waiting"] for p in self.timeline if p["waiting"] is not None]
        return max(values) if values else None

    @property
    def peak_running(self) -> float | None:
        values = [p["running"] for p in self.timeline if p["running"] is not None]
        return max(values) if values else None

    async def _loop(self) -> None:
        while True:
            try:
                snap = await self.fetch()
            except Exception:  # noqa: BLE001 - any scrape failure is only counted
                self.failures += 1
            else:
                self._record(snap)
            await asyncio.sleep(self.interval)

    def _record(self, snap: MetricsSnapshot) -> None:
        self.timeline.append(
            {
                "tSeconds": round(time.perf_counter() - self._t0, 4),
                "waiting": snap.gauge(REQUESTS_WAITING),
                "running": snap.gauge(REQUESTS_RUNNING),
                "kvCacheUsage": snap.gauge(KV_CACHE_USAGE),
            }
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[MetricsPoller]:
        self._t0 = time.perf_counter()
        task = asyncio.create_task(self._loop())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            with contextlib.suppress(Exception):  # one last scrape: the end state of the phase
                self._record(await self.fetch())
