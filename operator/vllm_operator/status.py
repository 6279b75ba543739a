"""Step 5 of the flow (status): a pure function from (service, observed) to the status.

Conditions follow metav1.Condition: Ready, Progressing, Degraded, CamelCase reasons,
observedGeneration, and lastTransitionTime kept when a condition's status did not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_operator.observed import Observed
from vllm_operator.render.meta import selector_labels
from vllm_operator.render.service import endpoint
from vllm_operator.settings import OperatorSettings
from vllm_operator.spec import Service


@dataclass(frozen=True)
class Cond:
    type: str
    status: str
    reason: str
    message: str


def merge_conditions(
    old: list[dict[str, Any]], new: list[Cond], generation: int, now: str
) -> list[dict[str, Any]]:
    previous = {c.get("type"): c for c in old}
    out = []
    for c in new:
        before = previous.get(c.type)
        changed = before is None or before.get("status") != c.status
        out.append(
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": now if changed else before.get("lastTransitionTime", now),  # type: ignore[union-attr]
                "observedGeneration": generation,
            }
        )
    return out


def _rollout(svc: Service, obs: Observed) -> tuple[list[Cond], dict[str, Any]]:
    dep = obs.deployment
    if dep is None:
        return [
            Cond("Ready", "False", "DeploymentMissing", "the Deployment is being created"),
            Cond("Progressing", "True", "Creating", "creating the Deployment"),
            Cond("Degraded", "False", "AsExpected", ""),
        ], {}
    st = dep.get("status", {})
    want = dep.get("spec", {}).get("replicas", 1)
    updated = st.get("updatedReplicas", 0)
    ready = st.get("readyReplicas", 0)
    available = st.get("availableReplicas", 0)
    total = st.get("replicas", 0)
    counts = {
        "replicas": total,  # pods that exist now (the scale subresource's statusReplicasPath)
        "desiredReplicas": want,
        "readyReplicas": ready,
        "updatedReplicas": updated,
        "availableReplicas": available,
    }
    dep_conds = {c["type"]: c for c in st.get("conditions", [])}
    seen = st.get("observedGeneration", 0) >= dep["metadata"].get("generation", 0)
    rolled_out = seen and updated >= want and total <= want and available >= want
    deadline = dep_conds.get("Progressing", {}).get("reason") == "ProgressDeadlineExceeded"

    conds: list[Cond] = []
    if want == 0:
        conds.append(Cond("Ready", "False", "ScaledToZero", "replicas is 0; scale up to serve"))
    elif rolled_out:
        conds.append(
            Cond(
                "Ready",
                "True",
                "Available",
                f"{available}/{want} replicas serve {svc.spec.served_model_name}",
            )
        )
    else:
        conds.append(
            Cond(
                "Ready",
                "False",
                "RolloutInProgress",
                f"{updated}/{want} replicas updated, {available} available",
            )
        )
    if rolled_out or want == 0:
        conds.append(Cond("Progressing", "False", "RolloutComplete", "the rollout is complete"))
    elif deadline:
        conds.append(
            Cond(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                dep_conds["Progressing"].get("message", ""),
            )
        )
    else:
        conds.append(
            Cond(
                "Progressing",
                "True",
                "RollingOut",
                f"rolling out generation {svc.generation}: {updated}/{want} updated, {ready} ready",
            )
        )
    problem = obs.pod_problems[0] if obs.pod_problems else None
    if problem is not None:
        extra = f" (and {len(obs.pod_problems) - 1} more)" if len(obs.pod_problems) > 1 else ""
        conds.append(
            Cond(
                "Degraded",
                "True",
                problem.reason,
                f"pod {problem.pod}: {problem.message}{extra}".strip(),
            )
        )
    elif deadline:
        conds.append(
            Cond(
                "Degraded",
                "True",
                "ProgressDeadlineExceeded",
                "the rollout did not finish within the progress deadline",
            )
        )
    else:
        conds.append(Cond("Degraded", "False", "AsExpected", ""))
    return conds, counts


def compute_status(
    svc: Service, obs: Observed, old: dict[str, Any], settings: OperatorSettings, now: str
) -> dict[str, Any]:
    conds, counts = _rollout(svc, obs)
    return {
        "observedGeneration": svc.generation,
        **counts,
        "selector": ",".join(f"{k}={v}" for k, v in sorted(selector_labels(svc).items())),
        "endpoint": endpoint(svc, settings),
        "model": svc.spec.served_model_name,
        "conditions": merge_conditions(old.get("conditions", []), conds, svc.generation, now),
    }


def invalid_spec_status(
    old: dict[str, Any], generation: int, message: str, now: str
) -> dict[str, Any]:
    """Ready=False/InvalidSpec; everything else the status said is kept (nothing is lost)."""
    conds = [
        Cond("Ready", "False", "InvalidSpec", message),
        Cond("Progressing", "False", "InvalidSpec", "fix the spec; nothing was applied"),
        Cond("Degraded", "True", "InvalidSpec", message),
    ]
    return {
        **old,
        "observedGeneration": generation,
        "conditions": merge_conditions(old.get("conditions", []), conds, generation, now),
    }


def same_status(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a == b
