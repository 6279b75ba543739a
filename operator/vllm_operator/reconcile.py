"""The pipeline: parse -> render -> apply -> observe -> status. One idempotent function.

Whatever goes wrong after parsing reaches the status: an invalid spec is Ready=False /
InvalidSpec, a request the API server refuses or fails is Ready=False / ApplyFailed with the
server's message. Events are derived from condition transitions, so each is posted once.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from vllm_operator import benchmarking
from vllm_operator.apply import MONITORING_PRUNABLE, PRUNABLE, ApplyError, Change, Writer
from vllm_operator.benchmarking import history
from vllm_operator.gates import Run, judge
from vllm_operator.observe import observe
from vllm_operator.observed import BenchView
from vllm_operator.render.autoscaling import render_hpa, render_pdb
from vllm_operator.render.benchmark import record_name, revision, run_name
from vllm_operator.render.deployment import (
    REPLICAS_HELD_ANNOTATION,
    render_deployment,
    render_pod_template,
)
from vllm_operator.render.monitoring import MONITORING_API, render_monitoring
from vllm_operator.render.service import render_service
from vllm_operator.settings import OperatorSettings
from vllm_operator.spec import Service, VLLMServiceSpec
from vllm_operator.status import apply_failed_status, compute_status, invalid_spec_status


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


def describe(error: ValidationError) -> str:
    """pydantic errors as `spec.field.path: message`, one per line, for status and events."""
    parts = []
    for err in error.errors():
        loc = ".".join(str(p) for p in err["loc"])  # list indices stay: spec.env.0.valueFrom
        # Service.from_body checks the name too (the CRD does; an older CRD may not have)
        where = "metadata.name" if err["loc"] == ("name",) else f"spec.{loc}"
        parts.append(f"{where}: {err['msg']}" if loc else err["msg"])
    return "; ".join(parts)


def render_children(
    svc: Service,
    settings: OperatorSettings,
    live_replicas: int | None,
    *,
    monitoring: bool = False,
    restored: Service | None = None,
    live_held: str | None = None,
) -> list[dict[str, Any]]:
    """`monitoring`: the Prometheus Operator's CRDs are served, so its objects can be applied.
    `restored`: during a rollback, the service as recorded for the revision rolled back to:
    only the pod template (what defines a revision) comes from it; everything else (replicas,
    autoscaling, PDB, rollout strategy, the Service, monitoring) from the current spec."""
    template = render_pod_template(restored, settings) if restored is not None else None
    rendered = [
        render_deployment(svc, settings, live_replicas, template=template, live_held=live_held),
        render_service(svc, settings),
        render_hpa(svc, settings),
        render_pdb(svc, settings),
    ]
    return [m for m in rendered if m is not None] + (
        render_monitoring(svc, settings) if monitoring else []
    )


def restorable(
    svc: Service, run: Run, settings: OperatorSettings
) -> tuple[Service | None, str | None]:
    """`svc` with the spec recorded for `run`, when it parses and re-renders to the run's
    revision (what was measured is what is deployed); else None and why not."""
    where = f"the record of revision {run.revision} ({record_name(run.name)})"
    if not run.spec_json:
        return None, f"{where} holds no spec"
    try:
        spec = VLLMServiceSpec.model_validate_json(run.spec_json)
    except ValidationError as exc:
        return None, f"{where} does not parse: {describe(exc)}"
    restored = svc.model_copy(update={"spec": spec})
    rendered = revision(render_pod_template(restored, settings))
    if rendered != run.revision:
        return None, f"{where} renders revision {rendered}, not {run.revision}"
    return restored, None


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
        status = apply_failed_status(old_status, generation, str(exc), _now())
        try:
            _write_status(writer, meta, old_status, status)
        except ApplyError:  # the status itself was refused: the error is raised anyway
            return Outcome(failed=exc)
        return Outcome(events=tuple(_events(old_status, status, [])), failed=exc)


def _pipeline(
    svc: Service, old_status: dict[str, Any], writer: Writer, settings: OperatorSettings
) -> Outcome:
    bench_on = svc.spec.benchmark.enabled
    runs = history(writer, svc) if bench_on else []
    rev = revision(render_pod_template(svc, settings))
    run = run_name(svc, rev)  # the current run: the revision's, or its re-run's
    verdict = (
        judge(
            runs,
            rev,
            svc.spec.benchmark.thresholds,
            rollback=svc.spec.benchmark.on_failure == "Rollback",
            name=run,
        )
        if bench_on
        else None
    )
    effective, rolled_back_to, refused = svc, None, None
    if verdict is not None and verdict.to_record is not None:
        current = next(r for r in runs if r.name == run)
        benchmarking.record_verdict(writer, svc, current, verdict.to_record, verdict.failures)
    if verdict is not None and verdict.rollback_to is not None:
        # the revision the spec asks for failed its gates when it was measured: run the last
        # one that passed until the spec changes again; the failed one is never re-applied
        restored, refused = restorable(svc, verdict.rollback_to, settings)
        if restored is not None:
            effective = restored
            rolled_back_to = verdict.rollback_to.revision

    live_dep = writer.get("apps/v1", "Deployment", svc.namespace, svc.name)
    if writer.newer_than(live_dep, svc.generation):
        # the Deployment was written from a later generation than this (stale) read of the
        # service: a no-op, so that a child never goes back to an older spec (and a run of
        # the newer revision is never superseded by the older one's)
        return Outcome(stale=True)
    live_replicas = (live_dep or {}).get("spec", {}).get("replicas")
    # the PrometheusRule/PodMonitor only where the Prometheus Operator's CRDs are served;
    # elsewhere the status says so (Monitoring=False) and nothing of theirs is touched
    monitoring_crds = writer.serves(MONITORING_API, {"prometheusrules", "podmonitors"})
    desired = render_children(
        svc,
        settings,
        live_replicas,
        monitoring=monitoring_crds,
        restored=effective if rolled_back_to is not None else None,
        live_held=((live_dep or {}).get("metadata", {}).get("annotations") or {}).get(
            REPLICAS_HELD_ANNOTATION
        ),
    )
    changes: list[Change] = []
    for manifest in desired:
        # the Deployment was read above; apply() reads the other children itself
        change = writer.apply(
            manifest,
            live=live_dep if manifest["kind"] == "Deployment" else None,
            generation=svc.generation,
        )
        if change is not None:
            changes.append(change)
    keep = {(m["kind"], m["metadata"]["name"]) for m in desired}
    changes += writer.prune(
        svc.namespace,
        svc.name,
        svc.uid,
        keep,
        PRUNABLE + (MONITORING_PRUNABLE if monitoring_crds else ()),
        generation=svc.generation,
    )

    deployment_unchanged = not any(c.kind == "Deployment" for c in changes)
    observed = observe(writer, svc, live_dep if deployment_unchanged else None)
    rollout = compute_status(svc, observed, old_status, settings, _now())
    rollout_done = _cond(rollout, "Ready") == "True" and rolled_back_to is None

    bench = None
    if bench_on:
        job, bench_changes = benchmarking.step(
            writer,
            svc,
            settings,
            rev,
            runs,
            rollout_done=rollout_done,
            protect={verdict.rollback_to.name}
            if verdict is not None and verdict.rollback_to is not None
            else set(),
        )
        changes += bench_changes
        if bench_changes or (job is not None and not job.active):
            runs = history(writer, svc)  # the run just started or just ended
        bench = BenchView(
            revision=rev,
            run_name=run,
            runs=tuple(runs),
            job=job,
            failures=verdict.failures if verdict is not None else None,
            rolled_back_to=rolled_back_to,
            rollback_refused=refused,
            rollout_done=rollout_done,
            gated=svc.spec.benchmark.thresholds.any,
        )
    status = compute_status(
        svc,
        observed,
        old_status,
        settings,
        _now(),
        bench=bench,
        revision=rolled_back_to or rev,
        monitoring_crds=monitoring_crds,
    )
    _write_status(writer, {"namespace": svc.namespace, "name": svc.name}, old_status, status)
    hpa_conditions = (observed.hpa or {}).get("status", {}).get("conditions") or []
    scaling = next((c for c in hpa_conditions if c.get("type") == "ScalingActive"), None)
    return Outcome(
        tuple(changes),
        tuple(_events(old_status, status, changes)),
        runs=tuple(runs),
        rolled_back_to=rolled_back_to,
        scaling_active=scaling.get("status") if scaling else None,
    )


def _cond(status: dict[str, Any], kind: str) -> str | None:
    for c in status.get("conditions", []):
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def _events(old: dict[str, Any], new: dict[str, Any], changes: list[Change]) -> list[Event]:
    events = [
        Event("Normal", f"{c.kind}{c.action.capitalize()}", f"{c.kind} {c.name} {c.action}")
        for c in changes
    ]
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
        elif (c["type"] == "Degraded" and c["status"] == "True") or (
            c["type"] == "BenchmarkComplete"
            and c["reason"] in ("BenchmarkFailed", "BenchmarkTimedOut")
        ):
            events.append(Event("Warning", c["reason"], c["message"]))
    return events
