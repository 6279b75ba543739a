"""The pipeline, one idempotent function that reads top to bottom:

    parse -> observe (read-only) -> decide (pure) -> render (pure) -> apply (the one writer)
          -> status (pure)

`decide` is policy.decide: the benchmark lifecycle (start, stop, judge, roll back, prune) as
a plan; `apply` writes the rendered children and carries out the plan; what the writes did is
read again before the status is computed.

Whatever goes wrong after parsing reaches the status, on the condition of what it is for:
an invalid spec is Ready=False / InvalidSpec; a refused write of what serves (the Deployment,
the Service) is Ready=False / ApplyFailed with the server's message (NotOwned: an object of
its name is not this service's); a refused HPA, PDB or monitoring object is ChildrenSynced=False
(and Degraded) and a refused benchmark run's object BenchmarkComplete=False, Ready left to
what serves; a failed read is ChildrenSynced=False / ReadFailed, everything else kept. Every
one of them is Outcome.failed: the caller retries with back-off. Events are derived from
condition transitions, so each is posted once.
"""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from vllm_operator.api.records import Capacity, Run
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide import capacity
from vllm_operator.decide import zero as zero_phase
from vllm_operator.decide.aim import aim
from vllm_operator.decide.policy import Plan, Start, decide, describe, held_spec, restorable
from vllm_operator.decide.progressive import Rollout, progress
from vllm_operator.decide.startup import load_key, startup_budget, with_budget
from vllm_operator.decide.zero import ZeroPlan, ZeroSeen, decide_zero
from vllm_operator.observe.live import live_reader
from vllm_operator.observe.read import observe
from vllm_operator.observe.state import (
    SERVED_SPEC_ANNOTATION,
    BenchView,
    Observed,
    previous_revision,
    rolled_out,
)
from vllm_operator.render.autoscaling import render_hpa, render_pdb
from vllm_operator.render.benchmark import (
    PREVIOUS_REVISION_ANNOTATION,
    REVISION_ANNOTATION,
    revision,
)
from vllm_operator.render.canary import BAKE_ANNOTATION, render_bake_endpoints, render_canary
from vllm_operator.render.deployment import (
    REPLICAS_HELD_ANNOTATION,
    REPLICAS_HELD_SINCE_ANNOTATION,
    render_deployment,
    render_pod_template,
    replicas_managers,
    surge_refused,
)
from vllm_operator.render.holder import is_holder, with_zero
from vllm_operator.render.monitoring import render_monitoring
from vllm_operator.render.service import render_service
from vllm_operator.status import compute_status
from vllm_operator.status.benchmark import CONFIRMING
from vllm_operator.status.failures import (
    REFUSALS,
    Refusal,
    apply_failed_status,
    invalid_spec_status,
    read_failed_status,
)
from vllm_operator.status.prose import rendering_changed
from vllm_operator.status.startup import slow_start_message
from vllm_operator.write.apply import (
    MONITORING_PRUNABLE,
    PRUNABLE,
    ApplyError,
    Change,
    PreconditionError,
    ReadError,
    Writer,
)
from vllm_operator.write.benchmark_runs import carry_out

__all__ = ["Event", "Outcome", "describe", "reconcile", "render_children", "restorable"]

# What serves the model: a refused write of one of them is Ready=False (nothing can serve
# through it); any other child's is reported on ChildrenSynced
SERVING = frozenset({"Deployment", "Service"})


@dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Outcome:
    changes: tuple[Change, ...] = ()
    events: tuple[Event, ...] = field(default_factory=tuple)
    runs: tuple[Run, ...] = ()  # the benchmark history, for the operator's metrics
    # the spec passed the schema but not the operator's own checks: retrying cannot help
    invalid: str | None = None
    # a request was refused or failed: reported in the status; the caller retries (back-off)
    failed: ApplyError | None = None
    # for the operator's metrics (the alerts of render/monitoring.py use them): the revision
    # restored by a rollback in effect, and the HPA's ScalingActive status (None: no HPA)
    rolled_back_to: str | None = None
    scaling_active: str | None = None
    # the service read was older than a child: nothing was done (the newer read reconciles)
    stale: bool = False


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def render_children(
    svc: Service,
    settings: OperatorSettings,
    live_replicas: int | None,
    *,
    monitoring: bool = False,
    own: dict[str, Any] | None = None,
    serving: dict[str, Any] | None = None,
    live_held: str | None = None,
    live_since: str | None = None,
    now: str | None = None,
    replicas_owned_elsewhere: bool = False,
    rollout: Rollout | None = None,
    no_room_for_surge: str = "",
    hpa_target: float | None = None,
) -> list[dict[str, Any]]:
    """`monitoring`: the Prometheus Operator's CRDs are served, so its objects can be applied.
    `own`: the spec's pod template (what its canary runs), rendered once by the caller (None:
    rendered here). `serving`: the serving pods' template where it is another spec's (during
    a rollback, the spec recorded for the revision rolled back to; while a canary is
    measured, the spec the serving pods run): only the pod template (what defines a revision)
    comes from it; everything else (replicas, autoscaling, PDB, rollout strategy, the
    Service, monitoring) from the current spec. `rollout`: the canary's part
    (progressive.progress): the canary Deployment, one serving pod fewer for it.
    `hpa_target`: the requests in flight per pod the serving revision's capacity allows
    (decide/capacity.hpa_target; None: the queue band)."""
    own = own if own is not None else render_pod_template(svc, settings)
    deployment = render_deployment(
        svc,
        settings,
        live_replicas,
        template=serving if serving is not None else own,
        live_held=live_held,
        live_since=live_since,
        now=now,
        replicas_owned_elsewhere=replicas_owned_elsewhere,
        no_room_for_surge=no_room_for_surge,
    )
    canary = []
    if rollout is not None and rollout.canary_replicas is not None:
        manifest = render_canary(svc, settings, own)
        manifest["spec"]["replicas"] = rollout.canary_replicas
        if rollout.bake_note:  # the bake's verdict outlives its EndpointSlice
            manifest["metadata"]["annotations"][BAKE_ANNOTATION] = rollout.bake_note
        canary.append(manifest)
    if rollout is not None and rollout.bake_endpoint is not None:
        e = rollout.bake_endpoint
        canary.append(render_bake_endpoints(svc, e.pod, e.uid, e.ip, e.port, node=e.node))
    if rollout is not None and rollout.take_one and "replicas" in deployment["spec"]:
        deployment["spec"]["replicas"] = max(1, svc.spec.replicas - 1)
    rendered = [
        deployment,
        *canary,
        render_service(svc, settings),
        render_hpa(svc, settings, hpa_target),
        render_pdb(svc, settings),
    ]
    return [m for m in rendered if m is not None] + (
        render_monitoring(svc, settings) if monitoring else []
    )


def served_spec(
    served: Service, template: dict[str, Any], seen: Observed, settings: OperatorSettings
) -> str:
    """The served-spec annotation for a Deployment whose template (`template`) is rendered
    from `served`: the live one where it renders the same pod template (a spec change that
    leaves the template alone, such as the thresholds or monitoring, writes nothing to the
    Deployment), else `served`'s spec."""
    held = held_spec(served, seen)
    # (revisions compared: the template may carry a startup budget the rendering leaves out)
    if held is not None and revision(render_pod_template(held, settings)) == revision(template):
        return seen.served_spec
    return served.spec.model_dump_json(by_alias=True, exclude_none=True)


def _zero_rendered(
    svc: Service,
    seen: Observed,
    old_status: dict[str, Any],
    settings: OperatorSettings,
    rendered: list[dict[str, Any]],
) -> tuple[ZeroPlan | None, list[dict[str, Any]]]:
    """Scale to zero's decision and the children with its objects (as rendered: none)."""
    zero = _zero_plan(svc, seen, old_status)
    if zero is None or seen.zero is None:
        return None, rendered
    return zero, with_zero(
        rendered,
        svc,
        settings,
        replicas=zero.replicas,
        holder_in_path=zero.holder_in_path,
        services=seen.zero.services,
        holder_pods=seen.zero.holder_pods,
    )


