"""Step 5 of the flow (status): a pure function from (service, observed) to the status.

Conditions follow metav1.Condition: Ready, Progressing, Degraded, CamelCase reasons,
observedGeneration, and lastTransitionTime kept when a condition's status did not change.

Ready is about serving: only a refusal of what serves (the Deployment, the Service) makes it
False. What else a reconcile could not write or read is on its own condition:
ChildrenSynced (the HPA, the PDB, the monitoring objects; a failed read) and
BenchmarkComplete (a benchmark run's objects).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from dataclasses import dataclass
from typing import Any

from vllm_operator.api.records import Headline, Run
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import RELEASE_HOLD_ANNOTATION, Service
from vllm_operator.decide.progressive import (
    ABORTED,
    BAKING,
    CANARY,
    PROMOTING,
    Rollout,
    rollout_status,
)
from vllm_operator.observe.state import BenchView, Observed, rolled_out
from vllm_operator.render.benchmark import REVISION_ANNOTATION
from vllm_operator.render.deployment import (
    REPLICAS_HELD_ANNOTATION,
    REPLICAS_HELD_SINCE_ANNOTATION,
    SURGE_REFUSED_ANNOTATION,
)
from vllm_operator.render.meta import selector_labels
from vllm_operator.render.service import endpoint

# BenchmarkComplete's reason while a second run confirms a failed verdict
CONFIRMING = "ConfirmingFailure"
# the reasons of a request refused or failed (kube.ApplyError and its kinds): a write the API
# server refused or failed, an object of a child's name this service does not own, a read
APPLY_FAILED, NOT_OWNED, READ_FAILED = "ApplyFailed", "NotOwned", "ReadFailed"
REFUSALS = frozenset({APPLY_FAILED, NOT_OWNED, READ_FAILED})


@dataclass(frozen=True)
class Cond:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Refusal:
    """A request of this reconcile that the API server refused or failed, or one the
    operator would not make (NotOwned): `reason` one of REFUSALS, `message` naming the
    object and the server's message."""

    reason: str
    message: str


def synced_condition(refused: tuple[Refusal, ...]) -> Cond:
    """ChildrenSynced: every child other than a benchmark run's written as rendered, or
    what was refused (the first one's reason; every message)."""
    if not refused:
        return Cond("ChildrenSynced", "True", "Applied", "every child is applied")
    return Cond("ChildrenSynced", "False", refused[0].reason, "; ".join(r.message for r in refused))


def merge_conditions(
    old: list[dict[str, Any]], new: list[Cond], generation: int, now: str
) -> list[dict[str, Any]]:
    previous = {c.get("type"): c for c in old}
    out = []
    for c in new:
        before = previous.get(c.type)
        changed = before is None or before.get("status") != c.status
        out.append(
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": now if changed else before.get("lastTransitionTime", now),  # type: ignore[union-attr]
                "observedGeneration": generation,
            }
        )
    return out


