"""Step 1 of the flow (spec): the VLLMService API as frozen pydantic models.

These models are the single source of truth: the CRD's openAPIV3Schema is generated from them
(generate/crd.py), the API server enforces the ranges, enums and CEL rules declared here, and the
operator parses every custom resource into them at the handler edge. Field descriptions are
what `kubectl explain vllmservice.spec...` shows.

Beside them: api/cel.py (the CEL rules that stand alone: the passthrough arguments' rules),
api/quantity.py (resource quantities), api/unknown_fields.py (the version-skew filter at the
handler edge) and api/status_schema.py (the status's schema).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator
from pydantic.alias_generators import to_camel

from vllm_operator.api import alertnames
from vllm_operator.api.cel import (
    _DENIED_CEL,
    _RUNNER_CEL,
    NEGATIVE_NUMBER,
    OWNED_ARGS,
    OWNED_RUNNER_ARGS,
    cel,
    owned_flag,
    owned_runner_flag,
)
from vllm_operator.api.quantity import Quantity, parse_quantity
from vllm_operator.api.unknown_fields import known_fields

# Environment variables the Deployment renderer sets itself (render/deployment.py _env; a
# unit test checks this list against what it renders): a user entry with one of these names
# would duplicate it, which server-side apply refuses ("duplicate entries for key").
RESERVED_ENV: tuple[str, ...] = ("HF_HOME", "HF_TOKEN", "VLLM_API_KEY", "VLLM_HOST_IP")
# Setting it (any new value) starts a fresh benchmark run of the current revision
RERUN_ANNOTATION = "serving.vllm-operator.dev/rerun-benchmark"
# set by the namespace's scale-to-zero holder on the first held request of a burst (holder/)
WAKE_ANNOTATION = "serving.vllm-operator.dev/wake-requested-at"
# on a VLLMService: end a replica hold (autoscaling switched off) now, and start none
RELEASE_HOLD_ANNOTATION = "serving.vllm-operator.dev/release-replicas-hold"
# on a VLLMService, valued with the revision of the canary in progress (status.rollout.revision):
# promote it now whatever its benchmark says, or abort it now (the stable pods keep serving).
# A value naming another revision does nothing, so one left behind never acts on a later one.
PROMOTE_ANNOTATION = "serving.vllm-operator.dev/promote"
ABORT_ANNOTATION = "serving.vllm-operator.dev/abort"
# metadata.name: the children (a Service above all) need an RFC 1035 label: no dots
DNS_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# an extended resource name: a DNS subdomain prefix, a slash, a name (no spaces)
RESOURCE_NAME_PATTERN = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
BLOCK_SIZES = (8, 16, 32, 64, 128)
VALUE_FROM_SOURCES = ("configMapKeyRef", "fieldRef", "resourceFieldRef", "secretKeyRef")
MODEL_PVC_MOUNT = "/models"
MAX_NAME_LENGTH = 42  # "<name>-bench-<revision hash 8>" and pod names stay within 63

# vLLM's CPU attention takes KV-cache blocks of a multiple of 32 tokens only
# (vllm/v1/attention/backends/cpu_attn.py: MultipleOf(32)); 8 and 16 fail at start-up
CPU_BLOCK_SIZE_MULTIPLE = 32
# On CPU without engine.kvCacheMemory: this share of resources.memory holds the KV cache
CPU_KV_CACHE_SHARE_OF_MEMORY = 4  # a quarter; the rest is for weights and the runtime

Name = Annotated[str, Field(min_length=1, max_length=253)]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )


class SecretKeyRef(_Model):
    """A reference to one key of a Secret in the service's namespace. The operator never
    reads the Secret: the kubelet injects the value into the container."""

    name: Name = Field(description="Name of the Secret.")
    key: str = Field(
        default="token", min_length=1, max_length=253, description="Key within the Secret."
    )


class PvcModelSource(_Model):
    """A PersistentVolumeClaim that already holds the model files."""

    claim_name: Name = Field(description="Name of the PersistentVolumeClaim.")
    sub_path: str | None = Field(
        default=None, max_length=1024, description="Directory of the model inside the volume."
    )


class ModelSpec(_Model):
    """Which model vLLM serves."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "[has(self.id), has(self.path), has(self.pvc)].filter(x, x).size() == 1",
                    "set exactly one of model.id (Hugging Face id), model.path or model.pvc",
                ),
            ]
        }
    )
    id: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        pattern=r"^[A-Za-z0-9][\w.\-/]*$",
        description="Hugging Face model id, e.g. TinyLlama/TinyLlama-1.1B-Chat-v1.0.",
    )
    path: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        pattern=r"^/",
        description="Absolute path of the model inside the container (e.g. baked into the "
        "image or on the model cache volume).",
    )
    pvc: PvcModelSource | None = Field(
        default=None,
        description="A PersistentVolumeClaim holding the model, mounted read-only at /models.",
    )
    revision: str | None = Field(
        default=None, max_length=128, description="Model revision (branch, tag or commit)."
    )
    served_model_name: str | None = Field(
        default=None,
        max_length=128,
        pattern=r"^[\w.\-/:]+$",
        description="The name clients put in the OpenAI `model` field. Defaults to the id or path.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:  # mirrors the CEL rule, for objects read back
        if sum(x is not None for x in (self.id, self.path, self.pvc)) != 1:
            raise ValueError(
                "set exactly one of model.id (Hugging Face id), model.path or model.pvc"
            )
        return self

    @property
    def reference(self) -> str:
        """What vLLM's --model gets: the id, the path, or where the PVC is mounted."""
        if self.pvc is not None:
            sub = (self.pvc.sub_path or "").strip("/")
            return f"{MODEL_PVC_MOUNT}/{sub}" if sub else MODEL_PVC_MOUNT
        return self.id or self.path or MODEL_PVC_MOUNT


class EngineSpec(_Model):
    """vLLM engine arguments. Unset fields keep vLLM's own defaults."""

    max_model_len: int | None = Field(
        default=None, ge=16, le=10_485_760, description="--max-model-len: context length."
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="--gpu-memory-utilization: fraction of GPU memory vLLM may use, in (0, 1]. "
        "Not rendered on CPU (resources.gpus: 0), where vLLM would apply it to the node's "
        "memory, not the pod's: kvCacheMemory sizes the cache there.",
    )
    kv_cache_memory: Quantity | None = Field(
        default=None,
        description="--kv-cache-memory-bytes: memory for the KV cache (per GPU), e.g. 4Gi; "
        "when set vLLM ignores gpuMemoryUtilization. On CPU (resources.gpus: 0) it must be "
        "less than resources.memory and defaults to a quarter of it.",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))",
                    "engine.kvCacheMemory must be a positive quantity, e.g. 4Gi",
                )
            ]
        },
    )
    enable_prefix_caching: bool = Field(
        default=True,
        description="--enable-prefix-caching: reuse KV cache across requests sharing a prefix.",
    )
    block_size: Literal[8, 16, 32, 64, 128] | None = Field(
        default=None,
        description="--block-size: tokens per KV-cache block (8, 16, 32, 64, 128). On CPU "
        "(resources.gpus: 0) a multiple of 32; unset there, vLLM uses 128.",
    )
    max_num_seqs: int | None = Field(
        default=None,
        ge=1,
        le=65_536,
        description="--max-num-seqs: concurrent sequences per replica.",
    )
    log_requests: bool = Field(
        default=False,
        description="--enable-log-requests: log every request. Off by default "
        "(the reference configuration disables per-request logging).",
    )
    enforce_eager: bool = Field(
        default=False,
        description="--enforce-eager: skip CUDA graph capture (faster start, slower decode).",
    )
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] = Field(
        default="auto", description="--dtype of the weights and activations."
    )
    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        le=64,
        description="--tensor-parallel-size: GPUs one replica shards "
        "the model over. Must equal resources.gpus; 1 on CPU (resources.gpus: 0).",
    )
    quantization: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z0-9_\-]+$",
        description="--quantization method, e.g. awq, gptq, fp8.",
    )
    kv_cache_dtype: Literal["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        default="auto", description="--kv-cache-dtype."
    )
    speculative_config: dict[str, JsonValue] | None = Field(
        default=None,
        description="--speculative-config as an object, e.g. {method: ngram, "
        "num_speculative_tokens: 5, prompt_lookup_max: 4}.",
    )
    extra_args: list[Annotated[str, Field(max_length=1024)]] = Field(
        default_factory=list,
        max_length=64,
        description="Other vLLM server arguments, passed as they are. Arguments the operator "
        f"renders itself are rejected: {', '.join(OWNED_ARGS)}.",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    # the same reading as owned_flag()
                    "self.all(a, !a.startsWith('-') || a.startsWith('--') || "
                    f"a.matches('{NEGATIVE_NUMBER}'))",
                    "extraArgs must not use short options (-q, -qfp8, -O3): vLLM reads "
                    "attached values and abbreviations of them; use the long form "
                    "(--quantization=fp8)",
                ),
                cel(
                    # the same reading as owned_flag()
                    "self.all(a, !a.startsWith('--') || "
                    "[a.split('=')[0].split('.')[0].replace('_', '-')].all(k, "
                    f"!{_DENIED_CEL}.exists(d, d.startsWith(k))))",
                    "extraArgs must not set arguments the operator owns ("
                    + ", ".join(OWNED_ARGS)
                    + "), a prefix of one, a --no- form or a dotted key of one, --config or "
                    "--uds; use the dedicated spec fields",
                ),
            ]
        },
    )

    @model_validator(mode="after")
    def _no_owned_args(self) -> EngineSpec:
        for arg in self.extra_args:
            flag = owned_flag(arg)
            if flag is not None and not flag.startswith("--"):
                raise ValueError(
                    f"engine.extraArgs: {arg}: short options are refused (vLLM reads attached "
                    "values and abbreviations of them); use the long form"
                )
            if flag is not None:
                raise ValueError(
                    f"engine.extraArgs: {flag} is set by the operator; use the spec field for it"
                )
        return self

    @model_validator(mode="after")
    def _kv_cache_memory(self) -> EngineSpec:  # mirrors the CEL rule
        if self.kv_cache_memory is not None:
            try:
                positive = parse_quantity(self.kv_cache_memory) > 0
            except ValueError as exc:
                raise ValueError(
                    f"engine.kvCacheMemory must be a positive quantity, e.g. 4Gi: {exc}"
                ) from None
            if not positive:
                raise ValueError("engine.kvCacheMemory must be a positive quantity, e.g. 4Gi")
        return self


