"""Live load: what else the measured server served while the runner measured it.

The operator's Job measures one pod of the new revision directly (its pod IP), so none of the
run's requests land on another replica; production traffic still reaches that pod through the
Service, and the numbers the gates judge are worth only as much as the pod was the runner's
alone. Around each scenario the runner scrapes the target's /metrics:

- foreign requests: the growth of `vllm:request_success` (every finished request, whatever
  its finish reason, aborts included) minus the requests the runner sent in the scenario;
  the same for `vllm:prompt_tokens` and `vllm:generation_tokens` (the runner's own token
  counts are the server's, exactly: tests/vllm/test_bench_runner.py);
- foreign in flight: while the scenario runs, a poller reads `vllm:num_requests_running` +
  `vllm:num_requests_waiting` and subtracts the runner's own requests in flight at the
  time (the higher of the counts before and after the scrape). The rest is somebody else's.
  This is a lower bound: a request of the runner's still on its way to the server, or already
  finished there but not yet read, hides a foreign one.

The server updates its counters a moment after the last token of a request is sent, so the
scrape after a scenario is repeated (briefly) until the counted requests cover the runner's
own; otherwise the runner's last request would show up as a foreign one in the next window.

Run against a load-balanced Service rather than one pod, the scrapes land on any replica and
these figures mean little: the operator targets a pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from vllm_bench.metrics import (
    GENERATION_TOKENS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    MetricsSnapshot,
    counter_delta,
)

REQUEST_SUCCESS = "vllm:request_success"
PROMPT_TOKENS = "vllm:prompt_tokens"
# what the live-load scrapes parse (the rest of vLLM's ~700 lines is dropped before parsing)
FAMILIES = (REQUEST_SUCCESS, PROMPT_TOKENS, GENERATION_TOKENS, REQUESTS_RUNNING, REQUESTS_WAITING)
SETTLE_SECONDS = 2.0  # how long the scrape after a scenario waits for the counters to catch up
SETTLE_INTERVAL = 0.05
# samples of these phases did not go to the server (the naive baseline runs transformers)
NOT_SERVED_PHASES = frozenset({"naive"})


def own_traffic(samples: Iterable[dict[str, Any]]) -> dict[str, int]:
    """What the runner itself sent, from its samples: requests (a retried empty completion is
    two), prompt and output tokens (of the retry: the empty first attempt's output is not
    known, so a retried request's first output tokens would count as foreign)."""
    requests = prompt = output = 0
    for s in samples:
        if s.get("phase") in NOT_SERVED_PHASES:
            continue
        attempts = 2 if s.get("retried") else 1
        requests += attempts
        prompt += attempts * int(s.get("promptTokens") or 0)
        output += int(s.get("outputTokens") or 0)
    return {"requests": requests, "promptTokens": prompt, "outputTokens": output}


def _foreign(server: float | None, own: int) -> int | None:
    # never negative: the server not yet counting the runner's last request is not load
    return None if server is None else max(0, round(server) - own)


def account(
    before: MetricsSnapshot | None,
    after: MetricsSnapshot | None,
    own: dict[str, int],
    polled: PollStats,
) -> dict[str, Any]:
    """One window's live load (a scenario, or one round of it): pure, from the scrapes
    around it, the runner's own traffic and the poller's peaks."""

    def delta(name: str) -> float | None:
        if before is None or after is None:
            return None
        grown = counter_delta(before, after, name)
        # a counter that went down: the server restarted in between, nothing is known
        return None if grown is None or grown < 0 else grown

    requests, prompt, generation = (
        delta(REQUEST_SUCCESS),
        delta(PROMPT_TOKENS),
        delta(GENERATION_TOKENS),
    )
    return {
        "serverRequests": None if requests is None else round(requests),
        "ownRequests": own["requests"],
        "foreignRequests": _foreign(requests, own["requests"]),
        "serverPromptTokens": None if prompt is None else round(prompt),
        "foreignPromptTokens": _foreign(prompt, own["promptTokens"]),
        "serverGenerationTokens": None if generation is None else round(generation),
        "foreignGenerationTokens": _foreign(generation, own["outputTokens"]),
        "peakRunning": polled.peak_running,
        "peakWaiting": polled.peak_waiting,
        "peakForeignInFlight": polled.peak_foreign,
        "scrapes": polled.scrapes,
        "scrapeFailures": polled.failures,
    }


def _add(a: int | float | None, b: int | float | None) -> int | float | None:
    return None if a is None or b is None else a + b


def _max(a: int | float | None, b: int | float | None) -> int | float | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


SUMMED = (
    "serverRequests",
    "ownRequests",
    "foreignRequests",
    "serverPromptTokens",
    "foreignPromptTokens",
    "serverGenerationTokens",
    "foreignGenerationTokens",
    "scrapes",
    "scrapeFailures",
)
PEAKS = ("peakRunning", "peakWaiting", "peakForeignInFlight")


def merge(windows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Several windows as one (a scenario's rounds, or the whole run): counts add up (unknown
    if any window's is), peaks are the highest."""
    out: dict[str, Any] = {}
    for w in windows:
        if not out:
            out = {k: w.get(k) for k in (*SUMMED, *PEAKS)}
            continue
        for k in SUMMED:
            out[k] = _add(out[k], w.get(k))
        for k in PEAKS:
            out[k] = _max(out[k], w.get(k))
    return out


def document(target: str, windows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The result document's `liveLoad`: per scenario and for the whole run, and `quiet`:
    no foreign request finished and none was seen in flight (null: not known, the scrapes
    failed)."""
    scenarios = {name: merge(ws) for name, ws in windows.items() if ws}
    total = merge(scenarios.values())
    foreign, peak = total.get("foreignRequests"), total.get("peakForeignInFlight")
    quiet = None if foreign is None or peak is None else foreign == 0 and peak == 0
    return {"target": target, **total, "quiet": quiet, "scenarios": scenarios}


@dataclass
class PollStats:
    """Peaks of the target's running and waiting requests during a window, and of those that
    were not the runner's."""

    scrapes: int = 0
    failures: int = 0
    peak_running: float | None = None
    peak_waiting: float | None = None
    peak_foreign: float | None = None

    def record(self, snap: MetricsSnapshot, own_in_flight: int) -> None:
        self.scrapes += 1
        running, waiting = snap.gauge(REQUESTS_RUNNING), snap.gauge(REQUESTS_WAITING)
        self.peak_running = _max(self.peak_running, running)
        self.peak_waiting = _max(self.peak_waiting, waiting)
        if running is not None:
            foreign = max(0.0, running + (waiting or 0.0) - own_in_flight)
            self.peak_foreign = _max(self.peak_foreign, foreign)


@dataclass
class LiveLoad:
    """Measures the live load around each scenario: `async with live.window(name, result):`.

    `fetch`: one scrape of the target's /metrics (FAMILIES only); `in_flight`: how many of the
    runner's requests are in flight now."""

    fetch: Callable[[], Awaitable[MetricsSnapshot]]
    in_flight: Callable[[], int]
    interval: float = 0.5
    windows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    async def _scrape(self) -> MetricsSnapshot | None:
        try:
            return await self.fetch()
        except Exception:  # noqa: BLE001 - a failed scrape makes the figures unknown, no more
            return None

    async def _poll(self, stats: PollStats) -> None:
        while True:
            own = self.in_flight()
            snap = await self._scrape()
            if snap is None:
                stats.failures += 1
            else:
                stats.record(snap, max(own, self.in_flight()))
            await asyncio.sleep(self.interval)

    async def _settled(self, before: MetricsSnapshot | None, own: int) -> MetricsSnapshot | None:
        """The scrape after a window, repeated until the server has counted the runner's own
        requests (or SETTLE_SECONDS passed)."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            after = await self._scrape()
            if after is None or before is None:
                return after
            counted = counter_delta(before, after, REQUEST_SUCCESS)
            if counted is None or counted >= own or time.monotonic() >= deadline:
                return after
            await asyncio.sleep(SETTLE_INTERVAL)

    @contextlib.asynccontextmanager
    async def window(self, name: str, samples: list[dict[str, Any]]) -> AsyncIterator[None]:
        """Scrapes before, polls during, scrapes after (settled); `samples`: the list the
        scenario appends its requests to (read when the window closes)."""
        before = await self._scrape()
        stats = PollStats(failures=0 if before is not None else 1)
        task = asyncio.create_task(self._poll(stats))
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            own = own_traffic(samples)
            after = await self._settled(before, own["requests"])
            if after is None:
                stats.failures += 1
            else:
                stats.record(after, self.in_flight())
            self.windows.setdefault(name, []).append(account(before, after, own, stats))
