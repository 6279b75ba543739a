"""Step 2 of the flow (decide), the startup probe's budget of a revision
(spec.probes.startupBudget Measured): how long its pods may take from container start to the
first /health 200 before the kubelet restarts them.

Measured: measuredStartupFactor x the slowest start (readySeconds: container started -> Ready)
that status.startup recorded for a revision of this service that loads the same model the
same way (the same `load_key`: model, image, resources, engine and model cache), between
measuredStartupMinSeconds and startupTimeoutSeconds. With no such start yet, the fixed budget
(startupTimeoutSeconds) applies.

A revision's budget is decided once: where a live Deployment (serving or canary) runs the
revision already, its template's budget is kept. A new measurement therefore never changes a
running revision's pod template (which would restart its pods); it sets the next revision's.
The budget is not part of the revision (render/benchmark.revision leaves it out), so keeping
or recomputing it never makes a revision of its own.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from vllm_operator.api.spec import Service
from vllm_operator.render.benchmark import REVISION_ANNOTATION
from vllm_operator.render.deployment import (
    startup_budget_basis,
    startup_probe_seconds,
    with_startup_budget,
)


@dataclass(frozen=True)
class StartupBudget:
    """The startup probe's budget of one revision (seconds: what its probe allows)."""

    revision: str
    seconds: int
    source: str  # "Measured": from the starts measured; "Fixed": startupTimeoutSeconds
    slowest_ready_seconds: float | None = None  # the slowest start it follows (Measured)
    factor: float | None = None
    kept: bool = False  # read from a live Deployment running the revision (decided before)

    def as_status(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "revision": self.revision,
            "seconds": self.seconds,
            "source": self.source,
        }
        if self.slowest_ready_seconds is not None:
            out["slowestReadySeconds"] = self.slowest_ready_seconds
        if self.factor is not None:
            out["factor"] = self.factor
        return out


def load_key(svc: Service) -> str:
    """What a start's duration depends on: two revisions with the same key load the same model
    the same way (a change of env, probes, scheduling or the benchmark leaves it alone)."""
    spec = svc.spec
    body = json.dumps(
        {
            "model": spec.model.model_dump(mode="json", by_alias=True),
            "image": spec.image,
            "engine": spec.engine.model_dump(mode="json", by_alias=True),
            "resources": spec.resources.model_dump(mode="json", by_alias=True),
            "modelCache": spec.model_cache.model_dump(mode="json", by_alias=True),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(body.encode()).hexdigest()[:10]


def _slowest(startup: dict[str, Any] | None, key: str) -> float | None:
    """The slowest readySeconds status.startup recorded for revisions of load key `key`."""
    slowest = [
        float(r["slowestReadySeconds"])
        for r in (startup or {}).get("revisions") or []
        if isinstance(r, dict)
        and r.get("loadKey") == key
        and isinstance(r.get("slowestReadySeconds"), int | float)
    ]
    return max(slowest) if slowest else None


def _kept(rev: str, live: tuple[dict[str, Any] | None, ...]) -> StartupBudget | None:
    """The budget of a live Deployment (serving or canary) that runs revision `rev`."""
    for deployment in live:
        if deployment is None:
            continue
        annotations = (deployment.get("metadata") or {}).get("annotations") or {}
        if annotations.get(REVISION_ANNOTATION) != rev:
            continue
        template = (deployment.get("spec") or {}).get("template") or {}
        seconds = startup_probe_seconds(template)
        basis = startup_budget_basis(template)
        if seconds is None or not basis:
            continue  # (rendered before the budget was decided: decide it now)
        slowest, factor = basis.get("slowestReadySeconds"), basis.get("factor")
        return StartupBudget(
            rev,
            seconds,
            "Measured" if basis.get("source") == "Measured" else "Fixed",
            float(slowest) if isinstance(slowest, int | float) else None,
            float(factor) if isinstance(factor, int | float) else None,
            kept=True,
        )
    return None


def startup_budget(
    svc: Service,
    rev: str,
    startup: dict[str, Any] | None,
    live: tuple[dict[str, Any] | None, ...] = (),
) -> StartupBudget | None:
    """The budget of revision `rev` rendered from `svc` (None: startupBudget Fixed, the
    rendering's own). `startup`: status.startup as last written; `live`: the serving and canary
    Deployments as observed."""
    probes = svc.spec.probes
    if probes.startup_budget != "Measured":
        return None
    if (kept := _kept(rev, live)) is not None:
        return kept
    cap = probes.startup_timeout_seconds
    slowest = _slowest(startup, load_key(svc))
    if slowest is None:
        return StartupBudget(rev, cap, "Fixed")
    wanted = math.ceil(probes.measured_startup_factor * slowest)
    seconds = min(cap, max(probes.measured_startup_min_seconds, wanted))
    return StartupBudget(rev, seconds, "Measured", slowest, probes.measured_startup_factor)


def with_budget(template: dict[str, Any], budget: StartupBudget | None) -> dict[str, Any]:
    """`template` with `budget` in its startup probe (None: as rendered)."""
    if budget is None:
        return template
    basis = {k: v for k, v in budget.as_status().items() if k not in ("revision", "seconds")}
    return with_startup_budget(template, budget.seconds, basis)