def _zero_plan(svc: Service, seen: Observed, old_status: dict[str, Any]) -> ZeroPlan | None:
    """Scale to zero's decision from what was read and the phase last written."""
    if seen.zero is None:
        return None
    recorded = (old_status.get("autoscaling") or {}).get("zero") or {}
    # Ready pods as the Deployment's status says once it has seen its latest spec (its replicas
    # just set to 0 or 1: the status of the count before is not this one's)
    dep = seen.deployment or {}
    status = dep.get("status") or {}
    current = (status.get("observedGeneration") or 0) >= (
        (dep.get("metadata") or {}).get("generation") or 0
    )
    ready = (status.get("readyReplicas") or 0) if current else 0
    return decide_zero(
        svc,
        ZeroSeen(
            phase=str(recorded.get("phase") or zero_phase.SERVING),
            since=recorded.get("since"),
            ready_pods=int(ready),
            idle=seen.zero.idle,
            wake_requested_at=svc.wake_requested_at,
            holder_ready=bool(seen.zero.holder_pods),
        ),
        _now(),
    )


def with_revision(
    manifest: dict[str, Any], live: dict[str, Any] | None = None, served: str = ""
) -> dict[str, Any]:
    """The serving Deployment carries the revision of its pod template in an annotation (metadata
    only: no rollout), so that observe() knows which revision a finished rollout is of, and
    the revision rolled out before it (observed.previous_revision; `live`: the Deployment as
    it is now): what a failure of this one rolls back to."""
    if manifest["kind"] != "Deployment" or REVISION_ANNOTATION in (
        manifest["metadata"].get("annotations") or {}
    ):  # (the canary carries the revision it runs already: render/canary.py)
        return manifest
    out = copy.deepcopy(manifest)
    rev = revision(out["spec"]["template"])
    annotations = out["metadata"].setdefault("annotations", {})
    annotations[REVISION_ANNOTATION] = rev
    if served:  # the spec its template is rendered from: what a canary holds the pods at
        annotations[SERVED_SPEC_ANNOTATION] = served
    if before := previous_revision(live, rev):
        annotations[PREVIOUS_REVISION_ANNOTATION] = before
    return out


def _write_status(
    writer: Writer, meta: dict[str, Any], old: dict[str, Any], new: dict[str, Any]
) -> None:
    """The whole status, replaced, and only when it changed (a no-op resync writes nothing)."""
    if new != old:
        writer.replace_status(meta["namespace"], meta["name"], new)


def reconcile(body: dict[str, Any], writer: Writer, settings: OperatorSettings) -> Outcome:
    """`body`: the service as it is now (the caller reads it fresh): its status is the old
    status that transitions and events are computed against."""
    meta = body["metadata"]
    old_status = dict(body.get("status") or {})
    generation = int(meta.get("generation", 1))
    try:
        svc = Service.from_body(body)
    except ValidationError as exc:
        message = describe(exc)
        status = invalid_spec_status(old_status, generation, message, _now())
        _write_status(writer, meta, old_status, status)
        return Outcome(events=tuple(_events(old_status, status, [])), invalid=message)
    try:
        return _pipeline(svc, old_status, writer, settings)
    except ApplyError as exc:
        failure = exc
    if isinstance(failure, ReadError):
        status = read_failed_status(old_status, generation, str(failure), _now())
    elif failure.kind in SERVING:
        status = apply_failed_status(
            old_status, generation, str(failure), _now(), reason=failure.reason
        )
    else:  # the status write itself, or this replica may not write: nothing to report with
        return Outcome(failed=failure)
    try:
        _write_status(writer, meta, old_status, status)
    except ApplyError:  # the status itself was refused: the error is raised anyway
        return Outcome(failed=failure)
    return Outcome(events=tuple(_events(old_status, status, [])), failed=failure)


def _refusal(exc: ApplyError) -> bool:
    """A refusal of one object, or a failed read: reported, and the rest of the reconcile
    goes on. Not one (the fence: this replica may not write) ends the reconcile."""
    return isinstance(exc, ReadError) or bool(exc.kind)


