"""Step 1 of the flow (spec): the status's schema (written by the operator; its schema goes
into the CRD too, beside the spec's: generate/crd.py). The status itself is computed by
vllm_operator.status."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from vllm_operator.api.spec import _Model


class Condition(_Model):
    """A metav1.Condition."""

    type: str = Field(max_length=316, description="Condition type, e.g. Ready.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(max_length=1024, description="CamelCase reason.")
    message: str = Field(default="", max_length=32_768, description="What a person can do.")
    last_transition_time: str = Field(description="When the status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, ge=0, description="Generation the condition is about."
    )


class BenchmarkLiveLoadStatus(_Model):
    """Load on the measured pod that was not the benchmark's, seen during the run (the
    result's liveLoad; the full figures per scenario are in the result ConfigMap)."""

    foreign_requests: int | None = Field(
        default=None, description="Requests the pod finished for other clients during the run."
    )
    peak_foreign_in_flight: float | None = Field(
        default=None, description="Most requests of other clients running or waiting at once."
    )
    quiet: bool | None = Field(
        default=None, description="True: the pod served the benchmark alone during the run."
    )


class BenchmarkStatus(_Model):
    """The latest benchmark run (of the revision the spec asks for)."""

    revision: str | None = Field(default=None, description="Pod-template revision measured.")
    job: str | None = Field(default=None, description="The benchmark Job.")
    target_pod: str | None = Field(
        default=None, description="The one pod measured: the oldest Ready pod of the revision."
    )
    target_pod_ip: str | None = Field(
        default=None, alias="targetPodIP", description="Its IP, the runner's --url."
    )
    live_load: BenchmarkLiveLoadStatus | None = Field(
        default=None, description="Load of other clients on the measured pod during the run."
    )
    state: Literal["Running", "Complete", "Failed"] | None = Field(
        default=None, description="Running, Complete or Failed."
    )
    completed_at: str | None = Field(default=None, description="When the result was written.")
    result: str | None = Field(default=None, description="ConfigMap holding the full result.")
    kv_cache_tokens: int | None = Field(default=None, description="KV-cache capacity (tokens).")
    max_concurrency: float | None = Field(
        default=None, description="Sequences that fit at max-model-len."
    )
    output_tokens_per_second: float | None = Field(
        default=None, description="Output throughput under concurrent load."
    )
    batching_speedup: float | None = Field(default=None, description="Concurrent over serial.")
    prefix_ttft_speedup: float | None = Field(default=None, description="Cold over warm TTFT.")
    prefix_hit_rate: float | None = Field(default=None, description="Prefix-cache hit rate.")
    ttft_p50_seconds: float | None = Field(default=None, description="TTFT p50 (s).")
    ttft_p95_seconds: float | None = Field(default=None, description="TTFT p95 (s).")
    request_latency_p99_seconds: float | None = Field(
        default=None,
        description="Request latency p99 under concurrent load (s): what a stopping pod's "
        "drain (shutdownTimeoutSeconds) must cover; BenchmarkComplete says when it does not.",
    )
    passed: bool | None = Field(default=None, description="All thresholds met (when set).")
    failures: list[str] = Field(default_factory=list, description="Thresholds not met.")
    rolled_back_to: str | None = Field(
        default=None, description="Revision restored because this one failed its gates."
    )
    rendered_as: str | None = Field(
        default=None,
        description="During a rollback: the spec's revision as this operator renders it, where "
        "that is not `revision` (an operator upgrade or one of its settings changed how pod "
        "templates render): the spec is still the one that failed as `revision`, so the "
        "rollback stays in force.",
    )
    restored_as: str | None = Field(
        default=None,
        description="During a rollback: the revision rolledBackTo's recorded spec renders as "
        "with this operator (what runs), where that is not rolledBackTo.",
    )


class BakeStatus(_Model):
    """The canary's live figures against the stable pods', as Prometheus reads them."""

    started_at: str | None = Field(default=None, description="When the canary joined.")
    ends_at: str | None = Field(
        default=None, description="When the bake's window ends (startedAt + bake.seconds)."
    )
    seconds: int | None = Field(
        default=None,
        description="Not written since endsAt (a count of seconds so far changed the status on "
        "every reconcile); kept in the schema for statuses an earlier operator wrote.",
    )
    verdict: Literal["Passed", "Failed", "Inconclusive", "Skipped"] | None = Field(
        default=None,
        description="The bake's outcome, once decided (Skipped: the canary would have taken "
        "more than bake.maxTrafficShare of live traffic; promoted on its benchmark alone).",
    )
    canary_requests: float | None = Field(
        default=None, description="Requests the canary answered in the window."
    )
    canary_ttft_p99_seconds: float | None = Field(default=None, description="Canary TTFT p99.")
    stable_ttft_p99_seconds: float | None = Field(default=None, description="Stable TTFT p99.")
    canary_inter_token_p99_seconds: float | None = Field(
        default=None, description="Canary inter-token latency p99."
    )
    stable_inter_token_p99_seconds: float | None = Field(
        default=None, description="Stable inter-token latency p99."
    )
    canary_error_rate: float | None = Field(default=None, description="Canary 5xx share.")
    stable_error_rate: float | None = Field(default=None, description="Stable 5xx share.")


