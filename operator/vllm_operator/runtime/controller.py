"""The operator's engine between the watches and the reconcile: the work queue of services,
its workers, the children's watch caches and the gate that lets only the active replica work.

    kopf's VLLMService watch --enqueue-->  WorkQueue  <--enqueue-- child watches (informer.Cache)
                                               |
                                 N workers (one key at a time each)
                                               |
             fresh read of the service -> reconcile.reconcile() -> events, metrics, requeue

A worker reconciles one service at a time and never waits for another service (the queue
hands a key to one worker at a time; there are no locks to queue behind). After a reconcile
the key comes back after the resync period (the drift check); after a failure after its
back-off (5 s doubling to 5 min) or the resync period, whichever is first.

No kopf here: runtime/handlers.py wires kopf's events to `service_event`.
"""

from __future__ import annotations

import enum
import logging
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

from vllm_operator import GROUP, VERSION, metrics
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.reconcile import Outcome, reconcile
from vllm_operator.runtime.informer import Cache
from vllm_operator.runtime.workqueue import WorkQueue
from vllm_operator.write.apply import ApplyError, Writer
from vllm_operator.write.events import EventRecorder
from vllm_operator.write.transport import Kube

# the finalizer an early version (a kopf drift timer) added; the operator removes it
LEGACY_FINALIZER = "vllm-operator.dev/finalizer"

log = logging.getLogger("vllm_operator")

Key = tuple[str, str]


class Result(enum.Enum):
    OK = "ok"
    INVALID = "invalid"  # in the status; retried at the resync (a fix is a spec change)
    FAILED = "error"  # in the status when it could be written; retried with back-off
    GONE = "gone"  # deleted or being deleted: nothing to do, nothing to requeue


