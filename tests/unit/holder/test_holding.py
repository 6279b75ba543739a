"""The holder holds, asks for a replica once per burst, and forwards: the real holder on real
sockets against a real upstream and a stand-in for the API server's wake PATCH."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import pytest

from tests.unit.holder.harness import (
    NAMESPACE,
    TOKEN,
    Stream,
    World,
    complete,
    free_port,
    refused,
    run_async,
    service,
    stream,
    wait_until,
    world,
)
from vllm_holder.wake import WAKE_ANNOTATION

REQUESTS = "vllm_holder_requests_total"
HELD = "vllm_holder_requests_held"
WAKES = "vllm_holder_wake_requests_total"


@run_async
async def test_held_requests_are_forwarded_in_order_once_ready(tmp_path: Path) -> None:
    w = await world(tmp_path)
    try:
        port = free_port()
        w.volume.write({"chat": service(port, w.backend.url)})
        await w.start_holder()
        w.backend.lockstep = True
        client = w.client()

        # five plain requests and one stream, each held before the next is sent
        plain = []
        for i in range(5):
            plain.append(asyncio.ensure_future(complete(client, port, f"p{i}")))
            await wait_until(f"p{i} held", lambda n=i + 1: _held(w, "chat", n))

        async def step(s: Stream) -> None:
            w.backend.steps.put_nowait(None)  # the next token only once this one arrived

        s = Stream()
        streamed = asyncio.ensure_future(stream(client, port, "s5", on_event=step, out=s))
        await wait_until("s5 held", lambda: _held(w, "chat", 6))
        # while held: the stream's 200 and event-stream headers at once, then comments
        await asyncio.wait_for(s.headers_seen.wait(), 60)
        assert (s.status, s.content_type) == (200, "text/event-stream")
        await wait_until("two keep-alive comments", lambda: len(s.comments) >= 2)
        assert all(c == ": waiting for a replica" for c in s.comments)
        assert not any(p.done() for p in plain)  # none answered while held

        # one wake for the burst, with the service account's token, as a merge patch
        await wait_until("the wake PATCH", lambda: w.api.patches)
        (patch,) = w.api.patches
        assert patch.path == (
            f"/apis/serving.vllm-operator.dev/v1alpha1/namespaces/{NAMESPACE}/vllmservices/chat"
        )
        assert patch.content_type == "application/merge-patch+json"
        assert patch.authorization == f"Bearer {TOKEN}"
        stamp = patch.body["metadata"]["annotations"][WAKE_ANNOTATION]
        assert dt.datetime.fromisoformat(stamp).tzinfo is not None

        w.backend.ready = True
        answers = await asyncio.gather(*plain)
        done = await streamed
        assert [a.status for a in answers] == [200] * 5
        assert [a.json()["prompt"] for a in answers] == [f"p{i}" for i in range(5)]
        assert w.backend.received == ["p0", "p1", "p2", "p3", "p4", "s5"]  # arrival order
        # the stream: comments while held, then the upstream's events one by one
        texts = [e["choices"][0]["text"] for e in done.events if e != "[DONE]"]
        assert texts == w.backend.tokens
        assert done.events[-1] == "[DONE]"
        first_data = next(i for i, ln in enumerate(done.lines) if ln.startswith("data: "))
        assert all(ln.startswith(":") for ln in done.lines[:first_data])

        m = await w.metrics()
        assert m.get_value(REQUESTS, service="chat", outcome="forwarded") == 6
        assert m.get_value(HELD, service="chat") == 0
        assert m.get_value("vllm_holder_hold_seconds_count", service="chat") == 6
        assert m.get_value(WAKES, service="chat", result="ok") == 1
        assert m.get_value("vllm_holder_backend_ready", service="chat") == 1
    finally:
        await w.close()


@run_async
async def test_a_ready_backend_is_forwarded_to_at_once_without_a_wake(tmp_path: Path) -> None:
    w = await world(tmp_path)
    try:
        w.backend.ready = True
        port = free_port()
        w.volume.write({"chat": service(port, w.backend.url)})
        await w.start_holder()
        client = w.client()
        answer = await complete(client, port, "direct")
        s = await stream(client, port, "direct-stream")
        assert (answer.status, answer.json()["prompt"]) == (200, "direct")
        assert s.comments == []  # nothing held: the upstream's own stream
        assert s.events[-1] == "[DONE]"
        m = await w.metrics()
        assert m.get_value(REQUESTS, service="chat", outcome="forwarded") == 2
        assert m.get_value("vllm_holder_hold_seconds_count", service="chat") == 0
        assert w.api.patches == []  # two answers came (the positive control): nothing held
    finally:
        await w.close()


@run_async
async def test_beyond_the_queue_requests_get_429_with_retry_after(tmp_path: Path) -> None:
    w = await world(tmp_path)
    try:
        port = free_port()
        w.volume.write({"chat": service(port, w.backend.url, queue=2, retryAfterSeconds=7)})
        await w.start_holder()
        client = w.client()
        held = [asyncio.ensure_future(complete(client, port, f"q{i}")) for i in range(2)]
        await wait_until("two held", lambda: _held(w, "chat", 2))
        refused_answer = await complete(client, port, "q2")
        assert refused_answer.status == 429
        assert refused_answer.headers["Retry-After"] == "7"
        error = refused_answer.json()["error"]
        assert (error["type"], error["limit"], error["service"]) == ("queue_full", 2, "chat")
        assert "queue limit" in error["message"]

        w.backend.ready = True
        assert [a.status for a in await asyncio.gather(*held)] == [200, 200]
        assert sorted(w.backend.received) == ["q0", "q1"]
        m = await w.metrics()
        assert m.get_value(REQUESTS, service="chat", outcome="rejected_queue_full") == 1
        assert m.get_value(REQUESTS, service="chat", outcome="forwarded") == 2
    finally:
        await w.close()


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "stream"])
@run_async
async def test_a_client_gone_while_held_is_dropped_not_forwarded(
    tmp_path: Path, streaming: bool
) -> None:
    w = await world(tmp_path)
    try:
        port = free_port()
        w.volume.write({"chat": service(port, w.backend.url)})
        await w.start_holder()
        body = (
            b'{"model": "m", "prompt": "gone", "stream": true}'
            if streaming
            else b'{"model": "m", "prompt": "gone"}'
        )
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        await wait_until("the request held", lambda: _held(w, "chat", 1))
        writer.close()
        await writer.wait_closed()
        # the positive control: the holder saw the disconnect
        await wait_until("client_gone counted", lambda: _count(w, "chat", "client_gone", 1))
        assert w.holder is not None
        assert w.holder.listeners["chat"].holder.held == 0

        w.backend.ready = True
        after = await complete(w.client(), port, "after")
        assert after.status == 200
        assert w.backend.received == ["after"]  # "gone" never reached the upstream
        m = await w.metrics()
        assert m.get_value(HELD, service="chat") == 0
        assert m.get_value(REQUESTS, service="chat", outcome="forwarded") == 1
    finally:
        await w.close()


@run_async
async def test_a_request_held_past_its_timeout_gets_503(tmp_path: Path) -> None:
    w = await world(tmp_path)
    try:
        port = free_port()
        w.volume.write(
            {"chat": service(port, w.backend.url, holdTimeoutSeconds=1, retryAfterSeconds=3)}
        )
        await w.start_holder()
        client = w.client()
        plain, streamed = await asyncio.gather(
            complete(client, port, "late"), stream(client, port, "late-stream")
        )
        assert plain.status == 503
        assert plain.headers["Retry-After"] == "3"
        assert plain.json()["error"]["type"] == "hold_timeout"
        # the stream had its 200 already: its end is one error event
        assert streamed.status == 200
        (event,) = streamed.events
        assert event["error"]["type"] == "hold_timeout"
        assert event["error"]["retry_after"] == 3
        m = await w.metrics()
        assert m.get_value(REQUESTS, service="chat", outcome="timed_out") == 2
        assert m.get_value("vllm_holder_hold_seconds_count", service="chat") == 2
        assert m.get_value("vllm_holder_hold_seconds_sum", service="chat") >= 2.0
        assert w.backend.received == []
    finally:
        await w.close()


@run_async
async def test_an_upstream_error_ends_a_held_stream_with_one_error_event(tmp_path: Path) -> None:
    w = await world(tmp_path)
    try:
        port = free_port()
        w.volume.write({"chat": service(port, w.backend.url)})
        await w.start_holder()
        streamed = asyncio.ensure_future(stream(w.client(), port, "bad", path="/v1/fail"))
        await wait_until("held", lambda: _held(w, "chat", 1))
        w.backend.ready = True
        s = await streamed
        assert s.status == 200
        (event,) = s.events
        assert event["error"]["type"] == "upstream_error"
        assert event["error"]["status"] == 400
        assert event["error"]["upstream"] == {"object": "error", "message": "bad model"}
        m = await w.metrics()
        assert m.get_value(REQUESTS, service="chat", outcome="upstream_error") == 1
    finally:
        await w.close()


@run_async
async def test_one_wake_per_burst(tmp_path: Path) -> None:
    w = await world(tmp_path)
    try:
        port = free_port()
        w.volume.write({"chat": service(port, w.backend.url)})
        await w.start_holder()
        client = w.client()
        burst = [asyncio.ensure_future(complete(client, port, f"a{i}")) for i in range(20)]
        await wait_until("20 held", lambda: _held(w, "chat", 20))
        await wait_until("the first wake", lambda: len(w.api.patches) == 1)
        w.backend.ready = True
        assert [a.status for a in await asyncio.gather(*burst)] == [200] * 20
        assert len(w.api.patches) == 1  # every hold decided while held: one ask
        assert (await w.metrics()).get_value(WAKES, service="chat", result="ok") == 1

        # scaled to zero again: the `-ready` Service refuses connections
        await w.backend.down()
        second = [asyncio.ensure_future(complete(client, port, f"b{i}")) for i in range(5)]
        await wait_until("5 held", lambda: _held(w, "chat", 5))
        await wait_until("the second wake", lambda: len(w.api.patches) == 2)
        await w.backend.up()
        w.backend.ready = True
        assert [a.status for a in await asyncio.gather(*second)] == [200] * 5
        assert len(w.api.patches) == 2
        m = await w.metrics()
        assert m.get_value(WAKES, service="chat", result="ok") == 2
        assert m.get_value(REQUESTS, service="chat", outcome="forwarded") == 25
    finally:
        await w.close()


@run_async
async def test_a_failed_wake_is_counted_and_retried_without_blocking(tmp_path: Path) -> None:
    w = await world(tmp_path)
    try:
        port = free_port()
        w.api.status = 403  # the Role does not allow it (yet)
        w.volume.write({"chat": service(port, w.backend.url)})
        await w.start_holder()
        held = asyncio.ensure_future(complete(w.client(), port, "x"))
        await wait_until("two refused asks", lambda: len(w.api.patches) >= 2)
        w.api.status = 200
        await wait_until("an accepted ask", lambda: _wakes(w, "chat", "ok", 1))
        w.backend.ready = True
        assert (await held).status == 200
        m = await w.metrics()
        assert m.get_value(WAKES, service="chat", result="error") >= 2
        assert m.get_value(WAKES, service="chat", result="ok") == 1
    finally:
        await w.close()


@run_async
async def test_config_reload_adds_and_removes_ports_keeping_held_requests(
    tmp_path: Path,
) -> None:
    w = await world(tmp_path)
    try:
        pa, pb = free_port(), free_port()
        w.volume.write({"a": service(pa, w.backend.url)})
        holder = await w.start_holder()
        client = w.client()
        held_a = [asyncio.ensure_future(complete(client, pa, f"a{i}")) for i in range(2)]
        await wait_until("a holds 2", lambda: _held(w, "a", 2))
        assert await refused(pb)

        # b appears: a new listener, a's held requests untouched
        w.volume.write({"a": service(pa, w.backend.url), "b": service(pb, w.backend.url)})
        await wait_until("b listening", lambda: "b" in holder.listeners and holder.ready()[0])
        held_b = asyncio.ensure_future(complete(client, pb, "b0"))
        await wait_until("b holds 1", lambda: _held(w, "b", 1))
        assert holder.listeners["a"].holder.held == 2

        # a leaves: its port closes, its held requests stay held, b's too
        w.volume.write({"b": service(pb, w.backend.url)})
        await wait_until("a's port closed", lambda: refused(pa))
        assert not any(t.done() for t in [*held_a, held_b])
        assert holder.listeners["b"].holder.held == 1
        assert holder.ready()[0]

        w.backend.ready = True
        answers = await asyncio.gather(*held_a, held_b)
        assert [a.status for a in answers] == [200, 200, 200]
        assert sorted(w.backend.received) == ["a0", "a1", "b0"]
        m = await w.metrics()
        assert m.get_value(REQUESTS, service="a", outcome="forwarded") == 2
        assert m.get_value(REQUESTS, service="b", outcome="forwarded") == 1
        assert m.get_value("vllm_holder_config_reloads_total", result="ok") == 3
        # a's gauges go once its last request was answered
        await wait_until("a forgotten", lambda: _gauge_gone(w, "a"))
    finally:
        await w.close()


@run_async
async def test_an_invalid_config_keeps_the_previous_one(tmp_path: Path) -> None:
    w = await world(tmp_path)
    try:
        port = free_port()
        w.volume.write({"a": service(port, w.backend.url)})
        holder = await w.start_holder()
        assert holder.ready() == (True, "1 services held for")
        w.volume.write({"a": service(port, w.backend.url), "b": service(port, w.backend.url)})
        await wait_until("the refusal", lambda: _reloads(w, "invalid", 1))
        assert holder.config_error is not None
        assert "also a's" in holder.config_error
        assert list(holder.listeners) == ["a"]
        assert holder.ready()[0]
    finally:
        await w.close()


# ---------- readings ----------


async def _held(w: World, svc: str, n: int) -> bool:
    return (await w.metrics()).get_value(HELD, service=svc) == n


async def _count(w: World, svc: str, outcome: str, n: int) -> bool:
    m = await w.metrics()
    return m.get_value(REQUESTS, service=svc, outcome=outcome) == n


async def _wakes(w: World, svc: str, result: str, n: int) -> bool:
    return (await w.metrics()).get_value(WAKES, service=svc, result=result) == n


async def _reloads(w: World, result: str, n: int) -> bool:
    m = await w.metrics()
    return m.get_value("vllm_holder_config_reloads_total", result=result) == n


async def _gauge_gone(w: World, svc: str) -> bool:
    m = await w.metrics()
    return not any(name == HELD and ("service", svc) in labels for name, labels in m)
