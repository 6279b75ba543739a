"""Step 5 of the flow (status): the shape of one condition (metav1.Condition) and the merge
that keeps lastTransitionTime when a condition's status did not change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