class ResourceSpec(_Model):
    """GPUs and host resources of one replica."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.gpus > 0 || (has(self.cpu) && has(self.memory))",
                    "resources.cpu and resources.memory are required when resources.gpus is 0 "
                    "(serving on CPU)",
                ),
                cel(
                    "self.gpus > 0 || !has(self.gpuProduct)",
                    "resources.gpuProduct needs resources.gpus > 0",
                    ".gpuProduct",
                ),
            ]
        }
    )
    gpus: int = Field(
        default=1,
        ge=0,
        le=64,
        description="GPUs per pod. 0 serves on CPU (vLLM's CPU backend): no GPU request, "
        "toleration or product selector, the operator's CPU image, resources.cpu and "
        "resources.memory required (and both become limits), the KV cache sized by "
        "engine.kvCacheMemory.",
    )
    gpu_resource_name: str = Field(
        default="nvidia.com/gpu",
        max_length=253,
        pattern=RESOURCE_NAME_PATTERN,
        description="Extended resource for GPUs (domain/name, e.g. nvidia.com/gpu).",
    )
    gpu_product: str | None = Field(
        default=None,
        max_length=128,
        description="Schedule only onto nodes whose "
        "nvidia.com/gpu.product label equals this, e.g. NVIDIA-H100-80GB-HBM3.",
    )
    cpu: Quantity | None = Field(
        default=None,
        description="CPU request. On GPUs no CPU limit is set: throttling the API "
        "server and tokenizer threads costs latency. On CPU (gpus: 0) the request is also the "
        "limit (Guaranteed QoS: with the kubelet's static CPU manager and a whole number the "
        "pod gets dedicated cores, which vLLM binds its OpenMP threads to).",
    )
    memory: Quantity | None = Field(default=None, description="Memory request and limit.")
    shared_memory: Quantity = Field(
        default="8Gi",
        description="Size of the in-memory /dev/shm (tensor-parallel workers "
        "exchange data through it).",
    )

    @model_validator(mode="after")
    def _cpu_serving(self) -> ResourceSpec:  # mirrors the CEL rules
        if self.gpus == 0 and (self.cpu is None or self.memory is None):
            raise ValueError(
                "resources.cpu and resources.memory are required when resources.gpus is 0 "
                "(serving on CPU)"
            )
        if self.gpus == 0 and self.gpu_product is not None:
            raise ValueError("resources.gpuProduct needs resources.gpus > 0")
        return self

    @property
    def on_cpu(self) -> bool:
        """Serving on vLLM's CPU backend (no GPUs)."""
        return self.gpus == 0


