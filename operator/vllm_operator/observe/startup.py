"""Part of the "observe" step: where one start of a vLLM pod spent its time (issue 34).

A start is read once, when the pod is first seen Ready, from three sources, each for what it
alone knows:

- the pod (Kubernetes' clock): created, scheduled (PodScheduled), the server container started
  (`state.running.startedAt`), Ready (the Ready condition: the first /health 200 of the
  readiness probe after the startup probe passed);
- the kubelet's Pulled event of the pod: how long the image pull took ("Successfully pulled
  image ... in 2.5s (2.5s including waiting)"; "already present on machine": none);
- vLLM's own log, from its beginning (the first MAX_LOG_BYTES): what the engine itself timed.
  These lines are vLLM's (V1 engine, 0.10 and later; the figures are vLLM's own):
    "Loading weights took 1.88 seconds"                       -> weightsSeconds
    "Model loading took 14.96 GiB and 4.367060 seconds"        -> modelLoadSeconds
    "torch.compile took 23.88 s in total"                      -> compileSeconds
    "Graph capturing finished in 5 secs, took 0.58 GiB"        -> graphCaptureSeconds
    "init engine (profile, create kv cache, warmup model) took 55.94 s"  -> engineInitSeconds
  and the time between its first line and "Application startup complete." (the API server
  answering), `serverSeconds`: the server's own figure of its start.
  The log is read with the kubelet's per-line timestamps (`timestamps=true`: when each line was
  written, to the nanosecond), so the same lines also give, on the container's timeline:
  `importSeconds` (the container started -> vLLM's first line: Python importing vLLM and torch,
  which vLLM's own figures leave out: 14-25 s of a GPU start), `serverReadySeconds` (started ->
  "Application startup complete.": when the server could answer) and `probeLagSeconds`
  ("Application startup complete." -> Ready: what the probes' period adds to every start).
  Without kubelet stamps (a log read otherwise) serverSeconds comes from vLLM's own stamps
  (`INFO 12-06 19:45:21`: to the second) and the three others are left out.

`loadSeconds` is the whole start, created to Ready. A phase the log does not show (an older
vLLM, a CPU build without graphs, a log rotated away) is left out, never guessed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# the start of the log holds every start-up line (a GPU start logs ~100 lines before serving)
MAX_LOG_BYTES = 512 * 1024

_ENGINE_FIGURES = {
    "weightsSeconds": re.compile(r"Loading weights took ([0-9.]+) seconds"),
    "modelLoadSeconds": re.compile(r"Model loading took [0-9.]+ ?[GM]i?B and ([0-9.]+) seconds"),
    "compileSeconds": re.compile(r"torch\.compile took ([0-9.]+) s in total"),
    "graphCaptureSeconds": re.compile(r"Graph capturing finished in ([0-9.]+) secs?"),
    "engineInitSeconds": re.compile(r"init engine \([^)]*\) took ([0-9.]+) s"),
}
# `INFO 12-06 19:45:21 [api_server.py:677] ...` (vLLM's logger; month-day, no year or zone)
_STAMP = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR)\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
_SERVING = "Application startup complete"
# the kubelet's stamp before each line of a log read with timestamps=true (RFC 3339, nanoseconds)
_KUBELET = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d) ")
_PULLED = re.compile(r"Successfully pulled image .* in ([0-9.]+)(ms|s|m)\b")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0}


def _ts(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _seconds(a: dt.datetime | None, b: dt.datetime | None) -> float | None:
    return None if a is None or b is None else round((b - a).total_seconds(), 3)


def _stamped(line: str) -> tuple[dt.datetime | None, str]:
    """A log line's kubelet stamp (None: the line has none) and the line without it."""
    m = _KUBELET.match(line)
    if m is None:
        return None, line
    fraction = (m[2] or "")[:6].ljust(6, "0")  # (datetime holds microseconds)
    zone = "+00:00" if m[3] == "Z" else m[3]
    return dt.datetime.fromisoformat(f"{m[1]}.{fraction}{zone}"), line[m.end() :]