class RolloutStatus(_Model):
    """A new revision on its way to serving (rollout.canary)."""

    phase: Literal["Canary", "Baking", "Promoting", "Promoted", "Aborted"] = Field(
        description="Canary: one pod of the new revision, outside the Service, is measured; "
        "Baking: it passed and serves live traffic beside the stable pods (rollout.canary.bake), "
        "compared with them; "
        "Promoting: it passed (or was promoted by hand) and the serving pods roll to it; "
        "Promoted: every serving pod runs it; Aborted: it failed its gates or was aborted by "
        "hand, and the stable revision kept serving.",
    )
    revision: str = Field(description="The new revision.")
    stable_revision: str | None = Field(
        default=None, description="The revision that serves while the canary is measured."
    )
    canary: str | None = Field(default=None, description="The canary Deployment.")
    bake: BakeStatus | None = Field(
        default=None, description="The bake on live traffic (rollout.canary.bake)."
    )
    message: str = Field(default="", max_length=32_768, description="Why, in words.")


class LatencyGuardStatus(_Model):
    """One of the live latency guard's HPA metrics (spec.objective.latencyGuard)."""

    metric: str = Field(description="The pods metric (the live TTFT or TPOT).")
    quantile: str | None = Field(default=None, description="Its percentile, as 0.95.")
    target_average_value: str | None = Field(
        default=None, description="The objective's latency (a quantity of seconds)."
    )
    current_average_value: str | None = Field(
        default=None,
        description="The service's live latency at that percentile over the last minute as "
        "the HPA read it (0 while idle); above the target the HPA adds replicas in proportion.",
    )


def _secs(what: str) -> Any:
    return Field(default=None, ge=0, description=what + " (seconds).")


class PodStartStatus(_Model):
    """One start of one pod (observe/startup.py): a phase not known is absent."""

    pod: str = Field(description="The pod.")
    uid: str = Field(description="Its uid (a start is recorded once).")
    revision: str = Field(default="", description="The revision it runs.")
    created_at: str | None = Field(default=None, description="Its creationTimestamp.")
    ready_at: str | None = Field(default=None, description="When it became Ready.")
    load_seconds: float = Field(ge=0, description="The whole start: created to Ready (seconds).")
    restarts: int = Field(default=0, ge=0, description="Server restarts before it served.")
    scheduled_seconds: float | None = _secs("Created to scheduled (PodScheduled)")
    image_pull_seconds: float | None = _secs(
        "The server image's pull, from the kubelet's Pulled event (0: already present)"
    )
    container_started_seconds: float | None = _secs(
        "Scheduled to the server container running (the image pull, volumes, the sandbox)"
    )
    ready_seconds: float | None = _secs(
        "The container's start to Ready: vLLM's own start until /health answers 200"
    )
    weights_seconds: float | None = _secs("vLLM: loading the weights (its log)")
    model_load_seconds: float | None = _secs("vLLM: loading the model, weights included")
    compile_seconds: float | None = _secs("vLLM: torch.compile, in total")
    graph_capture_seconds: float | None = _secs("vLLM: capturing CUDA graphs")
    engine_init_seconds: float | None = _secs(
        "vLLM: init engine (profile, create KV cache, warm up; compile and graphs included)"
    )
    server_seconds: float | None = _secs(
        "vLLM's log from its first line to 'Application startup complete' (the server's own "
        "figure of its start)"
    )
    import_seconds: float | None = _secs(
        "The container's start to vLLM's first log line (Python importing vLLM and torch; the "
        "kubelet's stamps of the log)"
    )
    server_ready_seconds: float | None = _secs(
        "The container's start to 'Application startup complete' (when the server could answer)"
    )
    probe_lag_seconds: float | None = _secs(
        "'Application startup complete' to Ready: what the probes' period adds to the start"
    )
    slower_than_usual: float | None = Field(
        default=None,
        description="This start's loadSeconds over the median of the revision's earlier "
        "recent starts, where above the operator's slowStartFactor (a SlowStart Warning).",
    )