class ModelCacheSpec(_Model):
    """Where Hugging Face downloads go (HF_HOME)."""

    type: Literal["EmptyDir", "PVC", "None"] = Field(
        default="EmptyDir",
        description="EmptyDir (per pod), PVC (shared, survives restarts) or None.",
    )
    claim_name: str | None = Field(
        default=None, max_length=253, description="The PVC when type is PVC."
    )
    size_limit: Quantity | None = Field(default=None, description="EmptyDir size limit.")
    mount_path: str = Field(
        default="/root/.cache/huggingface",
        max_length=1024,
        pattern=r"^/",
        description="Mount path; HF_HOME points here.",
    )


class ProbeSpec(_Model):
    """Health probes on vLLM's /health endpoint."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.startupBudget != 'Measured' || "
                    "self.measuredStartupMinSeconds <= self.startupTimeoutSeconds",
                    "probes.measuredStartupMinSeconds must be <= probes.startupTimeoutSeconds "
                    "(the measured budget lies between them)",
                ),
            ]
        }
    )
    startup_timeout_seconds: int = Field(
        default=1800,
        ge=30,
        le=86_400,
        description="How long a pod may take to load its model before it is restarted. "
        "Large models on slow storage need tens of minutes. With startupBudget Measured, "
        "the most the measured budget may be.",
    )
    startup_budget: Literal["Fixed", "Measured"] = Field(
        default="Fixed",
        description="Fixed: the startup probe allows startupTimeoutSeconds. Measured: it allows "
        "measuredStartupFactor x the slowest start measured (container started -> Ready, "
        "status.startup) of this service's revisions that load the same model the same way "
        "(model, image, resources and engine alike), between measuredStartupMinSeconds and "
        "startupTimeoutSeconds; startupTimeoutSeconds while none is measured. A revision's "
        "budget is fixed when it is first rolled out (a new measurement changes the next "
        "revision's, never restarts running pods); status.startup.probeBudget shows it.",
    )
    measured_startup_factor: float = Field(
        default=3.0,
        ge=1.5,
        le=20.0,
        description="startupBudget Measured: the budget as a multiple of the slowest start.",
    )
    measured_startup_min_seconds: int = Field(
        default=300,
        ge=30,
        le=86_400,
        description="startupBudget Measured: the least budget (a fast start measured on a warm "
        "node must not starve a start on a cold one).",
    )
    period_seconds: int = Field(default=10, ge=1, le=300, description="Probe period.")
    readiness_failure_threshold: int = Field(
        default=3, ge=1, le=100, description="Failures before a replica leaves the Service."
    )
    liveness_failure_threshold: int = Field(
        default=6, ge=1, le=100, description="Failures before a replica is restarted."
    )


class HoldSpec(_Model):
    """While a service is at zero: the bounds of the holder's queue for it."""

    queue: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="Requests held at most; beyond, 429 with Retry-After. The holder's two "
        "pods take half each (rounded up): kube-proxy spreads connections over them.",
    )
    timeout_seconds: int = Field(
        default=900,
        ge=10,
        le=3600,
        description="A request held longer is answered 503 with Retry-After (a GPU start takes "
        "minutes: keep it above the revision's status.startup loadSeconds).",
    )
    retry_after_seconds: int = Field(
        default=5, ge=1, le=600, description="The Retry-After of a 429 or 503."
    )