def _rollout(svc: Service, obs: Observed) -> tuple[list[Cond], dict[str, Any]]:
    dep = obs.deployment
    if dep is None:
        return [
            Cond("Ready", "False", "DeploymentMissing", "the Deployment is being created"),
            Cond("Progressing", "True", "Creating", "creating the Deployment"),
            Cond("Degraded", "False", "AsExpected", ""),
        ], {}
    st = dep.get("status", {})
    want = dep.get("spec", {}).get("replicas", 1)
    updated = st.get("updatedReplicas", 0)
    ready = st.get("readyReplicas", 0)
    available = st.get("availableReplicas", 0)
    total = st.get("replicas", 0)
    counts = {
        "replicas": total,  # pods that exist now (the scale subresource's statusReplicasPath)
        "desiredReplicas": want,
        "readyReplicas": ready,
        "updatedReplicas": updated,
        "availableReplicas": available,
    }
    dep_conds = {c["type"]: c for c in st.get("conditions", [])}
    done = rolled_out(dep)
    deadline = dep_conds.get("Progressing", {}).get("reason") == "ProgressDeadlineExceeded"
    # the ReplicaSet could not create pods (a ResourceQuota, Pod Security, a webhook): the
    # Deployment controller copies its ReplicaFailure condition up; no rollout is progressing
    failure = dep_conds.get("ReplicaFailure", {})
    if failure.get("status") == "True" and not done and want:
        reason = failure.get("reason") or "FailedCreate"
        message = f"pods cannot be created: {failure.get('message', '')}".strip()
        return [
            Cond("Ready", "False", reason, f"{available}/{want} replicas available; {message}"),
            Cond("Progressing", "False", reason, message),
            Cond("Degraded", "True", reason, message),
        ], counts

    conds: list[Cond] = []
    if want == 0:
        conds.append(Cond("Ready", "False", "ScaledToZero", "replicas is 0; scale up to serve"))
    elif done:
        conds.append(
            Cond(
                "Ready",
                "True",
                "Available",
                f"{available}/{want} replicas serve {svc.spec.served_model_name}",
            )
        )
    else:
        conds.append(
            Cond(
                "Ready",
                "False",
                "RolloutInProgress",
                f"{updated}/{want} replicas updated, {available} available",
            )
        )
    if done or want == 0:
        conds.append(Cond("Progressing", "False", "RolloutComplete", "the rollout is complete"))
    elif deadline:
        conds.append(
            Cond(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                dep_conds["Progressing"].get("message", ""),
            )
        )
    else:
        conds.append(
            Cond(
                "Progressing",
                "True",
                "RollingOut",
                f"rolling out generation {svc.generation}: {updated}/{want} updated, {ready} ready"
                + _surge_note(dep)
                + "".join(
                    f"; pod {w.pod} waits to be scheduled ({w.message})".replace(" ()", "")
                    for w in obs.pods_waiting[:1]
                ),
            )
        )
    # a surge pod without room, once the surge was given up for it, is a rollout in progress:
    # the one pod is replaced in place and frees the room (oneReplicaSurge)
    problems = [
        p for p in obs.pod_problems if not (_surge_note(dep) and p.reason == "Unschedulable")
    ]
    problem = problems[0] if problems else None
    if problem is not None:
        extra = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        conds.append(
            Cond(
                "Degraded",
                "True",
                problem.reason,
                f"pod {problem.pod}: {problem.message}{extra}".strip(),
            )
        )
    elif deadline:
        conds.append(
            Cond(
                "Degraded",
                "True",
                "ProgressDeadlineExceeded",
                "the rollout did not finish within the progress deadline",
            )
        )
    else:
        conds.append(Cond("Degraded", "False", "AsExpected", ""))
    return conds, counts


def _surge_note(dep: dict[str, Any]) -> str:
    """A one-replica rollout that found no room for its surge pod says so (oneReplicaSurge)."""
    annotations = dep.get("metadata", {}).get("annotations") or {}
    refused = annotations.get(SURGE_REFUSED_ANNOTATION)
    if not refused or refused != annotations.get(REVISION_ANNOTATION):
        return ""
    return (
        "; no room for a surge pod: the one replica is replaced in place (down meanwhile; "
        "rollout.oneReplicaSurge)"
    )


def _fmt(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:.4g}{unit}"


