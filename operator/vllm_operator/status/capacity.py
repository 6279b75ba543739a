"""Step 5 of the flow (status), the capacity: status.capacity, the serving revision's capacity
against the service's latency objective (decide/capacity.py), and a candidate revision's."""

from __future__ import annotations

from typing import Any

from vllm_operator.api.records import Capacity
from vllm_operator.api.spec import Service

CapacityView = Capacity | str | None  # measured / why not / nothing yet (decide/capacity)


def figures(c: Capacity) -> dict[str, Any]:
    """One revision's capacity as status.capacity shows it."""
    out: dict[str, Any] = {
        "revision": c.revision,
        "run": c.run,
        "measuredAt": c.measured_at,
        "concurrencyPerPod": c.concurrency_per_pod,
        "atLeast": c.at_least,
        "boundBy": c.bound_by,
        "requestsPerSecond": c.requests_per_second,
        "outputTokensPerSecond": c.output_tokens_per_second,
        "prefillTokensPerSecond": c.prefill_tokens_per_second,
        "kvCacheTokens": c.kv_cache_tokens,
        "inputTokens": c.input_tokens,
        "outputTokens": c.output_tokens,
        "workloadSource": c.workload_source,
        "workloadFrom": c.workload_from or None,
        "levels": [
            {
                k: v
                for k, v in {"concurrency": lc, "ttftSeconds": t, "tpotSeconds": p}.items()
                if v is not None
            }
            for lc, t, p in c.levels
        ],
    }
    return {k: v for k, v in out.items() if v is not None}


def _message(svc: Service, c: Capacity) -> str:
    o = svc.spec.objective
    assert o is not None
    wanted = " and ".join(
        f"{name} p{o.percentile} <= {value:g} s"
        for name, value in (("TTFT", o.ttft_seconds), ("TPOT", o.tpot_seconds))
        if value is not None
    )
    if c.concurrency_per_pod <= 0:
        return f"revision {c.revision} does not meet {wanted} even one request at a time"
    more = " (at least: the ladder's top still met it)" if c.at_least else f" ({c.bound_by} binds)"
    return (
        f"revision {c.revision} meets {wanted} up to {c.concurrency_per_pod:g} requests at once "
        f"per pod{more}, measured by run {c.run}"
    )


def _capacity(
    svc: Service, serving: CapacityView, candidate: CapacityView, serving_revision: str
) -> dict[str, Any] | None:
    """status.capacity (None without an objective)."""
    if svc.spec.objective is None:
        return None
    if isinstance(serving, Capacity):
        out = {**figures(serving), "message": _message(svc, serving)}
    else:
        out = {
            "revision": serving_revision,
            "run": "",
            "message": (
                f"revision {serving_revision} is not measured yet: the autoscaler keeps the "
                "queue band until its benchmark completes"
                if serving is None
                else f"revision {serving_revision}: no capacity: {serving}"
            ),
        }
    if isinstance(candidate, Capacity) and candidate.revision != serving_revision:
        out["candidate"] = {**figures(candidate), "message": _message(svc, candidate)}
    return out