class AutoscalingSpec(_Model):
    """A HorizontalPodAutoscaler on the per-pod queue depth."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.minReplicas <= self.maxReplicas",
                    "autoscaling.minReplicas must be <= autoscaling.maxReplicas",
                ),
                cel(
                    "self.minReplicas > 0 || self.enabled",
                    "autoscaling.minReplicas 0 (scale to zero) needs autoscaling.enabled",
                ),
                cel(
                    "self.scaleDownQueueDepth < self.targetQueueDepth",
                    "autoscaling.scaleDownQueueDepth must be < autoscaling.targetQueueDepth",
                ),
            ]
        }
    )
    enabled: bool = Field(
        default=False,
        description="Create the HPA. It targets the per-pod band metric "
        "vllm_operator:queue_depth_band, which needs the operator's recording rules "
        "(PrometheusRule or deploy/monitoring/vllm-alerts.rules.yaml) and prometheus-adapter "
        "(deploy/monitoring/prometheus-adapter-config.yaml) serving custom.metrics.k8s.io.",
    )
    min_replicas: int = Field(
        default=2,
        ge=0,
        le=1000,
        description="Lower bound. 0: scale to zero after idleSeconds without a request; while "
        "no pod is Ready the namespace's holder (docs/design/scale-to-zero.md) holds the "
        "Service's requests and asks for one replica (the HPA's own minReplicas is then 1: it "
        "scales from one pod up).",
    )
    idle_seconds: int = Field(
        default=900,
        ge=120,
        le=86_400,
        description="minReplicas 0: how long the service must have had no request (none "
        "finished, running or waiting, read from Prometheus) before it goes to zero.",
    )
    hold: HoldSpec = Field(
        default_factory=HoldSpec,
        description="minReplicas 0: how the holder keeps this service's requests at zero.",
    )
    max_replicas: int = Field(default=16, ge=1, le=1000, description="Upper bound.")
    metric_name: str = Field(
        default="vllm:num_requests_waiting",
        max_length=253,
        pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$",
        description="The raw per-pod queue metric (as scraped from vLLM) the band recording "
        "rule averages over the service's pods.",
    )
    target_queue_depth: int = Field(
        default=20,
        ge=1,
        le=100_000,
        description="Scale up when the average waiting requests per pod exceed this.",
    )
    scale_down_queue_depth: int = Field(
        default=2,
        ge=0,
        le=100_000,
        description="Scale down only when the average waiting requests per pod stay at or "
        "below this for scaleDownStabilizationSeconds; between the two the replicas hold.",
    )
    scale_down_stabilization_seconds: int = Field(
        default=300, ge=0, le=3600, description="Cooldown before scaling down."
    )
    scale_up_stabilization_seconds: int = Field(
        default=0, ge=0, le=3600, description="Window before scaling up."
    )

    @model_validator(mode="after")
    def _band(self) -> AutoscalingSpec:  # mirrors the CEL rules
        if self.scale_down_queue_depth >= self.target_queue_depth:
            raise ValueError(
                "autoscaling.scaleDownQueueDepth must be < autoscaling.targetQueueDepth"
            )
        if self.min_replicas == 0 and not self.enabled:
            raise ValueError("autoscaling.minReplicas 0 (scale to zero) needs autoscaling.enabled")
        return self

    @property
    def to_zero(self) -> bool:
        """The service may scale to zero (minReplicas 0, autoscaling on)."""
        return self.enabled and self.min_replicas == 0


class BakeSpec(_Model):
    """After its benchmark passes, the canary bakes on live traffic before the serving pods
    roll to it: it joins the Service's endpoints beside the stable pods (one more endpoint,
    an EndpointSlice the operator writes), and its live TTFT p99, inter-token latency p99
    and error rate, read from Prometheus, are compared with the stable pods' over the
    window. Worse beyond a limit (once it answered minRequests) aborts it at once."""

    seconds: int = Field(
        default=300,
        ge=30,
        le=86_400,
        description="The bake window: how long the canary serves live traffic before it is "
        "promoted (an abort can come earlier).",
    )
    max_ttft_p99_ratio: float = Field(
        default=1.5,
        ge=1,
        le=100,
        description="Abort when the canary's time-to-first-token p99 exceeds the stable pods' "
        "times this, at the histogram's resolution (the bucket holding the canary's p99 lies "
        "wholly above the limit).",
    )
    max_inter_token_p99_ratio: float = Field(
        default=1.5,
        ge=1,
        le=100,
        description="Abort when the canary's inter-token latency p99 exceeds the stable pods' "
        "times this, at the histogram's resolution (the bucket holding the canary's p99 lies "
        "wholly above the limit).",
    )
    max_error_rate_increase: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Abort when the canary's share of failed (5xx) /v1 requests exceeds the "
        "stable pods' by more than this (0.01: one point).",
    )
    min_requests: int = Field(
        default=20,
        ge=1,
        le=1_000_000,
        description="Requests the canary must have answered in the window (finished, or "
        "answered with an HTTP status: a 5xx counts) before its figures count; a window that "
        "ends with fewer is inconclusive (whenInconclusive decides).",
    )
    max_traffic_share: float = Field(
        default=1,
        gt=0,
        le=1,
        description="The largest share of the Service's live traffic the canary may take: "
        "it is one endpoint beside the N Ready serving pods, and kube-proxy spreads "
        "connections evenly over endpoints, so it takes about 1/(N+1) (a one-replica service: "
        "half). When 1/(N+1) exceeds this as the bake would begin, the bake is skipped: the "
        "revision is promoted on its benchmark alone (verdict Skipped, a Warning event), "
        "measured but never seen on live traffic. 1 (default): always bake; 0.25: bake only "
        "with 3 or more Ready serving pods.",
    )
    when_inconclusive: Literal["Wait", "Promote", "Abort"] = Field(
        default="Wait",
        description="When the window ends with fewer than minRequests answered by the canary "
        "(too little traffic reached it: nothing to compare): Wait (default) keeps it baking "
        "until it has answered minRequests, then judges it, or until the promote or abort "
        "annotation decides; Promote rolls the serving pods to it unseen; Abort stops it as "
        "failed (under benchmark.onFailure Rollback). Each is a Warning event.",
    )


class CanarySpec(_Model):
    """A new revision proves itself on one pod outside the Service before it serves anyone."""

    enabled: bool = Field(
        default=True,
        description="With benchmark gates set (benchmark.thresholds), a change of the pod "
        "template first starts one canary pod of the new revision that the Service does not "
        "select, benchmarks it alone, and only then rolls the serving pods to it; a revision "
        "that fails its gates (onFailure: Rollback, confirmed by a second run) is stopped there "
        "and never serves. false: roll out first and benchmark a serving pod afterwards.",
    )
    when_no_room: Literal["Wait", "ReplaceStable"] = Field(
        default="Wait",
        description="When the canary pod cannot be scheduled for want of room: Wait (the "
        "status says which resource, since when), or ReplaceStable: with 2 or more stable "
        "replicas whose count the operator sets (autoscaling off), run one stable pod fewer "
        "while the canary runs.",
    )
    bake: BakeSpec | None = Field(
        default=None,
        description="Bake on live traffic after the benchmark passes (needs the operator's "
        "prometheusUrl setting; unset: promote once the benchmark passes). Acts under "
        "benchmark.onFailure Rollback; under Report its verdict is only reported.",
    )


class RolloutSpec(_Model):
    """How a new revision replaces the old one."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.strategy == 'Recreate' || self.maxSurge > 0 || self.maxUnavailable > 0",
                    "rollout.maxSurge and rollout.maxUnavailable cannot both be 0",
                ),
            ]
        }
    )
    strategy: Literal["RollingUpdate", "Recreate"] = Field(
        default="RollingUpdate", description="Deployment strategy."
    )
    max_surge: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Extra pods during a rollout. 0 (default) never "
        "needs a spare GPU, so rollouts cannot deadlock on a full cluster.",
    )
    max_unavailable: int = Field(
        default=1, ge=0, le=100, description="Pods that may be down during a rollout."
    )
    # (no default in the schema: the stored rollout of an existing object stays as it was)
    one_replica_surge: bool | None = Field(
        default=None,
        description="A one-replica service without autoscaling rolls out with maxSurge 1 and "
        "maxUnavailable 0 (the new pod is Ready before the old one stops: no downtime) when "
        "there is room for one more pod; when the scheduler finds none, it is replaced in place "
        "as maxSurge/maxUnavailable say (the status says so). false: maxSurge/maxUnavailable "
        "always. Unset: true.",
    )
    canary: CanarySpec | None = Field(
        default=None,
        description="Benchmark a new revision before it serves (unset: enabled, whenNoRoom Wait).",
    )

    @property
    def canary_settings(self) -> CanarySpec:
        return self.canary if self.canary is not None else CanarySpec()

    @model_validator(mode="after")
    def _can_progress(self) -> RolloutSpec:  # mirrors the CEL rule
        if self.strategy == "RollingUpdate" and self.max_surge == 0 and self.max_unavailable == 0:
            raise ValueError("rollout.maxSurge and rollout.maxUnavailable cannot both be 0")
        return self


