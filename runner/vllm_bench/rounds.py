"""Repeated rounds (`--rounds N`): merge the summaries of one scenario's rounds into one
summary (median of each figure) and its spread (min/median/max/stdev). Pure; no I/O.

Rounds run interleaved (round 1 of every scenario, then round 2, ...), so a drift of the
server over the run spreads over all scenarios instead of biasing the last one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vllm_bench.stats import percentile, spread

# scenarios that repeat; capacity reads the server's configuration and naive loads a model
# in a subprocess: both run once, in the first round
ROUNDED_SCENARIOS = ("batching", "prefix", "streaming")
# integer counts over a round: added up across rounds, not a median
SUMMED_KEYS = frozenset({"emptyCompletions", "emptyAfterRetry", "preemptions"})


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _median(values: Sequence[float]) -> float | int:
    if all(isinstance(v, int) for v in values):
        return sorted(values)[(len(values) - 1) // 2]  # the lower median stays an integer
    middle = percentile(values, 50)
    assert middle is not None
    return middle


def merge_value(key: str, values: Sequence[Any]) -> Any:
    """One summary value over the rounds: numbers -> median (counts -> sum); lists of
    ladder points -> merged point by point; anything else -> the last round's."""
    numbers = [v for v in values if _is_number(v)]
    if numbers and all(v is None or _is_number(v) for v in values):
        return sum(numbers) if key in SUMMED_KEYS else _median(numbers)
    lists = [v for v in values if isinstance(v, list)]
    same_length = lists and all(len(v) == len(lists[0]) for v in lists)
    if same_length and all(isinstance(p, dict) for v in lists for p in v):
        return [merge_summaries(list(points)) for points in zip(*lists, strict=True)]
    return values[-1]


def merge_summaries(summaries: Sequence[dict[str, Any]]) -> dict[str, Any]:
    keys = dict.fromkeys(k for s in summaries for k in s)
    return {k: merge_value(k, [s.get(k) for s in summaries]) for k in keys}


def summary_spread(summaries: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Spread of every numeric top-level figure that was measured in each round, with the
    per-round values in round order."""
    out: dict[str, dict[str, Any]] = {}
    keys = dict.fromkeys(k for s in summaries for k in s)
    for key in keys:
        values = [s.get(key) for s in summaries]
        if key in SUMMED_KEYS or not any(_is_number(v) for v in values):
            continue
        if not all(v is None or _is_number(v) for v in values):
            continue
        out[key] = {**spread(values), "values": values}
    return out