def _refused_before(status: dict[str, Any]) -> bool:
    """The status on record says a benchmark run's write was refused: this start is its retry,
    and the rollout it waited for was reported by the pass that was refused (writing "starting"
    first would only be replaced by the same refusal again)."""
    bench = next(
        (c for c in status.get("conditions") or () if c.get("type") == "BenchmarkComplete"), None
    )
    return bench is not None and bench.get("reason") in REFUSALS


def _pipeline(
    svc: Service, old_status: dict[str, Any], writer: Writer, settings: OperatorSettings
) -> Outcome:
    # observe (read-only): the children, the pods, the benchmark history and its Jobs
    # a canary's bake reads Prometheus
    # the spec's pod template, rendered once: its revision is what decide() measures, what
    # the canary runs and what the status names (and, not measured yet, what the live
    # workload shape is read for)
    own = render_pod_template(svc, settings)
    rev = revision(own)
    live = live_reader(settings.prometheus_url, settings.scrape_interval)
    ready = old_status.get("readyReplicas")
    seen = observe(
        writer,
        svc,
        live=live,
        recorded_rollout=old_status.get("rollout") or {},
        revision=rev,
        recorded_startup=old_status.get("startup"),
        recorded_ready=ready if isinstance(ready, int) else None,
    )
    if seen.written_generation > svc.generation:
        # the Deployment was written from a later generation than this (stale) read of the
        # service: a no-op, so that no child goes back to an older spec and no run of the
        # newer revision is superseded by the older one's
        return Outcome(stale=True)
    # decide (pure): start, stop, judge, roll back, prune; and the one pod each run measures
    plan = aim(svc, seen, decide(svc, seen, settings, rev=rev))
    # the canary (rollout.canary): a new revision measured before it serves
    plan, rollout = progress(svc, seen, plan)
    # render (pure): the children, with the pod template of a rollback's target (or of what
    # the serving pods stay at while a canary is measured) if any
    served_from = plan.restored or rollout.hold or svc
    serving = own if served_from is svc else render_pod_template(served_from, settings)
    # the serving revision's capacity against the objective: what the autoscaler targets
    serving_rev = revision(serving)
    # each revision's startup probe budget (probes.startupBudget Measured): kept where a live
    # Deployment runs the revision, else from the starts measured (not part of the revision)
    live_deployments = (seen.deployment, seen.canary)
    own_budget = startup_budget(svc, rev, old_status.get("startup"), live_deployments)
    serving_budget = (
        own_budget
        if served_from is svc
        else startup_budget(served_from, serving_rev, old_status.get("startup"), live_deployments)
    )
    own = with_budget(own, own_budget)
    serving = own if served_from is svc else with_budget(serving, serving_budget)
    served_capacity = capacity.of_revision(svc, seen.runs, serving_rev)
    hpa_target = (
        capacity.hpa_target(svc, served_capacity) if isinstance(served_capacity, Capacity) else None
    )
    live_annotations = (seen.deployment or {}).get("metadata", {}).get("annotations") or {}
    rendered = render_children(
        svc,
        settings,
        (seen.deployment or {}).get("spec", {}).get("replicas"),
        monitoring=seen.monitoring_crds,
        own=own,
        serving=serving,
        live_held=live_annotations.get(REPLICAS_HELD_ANNOTATION),
        live_since=live_annotations.get(REPLICAS_HELD_SINCE_ANNOTATION),
        now=_now(),
        replicas_owned_elsewhere=bool(replicas_managers(seen.deployment, settings.field_manager)),
        rollout=rollout,
        hpa_target=hpa_target,
        no_room_for_surge=surge_refused(
            svc,
            revision(serving),
            seen.deployment,
            seen.waits_for_room and not rolled_out(seen.deployment or {"metadata": {}}),
        ),
    )
    # scale to zero (autoscaling.minReplicas 0): the phase, the replicas it sets, the holder
    zero, rendered = _zero_rendered(svc, seen, old_status, settings, rendered)
    served = served_spec(served_from, serving, seen, settings)
    desired = [m if is_holder(m) else with_revision(m, seen.deployment, served) for m in rendered]
    meta = {"namespace": svc.namespace, "name": svc.name}

    # what was refused: a child other than what serves (a refusal of what serves, or a
    # failed read of it, ends the reconcile: reconcile() reports it), a benchmark run's object
    failed: list[ApplyError] = []
    bench_failed: list[ApplyError] = []

    def status_from(obs: Observed, old: dict[str, Any]) -> dict[str, Any]:
        bench = _bench_view(svc, plan, obs)
        refused = [Refusal(e.reason, str(e)) for e in failed]
        on_bench = [Refusal(e.reason, str(e)) for e in bench_failed]
        if bench is None:  # (a stop or prune of a switched-off benchmark: no condition of it)
            refused += on_bench
        return compute_status(
            svc,
            obs,
            old,
            settings,
            _now(),
            bench=bench,
            revision=plan.restored_as
            or plan.rolled_back_to
            or (obs.deployment_revision if rollout.hold is not None else "")
            or rev,
            rollout=rollout,
            monitoring_crds=seen.monitoring_crds,
            refused=tuple(refused),
            bench_refused=on_bench[0] if on_bench and bench is not None else None,
            capacity=capacity.of_revision(svc, obs.runs, serving_rev),
            candidate=capacity.of_revision(svc, obs.runs, rev) if rev != serving_rev else None,
            serving_revision=serving_rev,
            starts=seen.starts,  # (the first look's: the look after the writes reads none)
            load_keys={rev: load_key(svc), serving_rev: load_key(served_from)},
            probe_budget=serving_budget.as_status() if serving_budget is not None else None,
            zero=(
                {"phase": zero.phase, "since": zero.since, "message": zero.message}
                if zero is not None
                else None
            ),
        )

    # apply (the one writer): the children, then the plan
    changes = _apply_children(writer, svc, desired, seen, failed)
    reported = old_status
    if plan.start is not None and not _refused_before(old_status):
        # the rollout the run waited for reaches the status first (Ready; the run "starting"):
        # a run's ConfigMaps, account, Role and Job take seconds to write when many services
        # roll out at once, and a service that serves must not be reported late for them
        now = observe(writer, svc, after_writes=True) if changes else seen
        reported = status_from(now, old_status)
        _write_status(writer, meta, old_status, reported)
    try:
        changes += carry_out(writer, svc, settings, plan, seen.runs)
    except ApplyError as exc:
        if not _refusal(exc):
            raise
        bench_failed.append(exc)
    # status (pure), from what the writes left (read again only when something was written)
    after = (
        observe(writer, svc, after_writes=True) if changes or plan.writes or bench_failed else seen
    )
    status = status_from(after, reported)
    _write_status(writer, meta, reported, status)
    hpa_conditions = (after.hpa or {}).get("status", {}).get("conditions") or []
    scaling = next((c for c in hpa_conditions if c.get("type") == "ScalingActive"), None)
    return Outcome(
        tuple(changes),
        tuple(_events(old_status, status, changes, plan.start)),
        runs=tuple(after.runs),
        rolled_back_to=plan.rolled_back_to,
        scaling_active=scaling.get("status") if scaling else None,
        failed=next(iter(failed + bench_failed), None),
    )


