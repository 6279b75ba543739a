"""Step 4 of the flow (observe): read-only gathering of the children's state."""

from __future__ import annotations

from typing import Any

from vllm_operator.apply import Writer
from vllm_operator.observed import Observed, PodProblem, pod_problems
from vllm_operator.render.meta import selector_labels
from vllm_operator.spec import Service


def observe(writer: Writer, svc: Service, deployment: dict[str, Any] | None = None) -> Observed:
    """`deployment`: the live Deployment when the caller just read it and did not change it
    (saves a read per resync); read here otherwise."""
    if deployment is None:
        deployment = writer.get("apps/v1", "Deployment", svc.namespace, svc.name)
    hpa = None
    if svc.spec.autoscaling.enabled:
        hpa = writer.get("autoscaling/v2", "HorizontalPodAutoscaler", svc.namespace, svc.name)
    problems: tuple[PodProblem, ...] = ()
    if deployment is not None:
        ready = deployment.get("status", {}).get("readyReplicas", 0)
        wanted = deployment.get("spec", {}).get("replicas", 0)
        if ready < wanted:  # only look at pods when something is missing
            selector = ",".join(f"{k}={v}" for k, v in selector_labels(svc).items())
            problems = pod_problems(writer.list_children("v1", "Pod", svc.namespace, selector))
    return Observed(deployment=deployment, hpa=hpa, pod_problems=problems)
