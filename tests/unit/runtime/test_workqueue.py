"""The work queue: coalescing, one worker per key, back-off, delays, and a slow key that
never blocks another. Real threads; every wait is on an event or barrier, never a sleep."""

from __future__ import annotations

import threading
from collections import Counter

from vllm_operator.runtime.workqueue import WorkQueue, backoff

WAIT = 10  # seconds: a generous bound on waits that are normally immediate


class Clock:
    """A hand-driven monotonic clock (delays without sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_key_added_many_times_waits_once() -> None:
    q: WorkQueue[str] = WorkQueue()
    for _ in range(50):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert q.get(timeout=0) == "a"
    assert q.get(timeout=0) == "b"
    assert q.get(timeout=0) is None


def test_a_burst_while_processing_is_one_more_run() -> None:
    """The coalescing: events that arrive while a key is reconciled make exactly one more
    reconcile, after the one in flight, not one each."""
    q: WorkQueue[str] = WorkQueue()
    q.add("svc")
    key = q.get(timeout=0)
    assert key == "svc"
    for _ in range(100):  # a burst of child events during the reconcile
        q.add("svc")
    assert len(q) == 0  # not handed out while in flight
    assert q.get(timeout=0) is None
    q.done("svc")
    assert q.get(timeout=0) == "svc"  # once more, for what arrived meanwhile
    q.done("svc")
    assert q.get(timeout=0) is None  # and only once


def test_a_key_is_processed_by_one_worker_at_a_time() -> None:
    q: WorkQueue[str] = WorkQueue()
    running: Counter[str] = Counter()
    overlap: list[str] = []
    runs: Counter[str] = Counter()
    lock = threading.Lock()
    all_started = threading.Barrier(5)

    def worker() -> None:
        all_started.wait(WAIT)
        while (key := q.get(timeout=0.5)) is not None:
            with lock:
                running[key] += 1
                if running[key] > 1:
                    overlap.append(key)
                runs[key] += 1
            # re-adds from inside (a child event caused by this very reconcile)
            if runs[key] < 20:
                q.add(key)
            with lock:
                running[key] -= 1
            q.done(key)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for k in "abc":
        q.add(k)
    all_started.wait(WAIT)
    for t in threads:
        t.join(WAIT)
    assert overlap == []
    assert runs == {"a": 20, "b": 20, "c": 20}  # positive control: the keys did run


def test_a_slow_key_does_not_block_another() -> None:
    """Two workers: while one is stuck in a slow reconcile of `slow` (with more events for
    it arriving), the other reconciles `fast`, repeatedly."""
    q: WorkQueue[str] = WorkQueue()
    slow_started, release_slow = threading.Event(), threading.Event()
    fast_ran = threading.Semaphore(0)
    done: list[str] = []

    def worker() -> None:
        while (key := q.get(timeout=WAIT)) is not None:
            if key == "slow":
                slow_started.set()
                release_slow.wait(WAIT)
            done.append(key)
            if key == "fast":
                fast_ran.release()
            q.done(key)
            if key == "slow":
                return

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    q.add("slow")
    assert slow_started.wait(WAIT)
    for _ in range(3):
        q.add("slow")  # more events for the slow key: they must not take the other worker
        q.add("fast")
        assert fast_ran.acquire(timeout=WAIT), done
    assert done == ["fast", "fast", "fast"]  # all while `slow` was still in flight
    release_slow.set()
    for t in threads:
        t.join(WAIT)
    assert done[3:] == ["slow", "slow"]  # the events during the slow run: one more run


def test_delays_keep_the_earliest_and_fire_on_the_clock() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("a", 60)
    q.add_after("a", 5)  # earlier wins
    q.add_after("a", 30)  # later: ignored
    assert q.pending() == 1
    assert q.get(timeout=0) is None
    clock.now += 4.9
    assert q.get(timeout=0) is None
    clock.now += 0.2
    assert q.get(timeout=0) == "a"
    q.done("a")
    clock.now += 100
    assert q.get(timeout=0) is None  # the superseded 60 s delay does not fire again


def test_handing_a_key_out_cancels_its_pending_delay() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("a", 5)
    q.add("a")  # an event before the resync is due
    assert q.get(timeout=0) == "a"
    q.done("a")
    clock.now += 10
    assert q.get(timeout=0) is None  # no second run from the old resync
    assert q.pending() == 0


def test_a_delayed_key_wakes_a_waiting_worker() -> None:
    q: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    waiting = threading.Event()

    def worker() -> None:
        waiting.set()
        got.append(q.get(timeout=WAIT))

    t = threading.Thread(target=worker)
    t.start()
    assert waiting.wait(WAIT)
    q.add_after("later", 0.05)
    t.join(WAIT)
    assert got == ["later"]


def test_failures_back_off_exponentially_and_forget_resets() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock, base_delay=5, max_delay=300)
    delays = [q.add_rate_limited("a") for _ in range(8)]
    assert delays == [5, 10, 20, 40, 80, 160, 300, 300]
    assert q.failures("a") == 8
    q.forget("a")
    assert q.failures("a") == 0
    assert q.add_rate_limited("a") == 5
    # the key itself comes back after its (earliest) delay
    clock.now += 5
    assert q.get(timeout=0) == "a"


def test_backoff_steps() -> None:
    assert [backoff(n) for n in (1, 2, 3, 7, 8, 100)] == [5, 10, 20, 300, 300, 300]


def test_discard_drops_a_deleted_key() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_rate_limited("gone")
    q.discard("gone")
    clock.now += 1000
    assert q.get(timeout=0) is None
    assert q.failures("gone") == 0


def test_depth_is_reported() -> None:
    depths: list[int] = []
    q: WorkQueue[str] = WorkQueue(on_depth=depths.append)
    q.add("a")
    q.add("b")
    q.add("a")
    q.get(timeout=0)
    assert depths == [1, 2, 1]
    assert len(q) == 1


def test_shutdown_wakes_waiting_workers() -> None:
    q: WorkQueue[str] = WorkQueue()
    got: list[str | None] = ["unset"]
    waiting = threading.Event()

    def worker() -> None:
        waiting.set()
        got[0] = q.get()

    t = threading.Thread(target=worker)
    t.start()
    assert waiting.wait(WAIT)
    q.shutdown()
    t.join(WAIT)
    assert got == [None]
    q.add("x")
    assert len(q) == 0
