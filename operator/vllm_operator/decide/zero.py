"""Step 2 of the flow (decide), scale to zero (autoscaling.minReplicas 0; issue 34, item 2;
docs/design/scale-to-zero.md): when the service goes to zero, when it wakes, and when the
holder leaves its data path.

Phases (status.autoscaling.zero.phase), each with the time it began:
- Serving: replicas are the HPA's (1 and up); the holder is not in the path.
- ScaledToZero: no request for idleSeconds (none finished, running or waiting, as Prometheus
  recorded it), so the holder's EndpointSlice joins the Service first and replicas go to 0
  (the HPA is inactive at 0 by design). Going to zero needs the holder Ready: without it the
  service stays at one replica and says why.
- Waking: a wake asked for since the service went to zero (the holder's wake annotation, set
  on the first held request of a burst), so replicas go to 1; the holder stays in the path
  (it holds, then forwards) until a pod is Ready.
- back to Serving once a pod is Ready: the holder's slice leaves the Service; replicas are left
  to the HPA again from the next reconcile on.

Pure: what was observed in, the decision out; the reconcile renders and applies it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from vllm_operator.api.spec import Service

SERVING, SCALED_TO_ZERO, WAKING = "Serving", "ScaledToZero", "Waking"


@dataclass(frozen=True)
class ZeroSeen:
    """What the decision reads (observe): the recorded phase, the pods, idleness, the wake."""

    phase: str = SERVING  # status.autoscaling.zero.phase as last written
    since: str | None = None  # when that phase began (RFC 3339)
    ready_pods: int = 0  # the serving Deployment's Ready pods
    # no request finished, running or waiting in the last idleSeconds (None: not known)
    idle: bool | None = None
    wake_requested_at: str | None = None  # the holder's wake annotation
    holder_ready: bool = False  # the namespace's holder has a Ready pod serving this port


@dataclass(frozen=True)
class ZeroPlan:
    """The decision: the phase, the replicas to apply (None: the HPA's), whether the holder's
    EndpointSlice is in the Service, and the status' message."""

    phase: str
    since: str | None
    replicas: int | None
    holder_in_path: bool
    message: str


def _ts(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _woken(seen: ZeroSeen) -> bool:
    """A wake asked for since the service went to zero."""
    asked, since = _ts(seen.wake_requested_at), _ts(seen.since)
    return asked is not None and (since is None or asked >= since)


def _at_zero(seen: ZeroSeen, now: str) -> ZeroPlan:
    if _woken(seen):
        return ZeroPlan(
            WAKING, now, 1, True, f"woken by a held request at {seen.wake_requested_at}"
        )
    return ZeroPlan(
        SCALED_TO_ZERO,
        seen.since,
        0,
        True,
        "at zero: the holder takes requests and asks for a replica",
    )


def _waking(seen: ZeroSeen, now: str) -> ZeroPlan:
    if seen.ready_pods > 0:
        return ZeroPlan(SERVING, now, None, False, "serving (woken from zero)")
    return ZeroPlan(WAKING, seen.since, 1, True, "waking: one replica starting")


def _serving(svc: Service, seen: ZeroSeen, now: str) -> ZeroPlan:
    period = svc.spec.autoscaling.idle_seconds
    since, at = _ts(seen.since), _ts(now)
    # (idle over the window, and serving for all of it: a service just created or woken has
    # had no chance of a request yet)
    served = (at - since).total_seconds() if since is not None and at is not None else 0.0
    why = "serving"
    if seen.idle is None:
        why = (
            "not going to zero: idleness is read from Prometheus, which the operator cannot "
            "read (settings.prometheusUrl)"
        )
    elif seen.idle and served >= period and seen.ready_pods > 0:
        if seen.holder_ready:
            return ZeroPlan(
                SCALED_TO_ZERO, now, 0, True, f"scaled to zero after {period} s without a request"
            )
        why = (
            f"idle for {period} s but not going to zero: the namespace's holder has no Ready "
            "pod for this service yet"
        )
    return ZeroPlan(SERVING, seen.since or now, None, False, why)


def decide_zero(svc: Service, seen: ZeroSeen, now: str) -> ZeroPlan | None:
    """The zero phase of `svc` (None: the service may not go to zero)."""
    if not svc.spec.autoscaling.to_zero:
        return None
    if seen.phase == SCALED_TO_ZERO:
        return _at_zero(seen, now)
    if seen.phase == WAKING:
        return _waking(seen, now)
    return _serving(svc, seen, now)