def _benchmark(svc: Service, bench: BenchView) -> tuple[dict[str, Any], list[Cond]]:
    """status.benchmark and the BenchmarkComplete / BenchmarkPassed conditions."""
    run = next(
        (r for r in bench.runs if r.revision == bench.revision and bench.run_name in ("", r.name)),
        None,
    )
    out: dict[str, Any] = {"revision": bench.revision}
    conds: list[Cond] = []
    confirming = bench.confirming is not None and (run is None or run.state == "Running")
    if confirming:
        # a failed verdict is confirmed by a second run before it can roll anything back
        if run is not None:
            out.update({"job": run.name, "result": f"configmap/{run.name}", "state": run.state})
        conds.append(Cond("BenchmarkComplete", "False", CONFIRMING, str(bench.confirming)))
    elif run is None:
        why = (
            "waiting for the rollout to complete"
            if not bench.rollout_done
            else "starting the benchmark Job"
        )
        conds.append(Cond("BenchmarkComplete", "False", "WaitingForRollout", why))
    else:
        out.update({"job": run.name, "result": f"configmap/{run.name}", "state": run.state})
        if run.state == "Running":
            conds.append(
                Cond(
                    "BenchmarkComplete",
                    "False",
                    "BenchmarkRunning",
                    f"job {run.name} is measuring revision {bench.revision}",
                )
            )
        elif run.state == "Failed":
            timed_out = "DeadlineExceeded" in run.message
            message = run.message or "the benchmark failed"
            if bench.confirming is not None:
                message += (
                    " (this run was to confirm a failed verdict: not rolled back on one "
                    "measurement; the rerun-benchmark annotation measures again)"
                )
            conds.append(
                Cond(
                    "BenchmarkComplete",
                    "False",
                    "BenchmarkTimedOut" if timed_out else "BenchmarkFailed",
                    message,
                )
            )
        else:
            h = run.headline
            out.update(
                {
                    k: v
                    for k, v in {
                        "completedAt": (run.result or {}).get("finishedAt"),
                        "kvCacheTokens": h.kv_cache_tokens,
                        "maxConcurrency": h.max_concurrency,
                        "outputTokensPerSecond": h.output_tokens_per_second,
                        "batchingSpeedup": h.batching_speedup,
                        "prefixTtftSpeedup": h.prefix_ttft_speedup,
                        "prefixHitRate": h.prefix_hit_rate,
                        "ttftP50Seconds": h.ttft_p50_seconds,
                        "ttftP95Seconds": h.ttft_p95_seconds,
                        "requestLatencyP99Seconds": h.request_latency_p99_seconds,
                    }.items()
                    if v is not None
                }
            )
            conds.append(
                Cond(
                    "BenchmarkComplete",
                    "True",
                    "Measured",
                    f"revision {bench.revision}: "
                    f"{_fmt(h.output_tokens_per_second)} output tokens/s, "
                    f"TTFT p95 {_fmt(h.ttft_p95_seconds, ' s')}, KV cache "
                    f"{_fmt(h.kv_cache_tokens)} tokens, prefix speed-up "
                    f"{_fmt(h.prefix_ttft_speedup, 'x')}" + _drain_short(svc, h),
                )
            )
    if bench.gated:
        passed, fields = _passed(bench, confirming)
        conds.append(passed)
        out.update(fields)
    if bench.rolled_back_to:
        out["rolledBackTo"] = bench.rolled_back_to
        if bench.rendered_as:
            out["renderedAs"] = bench.rendered_as
        if bench.restored_as:
            out["restoredAs"] = bench.restored_as
    return {**out, **_measured(run)}, conds


def _drain_short(svc: Service, h: Headline) -> str:
    """What BenchmarkComplete adds when the measured requests outlast the drain: vLLM lets
    requests in flight finish for shutdownTimeoutSeconds when a pod stops (a rollout, an abort,
    a scale-in); a longer stream is cut there ("" when covered, or not measured)."""
    took = h.request_latency_p99_seconds
    drain = svc.spec.shutdown_timeout
    if took is None or took <= drain:
        return ""
    return (
        f"; requests took up to {_fmt(took, ' s')} (p99 under concurrent load), longer than "
        f"the {drain} s that requests in flight get to finish when a pod stops "
        "(shutdownTimeoutSeconds"
        + (": 0, vLLM aborts them at once" if drain == 0 else "")
        + "): streams that long are cut on rollouts and scale-ins; raise "
        "shutdownTimeoutSeconds (and terminationGracePeriodSeconds, which must hold it)"
    )


def _rendered_anew(bench: BenchView) -> str:
    """During a rollback: what this operator renders differently from the one that measured
    the revisions ("" when nothing)."""
    parts = []
    if bench.rendered_as:
        parts.append(
            f"the spec renders revision {bench.rendered_as} now, still the spec that failed"
        )
    if bench.restored_as:
        parts.append(
            f"revision {bench.rolled_back_to}'s recorded spec renders revision "
            f"{bench.restored_as}, which runs now"
        )
    if not parts:
        return ""
    return (
        "; this operator renders the pod templates differently (an upgrade or its settings): "
        + ", and ".join(parts)
    )


