"""Pure statistics for the runner: percentiles, distributions and the knee of a
throughput/latency ladder. No I/O."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between closest ranks, as
    numpy's default; None when there are no values."""
    if not values:
        return None
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Sequence[float]) -> dict[str, float | int | None]:
    """count, mean, min, p50, p95, p99, max of the values (None where there are none)."""
    return {
        "count": len(values),
        "mean": sum(values) / len(values) if values else None,
        "min": min(values) if values else None,
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values) if values else None,
    }


def peak_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """The largest number of (start, end) intervals open at the same moment: how many
    requests were really in flight at once (an end at the same moment as a start does not
    overlap it)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    peak = current = 0
    for _, step in events:  # at equal times -1 sorts first: ends before starts
        current += step
        peak = max(peak, current)
    return peak


def knee(ladder: Sequence[tuple[int, float, float]]) -> int | None:
    """The knee of a concurrency ladder of (concurrency, throughput, latency) points, in
    increasing concurrency: the last concurrency before the first step at which latency grew
    by a larger factor than throughput. Up to the knee, more concurrency buys throughput
    almost for free (continuous batching); past it, requests mostly wait. When no step
    crosses, the knee is the highest concurrency measured (the server was not saturated)."""
    if not ladder:
        return None
    for (c_prev, thr_prev, lat_prev), (_, thr, lat) in itertools.pairwise(ladder):
        if thr_prev <= 0 or lat_prev <= 0:
            continue
        if lat / lat_prev > thr / thr_prev:
            return c_prev
    return ladder[-1][0]


def spread(values: Sequence[float | None]) -> dict[str, float | int | None]:
    """How repeated rounds of one figure spread: n, min, median, max and the sample standard
    deviation (None with fewer than two values); None values (not measured) are left out."""
    present = [v for v in values if v is not None]
    return {
        "n": len(present),
        "min": min(present) if present else None,
        "median": percentile(present, 50),
        "max": max(present) if present else None,
        "stdev": statistics.stdev(present) if len(present) > 1 else None,
    }