class EnvVar(_Model):
    """An environment variable (value, or valueFrom as in a Pod spec)."""

    name: str = Field(
        min_length=1,
        max_length=256,
        pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
        description="Variable name.",
    )
    value: str | None = Field(default=None, max_length=32_768, description="Literal value.")
    value_from: dict[str, JsonValue] | None = Field(
        default=None, description="A Pod-spec valueFrom (secretKeyRef, configMapKeyRef, ...)."
    )

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        # valueFrom is free-form in the schema (it mirrors the Pod API), so the operator checks
        # it: a bad one would otherwise only fail when the Deployment is applied
        if self.value_from is not None:
            keys = sorted(self.value_from)
            if len(keys) != 1 or keys[0] not in VALUE_FROM_SOURCES:
                raise ValueError(
                    f"valueFrom of {self.name} must have exactly one of "
                    f"{', '.join(VALUE_FROM_SOURCES)}; got {', '.join(keys) or 'nothing'}"
                )
            if self.value is not None:
                raise ValueError(f"env {self.name}: set value or valueFrom, not both")
        return self


Scenario = Literal["capacity", "batching", "prefix", "streaming", "naive"]
DEFAULT_SCENARIOS: list[Scenario] = ["capacity", "batching", "prefix", "streaming"]


class BenchmarkThresholds(_Model):
    """Gates on the benchmark of a new revision. Unset thresholds are not checked."""

    min_output_tokens_per_second: float | None = Field(
        default=None, ge=0, description="Minimum output throughput (tokens/s) under load."
    )
    max_ttft_p95_seconds: float | None = Field(
        default=None, gt=0, description="Maximum time to first token, 95th percentile (s)."
    )
    min_prefix_speedup: float | None = Field(
        default=None, ge=0, description="Minimum cold/warm TTFT ratio with a shared prefix."
    )
    min_kv_cache_tokens: int | None = Field(
        default=None, ge=0, description="Minimum KV-cache capacity in tokens."
    )
    max_throughput_regression_percent: float | None = Field(
        default=None,
        ge=0,
        le=100,
        description="Maximum drop of output throughput against the previous passing revision, "
        "in percent.",
    )

    @property
    def any(self) -> bool:
        return any(v is not None for v in self.model_dump().values())


class BenchmarkSpec(_Model):
    """Benchmark every rollout with the bundled runner (vllm-bench) and gate on the result."""

    enabled: bool = Field(default=True, description="Run a benchmark Job after each rollout.")
    image: str | None = Field(
        default=None, max_length=512, description="Runner image; the operator's default if unset."
    )
    scenarios: list[Scenario] = Field(
        default_factory=lambda: list(DEFAULT_SCENARIOS),
        min_length=1,
        max_length=5,
        description="Scenarios to run.",
        json_schema_extra={"default": list(DEFAULT_SCENARIOS)},
    )
    args: list[Annotated[str, Field(max_length=256)]] = Field(
        default_factory=list,
        max_length=32,
        description="Extra runner arguments (workload sizes), e.g. [--requests, '64']. The "
        f"flags the operator sets are refused ({', '.join(OWNED_RUNNER_ARGS)}), as are "
        "prefixes of them and short options.",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    # the same reading as owned_runner_flag()
                    "self.all(a, !a.startsWith('-') || (a.startsWith('--') && "
                    f"!{_RUNNER_CEL}.exists(o, o.startsWith(a.split('=')[0]))) || "
                    f"a.matches('{NEGATIVE_NUMBER}'))",
                    "benchmark.args must not set flags the operator sets ("
                    + ", ".join(OWNED_RUNNER_ARGS)
                    + "), a prefix of one, or a short option",
                )
            ]
        },
    )
    timeout_seconds: int = Field(
        default=1200, ge=10, le=86_400, description="activeDeadlineSeconds of the Job."
    )
    keep_runs: int = Field(default=10, ge=1, le=100, description="Results kept per service.")
    thresholds: BenchmarkThresholds = Field(
        default_factory=BenchmarkThresholds, description="Gates; none by default."
    )
    on_failure: Literal["Report", "Rollback"] = Field(
        default="Report",
        description="Report: set BenchmarkPassed=False. Rollback: also restore the previous "
        "revision that passed (until the spec changes again).",
    )

    @model_validator(mode="after")
    def _no_owned_runner_args(self) -> BenchmarkSpec:  # mirrors the CEL rule
        for arg in self.args:
            flag = owned_runner_flag(arg)
            if flag is not None:
                raise ValueError(
                    f"benchmark.args: {arg}: sets {flag}, which the operator sets "
                    f"({', '.join(OWNED_RUNNER_ARGS)}); short options are refused too"
                )
        return self


OBJECTIVE_PERCENTILES = (50, 90, 95, 99)
# the runner flags an objective's workload sets (render/benchmark.runner_args); benchmark.args
# may not set them as well (a CEL rule on the spec)
OBJECTIVE_RUNNER_FLAGS = ("--input-tokens", "--output-tokens")


