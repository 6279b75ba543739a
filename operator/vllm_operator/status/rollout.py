"""Step 5 of the flow (status), the rollout: Ready, Progressing and Degraded from the
Deployment and its pods, and what a canary in progress says on them."""

from __future__ import annotations

from typing import Any

from vllm_operator.api.spec import Service
from vllm_operator.decide.progressive import ABORTED, BAKING, CANARY, PROMOTING, Rollout
from vllm_operator.observe.state import Observed, rolled_out
from vllm_operator.render.benchmark import REVISION_ANNOTATION
from vllm_operator.render.deployment import SURGE_REFUSED_ANNOTATION
from vllm_operator.status.conditions import Cond


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
    done = rolled_out(dep)
    deadline = dep_conds.get("Progressing", {}).get("reason") == "ProgressDeadlineExceeded"
    # the ReplicaSet could not create pods (a ResourceQuota, Pod Security, a webhook): the
    # Deployment controller copies its ReplicaFailure condition up; no rollout is progressing
    failure = dep_conds.get("ReplicaFailure", {})
    if failure.get("status") == "True" and not done and want:
        reason = failure.get("reason") or "FailedCreate"
        message = f"pods cannot be created: {failure.get('message', '')}".strip()
        return [
            Cond("Ready", "False", reason, f"{available}/{want} replicas available; {message}"),
            Cond("Progressing", "False", reason, message),
            Cond("Degraded", "True", reason, message),
        ], counts

    conds: list[Cond] = []
    if want == 0:
        conds.append(Cond("Ready", "False", "ScaledToZero", "replicas is 0; scale up to serve"))
    elif done:
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
    if done or want == 0:
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
                f"rolling out generation {svc.generation}: {updated}/{want} updated, {ready} ready"
                + _surge_note(dep)
                + "".join(
                    f"; pod {w.pod} waits to be scheduled ({w.message})".replace(" ()", "")
                    for w in obs.pods_waiting[:1]
                ),
            )
        )
    # a surge pod without room, once the surge was given up for it, is a rollout in progress:
    # the one pod is replaced in place and frees the room (oneReplicaSurge)
    problems = [
        p for p in obs.pod_problems if not (_surge_note(dep) and p.reason == "Unschedulable")
    ]
    problem = problems[0] if problems else None
    if problem is not None:
        extra = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
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


def _surge_note(dep: dict[str, Any]) -> str:
    """A one-replica rollout that found no room for its surge pod says so (oneReplicaSurge)."""
    annotations = dep.get("metadata", {}).get("annotations") or {}
    refused = annotations.get(SURGE_REFUSED_ANNOTATION)
    if not refused or refused != annotations.get(REVISION_ANNOTATION):
        return ""
    return (
        "; no room for a surge pod: the one replica is replaced in place (down meanwhile; "
        "rollout.oneReplicaSurge)"
    )


def _canary_conditions(conds: list[Cond], rollout: Rollout, available: int = 0) -> list[Cond]:
    """While the canary is measured the rollout is in progress (the serving pods, rolled out
    at the stable revision, say complete); once it is aborted the service is Degraded (a
    rollback of its gates says so already: its reason stays). While a revision that passed is
    Promoting, Ready says what serves: the available pods (issue 31: it said False while the
    stable pod kept serving)."""
    if rollout.phase == PROMOTING and available > 0:
        serving = Cond(
            "Ready",
            "True",
            "Promoting",
            f"{available} replicas available serve while the serving pods roll to revision "
            f"{rollout.revision}",
        )
        return [
            serving if c.type == "Ready" and c.reason == "RolloutInProgress" else c for c in conds
        ]
    if rollout.phase == BAKING:  # the canary serves beside the stable pods, compared
        baking = Cond("Progressing", "True", "Baking", rollout.message)
        return [baking if c.type == "Progressing" else c for c in conds]
    if rollout.phase == CANARY:
        progressing = Cond("Progressing", "True", "Canary", rollout.message)
        if rollout.take_one:
            progressing = Cond(
                "Progressing",
                "True",
                "Canary",
                f"{rollout.message} (whenNoRoom ReplaceStable: one serving pod fewer meanwhile)",
            )
        conds = [progressing if c.type == "Progressing" else c for c in conds]
        degraded = next((c for c in conds if c.type == "Degraded"), None)
        if rollout.failing and (degraded is None or degraded.status == "False"):
            # the new revision cannot start: the stable pods serve, and a person must act
            failing = Cond(
                "Degraded",
                "True",
                "CanaryFailing",
                f"{rollout.failing}; revision {rollout.stable} serves meanwhile (fix the spec, "
                "or abort the canary)",
            )
            conds = [c for c in conds if c.type != "Degraded"] + [failing]
        return conds
    if rollout.phase == ABORTED:
        degraded = next((c for c in conds if c.type == "Degraded"), None)
        if degraded is not None and degraded.reason == "BenchmarkRollback":
            return [
                Cond(c.type, c.status, c.reason, f"{rollout.message}; {c.message}")
                if c is degraded
                else c
                for c in conds
            ]
        if degraded is None or degraded.status == "False":
            aborted = Cond("Degraded", "True", "CanaryAborted", rollout.message)
            return [c for c in conds if c.type != "Degraded"] + [aborted]
    return conds
