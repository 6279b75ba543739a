"""Step 4 of the flow (observe): read-only gathering of the children's state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm_operator.apply import Writer
from vllm_operator.render.meta import selector_labels
from vllm_operator.spec import Service

# container waiting reasons that mean the replica will not come up without a change
BAD_WAITING = (
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
)


@dataclass(frozen=True)
class PodProblem:
    pod: str
    reason: str
    message: str


@dataclass(frozen=True)
class Observed:
    deployment: dict[str, Any] | None
    hpa: dict[str, Any] | None = None
    pod_problems: tuple[PodProblem, ...] = field(default_factory=tuple)


def _pod_problems(pods: list[dict[str, Any]]) -> tuple[PodProblem, ...]:
    problems = []
    for pod in pods:
        name = pod["metadata"]["name"]
        status = pod.get("status", {})
        for cond in status.get("conditions", []):
            if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
                problems.append(PodProblem(name, "Unschedulable", cond.get("message", "")))
        for cs in status.get("containerStatuses", []):
            waiting = cs.get("state", {}).get("waiting") or {}
            if waiting.get("reason") in BAD_WAITING:
                problems.append(PodProblem(name, waiting["reason"], waiting.get("message", "")))
    return tuple(problems)


def observe(writer: Writer, svc: Service) -> Observed:
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
            problems = _pod_problems(writer.list_children("v1", "Pod", svc.namespace, selector))
    return Observed(deployment=deployment, hpa=hpa, pod_problems=problems)
