"""Step 5 of the flow (status), the failures: ChildrenSynced (what a reconcile could not
write or read) and the statuses of a reconcile that stopped short (an invalid spec, a refused
write of what serves, a failed read)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_operator.status.conditions import Cond, merge_conditions

# the reasons of a request refused or failed (kube.ApplyError and its kinds): a write the API
# server refused or failed, an object of a child's name this service does not own, a read
APPLY_FAILED, NOT_OWNED, READ_FAILED = "ApplyFailed", "NotOwned", "ReadFailed"
REFUSALS = frozenset({APPLY_FAILED, NOT_OWNED, READ_FAILED})


@dataclass(frozen=True)
class Refusal:
    """A request of this reconcile that the API server refused or failed, or one the
    operator would not make (NotOwned): `reason` one of REFUSALS, `message` naming the
    object and the server's message."""

    reason: str
    message: str


def synced_condition(refused: tuple[Refusal, ...]) -> Cond:
    """ChildrenSynced: every child other than a benchmark run's written as rendered, or
    what was refused (the first one's reason; every message)."""
    if not refused:
        return Cond("ChildrenSynced", "True", "Applied", "every child is applied")
    return Cond("ChildrenSynced", "False", refused[0].reason, "; ".join(r.message for r in refused))


def failure_status(  # noqa: PLR0917 (all six are needed; callers name the condition)
    old: dict[str, Any], generation: int, reason: str, message: str, progress: str, now: str
) -> dict[str, Any]:
    """Ready=False, Progressing=False and Degraded=True with `reason`, for the current
    generation; everything else the status said is kept, other conditions too (what the
    children did until now is still true)."""
    conds = [
        Cond("Ready", "False", reason, message),
        Cond("Progressing", "False", reason, progress),
        Cond("Degraded", "True", reason, message),
    ]
    if reason in REFUSALS:  # (a refusal of what serves: the children are not in sync either)
        conds.append(synced_condition((Refusal(reason, message),)))
    mine = {c.type for c in conds}
    old_conds = old.get("conditions", [])
    return {
        **old,
        "observedGeneration": generation,
        "conditions": merge_conditions(old_conds, conds, generation, now)
        + [c for c in old_conds if c.get("type") not in mine],
    }


def invalid_spec_status(
    old: dict[str, Any], generation: int, message: str, now: str
) -> dict[str, Any]:
    """Ready=False/InvalidSpec; everything else the status said is kept (nothing is lost)."""
    return failure_status(
        old, generation, "InvalidSpec", message, "fix the spec; nothing was applied", now
    )


def apply_failed_status(
    old: dict[str, Any], generation: int, message: str, now: str, reason: str = APPLY_FAILED
) -> dict[str, Any]:
    """Ready=False/ApplyFailed with the API server's message: what serves (the Deployment or
    the Service) was refused (an admission policy, a quota, RBAC) or the API server failed;
    NotOwned: an object of its name is not this service's. The operator retries."""
    return failure_status(
        old,
        generation,
        reason,
        message,
        f"generation {generation} could not be applied; retrying with back-off",
        now,
    )


def read_failed_status(
    old: dict[str, Any], generation: int, message: str, now: str
) -> dict[str, Any]:
    """ChildrenSynced=False/ReadFailed: a read failed (a 429, a 5xx), so nothing is known
    to have changed: every other condition, Ready included, and everything else the status
    said are kept as they were (observedGeneration too: this generation was not acted on)."""
    old_conds = old.get("conditions", [])
    (synced,) = merge_conditions(
        old_conds, [Cond("ChildrenSynced", "False", READ_FAILED, message)], generation, now
    )
    kept = [c for c in old_conds if c.get("type") != synced["type"]]
    return {**old, "conditions": [*kept, synced]}
