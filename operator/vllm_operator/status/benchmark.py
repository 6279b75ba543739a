"""Step 5 of the flow (status), the benchmark: status.benchmark and the BenchmarkComplete and
BenchmarkPassed conditions."""

from __future__ import annotations

from typing import Any

from vllm_operator.api.records import Run
from vllm_operator.api.spec import Service
from vllm_operator.observe.state import BenchView
from vllm_operator.status.conditions import Cond
from vllm_operator.status.prose import _drain_short, _fmt

# BenchmarkComplete's reason while a second run confirms a failed verdict
CONFIRMING = "ConfirmingFailure"


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
