"""The bake's p99s (observe/live.py): read as buckets by `le` and computed as Prometheus's
histogram_quantile computes them, with the lower bound of the bucket that holds each; proven
against Prometheus's own engine (promtool test rules evaluates histogram_quantile over the same
buckets and must answer the very same float), and the cases it answers NaN (None here)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from tests.unit.generate.test_monitoring_rules import promtool, run_promtool, write_rules
from vllm_operator.observe.live import quantile

__all__ = ["promtool"]  # (the fixture, used by name)

INF = math.inf
# vLLM's TTFT buckets around 100 ms (no bound between 0.1 and 0.25 s), cumulative counts
HISTOGRAMS: list[dict[float, float]] = [
    {0.08: 90, 0.1: 99, 0.25: 100, INF: 100},  # the p99 at a bound exactly
    {0.08: 90, 0.1: 98, 0.25: 100, INF: 100},  # two requests past 100 ms: 175 ms
    {0.001: 0, 0.005: 3, 0.01: 7, 0.02: 7, INF: 7},  # an empty bucket below the rank
    {0.1: 50, INF: 100},  # the rank in +Inf: the largest finite bound
    {0.1: 95, 0.25: 98, 0.5: 97, 1.0: 100, INF: 100},  # not monotonic (increase() of each apart)
    {0.04: 1, 0.06: 1, INF: 1},  # one request
    {0.1: 20, 0.25: 35.5, 0.5: 40.25, INF: 40.25},  # fractional (increase() extrapolates)
]


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


def test_the_p99_is_prometheus_histogram_quantile_to_the_last_bit(
    promtool: str, tmp_path: Path
) -> None:
    tests = []
    for i, buckets in enumerate(HISTOGRAMS):
        got = quantile(0.99, buckets)
        assert got is not None
        tests.append(
            {
                "interval": "1m",
                "input_series": [
                    {"series": f'h{i}_bucket{{le="{_le(le)}"}}', "values": repr(float(n))}
                    for le, n in buckets.items()
                ],
                "promql_expr_test": [
                    {
                        "expr": f"histogram_quantile(0.99, sum by (le) (h{i}_bucket))",
                        "eval_time": "0m",
                        "exp_samples": [{"labels": "{}", "value": got[0]}],
                    }
                ],
            }
        )
    rules = write_rules(tmp_path, [])
    (tmp_path / "t.yaml").write_text(
        yaml.safe_dump({"rule_files": [rules.name], "tests": tests}, sort_keys=False)
    )
    run_promtool(promtool, "test", "rules", "t.yaml", cwd=tmp_path)


def test_the_bucket_that_holds_the_p99_is_known() -> None:
    assert quantile(0.99, HISTOGRAMS[0]) == (0.1, 0.08)
    value, floor = quantile(0.99, HISTOGRAMS[1]) or (0, 0)
    assert (round(value, 6), floor) == (0.175, 0.1)
    assert quantile(0.99, HISTOGRAMS[3]) == (0.1, 0.1)
    assert quantile(0.99, {0.04: 1, 0.06: 1, INF: 1})[1] == 0.0  # type: ignore[index]


@pytest.mark.parametrize(
    "buckets",
    [{}, {0.1: 3}, {0.1: 3, 0.25: 5}, {0.1: 0, INF: 0}],
    ids=["none", "one bucket", "no +Inf", "no observation"],
)
def test_no_quantile_where_prometheus_answers_nan(buckets: dict[float, float]) -> None:
    assert quantile(0.99, buckets) is None