class ObjectiveSpec(_Model):
    """What the service's users need: time to first token and time per output token at a
    percentile, optionally for a workload shape and up to a peak. With an objective, each
    revision's benchmark finds the highest concurrency per pod at which it holds
    (status.capacity), and the autoscaler targets that concurrency less the headroom, for the
    revision that serves (re-derived at every promotion): no queue threshold to guess."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "has(self.ttftSeconds) || has(self.tpotSeconds)",
                    "objective needs ttftSeconds, tpotSeconds or both",
                ),
            ]
        }
    )
    ttft_seconds: float | None = Field(
        default=None,
        gt=0,
        le=3600,
        description="Time to first token each request must meet at `percentile` (seconds).",
    )
    tpot_seconds: float | None = Field(
        default=None,
        gt=0,
        le=60,
        description="Time per output token after the first at `percentile` (seconds).",
    )
    percentile: Literal[50, 90, 95, 99] = Field(
        default=95, description="The percentile both latencies are judged at: 50, 90, 95 or 99."
    )
    input_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="The workload's prompt length (tokens, about): the benchmark's "
        "--input-tokens. Unset: the runner's default (128).",
    )
    output_tokens: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="The workload's output length (tokens): the benchmark's --output-tokens. "
        "Unset: the runner's default (64).",
    )
    peak_requests_per_second: float | None = Field(
        default=None,
        gt=0,
        le=1_000_000,
        description="The request rate the service must be able to serve within the objective: "
        "a revision whose measured rate per pod times autoscaling.maxReplicas (less the "
        "headroom) falls short fails its benchmark gate.",
    )
    headroom_percent: int = Field(
        default=20,
        ge=0,
        le=90,
        description="The share of the measured capacity the autoscaler keeps free: it targets "
        "(100 - headroomPercent)% of the concurrency per pod at which the objective holds.",
    )
    latency_guard: bool = Field(
        default=True,
        description="Adds replicas while the live latency breaks the objective: the HPA also "
        "targets each latency the objective names, at its percentile over the service's "
        "serving pods and the last minute (vLLM's own histograms; 0 while idle), at the "
        "objective's value, so that a p95 TTFT 1.5x the objective asks for 1.5x the replicas. "
        "The HPA follows whichever metric wants more.",
    )

    @model_validator(mode="after")
    def _one_latency(self) -> ObjectiveSpec:  # mirrors the CEL rule
        if self.ttft_seconds is None and self.tpot_seconds is None:
            raise ValueError("objective needs ttftSeconds, tpotSeconds or both")
        return self


class AlertThresholds(_Model):
    """Thresholds of the service's alerts (the reference lab's values by default)."""

    kv_cache_usage: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description=f"{alertnames.KV_CACHE_USAGE_HIGH.name}: vllm:kv_cache_usage_perc of the "
        f"fullest pod above this {alertnames.KV_CACHE_USAGE_HIGH.held} (0-1).",
    )
    e2e_latency_p99_seconds: float = Field(
        default=5.0,
        alias="e2eLatencyP99Seconds",  # not to_camel's e2ELatency...
        gt=0,
        le=86_400,
        description=f"{alertnames.E2E_LATENCY_P99_HIGH.name}: end-to-end request latency p99 "
        f"above this (s) {alertnames.E2E_LATENCY_P99_HIGH.held}.",
    )
    ttft_p99_seconds: float = Field(
        default=0.5,
        gt=0,
        le=3600,
        description=f"{alertnames.TTFT_P99_HIGH.name}: time to first token p99 above this (s) "
        f"{alertnames.TTFT_P99_HIGH.held}.",
    )
    tpot_p99_seconds: float = Field(
        default=0.05,
        gt=0,
        le=3600,
        description=f"{alertnames.TPOT_P99_HIGH.name}: time per output token "
        f"(vllm:inter_token_latency_seconds) p99 above this (s) {alertnames.TPOT_P99_HIGH.held}.",
    )
    waiting_requests: float = Field(
        default=50,
        ge=0,
        le=1_000_000,
        description=f"{alertnames.REQUESTS_WAITING_HIGH.name}: waiting requests of the most "
        f"loaded pod above this {alertnames.REQUESTS_WAITING_HIGH.held}.",
    )
    preemptions_per_second: float = Field(
        default=1.0,
        ge=0,
        le=1_000_000,
        description=f"{alertnames.PREEMPTIONS_HIGH.name}: preemptions per second of the service "
        f"above this {alertnames.PREEMPTIONS_HIGH.held}.",
    )


class MonitoringSpec(_Model):
    """Prometheus objects for the service: a PrometheusRule (alerts, and the recording rules
    the autoscaler's band metric comes from) and a PodMonitor, rendered when the Prometheus
    Operator's CRDs (monitoring.coreos.com) are installed."""

    enabled: bool = Field(
        default=True, description="Render the PrometheusRule (alerts and recording rules)."
    )
    pod_monitor: bool = Field(
        default=True, description="Render a PodMonitor that scrapes the vLLM pods' /metrics."
    )
    alerts: AlertThresholds = Field(
        default_factory=AlertThresholds, description="Alert thresholds."
    )


class VLLMServiceSpec(_Model):
    """Desired state of a vLLM deployment."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.engine.tensorParallelSize == "
                    "(self.resources.gpus == 0 ? 1 : self.resources.gpus)",
                    "engine.tensorParallelSize must equal resources.gpus (GPUs per pod), "
                    "or be 1 on CPU (resources.gpus: 0)",
                    ".engine.tensorParallelSize",
                ),
                cel(
                    f"self.resources.gpus > 0 || !has(self.engine.blockSize) || "
                    f"self.engine.blockSize % {CPU_BLOCK_SIZE_MULTIPLE} == 0",
                    f"engine.blockSize must be a multiple of {CPU_BLOCK_SIZE_MULTIPLE} on CPU "
                    "(resources.gpus: 0): vLLM's CPU attention rejects 8 and 16",
                    ".engine.blockSize",
                ),
                cel(
                    "self.resources.gpus > 0 || !has(self.engine.kvCacheMemory) || "
                    "!has(self.resources.memory) || quantity(self.engine.kvCacheMemory)"
                    ".isLessThan(quantity(self.resources.memory))",
                    "engine.kvCacheMemory must be less than resources.memory on CPU "
                    "(resources.gpus: 0): the KV cache lives in the pod's memory",
                    ".engine.kvCacheMemory",
                ),
                cel(
                    "self.modelCache.type != 'PVC' || has(self.modelCache.claimName)",
                    "modelCache.claimName is required when modelCache.type is PVC",
                    ".modelCache",
                ),
                cel(
                    "!has(self.objective) || (self.benchmark.enabled && "
                    "self.benchmark.scenarios.exists(s, s == 'batching'))",
                    "objective needs benchmark.enabled and the batching scenario in "
                    "benchmark.scenarios: its ladder measures the capacity",
                    ".objective",
                ),
                cel(
                    "!has(self.objective) || ((!has(self.objective.inputTokens) || "
                    "!self.benchmark.args.exists(a, a.startsWith('--input-tokens'))) && "
                    "(!has(self.objective.outputTokens) || "
                    "!self.benchmark.args.exists(a, a.startsWith('--output-tokens'))))",
                    "benchmark.args must not set --input-tokens or --output-tokens when "
                    "objective.inputTokens or objective.outputTokens sets them",
                    ".benchmark.args",
                ),
                cel(
                    "self.drainSeconds <= self.terminationGracePeriodSeconds",
                    "drainSeconds (the preStop pause) must not exceed "
                    "terminationGracePeriodSeconds",
                    ".drainSeconds",
                ),
                cel(
                    "!has(self.shutdownTimeoutSeconds) || self.drainSeconds + "
                    "self.shutdownTimeoutSeconds <= self.terminationGracePeriodSeconds",
                    "drainSeconds + shutdownTimeoutSeconds must not exceed "
                    "terminationGracePeriodSeconds (the kubelet kills the pod then)",
                    ".shutdownTimeoutSeconds",
                ),
            ]
        }
    )
    model: ModelSpec = Field(description="The model to serve.")
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="vLLM server image. Unset: the operator's default for the accelerator "
        "(settings VLLM_OPERATOR_GPU_IMAGE, vllm/vllm-openai of the pinned vLLM, or "
        "VLLM_OPERATOR_CPU_IMAGE when resources.gpus is 0), so upgrading the operator "
        "upgrades vLLM.",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="Image pull policy."
    )
    image_pull_secrets: list[Name] = Field(
        default_factory=list, max_length=16, description="Secrets for pulling the image."
    )
    port: int = Field(default=8000, ge=1024, le=65535, description="OpenAI API port.")
    replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Replicas when autoscaling is off (`kubectl scale` sets this).",
    )
    engine: EngineSpec = Field(default_factory=EngineSpec, description="Engine arguments.")
    resources: ResourceSpec = Field(default_factory=ResourceSpec, description="Resources.")
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=128,
        description="Extra environment variables, one per name. Names the operator sets are "
        f"refused: {', '.join(RESERVED_ENV)} (use the spec fields).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "x-kubernetes-validations": [
                cel(
                    "self.all(e, !(e.name in [" + ", ".join(f"'{n}'" for n in RESERVED_ENV) + "]))",
                    "env must not set variables the operator sets ("
                    + ", ".join(RESERVED_ENV)
                    + "); use modelCache, huggingFaceToken and apiKey",
                )
            ],
        },
    )
    hugging_face_token: SecretKeyRef | None = Field(
        default=None, description="Secret holding a Hugging Face token (HF_TOKEN)."
    )
    api_key: SecretKeyRef | None = Field(
        default=None, description="Secret holding the API key clients must send (VLLM_API_KEY)."
    )
    model_cache: ModelCacheSpec = Field(
        default_factory=ModelCacheSpec, description="Hugging Face cache volume."
    )
    probes: ProbeSpec = Field(default_factory=ProbeSpec, description="Health probes.")
    termination_grace_period_seconds: int = Field(
        default=120,
        ge=0,
        le=3600,
        description="Time for in-flight requests to finish after the pod is told to stop "
        "(the preStop pause, then vLLM's drain: shutdownTimeoutSeconds).",
    )
    drain_seconds: int = Field(
        default=10,
        ge=0,
        le=600,
        description="preStop pause so load balancers stop routing before vLLM shuts down.",
    )
    shutdown_timeout_seconds: int | None = Field(
        default=None,
        ge=0,
        le=3600,
        description="How long vLLM lets requests in flight finish after it is told to stop, "
        "refusing new ones (vLLM's --shutdown-timeout, vLLM 0.18 and later; left out for an "
        "image whose tag names an older vLLM). Default: "
        "terminationGracePeriodSeconds - drainSeconds - 5 (105 s with the defaults), so a "
        "stream in flight when a rollout or a scale-in stops its pod ends normally. 0: the "
        "flag is not passed and vLLM aborts requests in flight at once (its own default; for "
        "images older than the flag).",
    )
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec, description="Queue-depth autoscaling."
    )
    objective: ObjectiveSpec | None = Field(
        default=None,
        description="A latency objective: the benchmark measures each revision's capacity "
        "against it and the autoscaler follows the serving revision's capacity. Unset: the "
        "queue band of autoscaling (targetQueueDepth, scaleDownQueueDepth).",
    )
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="Rollout strategy.")
    benchmark: BenchmarkSpec = Field(
        default_factory=BenchmarkSpec, description="Benchmark each rollout; gates."
    )
    monitoring: MonitoringSpec = Field(
        default_factory=MonitoringSpec, description="Alerts, recording rules, scraping."
    )
    node_selector: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict, description="Node labels pods must match."
    )
    tolerations: list[dict[str, JsonValue]] = Field(
        default_factory=list, max_length=64, description="Pod tolerations."
    )
    affinity: dict[str, JsonValue] | None = Field(default=None, description="Pod affinity.")
    priority_class_name: str | None = Field(
        default=None, max_length=253, description="PriorityClass of the pods."
    )
    runtime_class_name: str | None = Field(
        default=None, max_length=253, description="RuntimeClass, e.g. nvidia."
    )
    pod_labels: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict, description="Extra labels on the pods."
    )
    pod_annotations: dict[str, Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=dict, description="Extra annotations on the pods."
    )

    @model_validator(mode="after")
    def _cross_field(self) -> VLLMServiceSpec:
        if self.engine.tensor_parallel_size != (self.resources.gpus or 1):
            raise ValueError(
                "engine.tensorParallelSize must equal resources.gpus (GPUs per pod), "
                "or be 1 on CPU (resources.gpus: 0)"
            )
        if self.resources.on_cpu:
            block = self.engine.block_size
            if block is not None and block % CPU_BLOCK_SIZE_MULTIPLE:
                raise ValueError(
                    f"engine.blockSize must be a multiple of {CPU_BLOCK_SIZE_MULTIPLE} on CPU "
                    "(resources.gpus: 0): vLLM's CPU attention rejects 8 and 16"
                )
            kv, memory = self.engine.kv_cache_memory, self.resources.memory
            if (
                kv is not None
                and memory is not None
                and (parse_quantity(kv) >= parse_quantity(memory))
            ):
                raise ValueError(
                    "engine.kvCacheMemory must be less than resources.memory on CPU "
                    "(resources.gpus: 0): the KV cache lives in the pod's memory"
                )
        if self.autoscaling.min_replicas > self.autoscaling.max_replicas:
            raise ValueError("autoscaling.minReplicas must be <= autoscaling.maxReplicas")
        p = self.probes
        if (
            p.startup_budget == "Measured"
            and p.measured_startup_min_seconds > p.startup_timeout_seconds
        ):
            raise ValueError(
                "probes.measuredStartupMinSeconds must be <= probes.startupTimeoutSeconds "
                "(the measured budget lies between them)"
            )
        if self.model_cache.type == "PVC" and not self.model_cache.claim_name:
            raise ValueError("modelCache.claimName is required when modelCache.type is PVC")
        if self.drain_seconds > self.termination_grace_period_seconds:
            raise ValueError(
                "drainSeconds (the preStop pause) must not exceed terminationGracePeriodSeconds"
            )
        if (
            self.shutdown_timeout_seconds is not None
            and self.drain_seconds + self.shutdown_timeout_seconds
            > self.termination_grace_period_seconds
        ):
            raise ValueError(
                "drainSeconds + shutdownTimeoutSeconds must not exceed "
                "terminationGracePeriodSeconds (the kubelet kills the pod then)"
            )
        self._objective_measurable()
        names = [e.name for e in self.env]
        if len(set(names)) != len(names):
            raise ValueError(
                f"env: duplicate names {sorted({n for n in names if names.count(n) > 1})}"
            )
        reserved = sorted(set(names) & set(RESERVED_ENV))
        if reserved:
            raise ValueError(
                f"env must not set variables the operator sets ({', '.join(reserved)}); use "
                "modelCache, huggingFaceToken and apiKey"
            )
        return self

    def _objective_measurable(self) -> None:  # mirrors the two CEL rules on objective
        o = self.objective
        if o is None:
            return
        if not self.benchmark.enabled or "batching" not in self.benchmark.scenarios:
            raise ValueError(
                "objective needs benchmark.enabled and the batching scenario in "
                "benchmark.scenarios: its ladder measures the capacity"
            )
        for flag, value in zip(
            OBJECTIVE_RUNNER_FLAGS, (o.input_tokens, o.output_tokens), strict=True
        ):
            if value is not None and any(a.startswith(flag) for a in self.benchmark.args):
                raise ValueError(
                    "benchmark.args must not set --input-tokens or --output-tokens when "
                    "objective.inputTokens or objective.outputTokens sets them"
                )

    @property
    def gated(self) -> bool:
        """The benchmark can fail a revision: thresholds set, or an objective (its gate)."""
        return self.benchmark.thresholds.any or self.objective is not None

    @property
    def served_model_name(self) -> str:
        return self.model.served_model_name or self.model.reference

    @property
    def shutdown_timeout(self) -> int:
        """vLLM's --shutdown-timeout (0: not passed): the spec's, or what the grace period
        leaves after the preStop pause, less 5 s for the process to exit."""
        if self.shutdown_timeout_seconds is not None:
            return self.shutdown_timeout_seconds
        return max(0, self.termination_grace_period_seconds - self.drain_seconds - 5)

    @property
    def kv_cache_bytes(self) -> int | None:
        """--kv-cache-memory-bytes: engine.kvCacheMemory, or on CPU a quarter of the pod's
        memory (whole MiB). Without it vLLM's CPU backend sizes the cache from the node's
        memory (gpuMemoryUtilization of it), not the pod's limit: it fails to start or is
        OOM-killed."""
        if self.engine.kv_cache_memory is not None:
            return math.floor(parse_quantity(self.engine.kv_cache_memory))
        if self.resources.on_cpu and self.resources.memory is not None:
            share = parse_quantity(self.resources.memory) / CPU_KV_CACHE_SHARE_OF_MEMORY
            return max(1, math.floor(share / 2**20)) * 2**20
        return None

    @property
    def startup_failure_threshold(self) -> int:
        return math.ceil(self.probes.startup_timeout_seconds / self.probes.period_seconds)


class Service(_Model):
    """A parsed VLLMService: the parts of the object the operator works with."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)
    # the CRD checks the same (a CEL rule on metadata.name): every child name derives from it
    name: str = Field(max_length=MAX_NAME_LENGTH, pattern=DNS_LABEL)
    namespace: str
    uid: str
    generation: int
    spec: VLLMServiceSpec
    # the rerun-benchmark annotation's value: a new value starts a fresh run of the revision
    rerun: str | None = None
    # the release-replicas-hold annotation is set: spec.replicas applies at once
    release_hold: bool = False
    # the promote / abort annotations' values: the canary revision to promote or abort now
    promote: str | None = None
    abort: str | None = None
    # the holder's wake annotation (RFC 3339): a replica asked for by a held request
    wake_requested_at: str | None = None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Service:
        meta = body["metadata"]
        return cls(
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta["uid"],
            generation=meta.get("generation", 1),
            spec=VLLMServiceSpec.model_validate(known_fields(VLLMServiceSpec, body.get("spec"))),
            rerun=(meta.get("annotations") or {}).get(RERUN_ANNOTATION) or None,
            release_hold=RELEASE_HOLD_ANNOTATION in (meta.get("annotations") or {}),
            promote=(meta.get("annotations") or {}).get(PROMOTE_ANNOTATION) or None,
            abort=(meta.get("annotations") or {}).get(ABORT_ANNOTATION) or None,
            wake_requested_at=(meta.get("annotations") or {}).get(WAKE_ANNOTATION) or None,
        )
