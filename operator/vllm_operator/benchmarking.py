"""The benchmark step of the reconcile: reads the run history, starts the run of a finished
rollout, supersedes runs of older revisions, records failed runs, prunes old results.

A run is two ConfigMaps: the Job's (its result, its own state and message; the only object
the Job may patch) and the operator's record (the spec, the verdict, and the state of a run the
operator ended), which the Job cannot write: nothing the benchmark pod writes can pass a
verdict or plant what a rollback deploys.

Every write goes through the Writer (server-side apply, skipped when nothing changed), so a
resync where nothing changed writes nothing here either.
"""

from __future__ import annotations

import json
from typing import Any

from vllm_operator.apply import Change, Writer
from vllm_operator.gates import Run, last_passing, previous_passing
from vllm_operator.observed import JobState
from vllm_operator.render.benchmark import (
    COMPONENT,
    MESSAGE_KEY,
    RECORD_COMPONENT,
    RESULT_KEY,
    REVISION_LABEL,
    SPEC_KEY,
    STATE_KEY,
    VERDICT_FAILURES_KEY,
    VERDICT_KEY,
    record_name,
    render_account,
    render_job,
    render_result_configmap,
    render_run_record,
    run_name,
)
from vllm_operator.render.meta import SERVICE_LABEL
from vllm_operator.settings import OperatorSettings
from vllm_operator.spec import Service


def _selector(svc: Service) -> str:
    return f"{SERVICE_LABEL}={svc.name},app.kubernetes.io/component={COMPONENT}"


def _owned(obj: dict[str, Any], svc: Service) -> bool:
    return any(o.get("uid") == svc.uid for o in obj["metadata"].get("ownerReferences", []))


def history(writer: Writer, svc: Service) -> list[Run]:
    """The runs, oldest first: each run's ConfigMap (the Job's word: its result) joined with
    its record (the operator's: spec, verdict, a state the operator decided). A result that is
    not a JSON object fails the run, with the reason as its message (never a silent skip)."""
    selector = f"{SERVICE_LABEL}={svc.name},app.kubernetes.io/name=vllm-bench"
    items = [
        cm
        for cm in writer.list_children("v1", "ConfigMap", svc.namespace, selector)
        if _owned(cm, svc)
    ]
    component = "app.kubernetes.io/component"
    records = {
        cm["metadata"]["name"]: cm.get("data") or {}
        for cm in items
        if cm["metadata"]["labels"].get(component) == RECORD_COMPONENT
    }
    runs = []
    for cm in items:
        if cm["metadata"]["labels"].get(component) != COMPONENT:
            continue
        data = cm.get("data") or {}
        record = records.get(record_name(cm["metadata"]["name"]), {})
        result, state, message = _read_result(data)
        if record.get(STATE_KEY):  # the operator ended this run: its word is final
            state, message = record[STATE_KEY], record.get(MESSAGE_KEY, "")
        runs.append(
            Run(
                revision=cm["metadata"]["labels"].get(REVISION_LABEL, ""),
                name=cm["metadata"]["name"],
                created=cm["metadata"].get("creationTimestamp", ""),
                state=state,
                spec_json=record.get(SPEC_KEY, ""),
                result=result,
                message=message,
                verdict=record.get(VERDICT_KEY),
                verdict_failures=record.get(VERDICT_FAILURES_KEY, ""),
            )
        )
    return sorted(runs, key=lambda r: r.created)


def _read_result(data: dict[str, str]) -> tuple[dict[str, Any] | None, str, str]:
    """(result, state, message) from the Job's ConfigMap."""
    state = data.get(STATE_KEY, "Running")
    if RESULT_KEY not in data:
        return None, state, data.get(MESSAGE_KEY, "")
    try:
        result = json.loads(data[RESULT_KEY])
    except ValueError as exc:
        return None, "Failed", f"InvalidResult: result.json is not valid JSON ({exc})"
    if not isinstance(result, dict):
        return None, "Failed", "InvalidResult: result.json is not a JSON object"
    if state == "Running":
        state = "Complete" if result.get("status") in ("ok", "partial") else "Failed"
    return result, state, data.get(MESSAGE_KEY, "") or _runner_errors(result)


def _write_record(writer: Writer, svc: Service, run: Run, data: dict[str, str]) -> None:
    """Merges `data` into the run's record; a run without one (recorded by an earlier
    version, which kept everything in the Job's ConfigMap) gets one, without a spec."""
    name = record_name(run.name)
    if not writer.patch_configmap(svc.namespace, name, data):
        record = render_run_record(svc, run.revision)
        record["metadata"]["name"] = name
        record["data"] = dict(data)
        writer.apply(record)


def _runner_errors(result: dict[str, Any] | None) -> str:
    errors = (result or {}).get("errors") or []
    return "; ".join(f"{e.get('scenario')}: {e.get('message')}" for e in errors[:3])


def _job_state(job: dict[str, Any]) -> JobState:
    st = job.get("status", {})
    failed = next(
        (
            c
            for c in st.get("conditions", [])
            if c.get("type") == "Failed" and c.get("status") == "True"
        ),
        None,
    )
    return JobState(
        name=job["metadata"]["name"],
        active=bool(st.get("active")),
        succeeded=bool(st.get("succeeded")),
        failed_reason=failed.get("reason", "Failed") if failed else None,
        failed_message=failed.get("message", "") if failed else "",
    )