class RevisionStartsStatus(_Model):
    """The starts of one revision seen by this operator (its recent ones)."""

    revision: str = Field(description="The revision.")
    starts: int = Field(ge=0, description="Starts recorded.")
    last_load_seconds: float | None = _secs("The last start's loadSeconds")
    median_load_seconds: float | None = _secs("The median loadSeconds of its recent starts")
    slowest_load_seconds: float | None = _secs("The slowest start recorded")
    slowest_ready_seconds: float | None = _secs(
        "The slowest container start -> Ready recorded (what a measured startup budget follows)"
    )
    load_key: str | None = Field(
        default=None,
        max_length=64,
        description="What its starts depend on (model, image, engine, resources, model cache) "
        "as a hash: revisions with the same key load the same way.",
    )


class ProbeBudgetStatus(_Model):
    """The serving revision's startup probe budget (probes.startupBudget Measured)."""

    revision: str = Field(description="The revision.")
    seconds: int = Field(ge=0, description="What its startup probe allows, in seconds.")
    source: Literal["Measured", "Fixed"] = Field(
        description="Measured: factor x slowestReadySeconds (within the spec's bounds); Fixed: "
        "probes.startupTimeoutSeconds (no start of the same load key measured yet)."
    )
    slowest_ready_seconds: float | None = _secs("The slowest start it follows")
    factor: float | None = Field(default=None, description="probes.measuredStartupFactor.")


class StartupStatus(_Model):
    """Where the pods' starts spent their time (read once per pod when it is first Ready)."""

    last: PodStartStatus | None = Field(default=None, description="The last start.")
    recent: list[PodStartStatus] = Field(
        default_factory=list, max_length=10, description="The most recent starts."
    )
    revisions: list[RevisionStartsStatus] = Field(
        default_factory=list, max_length=5, description="Per revision, its starts' figures."
    )
    probe_budget: ProbeBudgetStatus | None = Field(
        default=None,
        description="The serving revision's startup probe budget (probes.startupBudget "
        "Measured), decided when the revision was first rolled out.",
    )


class ZeroStatus(_Model):
    """Scale to zero (autoscaling.minReplicas 0): the phase and when it began."""

    phase: Literal["Serving", "ScaledToZero", "Waking"] = Field(
        description="Serving: the HPA's replicas, the holder out of the path; ScaledToZero: no "
        "pod, the namespace's holder takes the requests; Waking: a held request asked for a "
        "replica, one is starting."
    )
    since: str | None = Field(default=None, description="When the phase began.")
    message: str = Field(default="", description="Why, in words.")


class AutoscalingStatus(_Model):
    """The HorizontalPodAutoscaler as its controller last reported it."""

    zero: ZeroStatus | None = Field(default=None, description="Scale to zero's phase.")

    horizontal_pod_autoscaler: str | None = Field(default=None, description="The HPA's name.")
    current_replicas: int | None = Field(default=None, description="Replicas the HPA saw.")
    desired_replicas: int | None = Field(default=None, description="Replicas the HPA wants.")
    metric: str | None = Field(default=None, description="The pods metric the HPA targets.")
    current_average_value: str | None = Field(
        default=None,
        description="The metric's current per-pod value as the HPA read it (a quantity); "
        "absent while the HPA cannot get it (see the AutoscalingActive condition).",
    )
    target_average_value: str | None = Field(
        default=None,
        description="The per-pod target: autoscaling.targetQueueDepth (policy QueueBand), or "
        "the requests in flight per pod the serving revision's capacity allows (policy "
        "Capacity).",
    )
    policy: str | None = Field(
        default=None,
        description="QueueBand (autoscaling's targetQueueDepth / scaleDownQueueDepth) or "
        "Capacity (spec.objective: the serving revision's measured capacity less the headroom).",
    )
    target_from: str | None = Field(
        default=None,
        description="Where the target comes from, in words: the band's fields, or the "
        "capacity's revision, run and time measured (status.capacity).",
    )
    latency_guard: list[LatencyGuardStatus] | None = Field(
        default=None,
        max_length=2,
        description="The live latency guard (spec.objective.latencyGuard): the HPA's metrics "
        "on the live TTFT / TPOT against the objective, beside the main metric.",
    )
    last_scale_time: str | None = Field(default=None, description="When the HPA last scaled.")
    held_replicas: int | None = Field(
        default=None,
        description="Autoscaling is off and the Deployment still runs the count the autoscaler "
        "chose (see the AutoscalingActive condition, reason ReplicasHeld).",
    )
    held_since: str | None = Field(default=None, description="When the hold began.")
    held_until: str | None = Field(
        default=None,
        description="When spec.replicas applies (the operator's replicasHoldSeconds after "
        "heldSince); at once with the release-replicas-hold annotation.",
    )


