"""The benchmark part of the "apply" step: carries out what policy.decide planned, through
the one writer. Nothing is decided here; the only reads are the guards that keep a write
from overtaking a result that landed after the history was read.

A run is two ConfigMaps: the Job's (its result, its own state and message; the only object
the Job may patch) and the operator's record (the spec, the verdict, and the state of a run the
operator ended), which the Job cannot write: nothing the benchmark pod writes can pass a
verdict or plant what a rollback deploys.

Every object is written with server-side apply (skipped when nothing changed), so a resync
where nothing changed writes nothing here either.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vllm_operator.api.records import Run
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.policy import Plan, Record, Start
from vllm_operator.observe.benchresult import SUMMARY_KEY
from vllm_operator.render.benchmark import (
    RESULT_KEY,
    record_name,
    render_account,
    render_job,
    render_result_configmap,
    render_run_record,
)
from vllm_operator.write.apply import Change, Writer


def render_start(svc: Service, settings: OperatorSettings, start: Start) -> list[dict[str, Any]]:
    """The objects of a run to start, in order: the operator's record before anything else
    (a run exists only with the operator's record of it), the Job's ConfigMap (it marks the
    revision as measured, so a restart or a resync never starts a second run), the Job's
    account, the Job, whose deterministic name makes a repeated create a no-op. A resumed
    start has its ConfigMaps already. Pure."""
    svc = svc.model_copy(update={"rerun": start.rerun})  # the run's name and Role follow it
    manifests = [
        *render_account(svc, start.revision),
        render_job(svc, settings, start.revision, start.target, start.workload),
    ]
    if not start.resume:
        manifests[:0] = [
            render_run_record(
                svc, start.revision, start.target, start.served_before, start.workload
            ),
            render_result_configmap(svc, start.revision),
        ]
    return manifests


def summaries(runs: Iterable[Run]) -> list[Record]:
    """The summaries the history found missing (observe.history: a run seen finished for the
    first time, or one recorded before records kept summaries), each into its run's record:
    one write per run, ever. Pure."""
    return [Record(r.name, r.revision, {SUMMARY_KEY: r.summary}) for r in runs if r.summary]


def carry_out(
    writer: Writer,
    svc: Service,
    settings: OperatorSettings,
    plan: Plan,
    runs: Iterable[Run] = (),
) -> list[Change]:
    """Stops, records (the summaries of `runs`, the history, first), starts and prunes, as
    planned. Returns what changed."""
    changes: list[Change] = []
    for job in plan.stop:
        if writer.delete("batch/v1", "Job", svc.namespace, job, propagation="Foreground"):
            changes.append(Change("Job", job, "deleted"))
    pruned = set(plan.prune)
    for record in (*(s for s in summaries(runs) if s.run not in pruned), *plan.record):
        _write_record(writer, svc, record)
    if plan.start is not None:
        # its ConfigMaps and Job as the watch cache holds them (new ones: absent, no GET;
        # the cache holds the operator's own writes, so a repeat writes nothing)
        for manifest in render_start(svc, settings, plan.start):
            change = writer.apply(manifest, generation=svc.generation, cached=True)
            if change is not None:
                changes.append(change)
    for run in plan.prune:
        writer.delete("v1", "ConfigMap", svc.namespace, run)
        writer.delete("v1", "ConfigMap", svc.namespace, record_name(run))
    return changes


def _write_record(writer: Writer, svc: Service, record: Record) -> None:
    """Merges the record's data into the run's record; a run without one (recorded by an
    earlier version, which kept everything in the Job's ConfigMap) gets one, without a spec.
    `unless_result`: the history was read before this write; a result may have landed since,
    and then the result decides."""
    if record.unless_result:
        fresh = writer.get("v1", "ConfigMap", svc.namespace, record.run) or {}
        if RESULT_KEY in (fresh.get("data") or {}):
            return
    name = record_name(record.run)
    if not writer.patch_configmap(svc.namespace, name, record.data):
        manifest = render_run_record(svc, record.revision)
        manifest["metadata"]["name"] = name
        manifest["data"] = dict(record.data)
        writer.apply(manifest)
