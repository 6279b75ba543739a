"""Forwarding to a service's backend: the one HTTP client to the upstream, headers filtered
as a proxy must (RFC 9110 section 7.6.1), requests dispatched in the order given.

Dispatch order: a service's released requests take its dispatch lock in arrival order and keep
it until their request line, headers and body have been handed to the kernel (aiohttp's
request-trace hooks say when), not until the answer: the upstream receives them in arrival
order and answers them concurrently (vLLM's own scheduler queues them, FIFO, and batches them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import aiohttp
from multidict import CIMultiDict

# hop-by-hop headers (and those aiohttp recomputes): never relayed in either direction
HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)
# how long one request may keep the dispatch lock before the next goes anyway (a slow connect
# must not stall every held request behind it)
DISPATCH_WAIT_SECONDS = 5.0


def relayed_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> CIMultiDict[str]:
    """The end-to-end headers of a request or response (hop-by-hop ones and those the
    Connection header names dropped)."""
    items = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    named = {
        token.strip().lower()
        for k, v in items
        if k.lower() == "connection"
        for token in v.split(",")
    }
    return CIMultiDict((k, v) for k, v in items if k.lower() not in HOP_BY_HOP | named)


@dataclass
class _Sent:
    """What the trace hooks see of a request: the future to resolve once it is written."""

    written: asyncio.Future[None]
    has_body: bool

    def mark(self) -> None:
        if not self.written.done():
            self.written.set_result(None)


async def _on_headers_sent(
    _session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: object
) -> None:
    # without a body the request goes out with its headers (aiohttp flushes them at once)
    sent = getattr(ctx, "trace_request_ctx", None)
    if isinstance(sent, _Sent) and not sent.has_body:
        sent.mark()


async def _on_chunk_sent(
    _session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: object
) -> None:
    # the body is written after the headers, in one chunk (it is bytes)
    sent = getattr(ctx, "trace_request_ctx", None)
    if isinstance(sent, _Sent):
        sent.mark()


class Upstream:
    """The client the holder forwards with: no pool limit (the number of requests at once is
    bounded by the services' queues), no decompression (bytes are relayed as they come, with
    their Content-Encoding), no total timeout (a generation takes as long as it takes)."""

    def __init__(self, *, connect_timeout_seconds: float = 10.0) -> None:
        trace = aiohttp.TraceConfig()
        trace.on_request_headers_sent.append(_on_headers_sent)
        trace.on_request_chunk_sent.append(_on_chunk_sent)
        self._trace = trace
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_seconds, sock_read=None
        )
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True),
                timeout=self._timeout,
                auto_decompress=False,
                trace_configs=[self._trace],
            )
        return self._session

    async def health(self, backend: str, *, timeout_seconds: float = 2.0) -> bool:
        """GET {backend}/health answered 200 (vLLM's readiness: the engine is up)."""
        try:
            async with self.session().get(
                f"{backend}/health", timeout=aiohttp.ClientTimeout(total=timeout_seconds)
            ) as resp:
                await resp.read()
                return resp.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def dispatch(
        self,
        lock: asyncio.Lock,
        *,
        method: str,
        url: str,
        headers: CIMultiDict[str],
        body: bytes,
    ) -> aiohttp.ClientResponse:
        """Sends the request once the lock is free, keeps the lock until the request is
        written (or DISPATCH_WAIT_SECONDS), returns the response once its headers came."""
        loop = asyncio.get_running_loop()
        sent: asyncio.Future[None] = loop.create_future()
        async with lock:
            task = asyncio.ensure_future(
                self.session().request(
                    method,
                    url,
                    headers=headers,
                    data=body or None,
                    allow_redirects=False,
                    trace_request_ctx=_Sent(sent, has_body=bool(body)),
                )
            )
            try:
                pending: set[asyncio.Future[Any]] = {task, sent}
                await asyncio.wait(
                    pending, timeout=DISPATCH_WAIT_SECONDS, return_when=asyncio.FIRST_COMPLETED
                )
            except asyncio.CancelledError:
                task.cancel()
                raise
        try:
            return await task
        except asyncio.CancelledError:
            task.cancel()
            raise

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
