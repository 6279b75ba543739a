"""Step 5 of the flow (status), the autoscaling: status.autoscaling and the AutoscalingActive
condition (the HPA's own, or a hold of the replicas it chose once autoscaling is off)."""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from vllm_operator.api.records import Capacity
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import RELEASE_HOLD_ANNOTATION, Service
from vllm_operator.observe.state import Observed
from vllm_operator.render.deployment import (
    REPLICAS_HELD_ANNOTATION,
    REPLICAS_HELD_SINCE_ANNOTATION,
)
from vllm_operator.render.monitoring import IN_FLIGHT_METRIC
from vllm_operator.status.capacity import CapacityView
from vllm_operator.status.conditions import Cond


def _hold(
    svc: Service, obs: Observed, settings: OperatorSettings
) -> tuple[dict[str, Any] | None, list[Cond]]:
    """Autoscaling is off and the Deployment still runs the count the autoscaler chose
    (render/deployment.decide_replicas): say how many, against what, until when, and how to
    end it now. GPUs held without a word are the surprise this prevents."""
    meta = (obs.deployment or {}).get("metadata", {})
    annotations = meta.get("annotations") or {}
    held = annotations.get(REPLICAS_HELD_ANNOTATION)
    replicas = (obs.deployment or {}).get("spec", {}).get("replicas")
    if held is None or replicas is None or replicas == svc.spec.replicas:
        return None, []
    since = annotations.get(REPLICAS_HELD_SINCE_ANNOTATION)
    until = None
    if since:
        with contextlib.suppress(ValueError):
            start = dt.datetime.fromisoformat(since.replace("Z", "+00:00"))
            until = (start + dt.timedelta(seconds=settings.replicas_hold_seconds)).isoformat()
            until = until.replace("+00:00", "Z")
    message = (
        f"autoscaling is off: the {replicas} replicas the autoscaler chose are held "
        f"(spec.replicas is {svc.spec.replicas})"
        + (f" until {until}, then spec.replicas applies" if until else "")
        + f"; to apply spec.replicas now: `kubectl scale vsvc {svc.name} --replicas=N` with "
        f"another count, or `kubectl annotate vsvc {svc.name} {RELEASE_HOLD_ANNOTATION}=now`"
    )
    out = {"heldReplicas": replicas, "heldSince": since, "heldUntil": until}
    return {k: v for k, v in out.items() if v is not None}, [
        Cond("AutoscalingActive", "False", "ReplicasHeld", message)
    ]


def _policy(svc: Service, metric: str | None, capacity: CapacityView) -> dict[str, str]:
    """status.autoscaling's policy and where its target comes from, in words."""
    a = svc.spec.autoscaling
    if metric == IN_FLIGHT_METRIC and isinstance(capacity, Capacity):
        o = svc.spec.objective
        headroom = o.headroom_percent if o is not None else 0
        return {
            "policy": "Capacity",
            "targetFrom": (
                f"{100 - headroom}% of revision {capacity.revision}'s "
                f"{capacity.concurrency_per_pod:g} requests in flight per pod within the "
                f"objective (run {capacity.run}, {capacity.measured_at})"
            ),
        }
    why = "autoscaling.targetQueueDepth"
    if svc.spec.objective is not None:
        if capacity is None:
            why += ": the serving revision's capacity is not measured yet"
        elif isinstance(capacity, str):
            why += f": no capacity ({capacity})"
        elif capacity.concurrency_per_pod <= 0:
            why += f": revision {capacity.revision} meets the objective not even one at a time"
        else:
            why += ": the HorizontalPodAutoscaler is being moved to the capacity target"
    return {
        "policy": "QueueBand",
        "targetFrom": f"{why} (scale down at <= {a.scale_down_queue_depth} waiting per pod)",
    }


def _current(hpa_status: dict[str, Any], metric: str | None) -> str | None:
    """The per-pod value the HPA last read of one of its Pods metrics."""
    return next(
        (
            m["pods"].get("current", {}).get("averageValue")
            for m in hpa_status.get("currentMetrics") or []
            if m.get("type") == "Pods" and m.get("pods", {}).get("metric", {}).get("name") == metric
        ),
        None,
    )


def _autoscaling(
    svc: Service, obs: Observed, settings: OperatorSettings, capacity: CapacityView = None
) -> tuple[dict[str, Any] | None, list[Cond]]:
    """status.autoscaling and the AutoscalingActive condition: the HPA's own ScalingActive
    condition (status, reason and message as the HPA controller wrote them), so that an
    autoscaler without its metric ("no custom metrics API") shows on the service itself."""
    if not svc.spec.autoscaling.enabled:
        return _hold(svc, obs, settings)
    hpa = obs.hpa
    if hpa is None:
        return None, [
            Cond(
                "AutoscalingActive",
                "Unknown",
                "HorizontalPodAutoscalerMissing",
                f"the HorizontalPodAutoscaler {svc.name} is being created",
            )
        ]
    st = hpa.get("status") or {}
    pods_metrics = [m["pods"] for m in hpa.get("spec", {}).get("metrics", []) if "pods" in m]
    metric = pods_metrics[0]["metric"]["name"] if pods_metrics else None
    current = _current(st, metric)
    guard = [
        {
            k: v
            for k, v in {
                "metric": p["metric"]["name"],
                "quantile": (p["metric"].get("selector") or {})
                .get("matchLabels", {})
                .get("quantile"),
                "targetAverageValue": p.get("target", {}).get("averageValue"),
                "currentAverageValue": _current(st, p["metric"]["name"]),
            }.items()
            if v is not None
        }
        for p in pods_metrics[1:]
    ]
    out = {
        k: v
        for k, v in {
            "horizontalPodAutoscaler": hpa["metadata"]["name"],
            "currentReplicas": st.get("currentReplicas"),
            "desiredReplicas": st.get("desiredReplicas"),
            "metric": metric,
            "currentAverageValue": current,
            "targetAverageValue": (
                pods_metrics[0].get("target", {}).get("averageValue") if pods_metrics else None
            ),
            "latencyGuard": guard or None,
            "lastScaleTime": st.get("lastScaleTime"),
            **_policy(svc, metric, capacity),
        }.items()
        if v is not None
    }
    active = next((c for c in st.get("conditions") or [] if c.get("type") == "ScalingActive"), None)
    if active is None:
        cond = Cond(
            "AutoscalingActive",
            "Unknown",
            "Pending",
            f"the HorizontalPodAutoscaler {hpa['metadata']['name']} has not been evaluated yet",
        )
    else:
        cond = Cond(
            "AutoscalingActive",
            str(active.get("status", "Unknown")),
            str(active.get("reason") or "Unknown"),
            str(active.get("message") or ""),
        )
    return out, [cond]
