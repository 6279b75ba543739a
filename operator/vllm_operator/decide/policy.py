"""The "decide" step of the flow: the benchmark lifecycle as one pure function.

    decide(service, observed, settings) -> Plan

What to start, what to stop (and why), which verdict to record, what to roll back to (or why
not), what history to prune: all decided here from what observe() read, with no client and
no I/O, and carried out by the one writer afterwards (benchmarking.carry_out). A reader
follows one reconcile top to bottom in reconcile.py; every branch of the lifecycle is a
unit test with exact inputs and outputs (tests/unit/decide/test_policy.py).

A run is two ConfigMaps: the Job's (its result; the only object the Job may patch) and the
operator's record (the spec, the verdict, and the state of a run the operator ended).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pydantic import ValidationError

from vllm_operator.api.records import LiveWorkload, Run, Target
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service, VLLMServiceSpec
from vllm_operator.decide import capacity
from vllm_operator.decide.gates import (
    FAILED,
    Verdict,
    judge,
    last_passing,
    previous_passing,
    rollback_target,
)
from vllm_operator.observe.state import JobState, Observed, rolled_out
from vllm_operator.render.benchmark import (
    CONFIRMATION_KEY,
    MESSAGE_KEY,
    STATE_KEY,
    VERDICT_FAILURES_KEY,
    VERDICT_KEY,
    record_name,
    revision,
    run_name,
    spec_hash,
)
from vllm_operator.render.deployment import render_pod_template

SUPERSEDED = "superseded by a newer rollout or re-run before it finished"
# a canary's run stopped by the promote annotation: measured again once it serves
PROMOTED_BY_HAND = "stopped: the canary was promoted by hand before the run finished"
ABORTED_BY_HAND = "stopped: the canary was aborted by hand before the run finished"
NO_RESULT = "the runner exited without publishing a result"


@dataclass(frozen=True)
class Start:
    """Start run `run` of `revision` (its record, its ConfigMap, the Job's account, the
    Job), or, `resume`: a start interrupted after the ConfigMaps (an operator restart):
    only the account and the Job. `rerun`: the token the run is named by (run_name).
    `target`: the one pod it measures (targeting.aim; None: the Service)."""

    run: str
    revision: str
    rerun: str | None = None
    resume: bool = False
    target: Target | None = None
    served_before: str = ""  # the revision rolled out before this one (gates.rollback_target)
    # the live traffic shape it sends where the objective names none (observe/live.py)
    workload: LiveWorkload | None = None


@dataclass(frozen=True)
class Record:
    """Merge `data` into run `run`'s record. `unless_result`: only while the run has no
    result (the history was read before a result may have landed)."""

    run: str
    revision: str
    data: dict[str, str] = field(hash=False)
    unless_result: bool = False


@dataclass(frozen=True)
class Plan:
    """What one reconcile does about benchmarking, and what the status says about it."""

    enabled: bool = False
    revision: str = ""  # the revision the spec asks for
    run: str = ""  # its current run (the rerun annotation picks a new one)
    start: Start | None = None
    stop: tuple[str, ...] = ()  # Jobs to delete (runs still going that are not wanted)
    record: tuple[Record, ...] = ()
    prune: tuple[str, ...] = ()  # runs whose two ConfigMaps go
    # the gates against the thresholds in force (None: no verdict yet)
    failures: tuple[str, ...] | None = None
    # the revision failed its gates: the spec restored (its pod template only is deployed)
    rollback_to: Run | None = None
    restored: Service | None = None
    rollback_refused: str | None = None  # a rollback was due but its record is unusable
    rollout_done: bool = False  # the spec's revision is rolled out (a run may start)
    # the revision's run failed its gates and a second run confirms it: why (for the status)
    confirming: str | None = None
    confirmed: bool = False  # the rollback follows two failed runs
    # this operator renders pod templates differently from the one that measured them (an
    # upgrade, a setting): the spec's revision now, where `revision` is the spec as measured
    # (its runs decide: the rollback stays in force), and the revision the target's recorded
    # spec renders now, where it is not the one measured (what runs)
    rendered_as: str = ""
    restored_as: str = ""
    # the revision is measured on a canary (rollout.canary): the serving pods stay at the
    # spec they run (`held`) until it is promoted (progressive.progress decides the phase)
    canary: bool = False
    held: Service | None = None

    @property
    def rolled_back_to(self) -> str | None:
        return self.rollback_to.revision if self.restored is not None and self.rollback_to else None

    @property
    def writes(self) -> bool:
        return bool(self.start or self.stop or self.record or self.prune)


def describe(error: ValidationError) -> str:
    """pydantic errors as `spec.field.path: message`, one per line, for status and events."""
    parts = []
    for err in error.errors():
        loc = ".".join(str(p) for p in err["loc"])  # list indices stay: spec.env.0.valueFrom
        # Service.from_body checks the name too (the CRD does; an older CRD may not have)
        where = "metadata.name" if err["loc"] == ("name",) else f"spec.{loc}"
        parts.append(f"{where}: {err['msg']}" if loc else err["msg"])
    return "; ".join(parts)


def _with_spec_json(svc: Service, text: str) -> Service | None:
    """`svc` with the spec `text` (JSON; None: empty, or it does not parse)."""
    if not text:
        return None
    try:
        spec = VLLMServiceSpec.model_validate_json(text)
    except ValidationError:
        return None
    return svc.model_copy(update={"spec": spec})


def _with_recorded_spec(svc: Service, run: Run) -> Service | None:
    """`svc` with the spec recorded for `run` (None: none recorded, or it does not parse)."""
    return _with_spec_json(svc, run.spec_json)


def restorable(
    svc: Service, run: Run, settings: OperatorSettings
) -> tuple[Service | None, str | None]:
    """`svc` with the spec recorded for `run`, when it parses; else None and why not.

    It is rendered by this operator: where that renders another revision than the one the
    run measured, this operator renders pod templates differently (an upgrade, or one of its
    settings such as the default image; the plan says so: Plan.restored_as), unless the spec
    is not the text recorded with the run (its spec hash; a record of an earlier version has
    none, and its spec is taken as recorded): a spec edited in the record is never deployed.
    """
    where = f"the record of revision {run.revision} ({record_name(run.name)})"
    if not run.spec_json:
        return None, f"{where} holds no spec"
    try:
        spec = VLLMServiceSpec.model_validate_json(run.spec_json)
    except ValidationError as exc:
        return None, f"{where} does not parse: {describe(exc)}"
    restored = svc.model_copy(update={"spec": spec})
    rendered = revision(render_pod_template(restored, settings))
    actual = spec_hash(run.spec_json)
    if rendered != run.revision and run.spec_hash and run.spec_hash != actual:
        return None, (
            f"{where} renders revision {rendered}, not {run.revision}, and its spec is not the "
            f"one recorded with the run (spec hash {actual}, recorded {run.spec_hash})"
        )
    return restored, None


def earlier_renderings(
    svc: Service, runs: tuple[Run, ...], settings: OperatorSettings, rev: str
) -> list[str]:
    """The revisions other than `rev` with a failed run whose recorded spec renders `rev`
    with this operator, newest first: the service's spec as an earlier operator (or the
    same one with other settings) rendered it when it was measured. Rendering, rather than
    comparing the spec text, leaves out what is not in the pod template (replicas,
    autoscaling, the thresholds), and reads a spec recorded before a field was added as
    this operator reads it."""
    out: list[str] = []
    for run in sorted(runs, key=lambda r: r.created, reverse=True):
        if run.verdict != FAILED or run.revision in (rev, *out):
            continue
        recorded = _with_recorded_spec(svc, run)
        if recorded is not None and revision(render_pod_template(recorded, settings)) == rev:
            out.append(run.revision)
    return out


def runs_to_prune(
    runs: list[Run] | tuple[Run, ...], rev: str, current: str, keep: int, protect: set[str]
) -> list[Run]:
    """The oldest runs beyond `keep`, never the current run, the runs in `protect`, the last
    run that passed, or the current revision's baseline (the newest passing run of another
    revision: its rollback target and regression baseline): with keepRuns 1, a failing
    revision still has something to roll back to."""
    runs = list(runs)
    kept = {current, *protect}
    kept |= {r.name for r in (last_passing(runs), previous_passing(runs, rev)) if r is not None}
    excess = len(runs) - keep
    out = []
    for run in runs:  # oldest first
        if excess <= 0:
            break
        if run.name in kept:
            continue
        out.append(run)
        excess -= 1
    return out


def _supersede(
    svc: Service, keep: set[str], jobs: tuple[JobState, ...], runs: dict[str, Run]
) -> tuple[tuple[str, ...], list[Record]]:
    """Runs still going other than the ones in `keep` (older revisions, an earlier re-run of
    this one) are stopped, and their records say why - never one that has published its
    result (it is finished, even if its Job is not marked so yet), and never one started from
    a later generation of the service than this one (this read of the service is stale: that
    is the current revision's run)."""
    stops, records = [], []
    for job in jobs:
        run = runs.get(job.name)
        if (
            job.name in keep
            or not job.active
            or (run is not None and run.state != "Running")
            or job.generation > svc.generation
        ):
            continue
        stops.append(job.name)
        if run is not None:
            data = {STATE_KEY: "Failed", MESSAGE_KEY: SUPERSEDED}
            records.append(Record(run.name, run.revision, data, unless_result=True))
    return tuple(stops), records


def _ended(svc: Service, job: JobState, run: Run) -> Record | None:
    """The record of a run whose Job ended without a result (failed, past its deadline,
    or exited 0 without publishing); None while it runs or once its result is there."""
    if run.state != "Running" or not (job.failed_reason or (job.succeeded and run.result is None)):
        return None
    reason = job.failed_reason or "NoResult"
    if reason == "DeadlineExceeded":
        message = f"the benchmark ran past its deadline ({svc.spec.benchmark.timeout_seconds}s)"
    else:
        message = job.failed_message or NO_RESULT
    return Record(
        run.name,
        run.revision,
        {STATE_KEY: "Failed", MESSAGE_KEY: f"{reason}: {message}"},
        unless_result=True,
    )


def superseded(run: Run) -> bool:
    """The operator stopped `run` before it finished (a newer rollout or re-run, or its canary
    promoted by hand): it measured nothing, so it is no verdict of its revision."""
    return run.state == "Failed" and run.message in (SUPERSEDED, PROMOTED_BY_HAND)


def held_spec(svc: Service, observed: Observed) -> Service | None:
    """`svc` with the spec the serving Deployment's pod template was rendered from (its
    annotation), when it is recorded and parses: what the serving pods stay at while a canary
    is measured. None: a Deployment of an earlier operator (no canary: rolled out directly)."""
    return _with_spec_json(svc, observed.served_spec)


def canary_wanted(svc: Service, observed: Observed, rev: str) -> bool:
    """Revision `rev` is measured on a canary before it serves (rollout.canary): gates set,
    and a Deployment that serves another revision, whose spec is recorded, with replicas or
    at zero by scale to zero (a spec change at zero is measured on a canary started for it,
    not first served to the next request's wake)."""
    bench, dep = svc.spec.benchmark, observed.deployment
    return bool(
        svc.spec.rollout.canary_settings.enabled
        and bench.enabled
        and svc.spec.gated
        and dep is not None
        and (dep.get("spec", {}).get("replicas", 1) > 0 or svc.spec.autoscaling.to_zero)
        and observed.deployment_revision not in ("", rev)
        and held_spec(svc, observed) is not None
    )


def measured_again(svc: Service, rev: str, runs: dict[str, Run]) -> Service:
    """`svc` with the rerun token that names its current run of `rev`: its own, or, where the
    run of that name was superseded (the revision was replaced before its run finished, and
    now it is back), the next token `<token>#remeasure-<n>`: a new run measures it. The
    newest run of those names that was not superseded is the current one (a pruned earlier
    one changes nothing)."""
    names = [
        svc.model_copy(update={"rerun": f"{svc.rerun or ''}#remeasure-{n}" if n else svc.rerun})
        for n in range(len(runs) + 2)
    ]
    seen = [(n, runs.get(run_name(s, rev))) for n, s in enumerate(names)]
    live = [n for n, r in seen if r is not None and not superseded(r)]
    if live:
        return names[live[-1]]
    gone = [n for n, r in seen if r is not None]
    return names[gone[-1] + 1] if gone else svc


def confirming(svc: Service) -> Service:
    """`svc` as the run confirming a failed verdict is rendered: a re-run of the same
    revision, under a token of its own (run_name: another Job, ConfigMap and record)."""
    return svc.model_copy(update={"rerun": f"{svc.rerun or ''}#confirm-failed-run"})


def _judge(  # noqa: PLR0917 (one decision's six inputs)
    runs: list[Run], svc: Service, rev: str, name: str, confirmation: str | None, before: str
) -> tuple[Verdict | None, list[Run], Record | None]:
    """The gates on run `name` (once it is complete), and the record of a new verdict (a
    Failed one names the run that will confirm it, `confirmation`, when there is one); the
    runs with that verdict in them, for the rest of the decision."""
    bench = svc.spec.benchmark
    rollback = bench.on_failure == "Rollback" and svc.promote != rev  # (promoted by hand)
    verdict = judge(
        runs,
        rev,
        bench.thresholds,
        rollback,
        name=name,
        before=before,
        objective=lambda run: capacity.failures(svc, run),
    )
    if verdict is None or verdict.to_record is None:
        return verdict, runs, None
    data = {VERDICT_KEY: verdict.to_record, VERDICT_FAILURES_KEY: "; ".join(verdict.failures)}
    if confirmation and verdict.to_record == FAILED:
        data[CONFIRMATION_KEY] = confirmation
    runs = [
        dataclasses.replace(
            r,
            verdict=verdict.to_record,
            verdict_failures=data[VERDICT_FAILURES_KEY],
            confirmation=data.get(CONFIRMATION_KEY, ""),
        )
        if r.name == name
        else r
        for r in runs
    ]
    return verdict, runs, Record(name, rev, data)


def decide(
    svc: Service, observed: Observed, settings: OperatorSettings, rev: str | None = None
) -> Plan:
    """The benchmark lifecycle of one reconcile, from what observe() read. `rev`: the spec's
    revision where the caller rendered its pod template already (reconcile does, once per
    reconcile; None: rendered here).

    The spec's revision is its pod template as this operator renders it. Where that has no
    run yet but the same spec was measured under an earlier rendering (an operator upgrade
    or a setting such as the default image changed how every pod template renders) and
    failed there in two runs, the rollback in force stays: the spec is the one that failed,
    whatever it renders now (Plan.rendered_as says so). The rerun annotation, or a spec
    that renders another revision, measures again as before."""
    bench = svc.spec.benchmark
    if not bench.enabled:
        return Plan()
    rev = rev if rev is not None else revision(render_pod_template(svc, settings))
    plan = _decide(svc, observed, settings, rev)
    if bench.on_failure != "Rollback" or any(r.name == plan.run for r in observed.runs):
        return plan
    for earlier in earlier_renderings(svc, observed.runs, settings, rev):
        kept = _decide(svc, observed, settings, earlier)
        if kept.rolled_back_to is not None:
            return dataclasses.replace(kept, rendered_as=rev)
    return plan


def _measurable(
    svc: Service, observed: Observed, rev: str, restored: Service | None
) -> tuple[bool, bool, str]:
    """(on a canary, rolled out so that a run may start, what served before): on a canary
    (rollout.canary) the run measures the canary's pod, and what served before is what serves
    now; else the Deployment's pods, once it is rolled out (never during a rollback)."""
    canary = canary_wanted(svc, observed, rev)
    dep = observed.canary if canary else observed.deployment
    rollout_done = (
        restored is None
        and dep is not None
        and dep.get("spec", {}).get("replicas", 1) > 0
        and rolled_out(dep)
        and (observed.canary_revision if canary else observed.deployment_revision) == rev
    )
    return (
        canary,
        rollout_done,
        (observed.deployment_revision if canary else observed.previous_revision),
    )


def _decide(svc: Service, observed: Observed, settings: OperatorSettings, rev: str) -> Plan:
    """decide(), with the runs of revision `rev` deciding."""
    bench = svc.spec.benchmark
    observed_runs = {r.name: r for r in observed.runs}
    # the current run: the revision's, or its re-run's; a new one where it was superseded
    base = measured_again(svc, rev, observed_runs)
    name = run_name(base, rev)
    confirm = measured_again(confirming(base), rev, observed_runs)
    confirm_name = run_name(confirm, rev)
    records: list[Record] = []

    # judge: a completed run is judged once, with the thresholds of that moment. A failed
    # verdict that would roll back is confirmed first by a second run of the same revision
    # (one noisy run must not roll back a good revision): that run's verdict decides.
    # (promoted by hand, the promote annotation naming it: it serves whatever its gates say)
    rollback = bench.on_failure == "Rollback" and svc.promote != rev
    # what served before the revision, as its run recorded when it started: the baseline
    # and the rollback target (not simply the newest passing run: a revert to an older one)
    judged = observed_runs.get(name)
    before = judged.served_before if judged is not None else ""
    verdict, runs, record = _judge(
        list(observed.runs), svc, rev, name, confirm_name if rollback else None, before
    )
    records += [record] if record else []
    first = next((r for r in runs if r.name == name), None)
    # every Failed verdict is confirmed before it rolls back, also one recorded under Report
    # (no confirmation named: onFailure was switched to Rollback since); its record names
    # the confirming run from now on
    confirmation = (
        rollback and verdict is not None and first is not None and first.verdict == FAILED
    )
    if confirmation and first is not None and first.confirmation != confirm_name:
        records.append(Record(name, rev, {CONFIRMATION_KEY: confirm_name}))
    measuring, token, confirming_why = name, base.rerun, None
    if confirmation and verdict is not None:
        failed_first = verdict.failures
        measuring, token = confirm_name, confirm.rerun
        verdict, runs, record = _judge(runs, svc, rev, confirm_name, None, before)
        records += [record] if record else []
        if verdict is None:  # the confirmation has no verdict yet: no rollback until it has
            confirming_why = (
                f"run {name} failed its gates ({'; '.join(failed_first)}); run {confirm_name} "
                f"measures revision {rev} again before any rollback"
            )
            verdict = Verdict(failed_first, None, None)

    # roll back: the spec's revision failed its gates (confirmed); run the last one that
    # passed until the spec changes, its recorded spec as this operator renders it (where
    # that is another revision than the one measured: restored_as)
    target = verdict.rollback_to if verdict is not None else None
    restored, refused = restorable(svc, target, settings) if target is not None else (None, None)
    restored_as = ""
    if restored is not None and target is not None:
        restored_as = revision(render_pod_template(restored, settings))
        restored_as = "" if restored_as == target.revision else restored_as

    # start, resume or end the run measuring the revision; supersede the others still going
    canary, rollout_done, served_before = _measurable(svc, observed, rev, restored)
    by_name = {r.name: r for r in runs}
    current, job = (
        by_name.get(measuring),
        next((j for j in observed.jobs if j.name == measuring), None),
    )
    stop, superseded = _supersede(svc, {name, confirm_name}, observed.jobs, by_name)
    records += superseded
    start = None
    if current is None and rollout_done:
        start = Start(
            measuring, rev, token, served_before=served_before, workload=observed.live_workload
        )
    elif current is not None and current.state == "Running" and job is None and rollout_done:
        start = Start(measuring, rev, token, resume=True, workload=current.live_workload)
    elif current is not None and job is not None and (ended := _ended(svc, job, current)):
        records.append(ended)

    # the target a failure would roll back to is kept, whatever keepRuns says; without gates
    # no verdict can fail, so nothing would ever roll back to it and keepRuns rules
    gated = svc.spec.gated
    due = target or (rollback_target(runs, rev, before) if gated else None)
    protect = {name, confirm_name} | ({due.name} if due is not None else set())
    return Plan(
        enabled=True,
        revision=rev,
        run=measuring,
        start=start,
        stop=stop,
        record=tuple(records),
        prune=tuple(r.name for r in runs_to_prune(runs, rev, name, bench.keep_runs, protect)),
        failures=verdict.failures if verdict is not None else None,
        rollback_to=target,
        restored=restored,
        rollback_refused=refused,
        rollout_done=rollout_done,
        confirming=confirming_why,
        confirmed=confirmation and target is not None,
        restored_as=restored_as,
        canary=canary,
        held=held_spec(svc, observed) if canary else None,
    )


__all__ = [
    "ABORTED_BY_HAND",
    "FAILED",
    "PROMOTED_BY_HAND",
    "Plan",
    "Record",
    "Start",
    "canary_wanted",
    "confirming",
    "decide",
    "earlier_renderings",
    "held_spec",
    "measured_again",
    "restorable",
    "runs_to_prune",
]