def _replicas_precondition(
    svc: Service, manifest: dict[str, Any], live: dict[str, Any] | None
) -> str | None:
    """With autoscaling on, while the operator still sets the serving Deployment's replicas
    (before the autoscaler's first scale takes the field over): the resourceVersion they were
    read at. An HPA scale between the read and the apply then makes the apply fail instead of
    taking the count back (issue 31: the first scale after creation raced the operator)."""
    if not svc.spec.autoscaling.enabled or live is None or "replicas" not in manifest["spec"]:
        return None
    return str(live.get("metadata", {}).get("resourceVersion") or "") or None


def _apply_after_a_scale(writer: Writer, svc: Service, manifest: dict[str, Any]) -> Change | None:
    """The serving Deployment changed between the read and the apply: read it again; when
    another field manager (the HPA's scale) owns replicas now, leave them to it, else apply
    the count as rendered, conditioned on the new read (a second change: retried later)."""
    meta = manifest["metadata"]
    live = writer.get("apps/v1", "Deployment", meta["namespace"], meta["name"], fresh=True)
    again = copy.deepcopy(manifest)
    if replicas_managers(live, writer.settings.field_manager):
        again["spec"].pop("replicas", None)
    return writer.apply(
        again,
        live=live,
        generation=svc.generation,
        owned_only=True,
        precondition=_replicas_precondition(svc, again, live),
    )


