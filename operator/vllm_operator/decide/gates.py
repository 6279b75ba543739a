"""Benchmark gates: pure checks of a result summary against the spec's thresholds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vllm_operator.api.records import Headline, Run
from vllm_operator.api.spec import BenchmarkThresholds

PASSED, FAILED = "Passed", "Failed"


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def failures(h: Headline, t: BenchmarkThresholds, previous: Headline | None) -> list[str]:
    """Each failed threshold as '<metric> <measured> <op> <limit>' (both values named)."""
    out: list[str] = []

    def low(name: str, value: float | None, minimum: float | None) -> None:
        if minimum is None:
            return
        if value is None:
            out.append(f"{name} was not measured (minimum {_fmt(minimum)})")
        elif value < minimum:
            out.append(f"{name} {_fmt(value)} < minimum {_fmt(minimum)}")

    low("outputTokensPerSecond", h.output_tokens_per_second, t.min_output_tokens_per_second)
    low("prefixTtftSpeedup", h.prefix_ttft_speedup, t.min_prefix_speedup)
    low("kvCacheTokens", h.kv_cache_tokens, t.min_kv_cache_tokens)
    if t.max_ttft_p95_seconds is not None:
        if h.ttft_p95_seconds is None:
            out.append(f"ttftP95Seconds was not measured (maximum {_fmt(t.max_ttft_p95_seconds)})")
        elif h.ttft_p95_seconds > t.max_ttft_p95_seconds:
            out.append(
                f"ttftP95Seconds {_fmt(h.ttft_p95_seconds)} > maximum "
                f"{_fmt(t.max_ttft_p95_seconds)}"
            )
    limit = t.max_throughput_regression_percent
    if (
        limit is not None
        and previous is not None
        and previous.output_tokens_per_second
        and h.output_tokens_per_second is not None
    ):
        drop = 100 * (1 - h.output_tokens_per_second / previous.output_tokens_per_second)
        if drop > limit:
            out.append(
                f"outputTokensPerSecond {_fmt(h.output_tokens_per_second)} is {drop:.1f}% below "
                f"the previous revision's {_fmt(previous.output_tokens_per_second)} "
                f"(maximum regression {_fmt(limit)}%)"
            )
    return out


def previous_passing(runs: list[Run], before: str) -> Run | None:
    """The newest completed run of another revision whose gates passed when it was measured:
    what a rollback restores, and the baseline for the regression threshold."""
    for run in sorted(runs, key=lambda r: r.created, reverse=True):
        if run.revision != before and run.state == "Complete" and run.verdict == PASSED:
            return run
    return None


def _theirs(runs: list[Run], revision: str) -> list[Run]:
    return sorted(
        (r for r in runs if r.revision == revision), key=lambda r: r.created, reverse=True
    )


def _passing(runs: list[Run]) -> Run | None:
    return next((r for r in runs if r.state == "Complete" and r.verdict == PASSED), None)


def baseline(runs: list[Run], revision: str, before: str = "") -> Run | None:
    """The regression baseline of `revision`: the newest passing run of the revision that
    served before it (`before`), else of the newest passing other revision."""
    if before and before != revision and (run := _passing(_theirs(runs, before))) is not None:
        return run
    return previous_passing(runs, revision)


def rollback_target(runs: list[Run], revision: str, before: str = "") -> Run | None:
    """What a failure of `revision` rolls back to: the revision that served before it was
    rolled out (`before`), when that one passed or has no failed verdict (its newest run with
    a recorded spec: a superseded one, say); else (not known, failed, or no run recorded) the
    newest passing run of another revision. After A passes, B passes, A is rolled out again
    and C fails, that is A: what served before C, not B."""
    theirs = _theirs(runs, before) if before and before != revision else []
    if (run := _passing(theirs)) is not None:
        return run
    if theirs and not any(r.verdict == FAILED for r in theirs):
        recorded = next((r for r in theirs if r.spec_json), None)
        if recorded is not None:
            return recorded
    return previous_passing(runs, revision)


@dataclass(frozen=True)
class Verdict:
    # against the thresholds in force now (BenchmarkPassed); while a rollback is in force, the
    # failures recorded when the run was judged (the reason for the rollback)
    failures: tuple[str, ...]
    to_record: str | None  # PASSED/FAILED, when the run has no recorded verdict yet
    rollback_to: Run | None

    @property
    def passed(self) -> bool:
        return not self.failures


def last_passing(runs: list[Run]) -> Run | None:
    """The newest completed run that passed: kept by the pruning whatever keepRuns says."""
    return next((r for r in reversed(runs) if r.state == "Complete" and r.verdict == PASSED), None)


def judge(
    runs: list[Run],
    revision: str,
    t: BenchmarkThresholds,
    rollback: bool,
    *,
    name: str | None = None,
    before: str = "",
    objective: Callable[[Run], list[str]] | None = None,
) -> Verdict | None:
    """The gates on `revision`'s completed run (None while there is none); `name`: that run
    (the revision's newest run, a re-run, is the one judged), else the revision's first.
    `before`: the revision that served before it (the baseline and the rollback target).
    `objective`: the latency objective's gate on the run (decide/capacity.failures).

    A run is judged for good once, when its result arrives, with the thresholds of that
    moment; that recorded verdict alone triggers a rollback, so tightening thresholds later
    reports (BenchmarkPassed=False) but never rolls back a revision that passed.
    """
    current = next(
        (
            r
            for r in runs
            if r.revision == revision and r.state == "Complete" and name in (None, r.name)
        ),
        None,
    )
    if current is None:
        return None
    base = baseline(runs, revision, before)
    failed = tuple(failures(current.headline, t, base.headline if base else None)) + tuple(
        objective(current) if objective is not None else ()
    )
    recorded = current.verdict
    to_record = None
    if recorded is None:
        recorded = to_record = FAILED if failed else PASSED
    target = rollback_target(runs, revision, before) if (rollback and recorded == FAILED) else None
    if target is not None and to_record is None:
        # a rollback in force reports the verdict that caused it: thresholds loosened since
        # do not make BenchmarkPassed=True beside Degraded=BenchmarkRollback (a re-run, the
        # rerun-benchmark annotation, judges the revision again with today's thresholds)
        failed = tuple(f for f in current.verdict_failures.split("; ") if f) or (
            failed or ("the gates failed when the run was judged",)
        )
    return Verdict(failed, to_record, target)
