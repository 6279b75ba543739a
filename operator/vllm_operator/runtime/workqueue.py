"""The work queue between the watches and the reconcile (controller-runtime's, in small).

Keys are services, `(namespace, name)`. A key waits in the queue at most once, however many
events name it (a burst of child events is one reconcile), and is handed to one worker at a
time: a key added while a worker processes it is marked dirty and handed out once more after
`done` (so the change that arrived meanwhile is seen). A worker never waits for another key:
there are no per-key locks to block on, only keys that are not handed out while in flight.

Delayed keys (the periodic resync, the back-off of a failed reconcile) wait in a heap; a key
has at most one pending delay, the earliest asked for, and handing the key out cancels it (the
worker schedules the next one when it is done).

No Kubernetes, no kopf: threads and a clock, unit-tested on their own.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


def backoff(failures: int, base: float = 5.0, cap: float = 300.0) -> float:
    """Seconds before the next attempt after `failures` failed ones in a row (at least one):
    `base` doubling to `cap` (5 s, 10 s, ... 5 min)."""
    return float(min(base * 2 ** min(max(failures, 1) - 1, 30), cap))


class WorkQueue(Generic[K]):
    """A deduplicating, per-key exclusive queue with delays and per-key failure counts."""

    def __init__(
        self,
        *,
        base_delay: float = 5.0,
        max_delay: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        on_depth: Callable[[int], None] | None = None,
    ) -> None:
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()  # waiting in _queue, or to be re-queued when done
        self._processing: set[K] = set()
        self._due: dict[K, float] = {}  # the pending delay of a key
        self._heap: list[tuple[float, int, K]] = []
        self._seq = itertools.count()
        self._failures: dict[K, int] = {}
        self._shutdown = False
        self._base, self._cap = base_delay, max_delay
        self._clock = clock
        self._on_depth = on_depth

    # -- adding -------------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queues `key` now (a no-op when it already waits; after `done` when in flight)."""
        with self._cond:
            self._add(key)

    def _add(self, key: K) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return  # handed out again by done()
        self._queue.append(key)
        self._depth_changed()
        self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Queues `key` after `delay` seconds; a pending earlier delay of the key wins."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            due = self._clock() + delay
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, next(self._seq), key))
            self._cond.notify_all()  # a waiting get() may have to wake up sooner

    def add_rate_limited(self, key: K) -> float:
        """Counts a failure of `key` and queues it after its back-off; returns the delay."""
        with self._cond:
            self._failures[key] = self._failures.get(key, 0) + 1
            delay = backoff(self._failures[key], self._base, self._cap)
        self.add_after(key, delay)
        return delay

    def failures(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        """Resets the failure count of `key` (it succeeded, or it is gone)."""
        with self._cond:
            self._failures.pop(key, None)

    def discard(self, key: K) -> None:
        """Drops everything about `key`: its pending delay and failure count (a deleted
        service). A copy waiting in the queue is still handed out once (and finds it gone)."""
        with self._cond:
            self._failures.pop(key, None)
            self._due.pop(key, None)

    # -- taking -------------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> K | None:
        """The next key to process (now exclusively the caller's until `done`), or None when
        the queue is shut down or `timeout` passed."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                wait = self._promote_due()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    self._due.pop(key, None)  # the worker schedules the next resync itself
                    self._depth_changed()
                    return key
                if deadline is not None:
                    left = deadline - self._clock()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def _promote_due(self) -> float | None:
        """Moves keys whose delay passed into the queue; seconds until the next one is due."""
        now = self._clock()
        while self._heap:
            due, _, key = self._heap[0]
            if self._due.get(key) != due:  # superseded by an earlier delay, or cancelled
                heapq.heappop(self._heap)
                continue
            if due > now:
                return due - now
            heapq.heappop(self._heap)
            del self._due[key]
            self._add(key)
        return None

    def done(self, key: K) -> None:
        """The caller finished `key`; when it was added meanwhile, it is queued again."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty and not self._shutdown:
                self._queue.append(key)
                self._depth_changed()
                self._cond.notify()

    # -- state --------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys ready to be handed out now (not the delayed ones, not the ones in flight)."""
        with self._cond:
            return len(self._queue)

    def pending(self) -> int:
        """Keys with a pending delay (resyncs and back-offs)."""
        with self._cond:
            return len(self._due)

    def shutdown(self) -> None:
        """Wakes every waiting get() with None; adds are ignored from now on."""
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def _depth_changed(self) -> None:
        if self._on_depth is not None:
            self._on_depth(len(self._queue))
