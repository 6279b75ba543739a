"""The holder's world in a test: a real upstream (an aiohttp server answering /health and
/v1/completions as vLLM does), a real HTTP server standing in for the Kubernetes API server
(it records the wake PATCHes), the holder itself (in-process, or as a subprocess), clients, and
waits on events (never a sleep followed by asserting that something did not happen)."""

from __future__ import annotations

import asyncio
import functools
import json
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from vllm_holder.hold import Timing
from vllm_holder.server import Holder, HolderSettings
from vllm_holder.wake import ApiAccess, KubeWaker

# generous: a loaded 2-core machine; every wait returns as soon as its event comes
WAIT_SECONDS = 60.0
TEST_SECONDS = 180.0
NAMESPACE = "team-a"
TOKEN = "holder-test-token"

P = ParamSpec("P")
T = TypeVar("T")


def run_async(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """A sync test that runs `fn` on a fresh event loop, bounded by TEST_SECONDS."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        async def bounded() -> T:
            return await asyncio.wait_for(fn(*args, **kwargs), TEST_SECONDS)

        return asyncio.run(bounded())

    return wrapper


async def wait_until(what: str, check: Callable[[], Any], timeout: float = WAIT_SECONDS) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if isinstance(last, Awaitable):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------- the upstream: a vLLM stand-in ----------


class _LocalServer:
    """A small real HTTP server on 127.0.0.1 at a free port (the holder's outside world)."""

    def __init__(self) -> None:
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


class Backend(_LocalServer):
    """/health: 503 until `ready`; /v1/completions: JSON, or SSE when `"stream": true` (each
    event after the previous one was read by the test when `lockstep`); /v1/fail: 400."""

    def __init__(self) -> None:
        super().__init__()
        self.ready = False
        self.received: list[str] = []  # the prompts, in the order their requests arrived
        self.lockstep = False
        self.steps: asyncio.Queue[None] = asyncio.Queue()
        self.tokens = ["Hel", "lo", " wor", "ld"]

    async def up(self) -> None:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/fail", self._fail)
        await self._serve(app)

    async def down(self) -> None:
        """Gone, as a `-ready` Service without endpoints: connections are refused."""
        self.ready = False
        await self._stop()

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        doc = await request.json()
        self.received.append(doc["prompt"])
        if not doc.get("stream"):
            return web.json_response({"prompt": doc["prompt"], "text": "".join(self.tokens)})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, token in enumerate(self.tokens):
            if self.lockstep and i > 0:
                await self.steps.get()  # the test read the previous event
            event = {"prompt": doc["prompt"], "choices": [{"text": token}]}
            await resp.write(f"data: {json.dumps(event)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _fail(self, request: web.Request) -> web.Response:
        doc = await request.json()
        self.received.append(doc["prompt"])
        return web.json_response({"object": "error", "message": "bad model"}, status=400)


# ---------- the Kubernetes API server's stand-in: records the wake PATCHes ----------


@dataclass
class Patch:
    path: str
    content_type: str
    authorization: str
    body: dict[str, Any]


class ApiServer(_LocalServer):
    def __init__(self) -> None:
        super().__init__()
        self.patches: list[Patch] = []
        self.status = 200

    async def up(self) -> None:
        app = web.Application()
        app.router.add_patch("/{tail:.*}", self._patch)
        await self._serve(app)

    async def close(self) -> None:
        await self._stop()

    async def _patch(self, request: web.Request) -> web.Response:
        self.patches.append(
            Patch(
                path=request.path,
                content_type=request.headers.get("Content-Type", ""),
                authorization=request.headers.get("Authorization", ""),
                body=await request.json(),
            )
        )
        return web.json_response({"kind": "VLLMService"}, status=self.status)


# ---------- the holder ----------


def service(port: int, backend: str, **extra: Any) -> dict[str, Any]:
    return {"port": port, "backend": backend, **extra}


@dataclass
class ConfigMapVolume:
    """A mounted ConfigMap as the kubelet writes one: `config.json` -> `..data/config.json`,
    `..data` -> a timestamped folder, swapped atomically on every update."""

    root: Path
    generation: int = 0

    @property
    def path(self) -> Path:
        return self.root / "config.json"

    def write(self, services: dict[str, Any]) -> None:
        self.generation += 1
        folder = self.root / f"..{self.generation:04d}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"services": services}))
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(folder.name)
        tmp.replace(self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to("..data/config.json")


@dataclass
class World:
    backend: Backend
    api: ApiServer
    volume: ConfigMapVolume
    token_file: Path
    holder: Holder | None = None
    sessions: list[aiohttp.ClientSession] = field(default_factory=list)

    async def start_holder(self, **timing: float) -> Holder:
        settings = HolderSettings(
            config_path=self.volume.path,
            host="127.0.0.1",
            admin_port=0,
            poll_seconds=0.1,
            timing=Timing(**{"keepalive_seconds": 0.2, **timing}),
        )
        access = ApiAccess(
            base_url=self.api.url,
            namespace=NAMESPACE,
            token_file=self.token_file,
            ca_file=None,
        )
        self.holder = Holder(settings, waker=KubeWaker(access))
        await self.holder.start()
        return self.holder

    def client(self) -> aiohttp.ClientSession:
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TEST_SECONDS))
        self.sessions.append(session)
        return session

    async def metrics(self) -> Metrics:
        assert self.holder is not None
        assert self.holder.admin_port is not None
        return await scrape(self.holder.admin_port)

    async def close(self) -> None:
        for s in self.sessions:
            await s.close()
        if self.holder is not None:
            await self.holder.close()
        await self.backend.down()
        await self.api.close()


async def world(tmp_path: Path) -> World:
    backend, api = Backend(), ApiServer()
    await backend.up()
    await api.up()
    root = tmp_path / "config"
    root.mkdir()
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    return World(backend=backend, api=api, volume=ConfigMapVolume(root), token_file=token)


# ---------- what a client sees ----------


class Metrics(dict[tuple[str, frozenset[tuple[str, str]]], float]):
    def get_value(self, name: str, **labels: str) -> float:
        return self.get((name, frozenset(labels.items())), 0.0)


async def scrape(admin_port: int) -> Metrics:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"http://127.0.0.1:{admin_port}/metrics") as resp,
    ):
        text = await resp.text()
    out = Metrics()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def complete(session: aiohttp.ClientSession, port: int, prompt: str) -> Answer:
    async with session.post(
        f"http://127.0.0.1:{port}/v1/completions", json={"model": "m", "prompt": prompt}
    ) as resp:
        return Answer(resp.status, dict(resp.headers), await resp.read())


