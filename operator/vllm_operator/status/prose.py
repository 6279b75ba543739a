"""Step 5 of the flow (status), the prose: the longer sentences the conditions and Events say
to a person (figures formatted, a drain too short for the measured requests, a rollback that
this operator renders differently)."""

from __future__ import annotations

from typing import Any

from vllm_operator.api.records import Headline
from vllm_operator.api.spec import Service
from vllm_operator.observe.state import BenchView


def _fmt(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:.4g}{unit}"


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
