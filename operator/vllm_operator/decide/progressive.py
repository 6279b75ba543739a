"""Part of the "decide" step: progressive delivery (rollout.canary), a pure function of the
benchmark plan and what observe() read.

    progress(service, observed, plan) -> (plan, Rollout)

With benchmark gates set, a new revision first runs as ONE canary pod that the Service does
not select (render/canary.py), its benchmark run measures that pod alone (policy.decide aims
it there), and the serving pods stay at the spec they run (`Plan.held`) until it is decided:

    Canary     the canary pod starts and is measured (a failed verdict under onFailure:
               Rollback is measured again before it counts, as for every failure)
    Promoting  it passed (or onFailure is Report, or the promote annotation names it): the
               serving Deployment's template becomes the revision; the canary scales to 0
    Promoted   every serving pod runs it
    Aborted    its failure is confirmed (or the abort annotation names it): the canary scales
               to 0 and the serving pods never stopped serving; until the spec changes

A later spec change supersedes a canary in progress (the canary runs the newer revision, the
older run is stopped as superseded). The promote and abort annotations act only on the
revision they name (status.rollout.revision), so one left behind never acts on a later one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vllm_operator.api.spec import ABORT_ANNOTATION, PROMOTE_ANNOTATION, Service
from vllm_operator.decide.gates import FAILED, PASSED, Run
from vllm_operator.decide.policy import ABORTED_BY_HAND, PROMOTED_BY_HAND, Plan, Record
from vllm_operator.observe.state import Observed, rolled_out
from vllm_operator.render.benchmark import MESSAGE_KEY, STATE_KEY
from vllm_operator.render.canary import canary_name

CANARY, PROMOTING, PROMOTED, ABORTED = "Canary", "Promoting", "Promoted", "Aborted"


@dataclass(frozen=True)
class Rollout:
    """What the canary does in this reconcile, and what the status says of it."""

    phase: str = ""  # "": no rollout through a canary to report
    revision: str = ""
    stable: str = ""  # the revision that serves meanwhile
    # the canary Deployment's replicas (None: not rendered: none exists and none is wanted)
    canary_replicas: int | None = None
    # the serving pods stay at this spec's pod template (None: the plan's own rendering)
    hold: Service | None = None
    take_one: bool = False  # whenNoRoom ReplaceStable: one serving pod fewer for the canary
    message: str = ""
    by_hand: bool = False  # the promote or abort annotation decided
    # the canary's pod cannot come up (a crash loop, an image that cannot be pulled): why
    failing: str = ""


def _stop(plan: Plan, observed: Observed, message: str) -> Plan:
    """`plan` with its current run stopped (its Job deleted, its record saying why) while it
    is still going: the canary it measures is promoted or aborted by hand."""
    run = next((r for r in observed.runs if r.name == plan.run), None)
    if run is None or run.state != "Running":
        return dataclasses.replace(plan, start=None)
    record = Record(
        run.name, run.revision, {STATE_KEY: "Failed", MESSAGE_KEY: message}, unless_result=True
    )
    job = next((j for j in observed.jobs if j.name == plan.run), None)
    stop = (*plan.stop, plan.run) if job is not None and job.active else plan.stop
    return dataclasses.replace(plan, start=None, stop=stop, record=(*plan.record, record))


def _measuring(plan: Plan, observed: Observed) -> Run | None:
    return next((r for r in observed.runs if r.name == plan.run), None)


def _waiting(svc: Service, observed: Observed, plan: Plan) -> str:
    """What the canary waits for, in words."""
    if observed.canary_waiting:
        w = observed.canary_waiting[0]
        return f"canary pod {w.pod} waits to be scheduled: {w.message}"
    if observed.canary_problems:
        p = observed.canary_problems[0]
        return f"canary pod {p.pod}: {p.reason}: {p.message}"
    run = _measuring(plan, observed)
    if plan.confirming:
        return str(plan.confirming)
    if run is None:
        return f"starting canary {canary_name(svc)} of revision {plan.revision}"
    if run.state == "Running":
        return f"benchmark run {run.name} measures the canary alone"
    return (
        f"benchmark run {run.name} ended without a verdict ({run.message}); the "
        f"rerun-benchmark annotation measures the canary again, or promote or abort it by "
        f"hand ({PROMOTE_ANNOTATION} or {ABORT_ANNOTATION}={plan.revision})"
    )


def _take_one(svc: Service, observed: Observed) -> bool:
    """whenNoRoom ReplaceStable: the canary's pod waits for room, or one serving pod is out for
    it already (the serving Deployment runs one fewer than it would), and the operator sets
    the serving count (autoscaling off) with two or more replicas."""
    if (
        svc.spec.rollout.canary_settings.when_no_room != "ReplaceStable"
        or svc.spec.autoscaling.enabled
    ):
        return False
    if svc.spec.replicas < 2:
        return False
    live = (observed.deployment or {}).get("spec", {}).get("replicas")
    return bool(observed.canary_waiting) or live == svc.spec.replicas - 1


def progress(svc: Service, observed: Observed, plan: Plan) -> tuple[Plan, Rollout]:
    """`plan` as the canary's phase has it (a run stopped by hand), and the Rollout."""
    idle = 0 if observed.canary is not None else None  # an idle canary stays, at 0 replicas
    if not plan.enabled or not plan.canary:
        return plan, _after(svc, observed, plan, idle)
    rev, stable = plan.revision, observed.deployment_revision
    base = Rollout(revision=rev, stable=stable, canary_replicas=idle)
    rollback = svc.spec.benchmark.on_failure == "Rollback"
    if svc.abort == rev:
        plan = _stop(plan, observed, ABORTED_BY_HAND)
        return plan, dataclasses.replace(
            base,
            phase=ABORTED,
            hold=None if plan.restored is not None else plan.held,
            message=f"aborted by hand ({ABORT_ANNOTATION}={rev}): revision {stable} serves; "
            "the canary served no request",
            by_hand=True,
        )
    if svc.promote == rev:
        plan = _stop(plan, observed, PROMOTED_BY_HAND)
        return plan, dataclasses.replace(
            base,
            phase=PROMOTING,
            message=f"promoted by hand ({PROMOTE_ANNOTATION}={rev}) whatever its benchmark "
            "says: the serving pods roll to it",
            by_hand=True,
        )
    # the verdict of the run measuring it (judged in this reconcile, or recorded before)
    verdict = None
    if plan.failures is not None and plan.confirming is None:
        verdict = FAILED if plan.failures else PASSED
    failed = (
        plan.restored is not None
        or plan.rollback_refused is not None
        or (rollback and verdict == FAILED)
    )
    if failed:
        why = "; ".join(plan.failures or ()) or "its gates failed"
        return plan, dataclasses.replace(
            base,
            phase=ABORTED,
            hold=None if plan.restored is not None else plan.held,
            message=f"revision {rev} failed its benchmark gates on the canary "
            f"{'in two runs ' if plan.confirmed else ''}({why}): it served no request; "
            f"revision {plan.rolled_back_to or stable} serves",
        )
    if verdict == PASSED or (verdict is not None and not rollback):
        passed = "passed its gates" if verdict == PASSED else "was measured (onFailure: Report)"
        return plan, dataclasses.replace(
            base,
            phase=PROMOTING,
            message=f"revision {rev} {passed} on the canary: the serving pods roll to it",
        )
    return plan, dataclasses.replace(
        base,
        phase=CANARY,
        canary_replicas=1,
        hold=plan.held,
        take_one=_take_one(svc, observed),
        message=_waiting(svc, observed, plan),
        failing=next(
            (f"canary pod {p.pod}: {p.reason}: {p.message}" for p in observed.canary_problems), ""
        ),
    )


