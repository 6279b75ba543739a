"""Which pod a benchmark run measures (a pure decision, like render and status).

The Job measures ONE Ready pod of the new revision directly, at its pod IP, never the
load-balanced Service: through the Service, with two or more replicas, the prefix scenario's
warm-up request can land on another pod than the warm requests that follow it, a ladder's
queue depth and speed-ups mix pods, and the scrapes of /metrics read whichever pod answered.
The gates and the rollback act on these numbers, so they must be one pod's.

The pods of the new revision, without reading ReplicaSets (the operator's RBAC stays as it
is: it may list pods, nothing more): when the Deployment reports its rollout complete for
its current generation (`updatedReplicas == replicas`: every pod it counts is of the current
ReplicaSet), the pods that are not terminating, and not finished (phase Failed or Succeeded:
an evicted pod, a pod of a node that shut down; no ReplicaSet counts those), are that
ReplicaSet's. As a guard against a
read of the pods that is newer than the read of the Deployment, every candidate must carry the
same `pod-template-hash` label and be controlled by the ReplicaSet `<deployment>-<hash>`;
pods of two hashes mean a rollout is under way and nothing is chosen yet.

The choice is deterministic: the oldest Ready pod (creation time, then name). The oldest is also
the one a ReplicaSet removes last when the HPA scales in (it deletes the newest pods first).

The run records the pod (name, UID, IP); while the run goes on, `target_gone` says when that
pod was deleted, replaced or is terminating, and the operator then fails the run with that
message instead of letting the runner report connection errors to an IP nobody recognises.
The Job's pod must be able to reach pod IPs (any pod network does; a NetworkPolicy that lets
the Job reach the Service's pods lets it reach them directly too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_operator.api.records import Target

HASH_LABEL = "pod-template-hash"


@dataclass(frozen=True)
class Choice:
    """A target, or None and why not (for a log line or a status message)."""

    target: Target | None
    reason: str = ""


def ready(pod: dict[str, Any]) -> bool:
    """Ready, Running and addressed: a pod a client can reach."""
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return ready and status.get("phase") == "Running" and bool(status.get("podIP"))


def _finished(pod: dict[str, Any]) -> bool:
    """A pod that will never run again (evicted, its node shut down, or exited): it stays in
    the API until the pod garbage collector removes it, but no ReplicaSet counts it (the
    Deployment's status does not either), so it says nothing about a rollout under way."""
    return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")


def _controller(pod: dict[str, Any]) -> dict[str, Any]:
    refs = pod["metadata"].get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), {})


def revision_pods(
    deployment: dict[str, Any] | None, pods: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], str]:
    """The pods of the Deployment's current revision (Ready or not), and "" or why there are
    none to choose from yet."""
    if deployment is None:
        return [], "the Deployment does not exist"
    name = deployment["metadata"]["name"]
    st = deployment.get("status") or {}
    if st.get("observedGeneration", 0) < deployment["metadata"].get("generation", 0):
        return [], "the Deployment controller has not seen the current pod template yet"
    if st.get("updatedReplicas", 0) != st.get("replicas", 0):
        return [], (
            f"the rollout is under way ({st.get('updatedReplicas', 0)} of "
            f"{st.get('replicas', 0)} pods updated)"
        )
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and not _finished(p)]
    hashes = {(p["metadata"].get("labels") or {}).get(HASH_LABEL) for p in live}
    if len(hashes) > 1:
        return [], "pods of more than one ReplicaSet are running: a rollout is under way"
    current = [
        p
        for p in live
        if _controller(p).get("kind") == "ReplicaSet"
        and _controller(p).get("name")
        == f"{name}-{(p['metadata'].get('labels') or {}).get(HASH_LABEL)}"
    ]
    return current, "" if current else "no pod of the current revision exists"


def choose_target(
    deployment: dict[str, Any] | None, pods: list[dict[str, Any]], port: int
) -> Choice:
    """The oldest Ready pod of the Deployment's current revision (see the module's docstring).
    `pods`: the pods of the service's selector; `port`: the server's container port."""
    current, why = revision_pods(deployment, pods)
    if not current:
        return Choice(None, why)
    ready_pods = sorted(
        (p for p in current if ready(p)),
        key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]),
    )
    if not ready_pods:
        return Choice(None, "no pod of the current revision is Ready")
    pod = ready_pods[0]
    return Choice(
        Target(
            pod=pod["metadata"]["name"],
            uid=pod["metadata"].get("uid", ""),
            ip=pod["status"]["podIP"],
            port=port,
        )
    )


def target_gone(target: Target, pod: dict[str, Any] | None) -> str | None:
    """Why the measured pod is no longer there to measure (None: it is). Not being Ready
    does not count: a pod under the benchmark's load can miss a readiness probe and recover,
    and the runner reports a server that really stopped answering."""
    where = f"the measured pod {target.pod} ({target.ip})"
    if pod is None:
        return f"{where} was deleted during the run"
    if target.uid and pod["metadata"].get("uid") != target.uid:
        return f"{where} was replaced by another pod of that name during the run"
    if pod["metadata"].get("deletionTimestamp"):
        return f"{where} began terminating during the run"
    ip = (pod.get("status") or {}).get("podIP")
    if ip and ip != target.ip:
        return f"{where} changed its IP to {ip} during the run"
    return None
