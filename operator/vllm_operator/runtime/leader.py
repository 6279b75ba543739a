"""Leader election on a coordination.k8s.io/v1 Lease, with fencing: of several operator
replicas exactly one may write to the API at any moment.

The decision is a pure step, `decide(me, lease, memory, now, timing)`, unit-tested with a fake
clock; `LeaderElector` runs it in a background thread against the API server and answers
`fence()` before every write of the operator.

Why two replicas never write at the same time (the fencing argument):

- The holder renews the Lease every `retry_period`. It counts itself leader only while
  `now - renewed_at < renew_deadline` on its own monotonic clock, where `renewed_at` is the
  moment the successful renewal (or acquisition) was *sent*: the server committed it later,
  so every standby saw it later still. `fence()` raises `NotLeaderError` outside that window,
  before the request leaves the process, whatever the elector thread is doing (a renewal
  stuck on a dead connection cannot extend it).
- A standby takes the Lease only after it has observed the same record (holder, renewTime,
  transitions) unchanged for `lease_duration` on its *own* monotonic clock, counted from its
  first observation of that record, which is later than the holder's send time. Wall clocks
  are never compared, so clock skew between nodes does not matter; only clock *rates* do.
- So with `lease_duration > renew_deadline + max request time + rate margin`, the old holder
  has stopped starting writes, and its last write has ended, before the new holder's first
  write. `fence()` returns the seconds left in the window, so the writer bounds a write's
  request timeout by it (kube.Kube does; the "max request time" then is the window itself),
  and the elector turns off urllib3's own retries on the writer's client: a request urllib3
  sent again would not pass the fence again.
- Acquire and renew are updates carrying the Lease's resourceVersion (optimistic
  concurrency): two standbys racing for an expired Lease cannot both win; the loser gets 409.
- A holder that sees another holder in the Lease stops at once. A graceful stop closes the
  fence first, then releases the Lease (empty holder), which a standby takes without waiting.

The residual risk: a write the client has handed to the network before the deadline that the
API server commits after the standby's first write (a request stuck in a queue, or TCP
retransmitting it across a healing partition after the client gave up). The client's
request timeout bounds how long the client waits, not when the server commits; Kubernetes
has no fencing token for arbitrary objects. The defaults (15 s lease, 10 s deadline, 2 s
retry, client-go's) leave 5 s for it; server-side apply is idempotent, so such a late write
re-applies what a leader would render anyway, and the new leader's next reconcile reads it.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import enum
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vllm_operator.api.settings import OperatorSettings
from vllm_operator.write.transport import ApplyError, Kube

log = logging.getLogger("vllm_operator.runtime.leader")

SA_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
# what a request to the API server can raise: its refusal, a dead or reset connection (urllib3
# wraps those in MaxRetryError, not an OSError), an answer that is not JSON
REQUEST_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError)


class NotLeaderError(ApplyError):
    """This replica may not write now (a standby, or a leader past its renew deadline)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, permanent=False, code=None)


@dataclass(frozen=True)
class Timing:
    lease_duration: float
    renew_deadline: float
    retry_period: float

    @classmethod
    def of(cls, settings: OperatorSettings) -> Timing:
        return cls(
            settings.lease_duration_seconds,
            settings.renew_deadline_seconds,
            settings.retry_period_seconds,
        )


@dataclass(frozen=True)
class Lease:
    """What the Lease object says (None for the whole Lease when it does not exist)."""

    holder: str  # "" when released
    renew_time: str | None
    duration: float | None
    transitions: int
    acquire_time: str | None
    resource_version: str

    @property
    def record(self) -> tuple[str, str | None, int]:
        """What a standby watches for change: the same record for lease_duration = expired."""
        return (self.holder, self.renew_time, self.transitions)

    @classmethod
    def parse(cls, obj: dict[str, Any]) -> Lease:
        spec = obj.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        return cls(
            holder=spec.get("holderIdentity") or "",
            renew_time=spec.get("renewTime"),
            duration=float(duration) if duration is not None else None,
            transitions=int(spec.get("leaseTransitions") or 0),
            acquire_time=spec.get("acquireTime"),
            resource_version=str(obj["metadata"]["resourceVersion"]),
        )


@dataclass(frozen=True)
class Memory:
    """What this candidate knows; every time is on its own monotonic clock."""

    seen: tuple[str, str | None, int] | None = None  # the last Lease record observed
    seen_at: float = 0.0  # when that record was first observed
    renewed_at: float | None = None  # send time of our last successful acquire/renew


class Action(enum.Enum):
    CREATE = "create"  # no Lease yet
    ACQUIRE = "acquire"  # expired or released: take it (a new term)
    RENEW = "renew"  # ours: extend it
    WAIT = "wait"  # another holder, not expired