def _apply_children(
    writer: Writer,
    svc: Service,
    desired: list[dict[str, Any]],
    seen: Observed,
    failed: list[ApplyError],
) -> list[Change]:
    """Server-side apply of every rendered child, then the prune of those no longer
    rendered; each write records the generation it was rendered from. An object of a child's
    name that the service does not own is never written (NotOwned). A refusal of what serves
    is raised; one of another child is added to `failed` and the others are still written."""
    changes: list[Change] = []
    for manifest in desired:
        # the Deployments were read by observe(); apply() reads the other children itself
        live = None
        precondition = None
        if manifest["kind"] == "Deployment":
            serving = manifest["metadata"]["name"] == svc.name
            live = seen.deployment if serving else seen.canary
            precondition = _replicas_precondition(svc, manifest, live) if serving else None
        try:
            try:
                change = writer.apply(
                    manifest,
                    live=live,
                    generation=svc.generation,
                    owned_only=True,
                    precondition=precondition,
                )
            except PreconditionError:
                change = _apply_after_a_scale(writer, svc, manifest)
        except ApplyError as exc:
            # (the canary serves no one: its refusal is reported as another child's)
            serves = manifest["kind"] in SERVING and manifest["metadata"]["name"] == svc.name
            if serves or not _refusal(exc):
                raise
            failed.append(exc)
            continue
        if change is not None:
            changes.append(change)
    keep = {(m["kind"], m["metadata"]["name"]) for m in desired}
    kinds = PRUNABLE + (MONITORING_PRUNABLE if seen.monitoring_crds else ())
    try:
        changes += writer.prune(
            svc.namespace, svc.name, svc.uid, keep, kinds, generation=svc.generation
        )
    except ApplyError as exc:
        if not _refusal(exc):
            raise
        failed.append(exc)
    return changes


def _bench_view(svc: Service, plan: Plan, after: Observed) -> BenchView | None:
    if not plan.enabled:
        return None
    return BenchView(
        revision=plan.revision,
        run_name=plan.run,
        runs=tuple(after.runs),
        failures=plan.failures,
        rolled_back_to=plan.rolled_back_to,
        rollback_refused=plan.rollback_refused,
        rollout_done=plan.rollout_done,
        gated=svc.spec.gated,
        confirming=plan.confirming,
        confirmed=plan.confirmed,
        rendered_as=plan.rendered_as,
        restored_as=plan.restored_as,
    )


# What a benchmark run is made of besides its Job (its account and its two ConfigMaps): their
# writes are reported as the one BenchmarkStarted event, not one event each
RUN_PARTS = frozenset({"ServiceAccount", "Role", "RoleBinding", "ConfigMap"})
# BenchmarkComplete's reasons that are a Warning event when they appear
BENCHMARK_WARNINGS = frozenset({"BenchmarkFailed", "BenchmarkTimedOut"}) | REFUSALS


# the bake verdicts said as a Warning event (once per revision)
BAKE_WARNINGS = {"Inconclusive": "BakeInconclusive", "Skipped": "BakeSkipped"}


def _zero_events(old: dict[str, Any], new: dict[str, Any]) -> list[Event]:
    """One Normal event per scale-to-zero phase change (ScaledToZero, Waking, Serving)."""
    before = ((old.get("autoscaling") or {}).get("zero") or {}).get("phase") or zero_phase.SERVING
    after = (new.get("autoscaling") or {}).get("zero") or {}
    if not after or after.get("phase") == before:
        return []
    return [Event("Normal", str(after["phase"]), str(after.get("message", "")))]