class Controller:
    """`writer`: the reconciles' client; `watcher`: the watches' client (long requests get
    their own connection pool). Call `start()`, then `set_active(True)` on the replica that
    may write (leader election; always, without it)."""

    def __init__(
        self,
        settings: OperatorSettings,
        writer: Writer,
        watcher: Kube,
        *,
        workers: int = 32,
    ) -> None:
        self.settings = settings
        self.writer = writer
        self.queue: WorkQueue[Key] = WorkQueue(on_depth=metrics.WORKQUEUE_DEPTH.set)
        self.cache = Cache(
            watcher,
            settings.watched_namespaces(),
            lambda namespace, name: self.queue.add((namespace, name)),
            timeout_seconds=settings.watch_timeout_seconds,
        )
        self.workers = workers
        self.events = EventRecorder(writer)  # posted beside the reconciles, in order
        self.active = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        # the services kopf reported, with what of them a reconcile reacts to: a status
        # written by the reconcile itself must not wake it again
        self._seen: dict[Key, tuple[Any, ...]] = {}
        self._seen_lock = threading.Lock()
        self._gauges_lock = threading.Lock()

    def start(self) -> None:
        self.writer.cache = self.cache  # answers only once a kind's watch has listed
        self.cache.start()
        self.events.start()
        for i in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"reconcile-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stopping.set()
        self.active.set()  # wake workers waiting for the gate, so they see the stop
        self.queue.shutdown()
        self.cache.stop()
        for thread in self._threads:
            thread.join(timeout=35)
        self.events.stop()  # what the last reconciles reported, for up to 5 s

    def set_active(self, active: bool) -> None:
        """Opens or closes the gate. Opening enqueues every known service: while closed,
        nothing was reconciled and no resync was scheduled."""
        if active and not self.active.is_set():
            with self._seen_lock:
                keys = list(self._seen)
            for key in keys:
                self.queue.add(key)
            self.active.set()
            log.info("active: reconciling %d services", len(keys))
        elif not active and self.active.is_set():
            with self._gauges_lock:  # a reconcile finishing now publishes nothing after this
                self.active.clear()
                metrics.forget_all()
            log.info("standing by: no reconciles, no writes, no per-service gauges")

    # -- events -------------------------------------------------------------------------------

    def service_event(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """A VLLMService event from kopf's watch (type None: kopf's initial listing)."""
        meta = body.get("metadata", {})
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if event_type == "DELETED":
            with self._seen_lock:
                self._seen.pop(key, None)
            self.queue.discard(key)
            metrics.forget(*key)
            return
        # a spec change (generation), an annotation (the rerun annotation), a deletion
        # starting: what a reconcile reacts to; a status change is the reconcile's own write
        mark = (
            meta.get("generation"),
            tuple(sorted((meta.get("annotations") or {}).items())),
            meta.get("deletionTimestamp"),
            meta.get("uid"),
        )
        with self._seen_lock:
            changed = self._seen.get(key) != mark
            self._seen[key] = mark
        if changed:
            self.queue.add(key)

    # -- the workers --------------------------------------------------------------------------

    def _work(self) -> None:
        while not self._stopping.is_set():
            if not self.active.wait(timeout=1.0):
                continue
            key = self.queue.get(timeout=1.0)
            if key is None:
                continue
            try:
                if not self.active.is_set():  # the gate closed while this worker waited
                    self.queue.add(key)  # dirty: handed out again after done()
                    continue
                self._process(key)
            finally:
                self.queue.done(key)

    def _process(self, key: Key) -> None:
        started = time.monotonic()
        try:
            result = self.reconcile_key(key)
        except Exception:  # a bug or an unexpected answer: logged, retried with back-off
            log.exception("reconcile of %s/%s", *key)
            result = Result.FAILED
        finally:
            metrics.RECONCILE_DURATION.observe(time.monotonic() - started)
        if result is Result.GONE:
            self.queue.forget(key)
            return
        if result is Result.FAILED:
            metrics.WORKQUEUE_RETRIES.inc()
            self.queue.add_rate_limited(key)
        else:
            self.queue.forget(key)
        # the drift check; after a failure too (the earlier of it and the back-off wins).
        # Up to 10 % early, at random: services applied together do not resync in lockstep
        jitter = 1 - 0.1 * random.random()  # noqa: S311  # spreading load, not a secret
        elapsed = time.monotonic() - started
        self.queue.add_after(key, max(self.settings.resync_seconds * jitter - elapsed, 0.1))

    def reconcile_key(self, key: Key) -> Result:
        """Reconciles the service `key` names, as it is now: the spec to apply and the status
        that transitions are computed against must be the latest, so it is read fresh (never
        from a cache)."""
        namespace, name = key
        try:
            fresh = self.writer.get(f"{GROUP}/{VERSION}", "VLLMService", namespace, name)
        except ApplyError as exc:  # the service itself could not be read
            metrics.RECONCILES.labels("error").inc()
            log.warning("reading %s/%s: %s", namespace, name, exc)
            return Result.FAILED
        if fresh is not None and LEGACY_FINALIZER in (fresh["metadata"].get("finalizers") or []):
            # an early version's kopf timer added one; nothing needs it (the children go with
            # their owner references) and a deletion would wait on it for good
            try:
                self.writer.drop_finalizer(namespace, name, fresh, LEGACY_FINALIZER)
            except ApplyError as exc:
                log.warning("removing the old finalizer of %s/%s: %s", namespace, name, exc)
                return Result.FAILED
            log.info("removed the finalizer an older version left on %s/%s", namespace, name)
        if fresh is None or fresh["metadata"].get("deletionTimestamp"):
            return Result.GONE
        outcome = reconcile(fresh, self.writer, self.settings)
        for event in outcome.events:
            self.events.record(fresh, event.type, event.reason, event.message)
        return self._record(namespace, name, outcome)

    def _record(self, namespace: str, name: str, outcome: Outcome) -> Result:
        if outcome.invalid is not None:
            metrics.RECONCILES.labels("invalid").inc()
            return Result.INVALID
        if outcome.failed is not None:
            metrics.RECONCILES.labels("error").inc()
            log.warning("reconcile of %s/%s failed: %s", namespace, name, outcome.failed)
            return Result.FAILED
        metrics.RECONCILES.labels("ok").inc()
        if outcome.changes:
            log.info(
                "reconciled %s/%s: %s",
                namespace,
                name,
                ", ".join(f"{c.kind} {c.name} {c.action}" for c in outcome.changes),
            )
        with self._gauges_lock:
            if self.active.is_set():  # only the leader exports the per-service gauges
                metrics.record_runs(namespace, name, outcome.runs)
                metrics.record_rollback(namespace, name, outcome.rolled_back_to)
                metrics.record_autoscaler(namespace, name, outcome.scaling_active)
        return Result.OK