def decide(
    me: str, lease: Lease | None, memory: Memory, now: float, timing: Timing
) -> tuple[Action, Memory]:
    """One round of the election: what to do with the Lease as read at `now`."""
    if lease is None:
        return Action.CREATE, replace(memory, renewed_at=None)
    if lease.record != memory.seen:
        memory = replace(memory, seen=lease.record, seen_at=now)
    if lease.holder == me:
        return Action.RENEW, memory
    memory = replace(memory, renewed_at=None)  # someone else holds or held it: not us
    if not lease.holder:
        return Action.ACQUIRE, memory
    # the longer of ours and the holder's: a holder configured with a longer lease is waited for
    expiry = max(timing.lease_duration, lease.duration or 0.0)
    if now - memory.seen_at >= expiry:
        return Action.ACQUIRE, memory
    return Action.WAIT, memory


def written(memory: Memory, lease: Lease, sent_at: float) -> Memory:
    """After our acquire/renew (sent at `sent_at`) succeeded and the server returned `lease`."""
    return Memory(seen=lease.record, seen_at=sent_at, renewed_at=sent_at)


def remaining(memory: Memory, now: float, timing: Timing) -> float:
    """Seconds this replica may still write; 0 or less: it may not."""
    if memory.renewed_at is None:
        return 0.0
    return timing.renew_deadline - (now - memory.renewed_at)


def desired(
    me: str, action: Action, lease: Lease | None, wall: dt.datetime, timing: Timing
) -> dict[str, Any]:
    """The Lease spec for `action` (CREATE, ACQUIRE, RENEW) at wall-clock time `wall`."""
    stamp = microtime(wall)
    spec: dict[str, Any] = {
        "holderIdentity": me,
        "leaseDurationSeconds": math.ceil(timing.lease_duration),
        "renewTime": stamp,
    }
    if action is Action.RENEW and lease is not None:
        spec["acquireTime"] = lease.acquire_time or stamp
        spec["leaseTransitions"] = lease.transitions
    else:
        spec["acquireTime"] = stamp
        spec["leaseTransitions"] = lease.transitions + 1 if lease is not None else 0
    return spec


def microtime(wall: dt.datetime) -> str:
    return wall.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """The pod's name (the hostname in a pod) and a random suffix: a restarted container is a
    new candidate, never mistaken for the holder it replaced."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def lease_namespace(settings: OperatorSettings) -> str:
    """The operator's own namespace: the setting, POD_NAMESPACE (the downward API), the
    ServiceAccount's namespace in a pod, or `default`."""
    if settings.lease_namespace:
        return settings.lease_namespace
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        return SA_NAMESPACE_FILE.read_text().strip() or "default"
    return "default"