def _slow_starts(old: dict[str, Any], new: dict[str, Any]) -> list[Event]:
    """A Warning per pod start much slower than its revision's earlier ones, once: a start is
    recorded once (by its uid), so it is new where the old status does not hold it."""
    before = {r.get("uid") for r in (old.get("startup") or {}).get("recent") or []}
    return [
        Event("Warning", "SlowStart", slow_start_message(r))
        for r in (new.get("startup") or {}).get("recent") or []
        if r.get("slowerThanUsual") and r.get("uid") not in before
    ]


def _events(
    old: dict[str, Any],
    new: dict[str, Any],
    changes: list[Change],
    start: Start | None = None,
) -> list[Event]:
    events = []
    for c in changes:
        if c.kind in RUN_PARTS:
            continue
        # the one Job a reconcile creates is its run's (carry_out: plan.start)
        if start is not None and c.kind == "Job" and c.action != "deleted":
            where = f"pod {start.target.pod}" if start.target is not None else "the Service"
            events.append(
                Event(
                    "Normal",
                    "BenchmarkStarted",
                    f"Job {c.name} measures revision {start.revision} on {where}",
                )
            )
            continue
        events.append(
            Event("Normal", f"{c.kind}{c.action.capitalize()}", f"{c.kind} {c.name} {c.action}")
        )
    before = {c["type"]: c for c in old.get("conditions", [])}
    for c in new.get("conditions", []):
        prev = before.get(c["type"])
        if (
            prev is not None
            and prev.get("status") == c["status"]
            and prev.get("reason") == c["reason"]
        ):
            continue
        if c["type"] == "Ready" and c["status"] == "True":
            events.append(Event("Normal", "Ready", c["message"]))
        elif c["type"] == "BenchmarkComplete" and c["reason"] == CONFIRMING:
            events.append(Event("Normal", c["reason"], c["message"]))
        elif (
            (c["type"] == "Degraded" and c["status"] == "True")
            or (c["type"] == "ChildrenSynced" and c["status"] == "False")
            or (c["type"] == "BenchmarkComplete" and c["reason"] in BENCHMARK_WARNINGS)
        ):
            warning = Event("Warning", c["reason"], c["message"])
            if warning not in events:  # (a refusal on Degraded and ChildrenSynced: one event)
                events.append(warning)
    # one event per phase of a revision's way through a canary (decide/progressive.py)
    was_r, now_r = old.get("rollout") or {}, new.get("rollout") or {}
    if now_r and (now_r.get("phase"), now_r.get("revision")) != (
        was_r.get("phase"),
        was_r.get("revision"),
    ):
        kind = "Warning" if now_r["phase"] == "Aborted" else "Normal"
        said = str(now_r.get("message", ""))
        # an abort is one Warning: Degraded (CanaryAborted) quotes the same message
        events = [e for e in events if not (e.reason == "CanaryAborted" and e.message == said)]
        events.append(Event(kind, f"Rollout{now_r['phase']}", said))
    # a bake that ended without enough traffic to compare, or was skipped for the canary's
    # share of the traffic: a Warning once, whatever comes of it (an abort's own Warning says
    # it already)
    verdict = (now_r.get("bake") or {}).get("verdict")
    if (
        verdict in BAKE_WARNINGS
        and now_r.get("phase") != "Aborted"
        and (verdict, now_r.get("revision"))
        != ((was_r.get("bake") or {}).get("verdict"), was_r.get("revision"))
    ):
        events.append(Event("Warning", BAKE_WARNINGS[verdict], str(now_r.get("message", ""))))
    events += _slow_starts(old, new) + _zero_events(old, new)
    # a rollback stays in force though this operator renders the pod templates differently
    # now: said once (the rollback's own Warning, when it begins now, says it already)
    was, now = old.get("benchmark") or {}, new.get("benchmark") or {}
    anew = (now.get("renderedAs"), now.get("restoredAs"))
    if (
        any(anew)
        and anew != (was.get("renderedAs"), was.get("restoredAs"))
        and not any(e.reason == "BenchmarkRollback" for e in events)
        and (message := rendering_changed(now))
    ):
        events.append(Event("Normal", "RenderingChanged", message))
    return events
