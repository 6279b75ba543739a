"""The runner's HTTP side: an async client of vLLM's OpenAI-compatible API (completions and
chat, streamed over server-sent events), its /metrics, /version, /tokenize and
/reset_prefix_cache, bounded by a run budget (deadline and request-start rate).

Every failure leaves this module as a `BenchError` whose kind the CLI maps to an exit code
and whose message says what to do. Empty completions are retried once greedily here (see
`OpenAIClient.generate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from vllm_bench.metrics import MetricsSnapshot, parse_metrics

HTTP_HINTS = {
    401: "the server wants an API key: pass --api-key",
    404: "the path does not exist on this server: is --url the server's root URL?",
    429: "the server is rate limiting: lower --max-rps or --max-concurrency",
    503: "the server is overloaded or not ready yet (still loading the model?)",
}


class BenchError(Exception):
    """A failure the runner reports. `kind` is one of: usage, connection, timeout, deadline,
    http-<status>, model-mismatch, protocol, metrics, naive; `message` is for a person."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class Budget:
    """Bounds the whole run: a wall-clock deadline (--max-duration-seconds) and a rate limit
    on request starts (--max-rps, opt-in). Request starts are spaced by 1/max_rps seconds (not
    at all without a cap: the concurrency of each phase is then the only pacing); a start
    that would fall after the deadline raises BenchError("deadline")."""

    def __init__(self, max_duration_seconds: float, max_rps: float | None = None) -> None:
        self.max_duration_seconds = max_duration_seconds
        self.deadline = time.monotonic() + max_duration_seconds
        self._interval = 1.0 / max_rps if max_rps else 0.0
        self._next_start = 0.0

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def deadline_error(self) -> BenchError:
        return BenchError(
            "deadline",
            f"the run reached --max-duration-seconds={self.max_duration_seconds:g}; "
            "requests still to send were not sent",
        )

    async def start_request(self) -> None:
        now = time.monotonic()
        slot = max(now, self._next_start)  # no await in between: safe within one event loop
        self._next_start = slot + self._interval
        if slot >= self.deadline:
            raise self.deadline_error()
        if slot > now:
            await asyncio.sleep(slot - now)


