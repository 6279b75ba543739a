"""Why the operator passes --shutdown-timeout (spec.shutdownTimeoutSeconds, by default the grace
period less the preStop pause), on the pinned vLLM: a stream in flight when the server gets
SIGTERM (the kubelet's signal to the container's PID 1, after the preStop pause) ends normally
with the flag, vLLM draining it, and is aborted without it (vLLM's own default). The real-node
counterpart, a pod deleted under a stream: tests/node/test_one_pod.py."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vllm_localenv.vllm_server import VllmServer

pytestmark = pytest.mark.vllm

STREAM_SECONDS = 15  # the stream's planned length at the measured decode rate
SIGNAL_AT_CHUNK = 8  # SIGTERM is sent by the reader once this many chunks have arrived


def stream(
    url: str, max_tokens: int, on_chunk: Callable[[int], None] = lambda _n: None
) -> dict[str, Any]:
    """One streamed completion: its chunks' finish reason, the tokens that came, [DONE] or
    the error that ended it, and when the first and the last chunk arrived. `on_chunk` is
    called by the reader after each chunk with the count so far."""
    body = {
        "model": "tiny",
        "prompt": "Hello there",
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        f"{url}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    out: dict[str, Any] = {"chunks": 0, "finish": None, "done": False, "error": None}
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for raw in r:
                line = raw.decode().strip()
                if line == "data: [DONE]":
                    out["done"] = True
                elif line.startswith("data: "):
                    choice = json.loads(line[6:])["choices"][0]
                    out["chunks"] += 1
                    out["finish"] = choice.get("finish_reason") or out["finish"]
                    now = time.monotonic()
                    out.setdefault("first", now)
                    out["last"] = now
                    on_chunk(out["chunks"])
    except Exception as exc:  # noqa: BLE001 (a cut stream: whatever the client raised)
        out["error"] = repr(exc)
    return out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("timeout", [60, 0], ids=["drain-60s", "vllm-default-0"])
def test_a_stream_in_flight_at_sigterm(tiny_model_dir: Path, tmp_path: Path, timeout: int) -> None:
    log = tmp_path / "vllm.log"
    extra = ("--shutdown-timeout", str(timeout)) if timeout else ()
    server = VllmServer(model=tiny_model_dir, extra_args=extra, log_path=log)
    with server.running():
        # the decode rate from the warm-up's chunks (first to last: the first-token wait and
        # the request's set-up left out), so that the stream lasts about STREAM_SECONDS
        warm = stream(server.url, 64)
        assert warm["done"], warm
        assert warm["chunks"] > 1, warm
        per_token = max((warm["last"] - warm["first"]) / (warm["chunks"] - 1), 1e-4)
        tokens = max(100, min(server.max_model_len - 16, int(STREAM_SECONDS / per_token)))
        at_signal: dict[str, Any] = {}

        def signal_in_flight(chunks: int) -> None:
            # sent by the reader itself, so the stream is in flight when it goes: the count
            # of chunks seen then is kept as the proof
            if chunks == SIGNAL_AT_CHUNK and not at_signal:
                at_signal.update(chunks=chunks, at=time.monotonic())
                server.process.send_signal(signal.SIGTERM)  # PID 1 only, as the kubelet does

        got: dict[str, Any] = {}
        client = threading.Thread(
            target=lambda: got.update(stream(server.url, tokens, signal_in_flight))
        )
        client.start()
        client.join(timeout=240)
        assert not client.is_alive(), "the stream neither ended nor was cut in 240 s"
        server.process.wait(timeout=120)
        ended = time.monotonic() - at_signal["at"] if at_signal else float("nan")
    text = log.read_text(errors="replace")
    print(
        f"\n--shutdown-timeout {timeout}: {tokens} tokens asked, SIGTERM at chunk "
        f"{at_signal.get('chunks')}, {got}, exited {ended:.1f} s after"
    )
    # the race each case depends on happened: SIGTERM went while the stream was in flight,
    # with almost all of its tokens still to come
    assert at_signal.get("chunks") == SIGNAL_AT_CHUNK, (at_signal, got)
    assert tokens * 0.5 > SIGNAL_AT_CHUNK, (tokens, got)
    if timeout:
        assert got["done"], (got, text[-2000:])
        assert got["finish"] == "length", got  # every token it asked for
        assert got["chunks"] >= tokens * 0.9, got
        assert "draining in-flight requests count=1" in text, text[-2000:]
    else:  # the control: without the flag the same stream is cut short (an error chunk, or
        # the connection closed; seen: 185 of 824 tokens, then vLLM's EngineDeadError)
        assert not (got["done"] and got["finish"] == "length"), got
        assert got["chunks"] < tokens * 0.9, got
