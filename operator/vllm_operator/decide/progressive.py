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

from vllm_operator.api.records import Run
from vllm_operator.api.spec import ABORT_ANNOTATION, PROMOTE_ANNOTATION, Service
from vllm_operator.decide.bake import (
    BAKE_FAILED,
    BAKE_INCONCLUSIVE,
    BAKE_PASSED,
    BAKE_SKIPPED,
    BakeVerdict,
    ends_at,
    judge_bake,
    too_exposed,
)
from vllm_operator.decide.gates import FAILED, PASSED
from vllm_operator.decide.policy import ABORTED_BY_HAND, PROMOTED_BY_HAND, Plan, Record
from vllm_operator.decide.target_pod import ready as pod_ready
from vllm_operator.observe.state import Bake, Observed, rolled_out
from vllm_operator.render.benchmark import MESSAGE_KEY, STATE_KEY
from vllm_operator.render.canary import BAKE_ANNOTATION, canary_name

CANARY, BAKING, PROMOTING, PROMOTED, ABORTED = (
    "Canary",
    "Baking",
    "Promoting",
    "Promoted",
    "Aborted",
)


@dataclass(frozen=True)
class BakeEndpoint:
    """The canary's pod as it joins the Service's endpoints (render/canary.py)."""

    pod: str
    uid: str
    ip: str
    port: int
    node: str | None = None


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
    # the bake (rollout.canary.bake): the canary's pod in the Service's endpoints (None: not
    # rendered: pruned), its verdict kept on the canary Deployment (BAKE_ANNOTATION: "" none)
    bake_endpoint: BakeEndpoint | None = None
    bake_note: str = ""
    bake: Bake | None = None
    bake_verdict: str = ""


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
        if svc.spec.rollout.canary_settings.bake is not None and _serving_at_zero(observed):
            # no live traffic to bake on (the holder answers the Service): said, not hidden
            why = (
                "its bake was skipped: the service is at zero (no live traffic to bake on); "
                "promoted on its benchmark alone, never seen on live traffic"
            )
            promoting = dataclasses.replace(
                base,
                phase=PROMOTING,
                bake_note=f"{rev} {BAKE_SKIPPED} {why}",
                bake_verdict=BAKE_SKIPPED,
                message=f"revision {rev} {passed} on the canary; not baked: the service is at "
                "zero: the serving pods roll to it (at zero: the next wake starts it)",
            )
        elif svc.spec.rollout.canary_settings.bake is not None:
            promoting = _baking(svc, observed, plan, base, passed=passed, rollback=rollback)
        else:
            promoting = dataclasses.replace(
                base,
                phase=PROMOTING,
                message=f"revision {rev} {passed} on the canary: the serving pods roll to it",
            )
        return plan, promoting
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


_BAKED = {
    BAKE_PASSED: "passed its bake",
    BAKE_INCONCLUSIVE: "baked without enough traffic to compare (whenInconclusive: Promote)",
    BAKE_FAILED: "failed its bake (onFailure: Report)",
    BAKE_SKIPPED: "was not baked",
}


def bake_note(observed: Observed, revision: str) -> tuple[str, str] | None:
    """(verdict, message) of the bake of `revision`, as the canary Deployment keeps it."""
    annotations = (observed.canary or {}).get("metadata", {}).get("annotations") or {}
    parts = (annotations.get(BAKE_ANNOTATION) or "").split(" ", 2)
    if len(parts) < 2 or parts[0] != revision:
        return None
    return parts[1], parts[2] if len(parts) > 2 else ""


def _recorded_bake(observed: Observed, revision: str) -> bool:
    """The status on record says `revision`'s bake began (its figures were read)."""
    r = observed.recorded_rollout
    return (
        r.get("revision") == revision
        and r.get("phase") == BAKING
        and bool((r.get("bake") or {}).get("startedAt"))
    )


def _recorded_verdict(observed: Observed, revision: str) -> tuple[str, str] | None:
    """The bake's verdict as the status recorded it, where the canary Deployment that keeps
    it (BAKE_ANNOTATION) was deleted: a revision aborted on its bake stays aborted."""
    r = observed.recorded_rollout
    verdict = (r.get("bake") or {}).get("verdict")
    if (
        r.get("revision") != revision
        or r.get("phase") not in (ABORTED, PROMOTING, PROMOTED)
        or verdict not in (BAKE_FAILED, BAKE_PASSED, BAKE_INCONCLUSIVE, BAKE_SKIPPED)
    ):
        return None
    return verdict, "as the status recorded it (the canary Deployment that kept it is gone)"


