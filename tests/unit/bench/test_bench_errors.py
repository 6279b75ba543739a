"""Error paths of `vllm-bench run`, run as a subprocess: each gives a clear message, the
documented exit code, and a result.json that records the error.

Nothing listens on the "stopped server" port. The failing upstream (HTTP 503/429, a server
that never answers) is a small http.server on 127.0.0.1: a fake used for error paths only;
the real-server paths are in tests/vllm/test_bench_runner.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from vllm_bench.results import validation_errors
from vllm_localenv.vllm_server import free_port

VLLM_BENCH = Path(sys.executable).parent / "vllm-bench"
METRICS_TEXT = (Path(__file__).parent / "bench_data" / "vllm-0.32-metrics.txt").read_text()
MODELS = {"object": "list", "data": [{"id": "tiny", "object": "model", "max_model_len": 2048}]}

# path -> (status, body, seconds to wait before answering)
Routes = dict[str, tuple[int, Any, float]]


def run_cli(
    *args: str, timeout: float = 120
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    out = Path(args[args.index("--out") + 1])
    proc = subprocess.run(
        [str(VLLM_BENCH), "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    result = out / "result.json"
    return proc, json.loads(result.read_text()) if result.exists() else None


@pytest.fixture
def upstream() -> Iterator[tuple[str, Routes]]:
    """A failing upstream; tests fill `routes`. Unknown paths answer 404."""
    routes: Routes = {}

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            status, body, delay = routes.get(
                self.path.split("?")[0], (404, {"detail": "Not Found"}, 0)
            )
            if self.headers.get("Content-Length"):
                self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(delay)
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header(
                "Content-Type", "text/plain" if isinstance(body, str) else "application/json"
            )
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer  # noqa: N815 - the names http.server calls

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", routes
    server.shutdown()
    server.server_close()


def serving_tiny(routes: Routes) -> None:
    """The setup calls succeed: /v1/models lists "tiny", /metrics is a real vLLM scrape."""
    routes["/v1/models"] = (200, MODELS, 0)
    routes["/version"] = (200, {"version": "0.32.0"}, 0)
    routes["/metrics"] = (200, METRICS_TEXT, 0)


def assert_recorded(doc: dict[str, Any] | None, scenario: str, kind: str) -> dict[str, str]:
    assert doc is not None, "result.json was not written"
    assert validation_errors(doc) == []
    matching = [e for e in doc["errors"] if e["scenario"] == scenario and e["kind"] == kind]
    assert matching, doc["errors"]
    return matching[0]


def test_server_not_running(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    proc, doc = run_cli(
        "--url", f"http://127.0.0.1:{port}", "--model", "tiny", "--out", str(tmp_path)
    )
    assert proc.returncode == 3, proc.stderr
    assert f"cannot connect to http://127.0.0.1:{port}" in proc.stderr
    assert "is the server running" in proc.stderr
    assert_recorded(doc, "setup", "connection")
    assert doc is not None
    assert doc["status"] == "failed"
    assert doc["scenarios"] == {}


@pytest.mark.parametrize(
    "url", ["http//127.0.0.1:8000", "127.0.0.1:8000", "http://127.0.0.1:99999"]
)
def test_malformed_url(tmp_path: Path, url: str) -> None:
    proc, doc = run_cli("--url", url, "--model", "tiny", "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert f"--url {url!r}" in proc.stderr
    error = assert_recorded(doc, "setup", "usage")
    assert "http://my-model.my-namespace.svc:8000" in error["message"]


def test_unknown_scenario_is_a_usage_error(tmp_path: Path) -> None:
    proc, _ = run_cli(
        "--url", "http://127.0.0.1:1", "--model", "m", "--scenarios", "warp", "--out", str(tmp_path)
    )
    assert proc.returncode == 2
    assert "unknown scenario(s) warp" in proc.stderr


def test_overloaded_server_503(tmp_path: Path, upstream: tuple[str, Routes]) -> None:
    url, routes = upstream
    routes["/v1/models"] = (503, {"error": {"message": "Service is overloaded", "code": 503}}, 0)
    proc, doc = run_cli("--url", url, "--model", "tiny", "--out", str(tmp_path))
    assert proc.returncode == 3
    assert "GET /v1/models: HTTP 503 Service Unavailable: Service is overloaded" in proc.stderr
    assert "overloaded or not ready" in proc.stderr
    assert_recorded(doc, "setup", "http-503")


def test_rate_limited_requests_429(tmp_path: Path, upstream: tuple[str, Routes]) -> None:
    url, routes = upstream
    serving_tiny(routes)
    routes["/v1/completions"] = (429, {"error": {"message": "Too many requests"}}, 0)
    proc, doc = run_cli(
        "--url", url, "--model", "tiny", "--scenarios", "capacity,streaming", "--out", str(tmp_path)
    )
    assert proc.returncode == 3
    assert "rate limiting: lower --max-rps" in proc.stderr
    # an HTTP error does not stop the run: every scenario is tried and reports it
    assert_recorded(doc, "capacity", "http-429")
    assert_recorded(doc, "streaming", "http-429")
    assert doc is not None
    assert doc["status"] == "failed"
    assert doc["environment"]["cacheConfig"]["num_gpu_blocks"] == "8192"  # setup got that far
    assert (tmp_path / "report.html").stat().st_size > 0


def test_request_timeout(tmp_path: Path, upstream: tuple[str, Routes]) -> None:
    url, routes = upstream
    serving_tiny(routes)
    routes["/v1/completions"] = (200, "never mind", 5)  # answers only after 5 s
    proc, doc = run_cli(
        "--url",
        url,
        "--model",
        "tiny",
        "--scenarios",
        "capacity",
        "--timeout-seconds",
        "1",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 3
    assert (
        "POST /v1/completions got no complete answer within 1.0s (--timeout-seconds)" in proc.stderr
    )
    assert_recorded(doc, "capacity", "timeout")  # (run_cli's own 120 s bounds the run)


def test_run_deadline_stops_the_run(tmp_path: Path, upstream: tuple[str, Routes]) -> None:
    url, routes = upstream
    serving_tiny(routes)
    routes["/v1/completions"] = (200, "slow", 30)
    proc, doc = run_cli(
        "--url",
        url,
        "--model",
        "tiny",
        "--scenarios",
        "capacity,streaming",
        "--max-duration-seconds",
        "2",
        "--out",
        str(tmp_path),
    )
    assert proc.returncode == 3
    assert "--max-duration-seconds=2" in proc.stderr
    assert_recorded(doc, "capacity", "deadline")
    assert_recorded(doc, "streaming", "skipped")
    assert doc is not None
    # stopped at the deadline, not at the 30 s answer (room for a loaded machine between)
    assert doc["durationSeconds"] < 25


def test_naive_baseline_without_torch(tmp_path: Path, upstream: tuple[str, Routes]) -> None:
    url, routes = upstream
    serving_tiny(routes)
    proc, doc = run_cli(
        "--url",
        url,
        "--model",
        "tiny",
        "--scenarios",
        "naive",
        "--naive-model-dir",
        str(tmp_path),
        "--naive-python",
        sys.executable,
        "--out",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 3
    assert "does " in proc.stderr
    assert "have torch and transformers?" in proc.stderr
    error = assert_recorded(doc, "naive", "naive")
    assert "No module named 'torch'" in error["message"]
