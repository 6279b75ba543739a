"""A real Prometheus for tests: Debian's prometheus started on a free port with a given config,
a query helper, and a stand-in for the operator's own /metrics."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        message = "prometheus is missing: scripts/build-monitoring.sh installs it (Debian)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return binary


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_prometheus(tmp: Path, config_text: str) -> Iterator[str]:
    """Starts Prometheus with `config_text`; yields its URL; stops it (only this process)."""
    cfg = tmp / "prometheus.yml"
    cfg.write_text(config_text)
    port = _free_port()
    log_path = tmp / "prometheus.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r,
            ):
                if r.status == 200:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail(f"prometheus did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def query(url: str, expr: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=60) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def without_data(url: str, exprs: list[str], timeout: float = 180) -> list[str]:
    """The expressions that still return nothing after `timeout` seconds (generous: scrapes
    and rule evaluations lag on a loaded machine, and it returns once all have data)."""
    deadline = time.monotonic() + timeout
    empty = exprs
    while True:
        empty = [e for e in empty if not query(url, e)]
        if not empty or time.monotonic() > deadline:
            return empty
        time.sleep(2)


def operator_exposition(namespace: str, service: str) -> str:
    """What the operator exports for one service with one benchmarked, rolled-back revision."""
    own = f'namespace="{namespace}",service="{service}"'
    return "".join(
        f"{name}{{{own}{extra}}} {value}\n"
        for name, extra, value in (
            ("vllm_operator_benchmark_output_tokens_per_second", ',revision="r1"', 812.5),
            ("vllm_operator_benchmark_ttft_p50_seconds", ',revision="r1"', 0.02),
            ("vllm_operator_benchmark_ttft_p95_seconds", ',revision="r1"', 0.05),
            ("vllm_operator_benchmark_batching_speedup", ',revision="r1"', 5.1),
            ("vllm_operator_benchmark_prefix_ttft_speedup", ',revision="r1"', 2.2),
            ("vllm_operator_benchmark_kv_cache_tokens", ',revision="r1"', 40960),
            ("vllm_operator_benchmark_passed", ',revision="r1"', 1),
            ("vllm_operator_rollback_active", ',revision="r0"', 1),
            ("vllm_operator_autoscaler_scaling_active", "", 1),
        )
    )


@contextlib.contextmanager
def http_exporter(body: Callable[[str], str]) -> Iterator[str]:
    """A /metrics stand-in on a free port: `body(path)` is the exposition served at a path.
    Yields host:port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = body(self.path).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