def rendering_changed(benchmark: dict[str, Any]) -> str:
    """The message of the one Event that says a rollback stays in force though this operator
    renders the pod templates differently (status.benchmark's renderedAs and restoredAs;
    "" when neither is set)."""
    target = benchmark.get("rolledBackTo")
    rendered, restored = benchmark.get("renderedAs"), benchmark.get("restoredAs")
    parts = []
    if rendered:
        parts.append(f"the spec as revision {rendered} (it failed as {benchmark.get('revision')})")
    if restored:
        parts.append(f"revision {target}'s recorded spec as {restored}")
    if not target or not parts:
        return ""
    return (
        f"this operator renders {' and '.join(parts)}: the rollback to {target} stays in force "
        f"(revision {restored or target} runs); the rerun-benchmark annotation measures the "
        "spec as rendered now"
    )


def _passed(bench: BenchView, confirming: bool) -> tuple[Cond, dict[str, Any]]:
    """The BenchmarkPassed condition, and status.benchmark's passed/failures."""
    failures = list(bench.failures or ())
    if confirming:
        message = f"the first run failed ({'; '.join(failures)}); a second run decides"
        return Cond("BenchmarkPassed", "Unknown", "Confirming", message), {"failures": failures}
    if bench.failures is None:
        message = "no completed benchmark of this revision yet"
        return Cond("BenchmarkPassed", "Unknown", "Pending", message), {}
    if failures:
        cond = Cond("BenchmarkPassed", "False", "ThresholdsNotMet", "; ".join(failures))
        return cond, {"passed": False, "failures": failures}
    return Cond("BenchmarkPassed", "True", "ThresholdsMet", "all thresholds met"), {"passed": True}


def _measured(run: Run | None) -> dict[str, Any]:
    """The one pod `run` (a Run, or None) measures, and the load of other clients seen
    on it during the run (the result's liveLoad, summarised)."""
    out: dict[str, Any] = {}
    if run is None:
        return out
    if run.target is not None:
        out.update({"targetPod": run.target.pod, "targetPodIP": run.target.ip})
    live = (run.result or {}).get("liveLoad") or {}
    keys = ("foreignRequests", "peakForeignInFlight", "quiet")
    if summary := {k: live[k] for k in keys if live.get(k) is not None}:
        out["liveLoad"] = summary
    return out


def _hold(
    svc: Service, obs: Observed, settings: OperatorSettings
) -> tuple[dict[str, Any] | None, list[Cond]]:
    """Autoscaling is off and the Deployment still runs the count the autoscaler chose
    (render/deployment.decide_replicas): say how many, against what, until when, and how to
    end it now. GPUs held without a word are the surprise this prevents."""
    meta = (obs.deployment or {}).get("metadata", {})
    annotations = meta.get("annotations") or {}
    held = annotations.get(REPLICAS_HELD_ANNOTATION)
    replicas = (obs.deployment or {}).get("spec", {}).get("replicas")
    if held is None or replicas is None or replicas == svc.spec.replicas:
        return None, []
    since = annotations.get(REPLICAS_HELD_SINCE_ANNOTATION)
    until = None
    if since:
        with contextlib.suppress(ValueError):
            start = dt.datetime.fromisoformat(since.replace("Z", "+00:00"))
            until = (start + dt.timedelta(seconds=settings.replicas_hold_seconds)).isoformat()
            until = until.replace("+00:00", "Z")
    message = (
        f"autoscaling is off: the {replicas} replicas the autoscaler chose are held "
        f"(spec.replicas is {svc.spec.replicas})"
        + (f" until {until}, then spec.replicas applies" if until else "")
        + f"; to apply spec.replicas now: `kubectl scale vsvc {svc.name} --replicas=N` with "
        f"another count, or `kubectl annotate vsvc {svc.name} {RELEASE_HOLD_ANNOTATION}=now`"
    )
    out = {"heldReplicas": replicas, "heldSince": since, "heldUntil": until}
    return {k: v for k, v in out.items() if v is not None}, [
        Cond("AutoscalingActive", "False", "ReplicasHeld", message)
    ]