def step(
    writer: Writer,
    svc: Service,
    settings: OperatorSettings,
    rev: str,
    runs: list[Run],
    *,
    rollout_done: bool,
    protect: set[str],
) -> tuple[JobState | None, list[Change]]:
    """Starts, supersedes and records runs; returns the current run's Job state. The current
    run is the one named for the revision and the rerun annotation (run_name); `protect`:
    names of runs the pruning must keep (a rollback's target)."""
    changes: list[Change] = []
    jobs = [
        j
        for j in writer.list_children("batch/v1", "Job", svc.namespace, _selector(svc))
        if _owned(j, svc)
    ]
    name = run_name(svc, rev)
    changes += _supersede(writer, svc, name, jobs, runs)
    current = next((j for j in jobs if j["metadata"]["name"] == name), None)
    recorded = next((r for r in runs if r.name == name), None)
    start = recorded is None and rollout_done
    # a start interrupted between the ConfigMap and the Job (operator restart) is completed
    resume = recorded is not None and recorded.state == "Running" and current is None
    if start or (resume and rollout_done):
        # one run per revision: the ConfigMap first (it marks the revision as measured, so a
        # restart or a resync never starts a second run), then the account, then the Job,
        # whose deterministic name makes a repeated create a no-op
        manifests = [*render_account(svc, rev), render_job(svc, settings, rev)]
        if start:
            # the record before the run: a run exists only with the operator's record of it
            manifests[:0] = [render_run_record(svc, rev), render_result_configmap(svc, rev)]
        for manifest in manifests:
            change = writer.apply(manifest, generation=svc.generation)
            if change is not None:
                changes.append(change)
        current = writer.get("batch/v1", "Job", svc.namespace, run_name(svc, rev))
    elif recorded is not None and recorded.state == "Running" and current is not None:
        state = _job_state(current)
        if state.succeeded and recorded.result is None:
            # the history was read before the Job finished; the runner publishes before it
            # exits, so look again before calling the run empty
            fresh = writer.get("v1", "ConfigMap", svc.namespace, recorded.name) or {}
            if RESULT_KEY in (fresh.get("data") or {}):
                return state, changes
        if state.failed_reason or (state.succeeded and recorded.result is None):
            reason = state.failed_reason or "NoResult"
            message = (
                state.failed_message or "the runner exited without publishing a result"
                if reason != "DeadlineExceeded"
                else f"the benchmark ran past its deadline ({svc.spec.benchmark.timeout_seconds}s)"
            )
            _write_record(
                writer, svc, recorded, {STATE_KEY: "Failed", MESSAGE_KEY: f"{reason}: {message}"}
            )
    for run in runs_to_prune(runs, rev, name, svc.spec.benchmark.keep_runs, protect):
        writer.delete("v1", "ConfigMap", svc.namespace, run.name)
        writer.delete("v1", "ConfigMap", svc.namespace, record_name(run.name))
    return (_job_state(current) if current else None), changes


def runs_to_prune(
    runs: list[Run], rev: str, current: str, keep: int, protect: set[str]
) -> list[Run]:
    """The oldest runs beyond `keep`, never the current run, the runs in `protect`, the last
    run that passed, or the current revision's baseline (the newest passing run of another
    revision: its rollback target and regression baseline): with keepRuns 1, a failing
    revision still has something to roll back to. Pure: the decision, not the deletes."""
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


def record_verdict(
    writer: Writer, svc: Service, run: Run, verdict: str, failed: tuple[str, ...]
) -> None:
    """Writes the gates' verdict into the run's record, once."""
    _write_record(writer, svc, run, {VERDICT_KEY: verdict, VERDICT_FAILURES_KEY: "; ".join(failed)})


def _supersede(
    writer: Writer, svc: Service, current: str, jobs: list[dict[str, Any]], runs: list[Run]
) -> list[Change]:
    """Stops runs still going other than `current` (older revisions, an earlier re-run of
    this one) and records why."""
    changes: list[Change] = []
    # a newer rollout or re-run supersedes a run still going (one that has published its
    # result is finished, even if its Job has not been marked so yet)
    by_name = {r.name: r for r in runs}
    for job in jobs:
        run = by_name.get(job["metadata"]["name"])
        if (
            job["metadata"]["name"] == current
            or not _job_state(job).active
            or (run and run.state != "Running")
            # started from a later generation than this view of the service: the run of
            # the current revision, seen from a stale read; never stopped
            or writer.newer_than(job, svc.generation)
        ):
            continue
        if writer.delete(
            "batch/v1", "Job", svc.namespace, job["metadata"]["name"], propagation="Foreground"
        ):
            changes.append(Change("Job", job["metadata"]["name"], "deleted"))
        if run is not None:
            # the history was read before this check; a result may have landed since
            fresh = writer.get("v1", "ConfigMap", svc.namespace, run.name) or {}
            if RESULT_KEY not in (fresh.get("data") or {}):
                _write_record(
                    writer,
                    svc,
                    run,
                    {
                        STATE_KEY: "Failed",
                        MESSAGE_KEY: "superseded by a newer rollout or re-run before it finished",
                    },
                )
    return changes
