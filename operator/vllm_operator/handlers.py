"""The only module with kopf decorators. Each handler parses, delegates, maps errors."""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
from collections.abc import Mapping
from typing import Any, cast

import kopf
from kubernetes import client, config

from vllm_operator import GROUP, PLURAL, VERSION, metrics
from vllm_operator.apply import ApplyError, Writer
from vllm_operator.reconcile import InvalidSpecError, Outcome, reconcile
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
    # many services roll out at once after an upgrade: do not serialise them on few workers
    settings.execution.max_workers = 16
    settings.posting.level = logging.INFO
    metrics.serve(ours.metrics_port)


def _run(raw: Mapping[str, Any], memo: kopf.Memo) -> Outcome:
    body = cast(kopf.Body, raw)  # kopf's event poster reads only apiVersion/kind/metadata
    meta = raw["metadata"]
    lock = memo.locks[(meta["namespace"], meta["name"])]
    writes_before = memo.writer.writes
    try:
        with lock:
            outcome = reconcile(dict(body), memo.writer, memo.settings)
    except InvalidSpecError as exc:
        metrics.RECONCILES.labels("invalid").inc()
        kopf.warn(body, reason="InvalidSpec", message=str(exc))
        raise kopf.PermanentError(str(exc)) from exc
    except ApplyError as exc:
        metrics.RECONCILES.labels("error").inc()
        if exc.permanent:
            kopf.warn(body, reason="ApplyFailed", message=str(exc))
            raise kopf.PermanentError(str(exc)) from exc
        raise kopf.TemporaryError(str(exc), delay=10) from exc
    finally:
        metrics.WRITES.inc(memo.writer.writes - writes_before)
    metrics.RECONCILES.labels("ok").inc()
    for event in outcome.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    metrics.record_runs(meta["namespace"], meta["name"], outcome.runs)
    return outcome


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_spec(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _run(body, memo)


@kopf.timer(
    GROUP, VERSION, PLURAL, interval=SETTINGS.resync_seconds, initial_delay=SETTINGS.resync_seconds
)
def on_resync(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Drift timer: the same reconcile. Reads only, unless something drifted."""
    with contextlib.suppress(kopf.PermanentError):  # already reported in status
        _run(body, memo)


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
    owner = memo.writer.get(f"{GROUP}/{VERSION}", "VLLMService", namespace, service)
    if owner is None or owner["metadata"].get("deletionTimestamp"):
        return
    try:
        _run(owner, memo)
    except (kopf.PermanentError, kopf.TemporaryError) as exc:
        log.info("reconcile of %s/%s after a child %s: %s", namespace, service, type, exc)
