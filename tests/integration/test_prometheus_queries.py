"""Every query of the rules and the dashboard, evaluated by a real Prometheus (Debian's 2.42,
started here on a free port) that scrapes vLLM 0.32's real /metrics exposition
(tests/unit/bench_data/vllm-0.32-metrics.txt, served with its counters growing between
scrapes) for two pods of one service, plus the operator's gauges; the generic rules file is
loaded, so the band metric is recorded by Prometheus itself.

This needs no cluster: discovery is the file_sd form the local cluster's Prometheus uses
(vllm_localenv.monitoring). The same queries against a live vLLM run in the cluster test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from vllm_localenv.monitoring import prometheus_config, rules_file
from vllm_operator.monitoringgen import all_queries
from vllm_operator.render.monitoring import BAND_METRIC

EXPOSITION = (
    Path(__file__).resolve().parents[1] / "unit" / "bench_data" / "vllm-0.32-metrics.txt"
).read_text()
NS, SVC = "team", "llama"
_OWN = f'namespace="{NS}",service="{SVC}"'
OPERATOR = "".join(
    f"{name}{{{_OWN}{extra}}} {value}\n"
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
GROWING = re.compile(r"^(vllm:[a-z_:]+(?:_bucket|_count|_sum|_total))(\{[^}]*\})? (\S+)$")


def grown(text: str, n: int, waiting: int) -> str:
    """The exposition with every counter multiplied by n (so rates are non-zero and the
    histograms have observations) and the queue gauges set to `waiting`."""
    out = []
    for line in text.splitlines():
        m = GROWING.match(line)
        new = line
        if m and not line.startswith("#"):
            name, labels, value = m.groups()
            # every bucket gets observations: +1 per scrape on top of the recorded counts
            new = f"{name}{labels or ''} {float(value) * n + n}"
        elif line.startswith(("vllm:num_requests_waiting{", "vllm:num_requests_running{")):
            new = line.rsplit(" ", 1)[0] + f" {waiting}"
        out.append(new)
    return "\n".join(out) + "\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is missing: scripts/build-monitoring.sh installs it")
        pytest.skip("prometheus is missing (apt-get install prometheus)")
    tmp = tmp_path_factory.mktemp("prometheus")
    scrapes = {"n": 0}
    # pod a: 30 waiting, pod b: 14 -> average 22 > 20: the band metric is above the target
    waiting = {"/a/metrics": 30, "/b/metrics": 14}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/operator/metrics":
                body = OPERATOR
            else:
                scrapes["n"] += 1
                body = grown(EXPOSITION, scrapes["n"], waiting.get(self.path, 0))
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    exporter = f"127.0.0.1:{server.server_address[1]}"
    targets = tmp / "pods.json"
    targets.write_text(
        json.dumps(
            [
                {
                    "targets": [exporter],
                    "labels": {
                        "__metrics_path__": f"/{p}/metrics",
                        "namespace": NS,
                        "pod": f"{SVC}-{p}",
                        "service": SVC,
                    },
                }
                for p in ("a", "b")
            ]
        )
    )
    cfg = tmp / "prometheus.yml"
    cfg.write_text(
        prometheus_config(
            tmp / "unused-kubeconfig",
            [rules_file()],
            operator_targets=[exporter],
            pod_targets_file=targets,
            scrape_interval="1s",
            evaluation_interval="1s",
        )
    )
    # the operator's fake endpoint lives under /operator/metrics
    text = cfg.read_text().replace(
        "job_name: vllm-operator\n", "job_name: vllm-operator\n  metrics_path: /operator/metrics\n"
    )
    cfg.write_text(text)
    port = free_port()
    log = (tmp / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"prometheus did not start: {(tmp / 'prometheus.log').read_text()[-2000:]}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        server.shutdown()


def query(url: str, expr: str) -> list[dict[str, Any]]:
    q = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def test_every_rule_and_dashboard_query_returns_data(prometheus: str) -> None:
    exprs = all_queries(NS, SVC, conditions=False)
    assert len(exprs) == 37
    deadline = time.monotonic() + 60
    empty = exprs
    while time.monotonic() < deadline:
        empty = [e for e in exprs if not query(prometheus, e)]
        if not empty:
            break
        time.sleep(2)
    assert not empty, f"queries without data: {empty}"


def test_band_metric_is_recorded_per_pod_above_the_target(prometheus: str) -> None:
    deadline = time.monotonic() + 30
    while len(result := query(prometheus, BAND_METRIC)) < 2 and time.monotonic() < deadline:
        time.sleep(1)
    assert {r["metric"]["pod"] for r in result} == {f"{SVC}-a", f"{SVC}-b"}
    for r in result:
        assert r["metric"]["namespace"] == NS
        assert float(r["value"][1]) == 24.0  # average 22 > 20: the scale-up floor 1.2 x 20