class LeaderElector:
    """Runs the election in a background thread; `fence()` guards every write."""

    def __init__(
        self,
        transport: Kube | client.ApiClient,
        settings: OperatorSettings,
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] = lambda: None,
        *,
        identity: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = transport.api if isinstance(transport, Kube) else transport
        _no_resend(self.api)
        # the Lease's own connections: never queued behind the workers' requests, and no
        # urllib3 retries (3 by default): one attempt per round, bounded by its timeout, so
        # a round ends (and notices a passed deadline) when the API server is unreachable
        lease_config = copy.deepcopy(self.api.configuration)
        lease_config.retries = False
        self._lease_api = client.ApiClient(lease_config)
        self.timing = Timing.of(settings)
        self.identity = identity or default_identity()
        self.name = settings.lease_name
        self.namespace = lease_namespace(settings)
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self._clock = clock
        self._memory = Memory()
        self._leading = False  # what the callbacks were last told
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # every request of this replica (reads, writes, the Lease) names it: the API server's
        # audit log then tells the replicas' writes apart even under one ServiceAccount
        self.api.user_agent = self._lease_api.user_agent = f"vllm-operator ({self.identity})"
        self._notify_lock = threading.Lock()
        self._watchdog: threading.Timer | None = None

    # ---- the fence -------------------------------------------------------------------
    def is_leader(self) -> bool:
        return not self._stopping.is_set() and self.remaining() > 0

    def remaining(self) -> float:
        return remaining(self._memory, self._clock(), self.timing)

    def fence(self) -> float:
        """Raises NotLeaderError unless this replica may write now; else the seconds it still may
        (bound the write's request timeout by them)."""
        left = self.remaining()
        if self._stopping.is_set() or left <= 0:
            raise NotLeaderError(
                f"not the leader ({self.identity}): Lease {self.namespace}/{self.name} "
                "is held by another replica or was not renewed within the renew deadline"
            )
        return left

    # ---- the loop --------------------------------------------------------------------
    def start(self) -> None:
        log.info(
            "leader election: %s competes for Lease %s/%s", self.identity, self.namespace, self.name
        )
        self._thread = threading.Thread(target=self._loop, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Closes the fence, stops the loop and releases the Lease if it is ours. Call it after
        the workers have stopped: a standby takes a released Lease at once."""
        self._stopping.set()
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._thread is not None:
            self._thread.join(timeout)
        self._notify()
        self._release()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.step()
            except Exception:  # a dead loop would never lead again; the fence is unaffected
                log.exception("leader election: round failed")
            self._stopping.wait(self.timing.retry_period)

    def step(self) -> Action | None:
        """One round: read the Lease, decide, write if the decision says so."""
        timeout = self._request_timeout()
        try:
            lease = self._read(timeout)
        except REQUEST_ERRORS as exc:
            log.warning("leader election: reading the Lease failed: %s", _short(exc))
            self._notify()
            return None
        action, memory = decide(self.identity, lease, self._memory, self._clock(), self.timing)
        self._memory = memory
        if action is not Action.WAIT:
            sent_at = self._clock()
            spec = desired(self.identity, action, lease, dt.datetime.now(dt.UTC), self.timing)
            try:
                new = self._write(action, lease, spec, timeout)
            except REQUEST_ERRORS as exc:
                # 409: another candidate won the race (or the holder renewed): not ours
                log.info("leader election: %s failed: %s", action.value, _short(exc))
            else:
                if action is not Action.RENEW:
                    log.info(
                        "leader election: %s leads (Lease %s/%s, transitions %d)",
                        self.identity,
                        self.namespace,
                        self.name,
                        new.transitions,
                    )
                self._memory = written(self._memory, new, sent_at)
                self._arm_watchdog()
        self._notify()
        return action

    def _arm_watchdog(self) -> None:
        """The callbacks hear of a passed deadline when it passes, even while a round is stuck
        on a request (the fence itself needs no thread: it compares clocks)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = threading.Timer(max(self.remaining(), 0) + 0.01, self._notify)
        self._watchdog.daemon = True
        self._watchdog.start()

    def _request_timeout(self) -> float:
        # a stuck request must not hold the loop past the next round, and a holder's renewal
        # is worthless once its deadline passed
        return max(1.0, min(self.timing.retry_period * 2, self.timing.renew_deadline / 2))

    def _notify(self) -> None:
        with self._notify_lock:  # the loop and the watchdog: each transition told once
            self._notify_locked()

    def _notify_locked(self) -> None:
        leading = self.is_leader()
        if leading == self._leading:
            return
        self._leading = leading
        if leading:
            log.info("leader election: %s started leading", self.identity)
            self.on_started_leading()
        else:
            log.warning("leader election: %s stopped leading", self.identity)
            self.on_stopped_leading()

    def _release(self) -> None:
        memory, self._memory = self._memory, Memory()
        if memory.renewed_at is None:
            return
        try:
            lease = self._read(self._request_timeout())
            if lease is None or lease.holder != self.identity:
                return
            spec = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": microtime(dt.datetime.now(dt.UTC)),
                "acquireTime": lease.acquire_time,
                "leaseTransitions": lease.transitions,
            }
            self._write(Action.RENEW, lease, spec, self._request_timeout())
            log.info("leader election: %s released the Lease", self.identity)
        except REQUEST_ERRORS as exc:
            log.warning("leader election: releasing the Lease failed: %s", _short(exc))

    # ---- HTTP ------------------------------------------------------------------------
    def _read(self, timeout: float) -> Lease | None:
        try:
            return Lease.parse(self._call("GET", f"/{self.name}", None, timeout))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _write(
        self, action: Action, lease: Lease | None, spec: dict[str, Any], timeout: float
    ) -> Lease:
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        if action is Action.CREATE or lease is None:
            return Lease.parse(self._call("POST", "", body, timeout))
        # optimistic concurrency: the update fails (409) if anyone wrote since our read
        body["metadata"]["resourceVersion"] = lease.resource_version
        return Lease.parse(self._call("PUT", f"/{self.name}", body, timeout))

    def _call(self, method: str, suffix: str, body: object, timeout: float) -> dict[str, Any]:
        path = LEASES.format(namespace=self.namespace) + suffix
        method, url, headers, payload, _ = self._lease_api.param_serialize(
            method=method,
            resource_path=path,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        resp = self._lease_api.call_api(
            method, url, header_params=headers, body=payload, _request_timeout=timeout
        )
        data = resp.read()  # type: ignore[no-untyped-call]
        if not 200 <= resp.status <= 299:
            raise ApiException(status=resp.status, reason=resp.reason, body=data.decode())
        return dict(json.loads(data))


def _no_resend(api: client.ApiClient) -> None:
    """One attempt per request on the writer's client. urllib3 retries 3 times by default: a
    request whose connection failed (any method) or whose answer did not come (PUT, DELETE)
    is sent again, without passing the fence again, possibly after the deadline. The
    reconcile retries the whole step instead, through the fence."""
    api.configuration.retries = False
    manager = api.rest_client.pool_manager
    manager.connection_pool_kw["retries"] = False
    manager.clear()  # pools made before keep their retries: drop them (idle at start-up)


def _short(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"
