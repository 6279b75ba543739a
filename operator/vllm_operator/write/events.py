"""Kubernetes Events, posted beside the reconciles rather than inside them (client-go's
EventBroadcaster, in small).

A reconcile computes its events (reconcile._events: one per condition transition and per
child written) and hands them over; one thread posts them in order. A reconcile never waits
for an Event's round-trip: with a hundred services applied at once, posting them inline took
about a sixth of the workers' time (py-spy, benchmarks/operator_scale.py), and an Event is a
report, not state: the status carries the truth.

Posting goes through the same transport as every write (kube.Kube: the leader election's
fence refuses it on a replica that is not the leader). The queue is bounded: when the API
server cannot keep up, the newest events are dropped and counted
(vllm_operator_events_dropped_total), never the reconciles slowed.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from typing import Any, Protocol

from vllm_operator import metrics

log = logging.getLogger("vllm_operator")


class Poster(Protocol):
    def post_event(
        self, involved: dict[str, Any], type_: str, reason: str, message: str
    ) -> None: ...


_Item = tuple[dict[str, Any], str, str, str]


class EventRecorder:
    """`record` queues an Event; `start` posts them on a thread of its own, in order;
    `stop` posts what is queued (for up to `flush_seconds`) and ends the thread."""

    def __init__(self, poster: Poster, *, capacity: int = 1000) -> None:
        self._poster = poster
        self._queue: queue.Queue[_Item | None] = queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def record(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        if self._thread is None:  # not started (a one-shot use): post in the caller
            self._post((involved, type_, reason, message))
            return
        meta = involved.get("metadata", {})
        # only what the Event names is kept, not the whole object
        slim = {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "metadata": {k: meta.get(k) for k in ("namespace", "name", "uid")},
        }
        try:
            self._queue.put_nowait((slim, type_, reason, message))
        except queue.Full:
            metrics.EVENTS_DROPPED.inc()
            log.warning(
                "event %s on %s/%s dropped: %d events wait to be posted",
                reason,
                meta.get("namespace"),
                meta.get("name"),
                self._queue.qsize(),
            )

    def pending(self) -> int:
        return self._queue.qsize()

    def stop(self, flush_seconds: float = 5.0) -> None:
        if self._thread is None:
            return
        with contextlib.suppress(queue.Full):  # then the join below times out
            self._queue.put(None, timeout=flush_seconds)
        self._thread.join(timeout=flush_seconds)
        self._thread = None

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            self._post(item)

    def _post(self, item: _Item) -> None:
        try:
            self._poster.post_event(*item)  # logs and swallows the API server's refusals
        except Exception:  # a bug must not end the thread: the next events still go out
            log.exception("posting event %s", item[2])