def _endpoint(observed: Observed, plan: Plan) -> BakeEndpoint | None:
    """The canary's pod the passing run measured, while it is Ready."""
    run = _measuring(plan, observed) or next(
        (r for r in reversed(observed.runs) if r.revision == plan.revision and r.target), None
    )
    if run is None or run.target is None:
        return None
    pods = observed.canary_pods or ()
    pod = next((p for p in pods if p["metadata"]["name"] == run.target.pod), None)
    t = run.target
    if pod is None and observed.bake is None:
        # the measured pod was replaced (evicted, drained) before its bake began: the revision
        # passed, its replacement runs the same revision and bakes once Ready
        pod = next((p for p in pods if _servable(p)), None)
        if pod is not None:
            status = pod.get("status") or {}
            return BakeEndpoint(
                pod["metadata"]["name"],
                pod["metadata"].get("uid", ""),
                status.get("podIP", ""),
                t.port,
                pod.get("spec", {}).get("nodeName"),
            )
    if pod is None or not _servable(pod):
        return None
    return BakeEndpoint(t.pod, t.uid, t.ip, t.port, pod.get("spec", {}).get("nodeName"))


def _servable(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and pod_ready(pod)


def _serving_at_zero(observed: Observed) -> bool:
    """The serving Deployment is at 0 replicas (scale to zero: only a service allowed to go
    to zero has a canary there, decide/policy.py canary_wanted)."""
    dep = observed.deployment
    return dep is not None and (dep.get("spec") or {}).get("replicas", 1) == 0


def _baking(
    svc: Service, observed: Observed, plan: Plan, base: Rollout, *, passed: str, rollback: bool
) -> Rollout:
    """The canary passed its benchmark: it bakes on live traffic beside the stable pods
    before the serving pods roll to it (decide/bake.py judges the figures)."""
    limits = svc.spec.rollout.canary_settings.bake
    assert limits is not None
    rev, stable = plan.revision, base.stable
    endpoint = _endpoint(observed, plan)

    def baking(**changes: Any) -> Rollout:
        """Still baking: one canary pod, the serving pods held, in the endpoints while Ready."""
        return dataclasses.replace(
            base,
            phase=BAKING,
            canary_replicas=1,
            hold=plan.held,
            take_one=_take_one(svc, observed),
            bake_endpoint=endpoint,
            **changes,
        )

    noted = bake_note(observed, rev) or _recorded_verdict(observed, rev)
    began = _recorded_bake(observed, rev)
    if noted is not None:  # decided in an earlier reconcile: it stays decided
        verdict, why = noted
        note = f"{rev} {verdict} {why}"
    else:
        if observed.bake is None and began and endpoint is None:
            # the bake began (the status recorded it) and its endpoint is gone with its pod
            # (unready, deleted, replaced, crashed): it cut the streams it served; failed
            gone = next(
                (f"canary pod {p.pod}: {p.reason}: {p.message}" for p in observed.canary_problems),
                "the canary's pod in the bake is gone or not Ready",
            )
            judged: BakeVerdict | None = BakeVerdict(
                BAKE_FAILED, f"its pod stopped serving during the bake: {gone}"
            )
        elif observed.bake is None and not began and endpoint is not None:
            # as the bake would begin: the canary's share of live traffic (1/(N+1))
            ready = int(((observed.deployment or {}).get("status") or {}).get("readyReplicas") or 0)
            judged = too_exposed(limits, ready)
        else:
            judged = None
        if judged is None and observed.bake is None:
            # its EndpointSlice is written now (or written again, where the bake began and the
            # slice is gone while the pod serves): the bake begins now, on the operator's
            # clock, and the status records when (observe reads its age from that record)
            start = (observed.recorded_rollout.get("bake") or {}).get("startedAt") if began else ""
            joins = endpoint is not None and bool(start or observed.observed_at)
            return baking(
                bake=Bake(str(start or observed.observed_at), 0.0) if joins else None,
                message=f"revision {rev} {passed} on the canary; it joins the Service's "
                f"endpoints to bake {limits.seconds} s on live traffic beside revision {stable}"
                if endpoint is not None
                else f"revision {rev} {passed} on the canary; its pod is not Ready to bake",
            )
        if judged is None:
            assert observed.bake is not None
            judged = judge_bake(limits, observed.bake)
        if judged.verdict == BAKE_INCONCLUSIVE and limits.when_inconclusive == "Wait":
            # not decided: it keeps baking, judged again on every reconcile (its verdict
            # comes once it has answered minRequests), or a person decides
            return baking(
                bake=observed.bake,
                bake_verdict=BAKE_INCONCLUSIVE,
                message=f"revision {rev}: {judged.message} (whenInconclusive: Wait): it "
                "bakes on until it has answered minRequests, or promote or abort it by hand "
                f"({PROMOTE_ANNOTATION} or {ABORT_ANNOTATION}={rev})",
            )
        if judged.verdict is None:
            return baking(bake=observed.bake, message=f"revision {rev}: {judged.message}")
        verdict, why = judged.verdict, judged.message
        note = f"{rev} {verdict} {why}"[:4000]
    abort = verdict == BAKE_FAILED or (
        verdict == BAKE_INCONCLUSIVE and limits.when_inconclusive == "Abort"
    )
    if abort and rollback:
        failed = (
            "failed its bake"
            if verdict == BAKE_FAILED
            else "its bake was inconclusive (whenInconclusive: Abort)"
        )
        return dataclasses.replace(
            base,
            phase=ABORTED,
            hold=plan.held,
            bake_note=note,
            bake=observed.bake,
            bake_verdict=verdict,
            message=f"revision {rev} {passed} on the canary, then {failed}: {why}; "
            f"the canary left the endpoints; revision {stable} serves",
        )
    said = _BAKED.get(verdict, verdict)
    return dataclasses.replace(
        base,
        phase=PROMOTING,
        bake_note=note,
        bake=observed.bake,
        bake_verdict=verdict,
        message=f"revision {rev} {passed} on the canary and {said} ({why}): the serving pods "
        "roll to it",
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
    # the bake's verdict stays on the canary Deployment (and in the status) with the revision
    noted = bake_note(observed, plan.revision) if idle is not None else None
    baked = f" (it {_BAKED.get(noted[0], noted[0])}: {noted[1]})" if noted else ""
    if svc.abort == plan.revision:  # too late for the canary: said, not ignored in silence
        baked += (
            f"; the abort annotation ({ABORT_ANNOTATION}={plan.revision}) came after the "
            "serving pods began to roll to it: a canary is aborted only before its promotion; "
            "to go back, apply the earlier spec (it is measured on a canary in turn)"
        )
    return Rollout(
        phase=PROMOTED if done else PROMOTING,
        revision=plan.revision,
        stable=observed.previous_revision,
        canary_replicas=idle,
        bake_note=f"{plan.revision} {noted[0]} {noted[1]}" if noted else "",
        bake_verdict=noted[0] if noted else "",
        message=(
            f"every serving pod runs revision {plan.revision}"
            if done
            else f"the serving pods roll to revision {plan.revision}"
        )
        + baked,
    )


def _canary_pod(svc: Service, run: Run) -> bool:
    """The run measured a canary pod (its pods are named after the canary Deployment)."""
    return run.target is not None and run.target.pod.startswith(canary_name(svc) + "-")


def rollout_status(rollout: Rollout, svc: Service) -> dict[str, Any] | None:
    """status.rollout (None: nothing to report)."""
    if not rollout.phase:
        return None
    out: dict[str, Any] = {"phase": rollout.phase, "revision": rollout.revision}
    if rollout.stable:
        out["stableRevision"] = rollout.stable
    if rollout.phase in (CANARY, BAKING):
        out["canary"] = canary_name(svc)
    if rollout.bake is not None or rollout.bake_verdict:
        bake = svc.spec.rollout.canary_settings.bake
        out["bake"] = _bake_status(rollout, bake.seconds if bake is not None else None)
    out["message"] = rollout.message
    return out


def _bake_status(rollout: Rollout, seconds: int | None) -> dict[str, Any]:
    b = rollout.bake
    ends = ends_at(b, seconds) if b is not None and seconds is not None else ""
    out: dict[str, Any] = {}
    if b is not None:
        # when it began and when its window ends: times, not a count of seconds so far (a
        # countdown would be a status write on every reconcile of a baking service)
        out["startedAt"] = b.started
        if ends:
            out["endsAt"] = ends
    if rollout.bake_verdict:
        out["verdict"] = rollout.bake_verdict
    for prefix, f in (("canary", b.canary if b else None), ("stable", b.stable if b else None)):
        if f is None:
            continue
        if prefix == "canary":
            out["canaryRequests"] = round(f.requests, 1)
        if f.ttft_p99 is not None:
            out[f"{prefix}TtftP99Seconds"] = round(f.ttft_p99, 4)
        if f.itl_p99 is not None:
            out[f"{prefix}InterTokenP99Seconds"] = round(f.itl_p99, 4)
        out[f"{prefix}ErrorRate"] = round(f.error_rate, 4)
    return out


__all__ = [
    "ABORTED",
    "BAKING",
    "CANARY",
    "PROMOTED",
    "PROMOTING",
    "BakeEndpoint",
    "Rollout",
    "bake_note",
    "progress",
    "rollout_status",
]