def engine_figures(
    log: str, started: dt.datetime | None = None, ready: dt.datetime | None = None
) -> dict[str, float]:
    """What vLLM's log says of its own start: the figures above that it printed, and
    serverSeconds (its first line to "Application startup complete."); with the kubelet's
    stamps and the container's `started` and `ready` times, importSeconds, serverReadySeconds
    and probeLagSeconds. The first of each (a restarted container's log is its own)."""
    out: dict[str, float] = {}
    first = latest = last = None
    first_at = serving_at = None
    text = []
    for raw in log.splitlines():
        at, line = _stamped(raw)
        text.append(line)
        if first_at is None and at is not None and line.strip():
            first_at = at
        if m := _STAMP.search(line):
            month, day, hour, minute, second = (int(x) for x in m.groups())
            latest = (month, day, hour, minute, second)
            first = first or latest
        if _SERVING in line:
            # (uvicorn's own line has no vLLM stamp: the last stamped line before it)
            last, serving_at = latest, at
            break
    body = "\n".join(text)
    for key, pattern in _ENGINE_FIGURES.items():
        if m := pattern.search(body):
            out[key] = float(m[1])
    if first_at is not None and serving_at is not None:
        out["serverSeconds"] = round((serving_at - first_at).total_seconds(), 3)
    elif first is not None and last is not None:
        out["serverSeconds"] = float(_span(first, last))
    if started is not None and first_at is not None:
        out["importSeconds"] = max(0.0, round((first_at - started).total_seconds(), 3))
    if started is not None and serving_at is not None:
        out["serverReadySeconds"] = max(0.0, round((serving_at - started).total_seconds(), 3))
    if ready is not None and serving_at is not None:
        # (Ready's stamp is to the second: a lag under a second may read as a little below 0)
        out["probeLagSeconds"] = max(0.0, round((ready - serving_at).total_seconds(), 3))
    return out


def _span(a: tuple[int, int, int, int, int], b: tuple[int, int, int, int, int]) -> int:
    year = 2001  # any non-leap year: only differences count
    da = dt.datetime(year, a[0], a[1], a[2], a[3], a[4])
    db = dt.datetime(year, b[0], b[1], b[2], b[3], b[4])
    if db < da:  # across New Year's Eve
        db = db.replace(year=year + 1)
    return int((db - da).total_seconds())


def pull_seconds(events: Iterable[dict[str, Any]]) -> float | None:
    """The image pull of the pod's server container as the kubelet reported it (0: the image
    was already present; None: no such event, e.g. expired after the API server's event TTL)."""
    for e in events:
        if e.get("reason") != "Pulled":
            continue
        message = str(e.get("message") or "")
        if "already present" in message:
            return 0.0
        if m := _PULLED.search(message):
            return round(float(m[1]) * _UNIT[m[2]], 3)
    return None


@dataclass(frozen=True)
class PodStart:
    """One start of one pod: its phases (seconds; a phase not known is absent)."""

    pod: str
    uid: str
    revision: str
    created: str  # the pod's creationTimestamp
    ready_at: str  # when it became Ready
    load_seconds: float  # created -> Ready: the whole start
    restarts: int  # of the server container before it served (a crash loop's start is slow)
    phases: dict[str, float] = field(default_factory=dict)

    def as_status(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "uid": self.uid,
            "revision": self.revision,
            "createdAt": self.created,
            "readyAt": self.ready_at,
            "loadSeconds": self.load_seconds,
            "restarts": self.restarts,
            **dict(sorted(self.phases.items())),
        }


def pod_start(
    pod: dict[str, Any],
    revision: str,
    container: str,
    events: Iterable[dict[str, Any]] = (),
    log: str = "",
) -> PodStart | None:
    """The start of a Ready pod (None: not Ready, or its stamps are missing)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready") or {}
    if ready.get("status") != "True":
        return None
    created, ready_at = _ts(meta.get("creationTimestamp")), _ts(ready.get("lastTransitionTime"))
    if created is None or ready_at is None:
        return None
    scheduled = _ts((conditions.get("PodScheduled") or {}).get("lastTransitionTime"))
    server: dict[str, Any] = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == container), {}
    )
    started = _ts(((server.get("state") or {}).get("running") or {}).get("startedAt"))
    phases: dict[str, float] = {}
    for key, value in (
        ("scheduledSeconds", _seconds(created, scheduled)),
        ("imagePullSeconds", pull_seconds(events)),
        ("containerStartedSeconds", _seconds(scheduled, started)),
        ("readySeconds", _seconds(started, ready_at)),
    ):
        if value is not None and value >= 0:
            phases[key] = value
    phases |= engine_figures(log, started, ready_at)
    load = _seconds(created, ready_at)
    assert load is not None
    return PodStart(
        pod=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        revision=revision,
        created=str(meta.get("creationTimestamp")),
        ready_at=str(ready.get("lastTransitionTime")),
        load_seconds=load,
        restarts=int(server.get("restartCount") or 0),
        phases=phases,
    )