def _after(svc: Service, observed: Observed, plan: Plan, idle: int | None) -> Rollout:
    """Once the serving Deployment runs the revision (promoted, or never on a canary)."""
    dep = observed.deployment
    if not plan.enabled or dep is None or observed.deployment_revision != plan.revision:
        return Rollout(canary_replicas=idle)
    run = next((r for r in observed.runs if r.revision == plan.revision and r.target), None)
    on_canary = run is not None and run.target is not None and _canary_pod(svc, run)
    if not on_canary:
        return Rollout(canary_replicas=idle)
    done = rolled_out(dep)
    return Rollout(
        phase=PROMOTED if done else PROMOTING,
        revision=plan.revision,
        stable=observed.previous_revision,
        canary_replicas=idle,
        message=f"every serving pod runs revision {plan.revision}"
        if done
        else f"the serving pods roll to revision {plan.revision}",
    )


def _canary_pod(svc: Service, run: Run) -> bool:
    """The run measured a canary pod (its pods are named after the canary Deployment)."""
    return run.target is not None and run.target.pod.startswith(canary_name(svc) + "-")


def status_of(rollout: Rollout, svc: Service) -> dict[str, Any] | None:
    """status.rollout (None: nothing to report)."""
    if not rollout.phase:
        return None
    out: dict[str, Any] = {"phase": rollout.phase, "revision": rollout.revision}
    if rollout.stable:
        out["stableRevision"] = rollout.stable
    if rollout.phase == CANARY:
        out["canary"] = canary_name(svc)
    out["message"] = rollout.message
    return out


__all__ = ["ABORTED", "CANARY", "PROMOTED", "PROMOTING", "Rollout", "progress", "status_of"]