class CapacityLevel(_Model):
    """One level of the batching ladder, as the objective judges it."""

    concurrency: int = Field(description="Requests at once.")
    ttft_seconds: float | None = Field(default=None, description="TTFT at the percentile.")
    tpot_seconds: float | None = Field(default=None, description="TPOT at the percentile.")


class CapacityFigures(_Model):
    """A revision's capacity against spec.objective, from its benchmark's batching ladder."""

    revision: str = Field(description="The revision measured.")
    run: str = Field(description="The benchmark run (its result ConfigMap) measured in.")
    measured_at: str | None = Field(default=None, description="When the run started.")
    concurrency_per_pod: float | None = Field(
        default=None,
        description="The highest requests at once per pod at which both latencies meet the "
        "objective (interpolated between the ladder's levels); 0: not even one at a time.",
    )
    at_least: bool | None = Field(
        default=None,
        description="True: the ladder's top level still met the objective (raise the "
        "runner's --max-concurrency in benchmark.args to find the limit).",
    )
    bound_by: str | None = Field(
        default=None, description="What ends the capacity: ttft, tpot or ladderTop."
    )
    requests_per_second: float | None = Field(
        default=None, description="Requests/s per pod at that concurrency."
    )
    output_tokens_per_second: float | None = Field(
        default=None, description="Output tokens/s per pod at that concurrency."
    )
    prefill_tokens_per_second: float | None = Field(
        default=None, description="Prompt tokens/s of one request alone (prompt / TTFT p50)."
    )
    kv_cache_tokens: int | None = Field(default=None, description="KV-cache capacity (tokens).")
    input_tokens: float | None = Field(
        default=None, description="The workload measured: mean prompt tokens per request."
    )
    output_tokens: int | None = Field(
        default=None, description="The workload measured: output tokens per request."
    )
    workload_source: str | None = Field(
        default=None,
        description="objective (spec.objective's inputTokens/outputTokens), liveTraffic (the "
        "service's mean prompt/generation tokens per request over the hour before the run, from "
        "vLLM's histograms in Prometheus, for the lengths the objective leaves unset; at least "
        "100 requests) or runnerDefault.",
    )
    workload_from: str | None = Field(
        default=None,
        max_length=256,
        description="The live traffic shape the run sent, in words (workloadSource "
        "liveTraffic): the lengths and how many requests over which window they are the mean of.",
    )
    levels: list[CapacityLevel] = Field(
        default_factory=list, description="The ladder's levels at the objective's percentile."
    )
    message: str = Field(default="", max_length=32_768, description="Why, in words.")


class CapacityStatus(CapacityFigures):
    """The serving revision's capacity, and the capacity of a revision being measured."""

    candidate: CapacityFigures | None = Field(
        default=None,
        description="The capacity of the revision being measured, where it is not the one "
        "that serves (a canary's: what the autoscaler will target once it is promoted).",
    )


class VLLMServiceStatus(_Model):
    """Observed state, written by the operator."""

    observed_generation: int | None = Field(default=None, description="Last generation acted on.")
    replicas: int | None = Field(default=None, description="Pods of the Deployment now.")
    desired_replicas: int | None = Field(
        default=None, description="Replicas the Deployment wants (the spec, or the HPA's choice)."
    )
    ready_replicas: int | None = Field(default=None, description="Ready pods.")
    updated_replicas: int | None = Field(default=None, description="Pods of the current revision.")
    available_replicas: int | None = Field(default=None, description="Available pods.")
    selector: str | None = Field(
        default=None, description="Label selector of the pods (for the scale subresource)."
    )
    endpoint: str | None = Field(default=None, description="In-cluster OpenAI base URL.")
    model: str | None = Field(default=None, description="The served model name.")
    revision: str | None = Field(default=None, description="Pod-template revision running.")
    benchmark: BenchmarkStatus | None = Field(default=None, description="Latest benchmark.")
    rollout: RolloutStatus | None = Field(
        default=None, description="The last revision rolled out through a canary."
    )
    startup: StartupStatus | None = Field(
        default=None,
        description="Where each pod's start spent its time (scheduled, image pulled, "
        "container started, vLLM's weights, compile, graphs, engine init, Ready), per revision.",
    )
    autoscaling: AutoscalingStatus | None = Field(
        default=None, description="The autoscaler's state (when autoscaling is enabled)."
    )
    capacity: CapacityStatus | None = Field(
        default=None,
        description="The serving revision's capacity against spec.objective (with an "
        "objective): what the autoscaler targets.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready (serving), Progressing, Degraded, ChildrenSynced (every child "
        "written; else the object refused, or a read failed), BenchmarkComplete, "
        "BenchmarkPassed, AutoscalingActive (the HPA's ScalingActive), Monitoring.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
