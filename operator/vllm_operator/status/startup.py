"""Step 5 of the flow (status), the starts: status.startup, where each pod's start spent its
time (observe/startup.py reads them, once per pod), per revision.

status.startup holds the last start (`last`), the RECENT most recent starts (by uid: a start
is recorded once), and per revision (the REVISIONS most recent) how many starts were seen and
their last, median and slowest loadSeconds: what a slow start is compared with, and what a
startup probe budget can follow. A start slower than `slow_factor` times the median of the
same revision's earlier starts carries `slowerThanUsual` (the ratio): reconcile._events posts
it as a Warning event (SlowStart), once.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from vllm_operator.observe.startup import PodStart

RECENT = 10
REVISIONS = 5


def _startup(
    old: dict[str, Any] | None,
    new: Iterable[PodStart],
    slow_factor: float,
    load_keys: Mapping[str, str] | None = None,
    probe_budget: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """status.startup from the last one written (`old`) and the starts read now (None: no
    start seen yet). `load_keys`: the load key (decide/startup.load_key) of the revisions the
    operator renders now, recorded with their starts (what a measured startup budget follows);
    `probe_budget`: the serving revision's startup budget (StartupBudget.as_status)."""
    load_keys = load_keys or {}
    recent = [r for r in (old or {}).get("recent") or [] if isinstance(r, dict) and r.get("uid")]
    revisions = {
        r["revision"]: dict(r)
        for r in (old or {}).get("revisions") or []
        if isinstance(r, dict) and r.get("revision")
    }
    known = {r["uid"] for r in recent}
    last = (old or {}).get("last")
    for start in sorted(new, key=lambda s: s.ready_at):
        if start.uid in known:
            continue
        known.add(start.uid)
        record = start.as_status()
        earlier = [
            float(r["loadSeconds"])
            for r in recent
            if r.get("revision") == start.revision and isinstance(r.get("loadSeconds"), int | float)
        ]
        if earlier:
            usual = statistics.median(earlier)
            if usual > 0 and start.load_seconds > slow_factor * usual:
                record["slowerThanUsual"] = round(start.load_seconds / usual, 2)
        recent = [*recent, record][-RECENT:]
        last = record
        seen = revisions.pop(start.revision, {"revision": start.revision, "starts": 0})
        loads = [*earlier, start.load_seconds]
        entry: dict[str, Any] = {
            "revision": start.revision,
            "starts": int(seen.get("starts", 0)) + 1,
            "lastLoadSeconds": start.load_seconds,
            "medianLoadSeconds": round(statistics.median(loads), 3),
            "slowestLoadSeconds": max(float(seen.get("slowestLoadSeconds", 0)), start.load_seconds),
        }
        ready = [
            float(v)
            for v in (seen.get("slowestReadySeconds"), start.phases.get("readySeconds"))
            if isinstance(v, int | float)
        ]
        if ready:  # (container started -> Ready: what the startup probe allows time for)
            entry["slowestReadySeconds"] = max(ready)
        if key := seen.get("loadKey") or load_keys.get(start.revision):
            entry["loadKey"] = key
        revisions[start.revision] = entry
    if last is None:
        return None
    out = {
        "last": last,
        "recent": recent,
        # the most recently started revisions last (dicts keep insertion order)
        "revisions": list(revisions.values())[-REVISIONS:],
    }
    if probe_budget is not None:
        out["probeBudget"] = probe_budget
    return out


def slow_start_message(record: dict[str, Any]) -> str:
    """The Warning event's message for a start marked slowerThanUsual."""
    # the start's consecutive parts (the engine's figures lie within readySeconds)
    parts = {
        k.removesuffix("Seconds"): record[k]
        for k in ("scheduledSeconds", "containerStartedSeconds", "readySeconds")
        if isinstance(record.get(k), int | float)
    }
    where = (
        "; "
        + ", ".join(f"{k} {v:g} s" for k, v in parts.items())
        + (
            f" (engine init {record['engineInitSeconds']:g} s)"
            if isinstance(record.get("engineInitSeconds"), int | float)
            else ""
        )
        if parts
        else ""
    )
    return (
        f"pod {record.get('pod')} of revision {record.get('revision')} took "
        f"{record.get('loadSeconds'):g} s to start, {record.get('slowerThanUsual'):g}x the "
        f"median of the revision's earlier starts{where}"
    )
