"""The only module with kopf decorators: kopf watches VLLMServices and hands each event to the
controller's work queue (runtime/controller.py); it runs no reconcile itself.

The handlers are kopf's event-watching kind (`on.event`) only: they make kopf write nothing
onto the objects (no progress or last-handled-configuration annotations, no finalizers), so a
replica that stands by makes no writes at all, and the reconcile decides what changed (the
spec, the rerun annotation) from the object itself.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from kubernetes import client, config

from vllm_operator import GROUP, PLURAL, VERSION, metrics
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.runtime.controller import Controller
from vllm_operator.runtime.leader import LeaderElector
from vllm_operator.write.apply import Writer
from vllm_operator.write.transport import Kube

log = logging.getLogger("vllm_operator")
SETTINGS = OperatorSettings()


def _load_api(pool: int) -> client.ApiClient:
    """A client with `pool` kept connections (one per worker, one per watch: urllib3 drops
    and re-opens connections beyond its pool size)."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = pool
    return client.ApiClient(configuration)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    ours = SETTINGS
    # one kept connection per worker, and a few for the leader election and events
    writer = Writer(_load_api(ours.workers + 4), ours)
    watcher = Kube(_load_api(16), ours)
    controller = Controller(ours, writer, watcher, workers=ours.workers)
    memo.controller = controller
    settings.watching.server_timeout = ours.watch_timeout_seconds
    settings.watching.client_timeout = ours.watch_timeout_seconds + 10
    # namespaced mode (Roles only): kopf would list and watch CRDs and namespaces cluster-wide,
    # be refused, retry each 403 with its error_backoffs (1+1+2+3+5+8+13+21 = 54 s) and only
    # then fall back. It needs neither: the namespaces are listed exactly, and the resources it
    # serves are found once at start-up by discovery (/apis, readable by every client).
    if ours.watched_namespaces():
        settings.scanning.disabled = True
    # the service's events are the operator's own (the controller posts one per condition
    # transition); kopf's log lines as events would repeat
    settings.posting.level = logging.CRITICAL
    # kopf logs each handled event ("Handler 'on_service' succeeded."): a line per status
    # write of every service; the controller logs what a reconcile changed instead
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # the one HA mode: every replica watches, only the Lease's holder reconciles, and every
    # write passes the fence first (runtime/leader.py; docs/design/runtime.md)
    elector = LeaderElector(
        writer,
        ours,
        on_started_leading=lambda: controller.set_active(True),
        on_stopped_leading=lambda: controller.set_active(False),
    )
    writer.fence = elector.fence
    watcher.api.user_agent = writer.api.user_agent  # the replica's identity, on reads too
    memo.elector = elector
    controller.start()
    elector.start()
    metrics.serve(ours.metrics_port)


@kopf.on.cleanup()
def shutdown(memo: kopf.Memo, **_: Any) -> None:
    memo.controller.stop()
    memo.elector.stop()  # after the workers: a standby takes a released Lease at once


@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_service(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    """Every change of a service (and kopf's initial listing) goes to the work queue."""
    memo.controller.service_event(event.get("type"), event.get("object") or {})
