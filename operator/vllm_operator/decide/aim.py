"""Part of the "decide" step: the one pod each benchmark run measures, added to the plan that
policy.decide made (a pure function of the plan and what observe() read).

    aim(service, observed, plan) -> plan

- A run about to start measures the oldest Ready pod of the Deployment's current revision
  (benchtarget.choose_target); while there is none, the run does not start yet (the next
  reconcile looks again). A resumed start (an operator restart between the ConfigMaps and
  the Job) measures the pod its record names.
- A run whose measured pod went away (deleted, replaced, terminating) is failed with that
  message, and its Job, still measuring an address nobody serves, is stopped.

Kept apart from policy.decide, which says whether a run starts, so that choosing a pod is one
place; with no pods read (`observed.pods` is None: an observer of an older shape, the unit
tests of other branches) the run measures the Service, as every run did before.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vllm_operator.api.records import Run, Target
from vllm_operator.api.spec import Service
from vllm_operator.decide.policy import Plan, Record
from vllm_operator.decide.target_pod import choose_target, target_gone
from vllm_operator.observe.state import Observed
from vllm_operator.render.benchmark import MESSAGE_KEY, STATE_KEY

TARGET_GONE = "TargetPodGone"


def _choose(svc: Service, observed: Observed, canary: bool) -> tuple[bool, Target | None]:
    """(may start, the pod to measure): on a canary (rollout.canary), the canary's pod."""
    if canary:
        choice = choose_target(observed.canary, list(observed.canary_pods or ()), svc.spec.port)
        return choice.target is not None, choice.target
    if observed.pods is None:
        return True, None
    choice = choose_target(observed.deployment, list(observed.pods), svc.spec.port)
    return choice.target is not None, choice.target


def _pods(observed: Observed) -> tuple[dict[str, Any], ...] | None:
    """The pods read, the serving ones and the canary's (None: none read)."""
    if observed.pods is None and observed.canary_pods is None:
        return None
    return (*(observed.pods or ()), *(observed.canary_pods or ()))


def gone(run: Run, observed: Observed) -> Record | None:
    """The record that fails `run` because its measured pod went away; None while the pod is
    there (Ready or not), for a run without a recorded pod, or when the pods were not read."""
    pods = _pods(observed)
    if run.target is None or pods is None:
        return None
    pod = next((p for p in pods if p["metadata"]["name"] == run.target.pod), None)
    why = target_gone(run.target, pod)
    if why is None:
        return None
    message = f"{TARGET_GONE}: {why}; the rerun-benchmark annotation measures the revision again"
    return Record(
        run.name, run.revision, {STATE_KEY: "Failed", MESSAGE_KEY: message}, unless_result=True
    )


def aim(svc: Service, observed: Observed, plan: Plan) -> Plan:
    """`plan` with the pod its start measures, without a start while no pod can be measured,
    and with the current run failed (and its Job stopped) when its pod went away."""
    if not plan.enabled:
        return plan
    current = next((r for r in observed.runs if r.name == plan.run), None)
    ended = gone(current, observed) if current is not None and current.state == "Running" else None
    start, stop, records = plan.start, plan.stop, plan.record
    if start is not None and start.resume and ended is not None:
        start, records = None, (*records, ended)  # the pod it was to measure is gone
    elif start is not None and start.resume and current is not None and current.target:
        start = dataclasses.replace(start, target=current.target)
    elif start is not None:
        may, pod = _choose(svc, observed, plan.canary)
        start = dataclasses.replace(start, target=pod) if may else None
    elif ended is not None and not any(r.run == plan.run for r in records):
        job = next((j for j in observed.jobs if j.name == plan.run), None)
        if job is not None and job.active:
            stop = (*stop, plan.run)  # a runner measuring a pod that is gone measures nothing
        records = (*records, ended)
    return dataclasses.replace(plan, start=start, stop=stop, record=records)