def _autoscaling(
    svc: Service, obs: Observed, settings: OperatorSettings
) -> tuple[dict[str, Any] | None, list[Cond]]:
    """status.autoscaling and the AutoscalingActive condition: the HPA's own ScalingActive
    condition (status, reason and message as the HPA controller wrote them), so that an
    autoscaler without its metric ("no custom metrics API") shows on the service itself."""
    if not svc.spec.autoscaling.enabled:
        return _hold(svc, obs, settings)
    hpa = obs.hpa
    if hpa is None:
        return None, [
            Cond(
                "AutoscalingActive",
                "Unknown",
                "HorizontalPodAutoscalerMissing",
                f"the HorizontalPodAutoscaler {svc.name} is being created",
            )
        ]
    st = hpa.get("status") or {}
    pods_metrics = [m["pods"] for m in hpa.get("spec", {}).get("metrics", []) if "pods" in m]
    metric = pods_metrics[0]["metric"]["name"] if pods_metrics else None
    current = next(
        (
            m["pods"].get("current", {}).get("averageValue")
            for m in st.get("currentMetrics") or []
            if m.get("type") == "Pods" and m.get("pods", {}).get("metric", {}).get("name") == metric
        ),
        None,
    )
    out = {
        k: v
        for k, v in {
            "horizontalPodAutoscaler": hpa["metadata"]["name"],
            "currentReplicas": st.get("currentReplicas"),
            "desiredReplicas": st.get("desiredReplicas"),
            "metric": metric,
            "currentAverageValue": current,
            "targetAverageValue": (
                pods_metrics[0].get("target", {}).get("averageValue") if pods_metrics else None
            ),
            "lastScaleTime": st.get("lastScaleTime"),
        }.items()
        if v is not None
    }
    active = next((c for c in st.get("conditions") or [] if c.get("type") == "ScalingActive"), None)
    if active is None:
        cond = Cond(
            "AutoscalingActive",
            "Unknown",
            "Pending",
            f"the HorizontalPodAutoscaler {hpa['metadata']['name']} has not been evaluated yet",
        )
    else:
        cond = Cond(
            "AutoscalingActive",
            str(active.get("status", "Unknown")),
            str(active.get("reason") or "Unknown"),
            str(active.get("message") or ""),
        )
    return out, [cond]


def _monitoring(svc: Service, crds: bool | None) -> list[Cond]:
    """The Monitoring condition: the PrometheusRule/PodMonitor applied, or why not. `crds`:
    whether the Prometheus Operator's CRDs are served (None: not looked at)."""
    m = svc.spec.monitoring
    if crds is None or not m.enabled:
        return []
    if crds:
        return [
            Cond(
                "Monitoring",
                "True",
                "Rendered",
                "PrometheusRule" + (" and PodMonitor" if m.pod_monitor else "") + " applied",
            )
        ]
    return [
        Cond(
            "Monitoring",
            "False",
            "PrometheusOperatorMissing",
            "the Prometheus Operator's CRDs (prometheusrules, podmonitors.monitoring.coreos.com) "
            "are not installed: no PrometheusRule or PodMonitor for this service; install the "
            "rules file deploy/monitoring/vllm-alerts.rules.yaml and the scrape configs "
            "deploy/monitoring/prometheus-scrape-configs.yaml in your Prometheus instead",
        )
    ]


