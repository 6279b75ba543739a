"""One service's holding: its bounded queue, its backend's readiness, its wake, its forwarding.

A request on the service's port is forwarded at once when the backend answered GET /health
with 200 within the last READY_FRESH_SECONDS; otherwise it is held (in arrival order, at most
`queue` of them: beyond, 429 with Retry-After). While requests are held the backend is probed
at most every probe interval; its first 200 releases every held request, in arrival order, to
be forwarded at once (forward.Upstream.dispatch keeps that order on the wire). A request whose
upstream cannot be connected to (the `-ready` Service lost its endpoints again) is held again,
its hold time still counted from its arrival.

The first held request of a burst asks for a replica (wake.KubeWaker: the VLLMService's wake
annotation), once: a burst is every request held from that ask until the backend is next seen
ready, or until the ask is wake_timeout_seconds old with requests still held (then it is asked
again). The ask runs beside the holding with its own retries and never delays it.

A held request whose JSON body has `"stream": true` gets its 200 and `text/event-stream`
headers at once and an SSE comment every keepalive interval until it is forwarded, so that
clients and proxies with idle timeouts keep the connection; an upstream error is then one
`data: {"error": ...}` event. A non-streaming request gets no bytes until its answer.

A client that goes away while held is dropped: the listener runs with aiohttp's
`handler_cancellation`, so the handler is cancelled when the connection is lost (otherwise
aiohttp lets it run on), the request leaves the queue and is counted `client_gone`; the
transport is checked once more just before forwarding.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import enum
import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from aiohttp import web

from vllm_holder.config import ServiceConfig
from vllm_holder.forward import Upstream, relayed_headers
from vllm_holder.metrics import HolderMetrics
from vllm_holder.wake import WakeError

log = logging.getLogger("vllm_holder.hold")

# a 200 from /health this recent lets a request through without holding it
READY_FRESH_SECONDS = 2.0
KEEPALIVE_COMMENT = b": waiting for a replica\n\n"
WAKE_BACKOFF_FIRST_SECONDS = 0.5
WAKE_BACKOFF_MAX_SECONDS = 30.0
# of an upstream's error body, what the SSE error event repeats
ERROR_BODY_BYTES = 4096


class Waker(Protocol):
    async def wake(self, vllm_service: str) -> None: ...


@dataclass(frozen=True)
class Timing:
    probe_interval_seconds: float = 0.5
    keepalive_seconds: float = 5.0
    wake_timeout_seconds: float = 60.0


class Release(enum.Enum):
    FORWARD = "forward"  # the backend is ready
    SHUTDOWN = "shutdown"  # the grace period after SIGTERM ended
    CLIENT_GONE = "client_gone"  # a keep-alive comment found the connection closed


@dataclass(eq=False)
class _Held:
    arrived: float  # time.monotonic()
    seq: int
    released: asyncio.Future[Release]


@dataclass
class _Request:
    """What one handler call knows about its request."""

    request: web.Request
    body: bytes
    streaming: bool
    arrived: float = field(default_factory=time.monotonic)
    outcome: str | None = None
    early: web.StreamResponse | None = None  # the SSE response begun while held


class ServiceHolder:
    def __init__(
        self,
        config: ServiceConfig,
        *,
        upstream: Upstream,
        waker: Waker,
        metrics: HolderMetrics,
        timing: Timing,
    ) -> None:
        self.config = config
        self._upstream = upstream
        self._waker = waker
        self._metrics = metrics
        self._timing = timing
        self._held: list[_Held] = []  # arrival order
        self._seq = itertools.count()
        self._active = 0  # handler calls running: held or forwarding
        self._idle = asyncio.Event()
        self._idle.set()
        self._dispatch_lock = asyncio.Lock()
        self._ready_seen_at: float | None = None
        self._last_probe_at = float("-inf")
        self._probe_task: asyncio.Task[bool] | None = None
        self._probe_loop: asyncio.Task[None] | None = None
        self._wake_asked_at: float | None = None
        self._wake_task: asyncio.Task[None] | None = None
        self.draining = False  # answers close their connections (set after SIGTERM)
        self._metrics.held.labels(config.name).set(0)
        self._metrics.backend_ready.labels(config.name).set(0)

    # ---------- what the server asks ----------

    @property
    def held(self) -> int:
        return len(self._held)

    @property
    def active(self) -> int:
        return self._active

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def release_all(self, how: Release) -> None:
        held, self._held = self._held, []
        for h in held:
            if not h.released.done():
                h.released.set_result(how)
        self._gauge_held()

    async def close(self) -> None:
        for task in (self._probe_loop, self._probe_task, self._wake_task):
            if task is not None and not task.done():
                task.cancel()

    # ---------- the request handler ----------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self._active += 1
        self._idle.clear()
        r: _Request | None = None
        outcome = "internal_error"  # unless the request says otherwise
        try:
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                outcome = "rejected_too_large"
                raise
            r = _Request(request=request, body=body, streaming=_wants_stream(request, body))
            resp = await self._handle(r)
        except asyncio.CancelledError:
            # aiohttp's handler_cancellation: the client's connection was lost
            outcome = "client_gone"
            raise
        finally:
            if r is not None and r.outcome is not None:
                outcome = r.outcome
            self._metrics.requests.labels(self.config.name, outcome).inc()
            self._active -= 1
            if self._active == 0:
                self._idle.set()
        if self.draining:
            resp.force_close()
        return resp

    async def _handle(self, r: _Request) -> web.StreamResponse:
        if await self._backend_ready():
            resp = await self._forward(r)
            if resp is not None:
                return resp
        while True:
            if len(self._held) >= self.config.queue:
                r.outcome = "rejected_queue_full"
                return self._refuse_queue_full(r)
            release = await self._hold(r)
            if release is None:
                r.outcome = "timed_out"
                return await self._unavailable(
                    r,
                    kind="hold_timeout",
                    message=f"no replica of {self.config.name} became ready within "
                    f"{self.config.hold_timeout_seconds:g} s",
                )
            if release is Release.SHUTDOWN:
                r.outcome = "shutdown"
                return await self._unavailable(
                    r, kind="holder_shutdown", message="the holder is shutting down"
                )
            transport = r.request.transport
            if release is Release.CLIENT_GONE or transport is None or transport.is_closing():
                r.outcome = "client_gone"
                return r.early or web.Response(status=499)
            resp = await self._forward(r)
            if resp is not None:
                return resp
            # the upstream could not be connected to: held again (the queue bound holds)

    # ---------- holding ----------

    async def _hold(self, r: _Request) -> Release | None:
        """Holds the request until released (None: its hold timeout passed)."""
        loop = asyncio.get_running_loop()
        held = _Held(arrived=r.arrived, seq=next(self._seq), released=loop.create_future())
        bisect.insort(self._held, held, key=lambda h: (h.arrived, h.seq))
        self._gauge_held()
        self._maybe_wake()
        self._ensure_probing()
        deadline = r.arrived + self.config.hold_timeout_seconds
        try:
            if r.streaming and r.early is None:
                r.early = web.StreamResponse(
                    status=200,
                    headers={
                        "Content-Type": "text/event-stream",
                        "Cache-Control": "no-cache",
                        "X-Accel-Buffering": "no",
                    },
                )
                await r.early.prepare(r.request)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                step = min(remaining, self._timing.keepalive_seconds) if r.early else remaining
                try:
                    return await asyncio.wait_for(asyncio.shield(held.released), step)
                except TimeoutError:
                    if r.early is not None and time.monotonic() < deadline:
                        await r.early.write(KEEPALIVE_COMMENT)
        except ConnectionResetError:
            return Release.CLIENT_GONE
        finally:
            if held in self._held:
                self._held.remove(held)
                self._gauge_held()
            self._metrics.hold_seconds.labels(self.config.name).observe(
                time.monotonic() - r.arrived
            )

    def _gauge_held(self) -> None:
        self._metrics.held.labels(self.config.name).set(len(self._held))

    # ---------- the backend's readiness ----------

    def _ready_fresh(self) -> bool:
        seen = self._ready_seen_at
        return seen is not None and time.monotonic() - seen < READY_FRESH_SECONDS

    async def _backend_ready(self) -> bool:
        """Whether a new request may go at once: the backend is known ready, and no request
        is held before it (a new one never overtakes the held ones)."""
        if self._held:
            return False
        if self._ready_fresh():
            return True
        return await self._probe()

    async def _probe(self) -> bool:
        """One GET /health shared by every caller, at most one per probe interval."""
        if self._probe_task is None or self._probe_task.done():
            if time.monotonic() - self._last_probe_at < self._timing.probe_interval_seconds:
                return self._ready_fresh()
            self._last_probe_at = time.monotonic()
            self._probe_task = asyncio.ensure_future(self._probe_once())
        return await asyncio.shield(self._probe_task)

    async def _probe_once(self) -> bool:
        ok = await self._upstream.health(self.config.backend)
        self._metrics.backend_ready.labels(self.config.name).set(1 if ok else 0)
        if ok:
            if self._ready_seen_at is None:
                log.info("%s: the backend is ready; releasing %d held", self.config.name, self.held)
            self._ready_seen_at = time.monotonic()
            self._wake_asked_at = None  # the burst is over: the next hold asks again
            self.release_all(Release.FORWARD)
        else:
            self._ready_seen_at = None
        return ok

    def _mark_unready(self) -> None:
        self._ready_seen_at = None
        self._metrics.backend_ready.labels(self.config.name).set(0)

    def _ensure_probing(self) -> None:
        if self._probe_loop is None or self._probe_loop.done():
            self._probe_loop = asyncio.ensure_future(self._probing())

    async def _probing(self) -> None:
        while self._held:
            await self._probe()
            if not self._held:
                return
            await asyncio.sleep(self._timing.probe_interval_seconds)
            self._maybe_wake()  # the last ask timed out: ask again

    # ---------- asking for a replica ----------

    def _maybe_wake(self) -> None:
        now = time.monotonic()
        asked = self._wake_asked_at
        if asked is not None and now - asked < self._timing.wake_timeout_seconds:
            return
        if self._wake_task is not None and not self._wake_task.done():
            return  # still retrying the last ask
        self._wake_asked_at = now
        self._wake_task = asyncio.ensure_future(self._wake())

    async def _wake(self) -> None:
        delay = WAKE_BACKOFF_FIRST_SECONDS
        name = self.config.name
        while True:
            try:
                await self._waker.wake(self.config.vllm_service)
            except WakeError as e:
                self._metrics.wake_requests.labels(name, "error").inc()
                log.warning("%s: asking for a replica failed (again in %.1f s): %s", name, delay, e)
            else:
                self._metrics.wake_requests.labels(name, "ok").inc()
                log.info("%s: asked for a replica (%d held)", name, self.held)
                return
            if not self._held or self._ready_fresh():
                return  # the burst is over
            await asyncio.sleep(delay)
            delay = min(delay * 2, WAKE_BACKOFF_MAX_SECONDS)

    # ---------- forwarding ----------

    async def _forward(self, r: _Request) -> web.StreamResponse | None:
        """The upstream's answer relayed; None when the upstream could not be connected to
        (nothing was sent: the request may be held again)."""
        headers = relayed_headers(r.request.headers.items())
        if r.request.remote:
            prior = r.request.headers.get("X-Forwarded-For")
            headers["X-Forwarded-For"] = (
                f"{prior}, {r.request.remote}" if prior else r.request.remote
            )
        try:
            upstream = await self._upstream.dispatch(
                self._dispatch_lock,
                method=r.request.method,
                url=f"{self.config.backend}{r.request.raw_path}",
                headers=headers,
                body=r.body,
            )
        except aiohttp.ClientConnectorError as e:
            log.info("%s: the backend cannot be reached (%s): holding", self.config.name, e)
            self._mark_unready()
            return None
        except (aiohttp.ClientError, OSError) as e:
            r.outcome = "upstream_error"
            return await self._upstream_failed(r, f"the upstream failed: {type(e).__name__}: {e}")
        async with upstream:
            if r.early is not None:
                if not 200 <= upstream.status < 300:
                    detail = await upstream.content.read(ERROR_BODY_BYTES)
                    r.outcome = "upstream_error"
                    await _sse_error(
                        r.early,
                        kind="upstream_error",
                        message=f"the upstream answered HTTP {upstream.status}",
                        status=upstream.status,
                        upstream=_maybe_json(detail),
                    )
                    return r.early
                resp = r.early
            else:
                resp = web.StreamResponse(
                    status=upstream.status,
                    reason=upstream.reason,
                    headers=relayed_headers(upstream.headers.items()),
                )
                if (
                    upstream.content_length is not None
                    and "Transfer-Encoding" not in upstream.headers
                ):
                    resp.content_length = upstream.content_length
                await resp.prepare(r.request)
            return await self._relay(r, upstream, resp)

    async def _relay(
        self, r: _Request, upstream: aiohttp.ClientResponse, resp: web.StreamResponse
    ) -> web.StreamResponse:
        """The upstream's body, chunk by chunk as it comes (an SSE stream token by token)."""
        while True:
            try:
                chunk = await upstream.content.readany()
            except (aiohttp.ClientError, OSError) as e:
                r.outcome = "upstream_error"
                log.warning("%s: the upstream broke off mid-answer: %s", self.config.name, e)
                if r.early is not None:
                    await _sse_error(r.early, kind="upstream_error", message=f"{e}")
                elif r.request.transport is not None:
                    r.request.transport.abort()  # the client sees a truncated body, not an end
                return resp
            if not chunk:
                break
            try:
                await resp.write(chunk)
            except ConnectionResetError:
                r.outcome = "client_gone"
                return resp
        r.outcome = "forwarded"
        return resp

    # ---------- answers of the holder's own ----------

    def _refuse_queue_full(self, r: _Request) -> web.StreamResponse:
        c = self.config
        return web.json_response(
            {
                "error": {
                    "message": f"{c.queue} requests for {c.name} are held already (the queue "
                    f"limit): retry after {c.retry_after_seconds} s",
                    "type": "queue_full",
                    "service": c.name,
                    "limit": c.queue,
                }
            },
            status=429,
            headers={"Retry-After": str(c.retry_after_seconds)},
        )

    async def _unavailable(self, r: _Request, *, kind: str, message: str) -> web.StreamResponse:
        c = self.config
        if r.early is not None:
            await _sse_error(r.early, kind=kind, message=message, retry_after=c.retry_after_seconds)
            return r.early
        return web.json_response(
            {"error": {"message": message, "type": kind, "service": c.name}},
            status=503,
            headers={"Retry-After": str(c.retry_after_seconds)},
        )

    async def _upstream_failed(self, r: _Request, message: str) -> web.StreamResponse:
        if r.early is not None:
            await _sse_error(r.early, kind="upstream_error", message=message)
            return r.early
        return web.json_response(
            {"error": {"message": message, "type": "upstream_error", "service": self.config.name}},
            status=502,
        )


def _wants_stream(request: web.Request, body: bytes) -> bool:
    if not body or "json" not in request.headers.get("Content-Type", "application/json"):
        return False
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and doc.get("stream") is True


def _maybe_json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return data.decode("utf-8", "replace")


async def _sse_error(resp: web.StreamResponse, *, kind: str, message: str, **extra: Any) -> None:
    event = {"error": {"message": message, "type": kind, **extra}}
    with contextlib.suppress(ConnectionResetError):  # gone: nothing to tell the client
        await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
