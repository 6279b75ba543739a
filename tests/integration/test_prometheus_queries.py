"""Every query of the rules and the dashboard, evaluated by a real Prometheus (Debian's 2.42,
started here on a free port) that scrapes vLLM 0.32's real /metrics exposition
(tests/unit/bench/bench_data/vllm-0.32-metrics.txt, served with its counters growing between
scrapes) for two pods of one service, plus the operator's gauges; the generic rules file is
loaded, so the band metric is recorded by Prometheus itself.

This needs no cluster: discovery is the file_sd form the local cluster's Prometheus uses
(vllm_localenv.monitoring). tests/vllm/test_monitoring_queries.py does the same against a
live vLLM server.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.prometheus_support import (
    http_exporter,
    operator_exposition,
    query,
    running_prometheus,
    without_data,
)
from vllm_localenv.monitoring import prometheus_config, rules_file
from vllm_operator.generate.monitoring import all_queries
from vllm_operator.render.monitoring import BAND_METRIC

EXPOSITION = (
    Path(__file__).resolve().parents[1] / "unit" / "bench" / "bench_data" / "vllm-0.32-metrics.txt"
).read_text()
NS, SVC = "team", "llama"
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


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("prometheus")
    scrapes = {"n": 0}
    # pod a: 30 waiting, pod b: 14 -> average 22 > 20: the band metric is above the target
    waiting = {"/a/metrics": 30, "/b/metrics": 14}
    operator = operator_exposition(NS, SVC)

    def body(path: str) -> str:
        if path == "/metrics":
            return operator
        scrapes["n"] += 1
        return grown(EXPOSITION, scrapes["n"], waiting.get(path, 0))

    with http_exporter(body) as exporter:
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
        config = prometheus_config(
            tmp / "unused-kubeconfig",
            [rules_file()],
            operator_targets=[exporter],
            pod_targets_file=targets,
            scrape_interval="1s",
            evaluation_interval="1s",
        )
        with running_prometheus(tmp, config) as url:
            yield url


def test_every_rule_and_dashboard_query_returns_data(prometheus: str) -> None:
    exprs = all_queries(NS, SVC, conditions=False)
    # the band records the queue sum and the pod count too (2 rules); the capacity policy its
    # requests in flight (running + waiting, issue 33); the live latency guard its TTFT and
    # TPOT at four percentiles (8 rules, 0 while idle: data without a histogram here too)
    assert len(exprs) == 52
    empty = without_data(prometheus, exprs)
    assert not empty, f"queries without data: {empty}"


def test_band_metric_is_recorded_per_pod_above_the_target(prometheus: str) -> None:
    deadline = time.monotonic() + 120
    while len(result := query(prometheus, BAND_METRIC)) < 2 and time.monotonic() < deadline:
        time.sleep(1)
    assert {r["metric"]["pod"] for r in result} == {f"{SVC}-a", f"{SVC}-b"}
    for r in result:
        assert r["metric"]["namespace"] == NS
        assert float(r["value"][1]) == 24.0  # average 22 > 20: the scale-up floor 1.2 x 20
