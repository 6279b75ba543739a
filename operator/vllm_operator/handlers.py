"""The only module with kopf decorators. Each handler parses, delegates, maps errors."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Mapping
from typing import Any, cast

import kopf
from kubernetes import client, config

from vllm_operator import GROUP, PLURAL, VERSION, metrics
from vllm_operator.apply import ApplyError, Writer
from vllm_operator.reconcile import Outcome, reconcile
from vllm_operator.render.meta import MANAGED_BY, SERVICE_LABEL
from vllm_operator.settings import OperatorSettings

log = logging.getLogger("vllm_operator")
# read once at import: decorator arguments (the timer interval) are fixed at registration
SETTINGS = OperatorSettings()


def _load_api() -> client.ApiClient:
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    ours = SETTINGS
    memo.settings = ours
    memo.writer = Writer(_load_api(), ours)
    # one reconcile at a time per service: kopf serialises its own handlers per object, but
    # the child-event handler runs beside them
    memo.locks = collections.defaultdict(threading.Lock)
    # kopf's own bookkeeping under our prefix, so it never collides with other operators
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ours.annotation_prefix
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ours.annotation_prefix, key="last-handled-configuration"
    )
    settings.persistence.finalizer = ours.finalizer
    settings.watching.server_timeout = ours.watch_timeout_seconds
    settings.watching.client_timeout = ours.watch_timeout_seconds + 10
    # namespaced mode (Roles only): kopf would list and watch CRDs and namespaces cluster-wide,
    # be refused, retry each 403 with its error_backoffs (1+1+2+3+5+8+13+21 = 54 s) and only
    # then fall back. It needs neither: the namespaces are listed exactly, and the resources it
    # serves are found once at start-up by discovery (/apis, readable by every client).
    if ours.watched_namespaces():
        settings.scanning.disabled = True
    # many services roll out at once after an upgrade: do not serialise them on few workers
    settings.execution.max_workers = 16
    # the service's events are the operator's own (reconcile derives them from condition
    # transitions, each posted once); kopf's log lines as events would repeat every retry
    settings.posting.level = logging.CRITICAL
    metrics.serve(ours.metrics_port)


def backoff(retry: int) -> float:
    """Seconds before the next attempt after `retry` failed ones: 5 s doubling to 5 min."""
    return float(min(5 * 2 ** min(retry, 6), 300))


def _run(raw: Mapping[str, Any], memo: kopf.Memo) -> Outcome | None:
    """Reconciles the service `raw` names, as it is now: kopf's body can be older than the
    object (a resume after a restart, a timer between two spec changes), and both the spec
    to apply and the status that transitions are computed against must be the latest.
    None when the service is gone or being deleted."""
    meta = raw["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    lock = memo.locks[(namespace, name)]
    writes_before = memo.writer.writes
    try:
        with lock:
            fresh = memo.writer.get(f"{GROUP}/{VERSION}", "VLLMService", namespace, name)
            if fresh is None or fresh["metadata"].get("deletionTimestamp"):
                return None
            outcome = reconcile(fresh, memo.writer, memo.settings)
    except ApplyError as exc:  # the service itself could not be read
        metrics.RECONCILES.labels("error").inc()
        raise kopf.TemporaryError(str(exc), delay=backoff(0)) from exc
    finally:
        metrics.WRITES.inc(memo.writer.writes - writes_before)
    body = cast(kopf.Body, fresh)  # kopf's event poster reads only apiVersion/kind/metadata
    for event in outcome.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    if outcome.invalid is not None:
        metrics.RECONCILES.labels("invalid").inc()
    elif outcome.failed is not None:
        metrics.RECONCILES.labels("error").inc()
        log.warning("reconcile of %s/%s failed: %s", namespace, name, outcome.failed)
    else:
        metrics.RECONCILES.labels("ok").inc()
        metrics.record_runs(namespace, name, outcome.runs)
        metrics.record_rollback(namespace, name, outcome.rolled_back_to)
        metrics.record_autoscaler(namespace, name, outcome.scaling_active)
    return outcome


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
# the rerun-benchmark annotation (spec.RERUN_ANNOTATION) starts a run now, not at the resync
@kopf.on.update(GROUP, VERSION, PLURAL, field="metadata.annotations")
def on_spec(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
    outcome = _run(body, memo)
    if outcome is not None and outcome.invalid is not None:  # in the status; a fix is an update
        raise kopf.PermanentError(outcome.invalid)
    if outcome is not None and outcome.failed is not None:  # in the status; retried
        raise kopf.TemporaryError(str(outcome.failed), delay=backoff(retry))


@kopf.timer(
    GROUP, VERSION, PLURAL, interval=SETTINGS.resync_seconds, initial_delay=SETTINGS.resync_seconds
)
def on_resync(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Drift timer: the same reconcile. Reads only, unless something drifted. A failure is
    already in the status; the next tick retries it."""
    with contextlib.suppress(kopf.TemporaryError):
        _run(body, memo)


def _without_finalizer(fn: object) -> None:
    """kopf gives every timer a finalizer, so that it can stop the timer before the object
    goes (kopf/on.py hard-codes requires_finalizer=True for timers). The drift timer needs
    none: a reconcile of a deleted service finds it gone and does nothing, while a finalizer
    blocks deletion whenever the operator is down or uninstalled (services and their
    namespaces stuck Terminating). Deletion is garbage collection's job alone. kopf removes
    its finalizer from objects that carry one and no longer need it."""
    spawning = kopf.get_default_registry()._spawning  # private: kopf has no public switch
    spawning._handlers = [
        dataclasses.replace(h, requires_finalizer=False) if h.fn is fn else h
        for h in spawning._handlers
    ]


_without_finalizer(on_resync)


@kopf.on.delete(GROUP, VERSION, PLURAL, optional=True)  # optional: no finalizer needed
def on_delete(meta: kopf.Meta, **_: Any) -> None:
    """Children go by garbage collection; only the service's metric series are ours to drop."""
    metrics.forget(str(meta.get("namespace")), str(meta.get("name")))


@kopf.on.event("apps", "v1", "deployments", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
@kopf.on.event("batch", "v1", "jobs", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
@kopf.on.event("", "v1", "configmaps", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
def on_child_event(body: kopf.Body, memo: kopf.Memo, type: str, **_: Any) -> None:  # noqa: A002
    """A child changed (rollout progress, a benchmark finished or wrote its result, an edit,
    a deletion): reconcile its owner now rather than at the next resync."""
    service = (body.get("metadata", {}).get("labels") or {}).get(SERVICE_LABEL)
    namespace = body.get("metadata", {}).get("namespace")
    if not service or not namespace:
        return
    try:
        _run({"metadata": {"namespace": namespace, "name": service}}, memo)
    except kopf.TemporaryError as exc:
        log.info("reconcile of %s/%s after a child %s: %s", namespace, service, type, exc)
