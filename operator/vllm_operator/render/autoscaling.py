"""The HorizontalPodAutoscaler on per-pod queue depth, and the PodDisruptionBudget.

The HPA targets the band metric (render/monitoring.py, `band_rules`), not the raw queue:
with a target of 20 on the raw queue the HPA's proportional rule would scale in as soon as the
average dropped below about 20 (n-1)/n. The band metric equals the target while the average
queue lies in (scaleDownQueueDepth, targetQueueDepth], so the replicas hold there; above it
scales up; at or below scaleDownQueueDepth for the whole scale-down stabilization window
(300 s) it scales down, by half the pods a minute (at least one, `SCALE_DOWN_PERCENT`).

With a latency objective (spec.objective) and a measured capacity of the serving revision
(decide/capacity.py; handed in as `target`, requests in flight per pod), the HPA targets the
requests in flight per pod (running + waiting, `vllm_operator:requests_in_flight`) at that
value instead: the proportional rule then gives replicas = ceil(in flight / target), the load
over what one pod serves within the objective (less the headroom). Until the serving revision
is measured, the band applies. The scale-down keeps the band's stabilization window.

With an objective (and objective.latencyGuard, the default), the HPA also targets the live
latency guard's metrics (render/monitoring.py, `guard_rules`): each latency the objective names
at its percentile over the serving pods and the last minute, at the objective's value. The HPA
takes the largest of its metrics' recommendations, so the guard only ever adds replicas: at a
live p95 TTFT 1.5x the objective it wants 1.5x the replicas, below the objective the capacity
(or the band) decides. Idle, the guard's metrics read 0, so they never block a scale-down. A
breach counts once it held (render/monitoring.GUARD_HOLD: the guard's series is the lowest of
the last 45 s), so a transient does not send the fleet towards maxReplicas.
"""

from __future__ import annotations

from typing import Any

from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.render.meta import metadata, selector_labels
from vllm_operator.render.monitoring import (
    BAND_METRIC,
    IN_FLIGHT_METRIC,
    LIVE_TPOT_METRIC,
    LIVE_TTFT_METRIC,
    guard_quantile,
    objective_guard,
)

# past the scale-down stabilization window, the HPA may remove this share of the pods a minute
SCALE_DOWN_PERCENT = 50


def quantity(x: float) -> str:
    """A target as a Kubernetes quantity: whole numbers plain, else in thousandths (m)."""
    milli = round(x * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def seconds(x: float) -> str:
    """A latency as a Kubernetes quantity: in thousandths (m) when exact, else millionths (u)."""
    micro = round(x * 1_000_000)
    return quantity(x) if micro % 1000 == 0 else f"{micro}u"


def guard_metrics(svc: Service) -> list[dict[str, Any]]:
    """The live latency guard's Pods metrics (empty without an objective or with it off)."""
    guard = objective_guard(svc)
    o = svc.spec.objective
    if guard is None or o is None:
        return []
    (percentile,), metrics = guard
    targets = {LIVE_TTFT_METRIC: o.ttft_seconds, LIVE_TPOT_METRIC: o.tpot_seconds}
    out = []
    for metric in metrics:
        target = targets[metric]
        assert target is not None
        out.append(
            {
                "type": "Pods",
                "pods": {
                    "metric": {
                        "name": metric,
                        "selector": {"matchLabels": {"quantile": guard_quantile(percentile)}},
                    },
                    "target": {"type": "AverageValue", "averageValue": seconds(target)},
                },
            }
        )
    return out


def render_hpa(
    svc: Service, settings: OperatorSettings, target: float | None = None
) -> dict[str, Any] | None:
    """`target`: the requests in flight per pod the serving revision's capacity allows
    (decide/capacity.hpa_target), or None: the queue band."""
    a = svc.spec.autoscaling
    if not a.enabled:
        return None
    metric, value = (
        (BAND_METRIC, str(a.target_queue_depth))
        if target is None
        else (IN_FLIGHT_METRIC, quantity(target))
    )
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(svc),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": svc.name},
            # (autoscaling/v2 cannot scale from 0: at zero the operator sets 0 and 1 itself,
            # decide/zero.py, and the HPA is inactive until its target has a replica)
            "minReplicas": max(1, a.min_replicas),
            "maxReplicas": a.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric},
                        "target": {"type": "AverageValue", "averageValue": value},
                    },
                },
                *guard_metrics(svc),
            ],
            "behavior": {
                "scaleDown": {
                    "stabilizationWindowSeconds": a.scale_down_stabilization_seconds,
                    # the window is the caution (the load stayed low for all of it); past it,
                    # up to half the pods a minute (at least one), so a fleet sized for a peak
                    # is back to what the load needs within minutes (one a minute took 28
                    # minutes from 30 pods to 2)
                    "policies": [
                        {"type": "Pods", "value": 1, "periodSeconds": 60},
                        {"type": "Percent", "value": SCALE_DOWN_PERCENT, "periodSeconds": 60},
                    ],
                    "selectPolicy": "Max",
                },
                "scaleUp": {
                    "stabilizationWindowSeconds": a.scale_up_stabilization_seconds,
                    "policies": [
                        {"type": "Pods", "value": 4, "periodSeconds": 60},
                        {"type": "Percent", "value": 100, "periodSeconds": 60},
                    ],
                    "selectPolicy": "Max",
                },
            },
        },
    }


def desired_floor(svc: Service) -> int:
    """The replica count the service runs at least (what the PDB protects)."""
    a = svc.spec.autoscaling
    return a.min_replicas if a.enabled else svc.spec.replicas


def render_pdb(svc: Service, settings: OperatorSettings) -> dict[str, Any] | None:
    if desired_floor(svc) <= 1:
        return None  # a PDB on one replica would block node drains forever
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(svc),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(svc)}},
    }