@dataclass
class Stream:
    """A streaming client: its status, headers and every SSE line as it came."""

    status: int = 0
    content_type: str = ""
    lines: list[str] = field(default_factory=list)
    headers_seen: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def comments(self) -> list[str]:
        return [ln for ln in self.lines if ln.startswith(":")]

    @property
    def events(self) -> list[Any]:
        out: list[Any] = []
        for ln in self.lines:
            if ln.startswith("data: "):
                data = ln[len("data: ") :]
                out.append(data if data == "[DONE]" else json.loads(data))
        return out


async def stream(
    session: aiohttp.ClientSession,
    port: int,
    prompt: str,
    *,
    path: str = "/v1/completions",
    on_event: Callable[[Stream], Awaitable[None]] | None = None,
    out: Stream | None = None,
) -> Stream:
    out = out or Stream()
    async with session.post(
        f"http://127.0.0.1:{port}{path}", json={"model": "m", "prompt": prompt, "stream": True}
    ) as resp:
        out.status = resp.status
        out.content_type = resp.headers.get("Content-Type", "")
        out.headers_seen.set()
        while True:
            line = await resp.content.readline()
            if not line:
                break
            text = line.decode().rstrip("\n")
            if text:
                out.lines.append(text)
                if text.startswith("data: ") and on_event is not None:
                    await on_event(out)
    return out


async def refused(port: int) -> bool:
    """A connection to the port is refused (nothing listens). A connection reset while
    connecting (it was in the backlog of a listener that just closed) is not yet a refusal:
    the caller asks again."""
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        return False
    writer.close()
    return False


def holder_command(
    config: Path, admin_port: int, api: ApiServer, token: Path, *extra: str
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vllm_holder",
        "--config",
        str(config),
        "--host",
        "127.0.0.1",
        "--admin-port",
        str(admin_port),
        "--api-server",
        api.url,
        "--namespace",
        NAMESPACE,
        "--token-file",
        str(token),
        "--keepalive-seconds",
        "0.2",
        "--grace-seconds",
        "120",
        *extra,
    ]
