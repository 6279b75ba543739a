"""The benchmark gates (decide/gates.py): every threshold, the regression baseline and the verdict,
as pure functions with exact inputs and outputs."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_operator.api.records import Headline, Run
from vllm_operator.api.spec import BenchmarkThresholds
from vllm_operator.decide.gates import (
    FAILED,
    PASSED,
    baseline,
    failures,
    judge,
    previous_passing,
    rollback_target,
)


def headline(**values: Any) -> Headline:
    return Headline(**values)


def run(
    revision: str,
    created: str,
    *,
    state: str = "Complete",
    verdict: str | None = PASSED,
    tps: float | None = 100.0,
) -> Run:
    return Run(
        revision=revision,
        name=f"svc-bench-{revision}",
        created=created,
        state=state,
        spec_json="{}",
        result={"status": "ok", "headline": {"outputTokensPerSecond": tps}},
        verdict=verdict,
    )


@pytest.mark.parametrize(
    ("thresholds", "measured", "expected"),
    [
        ({}, {"output_tokens_per_second": 1.0}, []),
        ({"minOutputTokensPerSecond": 100}, {"output_tokens_per_second": 100.0}, []),
        (
            {"minOutputTokensPerSecond": 100},
            {"output_tokens_per_second": 99.5},
            ["outputTokensPerSecond 99.5 < minimum 100"],
        ),
        (
            {"minOutputTokensPerSecond": 100},
            {},
            ["outputTokensPerSecond was not measured (minimum 100)"],
        ),
        ({"maxTtftP95Seconds": 0.5}, {"ttft_p95_seconds": 0.5}, []),
        (
            {"maxTtftP95Seconds": 0.5},
            {"ttft_p95_seconds": 0.75},
            ["ttftP95Seconds 0.75 > maximum 0.5"],
        ),
        (
            {"maxTtftP95Seconds": 0.5},
            {},
            ["ttftP95Seconds was not measured (maximum 0.5)"],
        ),
        ({"minPrefixSpeedup": 2}, {"prefix_ttft_speedup": 2.0}, []),
        (
            {"minPrefixSpeedup": 2},
            {"prefix_ttft_speedup": 1.5},
            ["prefixTtftSpeedup 1.5 < minimum 2"],
        ),
        ({"minKvCacheTokens": 4096}, {"kv_cache_tokens": 4096}, []),
        (
            {"minKvCacheTokens": 4096},
            {"kv_cache_tokens": 2048},
            ["kvCacheTokens 2048 < minimum 4096"],
        ),
        (
            {"minOutputTokensPerSecond": 100, "minKvCacheTokens": 4096},
            {"output_tokens_per_second": 10.0, "kv_cache_tokens": 10},
            ["outputTokensPerSecond 10 < minimum 100", "kvCacheTokens 10 < minimum 4096"],
        ),
    ],
)
def test_each_threshold(
    thresholds: dict[str, Any], measured: dict[str, Any], expected: list[str]
) -> None:
    t = BenchmarkThresholds.model_validate(thresholds)
    assert failures(headline(**measured), t, previous=None) == expected


@pytest.mark.parametrize(
    ("previous", "now", "expected"),
    [
        (100.0, 90.0, []),  # a 10% drop: exactly the limit
        (
            100.0,
            89.0,
            [
                (
                    "outputTokensPerSecond 89 is 11.0% below the previous revision's 100 "
                    "(maximum regression 10%)"
                )
            ],
        ),
        (100.0, 150.0, []),  # faster is never a regression
        (None, 1.0, []),  # no baseline: nothing to compare with
        (0.0, 1.0, []),  # a baseline of 0 cannot be regressed from
    ],
)
def test_regression_against_the_previous_passing_revision(
    previous: float | None, now: float, expected: list[str]
) -> None:
    t = BenchmarkThresholds(max_throughput_regression_percent=10)
    base = None if previous is None else headline(output_tokens_per_second=previous)
    assert failures(headline(output_tokens_per_second=now), t, base) == expected


def test_previous_passing_is_the_newest_passing_run_of_another_revision() -> None:
    runs = [
        run("a", "2030-01-01T00:01:00Z"),
        run("b", "2030-01-01T00:02:00Z"),
        run("c", "2030-01-01T00:03:00Z", verdict=FAILED),
        run("d", "2030-01-01T00:04:00Z", state="Failed", verdict=None),
        run("e", "2030-01-01T00:05:00Z", state="Running", verdict=None),
        run("f", "2030-01-01T00:06:00Z", verdict=None),  # complete, not judged yet
        run("g", "2030-01-01T00:07:00Z"),
    ]
    prev = previous_passing(runs, before="g")
    assert prev is not None
    assert prev.revision == "b"
    assert previous_passing(runs[::-1], before="g") == prev  # by creation, not list order
    assert previous_passing(runs[:1], before="a") is None


def test_no_verdict_without_a_complete_run() -> None:
    t = BenchmarkThresholds(min_output_tokens_per_second=1)
    assert judge([], "a", t, rollback=True) is None
    assert judge([run("a", "t1", state="Running", verdict=None)], "a", t, rollback=True) is None


def test_a_new_result_is_judged_and_the_verdict_recorded() -> None:
    t = BenchmarkThresholds(min_output_tokens_per_second=50)
    v = judge([run("a", "t1", verdict=None, tps=100)], "a", t, rollback=False)
    assert v is not None
    assert (v.failures, v.to_record, v.rollback_to, v.passed) == ((), PASSED, None, True)
    v = judge([run("a", "t1", verdict=None, tps=10)], "a", t, rollback=False)
    assert v is not None
    assert v.failures == ("outputTokensPerSecond 10 < minimum 50",)
    assert (v.to_record, v.rollback_to) == (FAILED, None)  # Report: no rollback


def test_a_failed_verdict_with_rollback_targets_the_last_passing_revision() -> None:
    t = BenchmarkThresholds(min_output_tokens_per_second=50)
    runs = [run("a", "t1", tps=100), run("b", "t2", verdict=None, tps=10)]
    v = judge(runs, "b", t, rollback=True)
    assert v is not None
    assert v.to_record == FAILED
    assert v.rollback_to is not None
    assert v.rollback_to.revision == "a"
    # recorded already: not recorded again, still rolled back
    runs[1] = run("b", "t2", verdict=FAILED, tps=10)
    v = judge(runs, "b", t, rollback=True)
    assert v is not None
    assert v.to_record is None
    assert v.rollback_to is not None


def test_a_failed_verdict_without_a_passing_revision_has_nothing_to_roll_back_to() -> None:
    t = BenchmarkThresholds(min_output_tokens_per_second=50)
    v = judge([run("b", "t2", verdict=None, tps=10)], "b", t, rollback=True)
    assert v is not None
    assert v.rollback_to is None
    assert v.failures


def test_tightened_thresholds_report_but_never_roll_back_a_revision_that_passed() -> None:
    runs = [run("a", "t1", tps=100), run("b", "t2", verdict=PASSED, tps=60)]
    t = BenchmarkThresholds(min_output_tokens_per_second=80)
    v = judge(runs, "b", t, rollback=True)
    assert v is not None
    assert v.failures == ("outputTokensPerSecond 60 < minimum 80",)
    assert v.rollback_to is None
    assert v.to_record is None


def test_a_failure_rolls_back_to_what_served_before_it_not_the_newest_passing_run() -> None:
    """Issue 19, item 5: A passes, B passes, A is rolled out again (measured already), C fails:
    C's run recorded A as what served before it, and A is restored, not B."""
    t = BenchmarkThresholds(min_output_tokens_per_second=50, max_throughput_regression_percent=5)
    a, b = run("a", "t1", tps=100), run("b", "t2", tps=200)
    c = run("c", "t3", verdict=None, tps=90)
    v = judge([a, b, c], "c", t, rollback=True, before="a")
    assert v is not None
    assert v.rollback_to == a
    # and the regression is against A's 100 (C's predecessor), not B's 200
    assert v.failures == (
        (
            "outputTokensPerSecond 90 is 10.0% below the previous revision's 100 "
            "(maximum regression 5%)"
        ),
    )
    assert rollback_target([a, b, c], "c", "a") == a
    assert baseline([a, b, c], "c", "a") == a
    # not known (a run recorded before this): the newest passing run, as before
    assert rollback_target([a, b, c], "c", "") == b
    assert baseline([a, b, c], "c", "") == b


def test_what_served_before_is_restored_only_when_it_did_not_fail() -> None:
    a, c = run("a", "t1"), run("c", "t4", verdict=FAILED)
    # B failed under Report and served on; C fails: not B, the newest passing run
    b = run("b", "t2", verdict=FAILED)
    assert rollback_target([a, b, c], "c", "b") == a
    # B's run was superseded (no verdict): B, as it was recorded, is what served before C
    b = Run("b", "svc-bench-b", "t2", "Failed", "{}", message="superseded")
    assert rollback_target([a, b, c], "c", "b") == b
    # no record of B at all (pruned, or never measured): the newest passing run
    assert rollback_target([a, c], "c", "b") == a
    assert rollback_target([a, c], "c", "c") == a  # never the failing revision itself