class SseDecoder:
    """Incremental decoder of a text/event-stream, fed line by line: the data lines of one
    event are joined by newlines, comments (":...") and other fields are ignored, a blank
    line ends the event (the WHATWG rules the OpenAI streaming API relies on)."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        """Returns the data of the event this line completes, else None."""
        line = line.rstrip("\r\n")
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value.removeprefix(" "))
        return None

    def flush(self) -> str | None:
        """The data of a pending event (a stream may end without the final blank line)."""
        if not self._data:
            return None
        data, self._data = "\n".join(self._data), []
        return data


@dataclass(frozen=True)
class Request:
    """One generation request: a completions `prompt` (a list of prompts: one request for
    all of them, as the reference lab's one llm.generate call) or chat `messages`.
    `max_tokens` or `temperature` None: not sent (the server's default, as a lab that sets
    none). `retry_empty` False: an empty completion is returned as it is (the caller has its
    own fallback)."""

    max_tokens: int | None
    prompt: str | tuple[str, ...] | None = None
    messages: tuple[Mapping[str, str], ...] | None = None
    ignore_eos: bool = True  # fixed output length, so that runs compare
    temperature: float | None = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)
    retry_empty: bool = True

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.messages is not None else "/v1/completions"

    def body(self, model: str, temperature: float | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model}
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        temperature = self.temperature if temperature is None else temperature
        if temperature is not None:
            body["temperature"] = temperature
        body.update(
            {
                "ignore_eos": self.ignore_eos,
                "stream": True,
                "stream_options": {"include_usage": True},
                **self.extra,
            }
        )
        if self.messages is not None:
            body["messages"] = [dict(m) for m in self.messages]
        else:
            body["prompt"] = list(self.prompt) if isinstance(self.prompt, tuple) else self.prompt
        return body


@dataclass
class Completion:
    """What one request produced and when (seconds; `started` is time.perf_counter())."""

    started: float
    latency: float
    ttft: float | None  # send to the first chunk with a choice, as `vllm bench serve` times it
    token_times: list[float]  # arrival of each chunk with a choice, relative to `started`
    prompt_tokens: int
    output_tokens: int
    text: str
    finish_reason: str | None
    empty_first_attempt: bool = False
    retried: bool = False

    @property
    def empty(self) -> bool:
        """No output tokens, or only whitespace: nothing a user would see."""
        return self.output_tokens == 0 or not self.text.strip()

    @property
    def itls(self) -> list[float]:
        """Inter-token latencies: the gaps between consecutive chunk arrivals, as `vllm bench
        serve` measures them. A chunk carries one token when the server's API process keeps
        up, several when tokens piled up (then the gap spans several tokens)."""
        return [b - a for a, b in itertools.pairwise(self.token_times)]

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (latency - TTFT) / (tokens - 1)."""
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


def _error_detail(body: bytes) -> str:
    text = body.decode(errors="replace").strip()
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        doc = json.loads(text)
        err = doc.get("error", doc.get("detail", doc))
        text = err.get("message", str(err)) if isinstance(err, dict) else str(err)
    return text[:300] or "(empty body)"


def http_error(status: int, reason: str, body: bytes, what: str) -> BenchError:
    hint = HTTP_HINTS.get(status)
    message = f"{what}: HTTP {status} {reason}: {_error_detail(body)}"
    return BenchError(f"http-{status}", f"{message} ({hint})" if hint else message)


@dataclass(frozen=True)
class Response:
    """A whole (not streamed) HTTP response."""

    status: int
    reason: str
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


class OpenAIClient:
    """An async client of one vLLM server. Use as `async with OpenAIClient(...) as client`.

    The transport is aiohttp, as in `vllm bench serve`: for a streamed request it costs about
    a third of the client CPU httpx does (3-4 ms against 9-11 ms per 64-token request,
    measured here), CPU that a client on the server's machine takes from the server."""

    def __init__(
        self,
        base_url: str,
        model: str,
        budget: Budget,
        *,
        timeout_seconds: float = 120.0,
        api_key: str | None = None,
        max_connections: int = 256,
        proxy_from_env: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.budget = budget
        self.timeout_seconds = timeout_seconds
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._max_connections = max_connections
        self._proxy_from_env = proxy_from_env
        self._session: aiohttp.ClientSession | None = None
        # generation requests sent and not yet answered in full (liveload.py subtracts them
        # from the server's running + waiting to see somebody else's)
        self.in_flight = 0

    async def __aenter__(self) -> OpenAIClient:
        self._session = aiohttp.ClientSession(
            headers=self._headers,
            # idle connections are dropped after 2 s, before the server drops them (uvicorn,
            # vLLM's server, after 5 s): reusing one the server is closing fails the request
            # with "Server disconnected"
            connector=aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=2),
            timeout=aiohttp.ClientTimeout(total=None),  # one limit per call: see _call
            # off unless asked: aiohttp then looks the proxy and ~/.netrc up in a thread pool
            # before every request, 10-17 % of a GPU server's measured throughput at 128 in
            # flight (benchmarks/vs_vllm_rounds.py); on for clients behind a proxy
            trust_env=self._proxy_from_env,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use the client as `async with OpenAIClient(...)`")
        return self._session

    @contextlib.asynccontextmanager
    async def _call(self, what: str, limit: float | None = None) -> AsyncIterator[None]:
        """Maps transport failures and the time limit of one call to BenchError."""
        limit = min(limit or self.timeout_seconds, max(self.budget.remaining(), 0.0))
        try:
            async with asyncio.timeout(limit):
                yield
        except TimeoutError as exc:
            if self.budget.remaining() <= 0.05:
                raise self.budget.deadline_error() from exc
            raise BenchError(
                "timeout", f"{what} got no complete answer within {limit:.1f}s (--timeout-seconds)"
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            raise BenchError(
                "connection",
                f"cannot connect to {self.base_url} ({what}): {exc.os_error or exc}; "
                "is the server running and is --url right?",
            ) from exc
        except aiohttp.ClientError as exc:
            raise BenchError(
                "connection",
                f"the connection to {self.base_url} failed during {what}: "
                f"{exc or type(exc).__name__}",
            ) from exc

    async def request(
        self, method: str, path: str, *, limit: float | None = None, body: Any = None
    ) -> Response:
        """One whole request, whatever its status (callers decide)."""
        async with (
            self._call(f"{method} {path}", limit),
            self.session.request(method, self.base_url + path, json=body) as resp,
        ):
            return Response(resp.status, resp.reason or "", await resp.read())

    async def get(self, path: str, *, limit: float | None = None) -> Response:
        return await self.request("GET", path, limit=limit)

    async def get_json(self, path: str) -> Any:
        resp = await self.get(path)
        if resp.status >= 400:
            raise http_error(resp.status, resp.reason, resp.body, f"GET {path}")
        try:
            return resp.json()
        except ValueError as exc:
            raise BenchError("protocol", f"GET {path} did not answer JSON: {exc}") from exc

    async def served_models(self) -> list[dict[str, Any]]:
        """The entries of /v1/models (vLLM adds `root` and `max_model_len`)."""
        doc = await self.get_json("/v1/models")
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list):
            raise BenchError("protocol", f"GET /v1/models answered no model list: {doc!r:.200}")
        return [m for m in data if isinstance(m, dict)]

    async def server_version(self) -> str | None:
        resp = await self.get("/version")
        if resp.status != 200:
            return None
        with contextlib.suppress(ValueError, AttributeError):
            return str(resp.json().get("version"))
        return None

    async def metrics(self, only: Collection[str] | None = None) -> MetricsSnapshot:
        """The server's /metrics for --model (`only` these families, when given)."""
        resp = await self.get("/metrics", limit=30)
        if resp.status >= 400:
            raise http_error(resp.status, resp.reason, resp.body, "GET /metrics")
        try:
            return parse_metrics(resp.text, model=self.model, only=only)
        except ValueError as exc:
            raise BenchError("metrics", f"/metrics is not Prometheus text format: {exc}") from exc

    async def wait_ready(self, seconds: float) -> None:
        """Polls /health until it answers 200, for at most `seconds`."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                if (await self.get("/health", limit=5)).status == 200:
                    return
            except BenchError:
                if time.monotonic() >= deadline:
                    raise
            if time.monotonic() >= deadline:
                raise BenchError("timeout", f"{self.base_url}/health not 200 within {seconds:g}s")
            await asyncio.sleep(1.0)

    async def reset_prefix_cache(self) -> bool:
        """POST /reset_prefix_cache; True when the server reset its prefix cache. vLLM serves
        this path only with VLLM_SERVER_DEV_MODE=1 (else 404/405: False), and answers
        success=false while blocks are still held by running requests (retried briefly)."""
        for _ in range(5):
            resp = await self.request("POST", "/reset_prefix_cache")
            if resp.status in (404, 405):
                return False
            if resp.status >= 400:
                raise http_error(resp.status, resp.reason, resp.body, "reset")
            with contextlib.suppress(ValueError, AttributeError):
                if resp.json().get("success", True):
                    return True
            await asyncio.sleep(0.2)
        return False

    async def count_tokens(self, text: str) -> int | None:
        """The prompt's token count from vLLM's /tokenize, None where the server lacks it."""
        resp = await self.request("POST", "/tokenize", body={"model": self.model, "prompt": text})
        if resp.status != 200:
            return None
        with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError):
            return int(resp.json()["count"])
        return None

    async def generate(self, request: Request) -> Completion:
        """Sends one streamed request. An empty completion (no tokens, or only whitespace:
        a model that emits only special tokens) is flagged, and a sampled request (temperature
        > 0) is retried once greedily, as the reference labs do; the retry's Completion is
        returned with `retried` set, still `empty` if the retry was empty too. A greedy request
        is not retried: greedy decoding would return the same tokens."""
        first = await self._stream(request)
        if not first.empty:
            return first
        first.empty_first_attempt = True
        if request.temperature == 0 or not request.retry_empty:
            return first
        second = await self._stream(request, temperature=0.0)
        second.empty_first_attempt = True
        second.retried = True
        return second

    async def _stream(self, request: Request, temperature: float | None = None) -> Completion:
        await self.budget.start_request()
        what = f"POST {request.path}"
        body = request.body(self.model, temperature)
        decoder = SseDecoder()
        started = time.perf_counter()
        token_times: list[float] = []
        text_parts: list[str] = []
        usage: dict[str, Any] = {}
        finish_reason: str | None = None
        done = False
        self.in_flight += 1
        async with (
            _counted_out(self),
            self._call(what),
            self.session.post(self.base_url + request.path, json=body) as resp,
        ):
            if resp.status >= 400:
                raise http_error(resp.status, resp.reason or "", await resp.read(), what)
            async for raw in resp.content:  # one line at a time
                data = decoder.feed(raw.decode())
                if data is None:
                    continue
                if data == "[DONE]":
                    done = True
                    break
                chunk = _parse_chunk(data, what)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                choices = chunk.get("choices") or []
                if choices:  # a token arrived, even one whose text is empty (a special token)
                    token_times.append(time.perf_counter() - started)
                for choice in choices:
                    text_parts.append(
                        choice.get("text") or (choice.get("delta") or {}).get("content") or ""
                    )
                    finish_reason = choice.get("finish_reason") or finish_reason
        latency = time.perf_counter() - started
        if not done:
            raise BenchError("protocol", f"{what}: the stream ended without [DONE]")
        return Completion(
            started=started,
            latency=latency,
            ttft=token_times[0] if token_times else None,
            token_times=token_times,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            output_tokens=int(usage.get("completion_tokens", len(token_times))),
            text="".join(text_parts),
            finish_reason=finish_reason,
        )


@contextlib.asynccontextmanager
async def _counted_out(client: OpenAIClient) -> AsyncIterator[None]:
    """Takes a request off `client.in_flight` when it ends, however it ends."""
    try:
        yield
    finally:
        client.in_flight -= 1


def _parse_chunk(data: str, what: str) -> dict[str, Any]:
    try:
        chunk = json.loads(data)
    except ValueError as exc:
        raise BenchError("protocol", f"{what}: a stream event is not JSON: {data[:200]!r}") from exc
    if not isinstance(chunk, dict):
        raise BenchError("protocol", f"{what}: a stream event is not an object: {data[:200]!r}")
    if "error" in chunk:  # vLLM reports errors that happen mid-stream as an event
        raise BenchError("protocol", f"{what}: the server failed mid-stream: {chunk['error']}")
    return chunk