def _canary_conditions(conds: list[Cond], rollout: Rollout, available: int = 0) -> list[Cond]:
    """While the canary is measured the rollout is in progress (the serving pods, rolled out
    at the stable revision, say complete); once it is aborted the service is Degraded (a
    rollback of its gates says so already: its reason stays). While a revision that passed is
    Promoting, Ready says what serves: the available pods (issue 31: it said False while the
    stable pod kept serving)."""
    if rollout.phase == PROMOTING and available > 0:
        serving = Cond(
            "Ready",
            "True",
            "Promoting",
            f"{available} replicas available serve while the serving pods roll to revision "
            f"{rollout.revision}",
        )
        return [
            serving if c.type == "Ready" and c.reason == "RolloutInProgress" else c for c in conds
        ]
    if rollout.phase == BAKING:  # the canary serves beside the stable pods, compared
        baking = Cond("Progressing", "True", "Baking", rollout.message)
        return [baking if c.type == "Progressing" else c for c in conds]
    if rollout.phase == CANARY:
        progressing = Cond("Progressing", "True", "Canary", rollout.message)
        if rollout.take_one:
            progressing = Cond(
                "Progressing",
                "True",
                "Canary",
                f"{rollout.message} (whenNoRoom ReplaceStable: one serving pod fewer meanwhile)",
            )
        conds = [progressing if c.type == "Progressing" else c for c in conds]
        degraded = next((c for c in conds if c.type == "Degraded"), None)
        if rollout.failing and (degraded is None or degraded.status == "False"):
            # the new revision cannot start: the stable pods serve, and a person must act
            failing = Cond(
                "Degraded",
                "True",
                "CanaryFailing",
                f"{rollout.failing}; revision {rollout.stable} serves meanwhile (fix the spec, "
                "or abort the canary)",
            )
            conds = [c for c in conds if c.type != "Degraded"] + [failing]
        return conds
    if rollout.phase == ABORTED:
        degraded = next((c for c in conds if c.type == "Degraded"), None)
        if degraded is not None and degraded.reason == "BenchmarkRollback":
            return [
                Cond(c.type, c.status, c.reason, f"{rollout.message}; {c.message}")
                if c is degraded
                else c
                for c in conds
            ]
        if degraded is None or degraded.status == "False":
            aborted = Cond("Degraded", "True", "CanaryAborted", rollout.message)
            return [c for c in conds if c.type != "Degraded"] + [aborted]
    return conds


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
) -> dict[str, Any]:
    """`refused`: what this reconcile could not write or read of the children (the
    ChildrenSynced condition; None: not reported). A write refused (not a read: that is
    transient, and nothing was changed) is also Degraded=True, unless Degraded already says
    something of serving. `bench_refused`: a benchmark run's write or read that failed, on
    BenchmarkComplete. Ready stays what the observed serving state says. `rollout`: a new
    revision's way through a canary (status.rollout; Progressing while it is measured,
    Degraded once it is aborted)."""
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
    autoscaling, autoscaling_conds = _autoscaling(svc, obs, settings)
    if autoscaling is not None:
        status["autoscaling"] = autoscaling
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


def failure_status(  # noqa: PLR0917 (all six are needed; callers name the condition)
    old: dict[str, Any], generation: int, reason: str, message: str, progress: str, now: str
) -> dict[str, Any]:
    """Ready=False, Progressing=False and Degraded=True with `reason`, for the current
    generation; everything else the status said is kept, other conditions too (what the
    children did until now is still true)."""
    conds = [
        Cond("Ready", "False", reason, message),
        Cond("Progressing", "False", reason, progress),
        Cond("Degraded", "True", reason, message),
    ]
    if reason in REFUSALS:  # (a refusal of what serves: the children are not in sync either)
        conds.append(synced_condition((Refusal(reason, message),)))
    mine = {c.type for c in conds}
    old_conds = old.get("conditions", [])
    return {
        **old,
        "observedGeneration": generation,
        "conditions": merge_conditions(old_conds, conds, generation, now)
        + [c for c in old_conds if c.get("type") not in mine],
    }


def invalid_spec_status(
    old: dict[str, Any], generation: int, message: str, now: str
) -> dict[str, Any]:
    """Ready=False/InvalidSpec; everything else the status said is kept (nothing is lost)."""
    return failure_status(
        old, generation, "InvalidSpec", message, "fix the spec; nothing was applied", now
    )


def apply_failed_status(
    old: dict[str, Any], generation: int, message: str, now: str, reason: str = APPLY_FAILED
) -> dict[str, Any]:
    """Ready=False/ApplyFailed with the API server's message: what serves (the Deployment or
    the Service) was refused (an admission policy, a quota, RBAC) or the API server failed;
    NotOwned: an object of its name is not this service's. The operator retries."""
    return failure_status(
        old,
        generation,
        reason,
        message,
        f"generation {generation} could not be applied; retrying with back-off",
        now,
    )


def read_failed_status(
    old: dict[str, Any], generation: int, message: str, now: str
) -> dict[str, Any]:
    """ChildrenSynced=False/ReadFailed: a read failed (a 429, a 5xx), so nothing is known
    to have changed: every other condition, Ready included, and everything else the status
    said are kept as they were (observedGeneration too: this generation was not acted on)."""
    old_conds = old.get("conditions", [])
    (synced,) = merge_conditions(
        old_conds, [Cond("ChildrenSynced", "False", READ_FAILED, message)], generation, now
    )
    kept = [c for c in old_conds if c.get("type") != synced["type"]]
    return {**old, "conditions": [*kept, synced]}
