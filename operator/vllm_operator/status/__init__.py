"""Step 5 of the flow (status): a pure function from (service, observed) to the status.

Conditions follow metav1.Condition: Ready, Progressing, Degraded, CamelCase reasons,
observedGeneration, and lastTransitionTime kept when a condition's status did not change.

Ready is about serving: only a refusal of what serves (the Deployment, the Service) makes it
False. What else a reconcile could not write or read is on its own condition:
ChildrenSynced (the HPA, the PDB, the monitoring objects; a failed read) and
BenchmarkComplete (a benchmark run's objects).

compute_status puts the condition families together: rollout (Ready, Progressing, Degraded
and the canary's say on them), benchmark (BenchmarkComplete, BenchmarkPassed), autoscaling
(AutoscalingActive), monitoring (Monitoring) and failures (ChildrenSynced; the statuses of a
reconcile that stopped: invalid_spec_status, apply_failed_status, read_failed_status). The
longer sentences they write are composed in prose.py. Computes; writes nothing (write.apply
writes the status).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.decide.progressive import Rollout, rollout_status
from vllm_operator.observe.startup import PodStart
from vllm_operator.observe.state import BenchView, Observed
from vllm_operator.render.meta import selector_labels
from vllm_operator.render.service import endpoint
from vllm_operator.status.autoscaling import _autoscaling
from vllm_operator.status.benchmark import _benchmark
from vllm_operator.status.capacity import CapacityView, _capacity
from vllm_operator.status.conditions import Cond, merge_conditions
from vllm_operator.status.failures import READ_FAILED, Refusal, synced_condition
from vllm_operator.status.monitoring import _monitoring
from vllm_operator.status.prose import _rendered_anew
from vllm_operator.status.rollout import _canary_conditions, _rollout
from vllm_operator.status.startup import _startup


def compute_status(
    svc: Service,
    obs: Observed,
    old: dict[str, Any],
    settings: OperatorSettings,
    now: str,
    *,
    bench: BenchView | None = None,
    revision: str | None = None,
    monitoring_crds: bool | None = None,
    refused: tuple[Refusal, ...] | None = None,
    bench_refused: Refusal | None = None,
    rollout: Rollout | None = None,
    capacity: CapacityView = None,
    candidate: CapacityView = None,
    serving_revision: str = "",
    starts: tuple[PodStart, ...] = (),
    load_keys: Mapping[str, str] | None = None,
    probe_budget: dict[str, Any] | None = None,
    zero: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`refused`: what this reconcile could not write or read of the children (the
    ChildrenSynced condition; None: not reported). A write refused (not a read: that is
    transient, and nothing was changed) is also Degraded=True, unless Degraded already says
    something of serving. `bench_refused`: a benchmark run's write or read that failed, on
    BenchmarkComplete. Ready stays what the observed serving state says. `rollout`: a new
    revision's way through a canary (status.rollout; Progressing while it is measured,
    Degraded once it is aborted). `capacity`: the serving revision's (`serving_revision`)
    capacity against the objective, `candidate`: the revision measured now's
    (decide/capacity.of_revision). `starts`: the pods' starts read by this reconcile's first
    look (status.startup, merged into the old one's), with the `load_keys` of the revisions
    rendered now and the serving revision's startup `probe_budget` (decide/startup.py)."""
    conds, counts = _rollout(svc, obs)
    status: dict[str, Any] = {
        "observedGeneration": svc.generation,
        **counts,
        "selector": ",".join(f"{k}={v}" for k, v in sorted(selector_labels(svc).items())),
        "endpoint": endpoint(svc, settings),
        "model": svc.spec.served_model_name,
    }
    if revision:
        status["revision"] = revision
    if (
        startup := _startup(
            old.get("startup"), starts, settings.slow_start_factor, load_keys, probe_budget
        )
    ) is not None:
        status["startup"] = startup
    autoscaling, autoscaling_conds = _autoscaling(svc, obs, settings, capacity)
    if autoscaling is not None:
        status["autoscaling"] = autoscaling
        if zero is not None:  # (scale to zero's phase: decide/zero.py)
            status["autoscaling"] = {**autoscaling, "zero": zero}
    if (shown_capacity := _capacity(svc, capacity, candidate, serving_revision)) is not None:
        status["capacity"] = shown_capacity
    conds += autoscaling_conds + _monitoring(svc, monitoring_crds)
    if bench is not None:
        status["benchmark"], bench_conds = _benchmark(svc, bench)
        conds += bench_conds
        if bench.rolled_back_to:
            conds = [c for c in conds if c.type != "Degraded"]
            conds.append(
                Cond(
                    "Degraded",
                    "True",
                    "BenchmarkRollback",
                    f"revision {bench.revision} failed its benchmark gates"
                    f"{' in two runs' if bench.confirmed else ''} "
                    f"({'; '.join(bench.failures or ())}); rolled back to revision "
                    f"{bench.rolled_back_to} (its pod template only) until the spec renders "
                    "another revision or the rerun-benchmark annotation changes"
                    + _rendered_anew(bench),
                )
            )
        elif bench.rollback_refused:
            conds = [c for c in conds if c.type != "Degraded"]
            conds.append(
                Cond(
                    "Degraded",
                    "True",
                    "RollbackRefused",
                    f"revision {bench.revision} failed its benchmark gates "
                    f"({'; '.join(bench.failures or ())}); not rolled back: "
                    f"{bench.rollback_refused}",
                )
            )
    if rollout is not None and (shown := rollout_status(rollout, svc)) is not None:
        status["rollout"] = shown
        conds = _canary_conditions(conds, rollout, int(counts.get("availableReplicas") or 0))
    if bench_refused is not None:
        conds = [
            Cond(c.type, "False", bench_refused.reason, bench_refused.message)
            if c.type == "BenchmarkComplete"
            else c
            for c in conds
        ]
    if refused is not None:
        conds.append(synced_condition(refused))
        written = [r for r in refused if r.reason != READ_FAILED]
        if written and all(c.status == "False" for c in conds if c.type == "Degraded"):
            message = "; ".join(r.message for r in written)
            conds = [
                Cond(c.type, "True", written[0].reason, message) if c.type == "Degraded" else c
                for c in conds
            ]
    status["conditions"] = merge_conditions(old.get("conditions", []), conds, svc.generation, now)
    return status
