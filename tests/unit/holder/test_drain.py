"""SIGTERM: the holder as its image runs it (`python -m vllm_holder`, a subprocess) stops
accepting on its service ports at once and still answers what it holds once the backend is
ready, then exits 0."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp

from tests.unit.holder.harness import (
    WAIT_SECONDS,
    World,
    complete,
    free_port,
    holder_command,
    refused,
    run_async,
    scrape,
    service,
    stream,
    wait_until,
    world,
)


async def _status(admin_port: int, path: str) -> int | None:
    try:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{admin_port}{path}") as r:
            return r.status
    except aiohttp.ClientConnectionError:
        return None


@run_async
async def test_sigterm_closes_the_ports_and_answers_what_is_held(tmp_path: Path) -> None:
    w = await world(tmp_path)
    port, admin = free_port(), free_port()
    w.volume.write({"chat": service(port, w.backend.url)})
    proc = await asyncio.create_subprocess_exec(
        *holder_command(w.volume.path, admin, w.api, w.token_file),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        await wait_until("the holder ready", lambda: _is(admin, "/readyz", 200))
        assert await _status(admin, "/healthz") == 200
        client = w.client()
        plain = asyncio.ensure_future(complete(client, port, "held-plain"))
        streamed = asyncio.ensure_future(stream(client, port, "held-stream"))

        async def held(n: int) -> bool:
            m = await scrape(admin)
            return m.get_value("vllm_holder_requests_held", service="chat") == n

        await wait_until("both held", lambda: held(2))
        proc.send_signal(signal.SIGTERM)
        # new connections are refused while the held ones stay open (the admin port answers)
        await wait_until("the service port closed", lambda: refused(port))
        await wait_until("not ready while draining", lambda: _is(admin, "/readyz", 503))
        assert await held(2)
        assert proc.returncode is None

        w.backend.ready = True
        answer, s = await asyncio.gather(plain, streamed)
        assert (answer.status, answer.json()["prompt"]) == (200, "held-plain")
        assert s.status == 200
        assert s.events[-1] == "[DONE]"
        assert sorted(w.backend.received) == ["held-plain", "held-stream"]
        assert await asyncio.wait_for(proc.wait(), WAIT_SECONDS) == 0
    finally:
        out = await _finish(proc, w)
    assert b"draining" in out, out.decode()[-2000:]


@run_async
async def test_sigterm_with_an_accept_window_holds_connections_that_come_in_it(
    tmp_path: Path,
) -> None:
    """--accept-seconds: the pod reads not Ready at once, but a connection kube-proxy still
    sends it (its endpoint not yet dropped) is held and answered, not refused; the port
    closes once the window is over."""
    w = await world(tmp_path)
    port, admin = free_port(), free_port()
    w.volume.write({"chat": service(port, w.backend.url)})
    cmd = holder_command(w.volume.path, admin, w.api, w.token_file, "--accept-seconds", "20")
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        await wait_until("the holder ready", lambda: _is(admin, "/readyz", 200))
        client = w.client()
        proc.send_signal(signal.SIGTERM)
        await wait_until("not ready while draining", lambda: _is(admin, "/readyz", 503))
        # inside the window: accepted and held (not refused)
        late = asyncio.ensure_future(complete(client, port, "came-after-sigterm"))

        async def held(n: int) -> bool:
            m = await scrape(admin)
            return m.get_value("vllm_holder_requests_held", service="chat") == n

        await wait_until("the late request held", lambda: held(1))
        assert proc.returncode is None
        # the window ends: new connections are refused, the held one is still open
        await wait_until("the service port closed", lambda: refused(port))
        assert await held(1)
        w.backend.ready = True
        answer = await late
        assert (answer.status, answer.json()["prompt"]) == (200, "came-after-sigterm")
        assert await asyncio.wait_for(proc.wait(), WAIT_SECONDS) == 0
    finally:
        out = await _finish(proc, w)
    assert b"still accepting for 20 s" in out, out.decode()[-2000:]


async def _finish(proc: asyncio.subprocess.Process, w: World) -> bytes:
    """The holder process stopped (killed if it is still running) and its output; the
    world closed."""
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
    out = await proc.stdout.read() if proc.stdout else b""
    await w.close()
    return out


async def _is(admin_port: int, path: str, status: int) -> bool:
    return await _status(admin_port, path) == status
