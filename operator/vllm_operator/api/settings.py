"""Operator settings, from environment variables prefixed VLLM_OPERATOR_ (pydantic-settings).

Handed to handlers through kopf's memo; renderers receive them as an argument.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

log = logging.getLogger("vllm_operator")


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="VLLM_OPERATOR_", frozen=True)

    field_manager: str = Field(default="vllm-operator", description="Server-side apply owner.")
    # the operator's own annotations on its children (desired-hash, generation) use this prefix
    annotation_prefix: str = "vllm-operator.dev"
    # A drift timer re-runs the same reconcile; reads only, unless something drifted.
    resync_seconds: float = 60.0
    workers: int = Field(
        default=32,
        ge=1,
        le=512,
        description="Services reconciled in parallel. A reconcile mostly waits for the API "
        "server: more workers roll a large fleet out sooner, at the price of more requests in "
        "flight (100 services at once on 2 cores: Ready p95 12-13 s with 32, 15-19 s with 16; "
        "benchmarks/operator_scale.py).",
    )
    replicas_hold_seconds: float = Field(
        default=300.0,
        ge=0,
        description="Switching autoscaling off holds the count the autoscaler chose for at "
        "most this long (then spec.replicas applies; 0: no hold). 300 s is the HPA's own "
        "scale-down stabilisation window.",
    )
    slow_start_factor: float = Field(
        default=1.5,
        gt=1,
        le=100,
        description="A pod's start (created to Ready) slower than this multiple of the median "
        "of its revision's earlier recent starts is a Warning event (SlowStart).",
    )
    cluster_domain: str = "cluster.local"
    namespace: str | None = Field(
        default=None, description="Watch only this namespace (legacy; see `namespaces`)."
    )
    namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Watch only these namespaces (JSON list or comma-separated in the "
        "environment variable); empty together with `namespace`: the whole cluster.",
    )
    # Leader election on a Lease, with fencing, is the one HA mode (runtime/leader.py says why the
    # timings must satisfy lease > deadline > retry): every replica watches, the leader writes.
    lease_name: str = Field(default="vllm-operator", description="The leader-election Lease.")
    lease_namespace: str | None = Field(
        default=None,
        description="Namespace of the Lease; unset: POD_NAMESPACE, else the pod's own.",
    )
    lease_duration_seconds: float = Field(
        default=15.0,
        gt=0,
        description="A standby takes the Lease after seeing it unrenewed this long.",
    )
    renew_deadline_seconds: float = Field(
        default=10.0,
        gt=0,
        description="The leader stops writing when it has not renewed for this long.",
    )
    retry_period_seconds: float = Field(
        default=2.0, gt=0, description="How often the leader renews and a standby looks."
    )
    log_json: bool = Field(default=False, description="JSON log lines (for log pipelines).")
    verbose: bool = Field(default=False, description="Debug logging.")
    liveness_endpoint: str = "http://0.0.0.0:8080/healthz"
    # The vLLM image of a VLLMService without spec.image, per accelerator. Pinned to one vLLM
    # release (scripts/versions.env), whose flags the renderer is tested against (tests/vllm).
    gpu_image: str = Field(
        default="vllm/vllm-openai:v0.32.0",
        description="Default vLLM image for GPU serving (resources.gpus > 0).",
    )
    cpu_image: str = Field(
        default="public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0",
        description="Default vLLM image for CPU serving (resources.gpus: 0): vLLM's own CPU "
        "release image, or one built from images/vllm-cpu.",
    )
    benchmark_image: str = Field(
        default="ghcr.io/vllm-operator/vllm-bench:0.1.0",
        description="Default image of the benchmark Job (images/benchmark/Dockerfile).",
    )
    holder_image: str = Field(
        default="ghcr.io/vllm-operator/vllm-holder:0.1.0",
        description="Image of the scale-to-zero holder (images/holder/Dockerfile), deployed in "
        "a namespace where a service has autoscaling.minReplicas 0.",
    )
    metrics_port: int = Field(
        default=8081, description="Port of the operator's own Prometheus metrics (0: off)."
    )
    monitoring_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels on the rendered PrometheusRule and PodMonitor, for the "
        'Prometheus\'s ruleSelector/podMonitorSelector (e.g. {"release": "prometheus"} '
        "for kube-prometheus-stack). JSON in the environment variable.",
    )
    runbook_url: str = Field(
        default="https://github.com/vllm-operator/vllm-operator/blob/main/docs/runbooks.md",
        description="Runbook page the alerts link to; each alert adds its own #anchor.",
    )
    prometheus_url: str = Field(
        default="",
        description="The Prometheus the operator reads live figures from (rollout.canary.bake: "
        "the canary against the stable pods; spec.objective: the live workload shape a "
        "revision's benchmark sends), e.g. "
        "http://prometheus-operated.monitoring.svc:9090; empty: no bake can run (the status "
        "says so).",
    )
    scrape_interval: str = Field(
        default="15s", description="How often the rendered PodMonitor scrapes vLLM's /metrics."
    )
    # kopf's watch requests are restarted after this many seconds; short in tests
    watch_timeout_seconds: int = 300
    # Pod Security of the vLLM pods (render/deployment.py): "restricted" runs them as a
    # non-root user with a writable HOME volume; "baseline" keeps the image's own user
    vllm_pod_security: Literal["restricted", "baseline"] = Field(
        default="restricted",
        description='Pod Security level the vLLM pods meet: "restricted" (non-root user '
        '65532, HOME on an emptyDir) or "baseline" (the image\'s own user, for images that '
        "need root).",
    )

    @field_validator("namespaces", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _election_timings(self) -> OperatorSettings:
        # runtime/leader.py's fencing argument: the holder stops writing (renew deadline) before a
        # standby may take over (lease duration), and renews several times in between
        if not self.lease_duration_seconds > self.renew_deadline_seconds:
            raise ValueError(
                "lease_duration_seconds must be greater than renew_deadline_seconds "
                f"({self.lease_duration_seconds} <= {self.renew_deadline_seconds})"
            )
        if not self.renew_deadline_seconds > self.retry_period_seconds:
            raise ValueError(
                "renew_deadline_seconds must be greater than retry_period_seconds "
                f"({self.renew_deadline_seconds} <= {self.retry_period_seconds})"
            )
        return self

    def watched_namespaces(self) -> tuple[str, ...]:
        """The namespaces the operator watches; empty: the whole cluster."""
        names = [*self.namespaces, *([self.namespace] if self.namespace else [])]
        return tuple(dict.fromkeys(names))

    def warn_retired(self) -> list[str]:
        """Logs (and returns) each retired setting still set in the environment: kopf peering
        and standalone mode are gone (leader election is the one HA mode), and the operator
        sets no finalizer. Each is ignored; a warning says so rather than silence."""
        found = [name for name in RETIRED if os.environ.get(f"VLLM_OPERATOR_{name}")]
        for name in found:
            log.warning(
                "VLLM_OPERATOR_%s is no longer used and is ignored: %s", name, RETIRED[name]
            )
        return found


# settings earlier versions read, and why each is gone (docs/design/runtime.md)
RETIRED = {
    "STANDALONE": "leader election on a Lease is the one HA mode (a single replica takes the "
    "Lease at once)",
    "LEADER_ELECTION": "leader election is always on",
    "PEERING_NAME": "kopf peering is gone; leader election replaces it",
    "PRIORITY": "kopf peering is gone; leader election replaces it",
    "FINALIZER": "the operator adds no finalizer",
}
