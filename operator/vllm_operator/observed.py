"""What observe() gathers: small frozen dataclasses, and the pure reading of pod states.
Kept apart from observe.py so that status.py (pure) can use them without the client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


def pod_problems(pods: list[dict[str, Any]]) -> tuple[PodProblem, ...]:
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


@dataclass(frozen=True)
class JobState:
    name: str
    active: bool
    succeeded: bool
    failed_reason: str | None  # DeadlineExceeded, BackoffLimitExceeded, ...
    failed_message: str = ""


@dataclass(frozen=True)
class BenchView:
    """What the status needs to know about benchmarking (see benchmarking.py)."""

    revision: str  # the revision the spec asks for
    run_name: str = ""  # its current run (the rerun annotation picks a new one); "": any
    runs: tuple[Any, ...] = ()  # gates.Run, oldest first
    job: JobState | None = None
    failures: tuple[str, ...] | None = None  # None: no verdict (no thresholds or no result)
    rolled_back_to: str | None = None
    # the run failed and a rollback was due, but its target's record is unusable: why
    rollback_refused: str | None = None
    rollout_done: bool = False
    gated: bool = False  # the spec sets thresholds (the spec's, not a rolled-back one's)
