"""The benchmark step of the reconcile: reads the run history, starts the run of a finished
rollout, supersedes runs of older revisions, records failed runs, prunes old results.

Every write goes through the Writer (server-side apply, skipped when nothing changed), so a
resync where nothing changed writes nothing here either.
"""

from __future__ import annotations

import json
from typing import Any

from vllm_operator.apply import Change, Writer
from vllm_operator.gates import Run
from vllm_operator.observed import JobState
from vllm_operator.render.benchmark import (
    COMPONENT,
    MESSAGE_KEY,
    RESULT_KEY,
    REVISION_LABEL,
    SPEC_KEY,
    STATE_KEY,
    VERDICT_FAILURES_KEY,
    VERDICT_KEY,
    render_account,
    render_job,
    render_result_configmap,
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
    runs = []
    for cm in writer.list_children("v1", "ConfigMap", svc.namespace, _selector(svc)):
        if not _owned(cm, svc):
            continue
        data = cm.get("data") or {}
        result = None
        if RESULT_KEY in data:
            try:
                result = json.loads(data[RESULT_KEY])
            except ValueError:
                result = None
        state = data.get(STATE_KEY, "Running")
        if result is not None and state == "Running":
            state = "Complete" if result.get("status") in ("ok", "partial") else "Failed"
        runs.append(
            Run(
                revision=cm["metadata"]["labels"].get(REVISION_LABEL, ""),
                name=cm["metadata"]["name"],
                created=cm["metadata"].get("creationTimestamp", ""),
                state=state,
                spec_json=data.get(SPEC_KEY, ""),
                result=result,
                message=data.get(MESSAGE_KEY, "") or _runner_errors(result),
                verdict=data.get(VERDICT_KEY),
                verdict_failures=data.get(VERDICT_FAILURES_KEY, ""),
            )
        )
    return sorted(runs, key=lambda r: r.created)


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
    """Starts, supersedes and records runs; returns the current revision's Job state."""
    changes: list[Change] = []
    jobs = [
        j
        for j in writer.list_children("batch/v1", "Job", svc.namespace, _selector(svc))
        if _owned(j, svc)
    ]
    changes += _supersede(writer, svc, rev, jobs, runs)
    current = next((j for j in jobs if j["metadata"]["name"] == run_name(svc, rev)), None)
    recorded = next((r for r in runs if r.revision == rev), None)
    start = recorded is None and rollout_done
    # a start interrupted between the ConfigMap and the Job (operator restart) is completed
    resume = recorded is not None and recorded.state == "Running" and current is None
    if start or (resume and rollout_done):
        # one run per revision: the ConfigMap first (it marks the revision as measured, so a
        # restart or a resync never starts a second run), then the account, then the Job,
        # whose deterministic name makes a repeated create a no-op
        manifests = [*render_account(svc, rev), render_job(svc, settings, rev)]
        if start:
            manifests.insert(0, render_result_configmap(svc, rev))
        for manifest in manifests:
            change = writer.apply(manifest)
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
            writer.patch_configmap(
                svc.namespace,
                recorded.name,
                {STATE_KEY: "Failed", MESSAGE_KEY: f"{reason}: {message}"},
            )
    _prune(writer, svc, runs, keep=svc.spec.benchmark.keep_runs, protect={rev, *protect})
    return (_job_state(current) if current else None), changes


def _prune(writer: Writer, svc: Service, runs: list[Run], keep: int, protect: set[str]) -> None:
    excess = len(runs) - keep
    for run in runs:  # oldest first
        if excess <= 0:
            break
        if run.revision in protect:
            continue
        writer.delete("v1", "ConfigMap", svc.namespace, run.name)
        excess -= 1


def record_verdict(
    writer: Writer, svc: Service, run: Run, verdict: str, failed: tuple[str, ...]
) -> None:
    """Writes the gates' verdict into the run's ConfigMap, once."""
    writer.patch_configmap(
        svc.namespace, run.name, {VERDICT_KEY: verdict, VERDICT_FAILURES_KEY: "; ".join(failed)}
    )


def _supersede(
    writer: Writer, svc: Service, rev: str, jobs: list[dict[str, Any]], runs: list[Run]
) -> list[Change]:
    """Stops runs of older revisions still going and records why."""
    changes: list[Change] = []
    # a newer rollout supersedes a run still going for an older revision (one that has
    # published its result is finished, even if its Job has not been marked so yet)
    by_revision = {r.revision: r for r in runs}
    for job in jobs:
        job_rev = job["metadata"]["labels"].get(REVISION_LABEL, "")
        run = by_revision.get(job_rev)
        if job_rev == rev or not _job_state(job).active or (run and run.state != "Running"):
            continue
        if writer.delete(
            "batch/v1", "Job", svc.namespace, job["metadata"]["name"], propagation="Foreground"
        ):
            changes.append(Change("Job", job["metadata"]["name"], "deleted"))
        if run is not None:
            # the history was read before this check; a result may have landed since
            fresh = writer.get("v1", "ConfigMap", svc.namespace, run.name) or {}
            if RESULT_KEY not in (fresh.get("data") or {}):
                writer.patch_configmap(
                    svc.namespace,
                    run.name,
                    {
                        STATE_KEY: "Failed",
                        MESSAGE_KEY: "superseded by a newer rollout before it finished",
                    },
                )
    return changes
