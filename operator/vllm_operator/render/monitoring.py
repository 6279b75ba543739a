"""Step 2 of the flow (render): Prometheus objects for a service, as pure functions.

- the alert rules of the reference lab, written against vLLM 0.32's metric names, plus the
  operator's own alerts (benchmark gate failed, rollback in effect, autoscaler without metric);
- the recording rules of the autoscaler's *band metric* (see `band_rules`);
- a PrometheusRule and a PodMonitor (monitoring.coreos.com/v1) per VLLMService.

The same rule builders also produce the plain rules file for a Prometheus without the
Prometheus Operator (vllm_operator.generate.monitoring writes deploy/monitoring/), there for every
service at once with the default thresholds: the only difference is the `Scope`.

Series carry the labels `namespace`, `pod` and `service` (the pod's
app.kubernetes.io/instance label, relabelled at scrape time by the PodMonitor or by the plain
scrape config), so every rule groups per service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_operator.api import alertnames as names
from vllm_operator.api.alertnames import AlertName
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import AlertThresholds, Service
from vllm_operator.render.canary import COMPONENT as CANARY_COMPONENT
from vllm_operator.render.canary import canary_name
from vllm_operator.render.meta import labels, metadata, selector_labels
from vllm_operator.render.service import PORT_NAME

MONITORING_API = "monitoring.coreos.com/v1"
# the CRDs whose presence decides whether render_monitoring's objects can be applied
MONITORING_CRDS = {
    "PrometheusRule": "prometheusrules.monitoring.coreos.com",
    "PodMonitor": "podmonitors.monitoring.coreos.com",
}
# the pod label that names the VLLMService; relabelled into the `service` label at scrape time
INSTANCE_LABEL = "app.kubernetes.io/instance"
SERVICE_RELABEL_SOURCE = "__meta_kubernetes_pod_label_app_kubernetes_io_instance"
# a canary's series: `service` is `<name>-canary` (no rule or autoscaler of the service counts
# it) and `canary_of` names the service whose canary it is, from the pod's component label
# (canary) and its serving.vllm-operator.dev/service label, so that an alert of a canary reads
# as that service's revision on trial, not as a new service failing (and a route can tell it)
CANARY_OF_LABEL = "canary_of"
CANARY_OF_SOURCES = (
    "__meta_kubernetes_pod_label_app_kubernetes_io_component",
    "__meta_kubernetes_pod_label_serving_vllm_operator_dev_service",
)
CANARY_OF_REGEX = "canary;(.+)"

# ---- the autoscaler's band metric -----------------------------------------------------------
# What the HPA targets (a Pods metric, served by prometheus-adapter). One series per vLLM pod,
# with the pod's namespace and pod labels, whose value is the service's band value.
BAND_METRIC = "vllm_operator:queue_depth_band"
# per service: the raw queue metric summed over the service's pods (over a pod's engines
# first), the number of pods reporting it, their average, and the band value derived from them
QUEUE_SUM_RECORD = "namespace_service:vllm_queue_depth:sum"
QUEUE_PODS_RECORD = "namespace_service:vllm_queue_depth:pods"
QUEUE_AVG_RECORD = "namespace_service:vllm_queue_depth:avg"
BAND_SERVICE_RECORD = "namespace_service:vllm_operator_queue_depth_band"
# Above the band the metric is at least this multiple of the target, so the HPA's usage ratio
# clears its default tolerance (0.1, --horizontal-pod-autoscaler-tolerance) and adds at least
# one replica (ceil(1.2 n) >= n + 1) even when the average is just over the target.
SCALE_UP_FLOOR = 1.2

# ---- the autoscaler's capacity metric (a latency objective: decide/capacity.py) ---------------
# Requests in flight per pod, running + waiting (over a pod's engines): what the HPA targets at
# the serving revision's measured capacity less the headroom. One series per vLLM pod.
IN_FLIGHT_METRIC = "vllm_operator:requests_in_flight"
RUNNING_METRIC = "vllm:num_requests_running"
WAITING_METRIC = "vllm:num_requests_waiting"

# ---- the live latency guard (a latency objective) ---------------------------------------------
# The service's live TTFT and TPOT at a percentile (label `quantile`), over its serving pods
# (not a canary's) and the last GUARD_WINDOW, from vLLM's own histograms: the same value on
# every serving pod, so that a Pods metric's average is the service's percentile and the HPA's
# proportional rule with the objective as the target gives replicas x live / objective. With no
# request in the window (histogram_quantile is NaN there) it is 0: a metric missing for an
# idle service would stop the HPA scaling down.
# A breach must hold: the series is the lowest of the percentile evaluated at GUARD_STEP over
# the last GUARD_HOLD (a subquery: 3 evaluations in Prometheus 3's left-open ranges, 4 in 2.x),
# so one transient (a burst that ends before a pod could start, a pod falling over while its
# neighbours start) does not ask for replicas; a breach that lasts does, 30-45 s later.
LIVE_TTFT_METRIC = "vllm_operator:live_ttft_seconds"
LIVE_TPOT_METRIC = "vllm_operator:live_tpot_seconds"
GUARD_WINDOW_SECONDS = 60
GUARD_STEP_SECONDS = 15
GUARD_HOLD_SECONDS = 45
GUARD_WINDOW = f"{GUARD_WINDOW_SECONDS // 60}m"
GUARD_STEP = f"{GUARD_STEP_SECONDS}s"
GUARD_HOLD = f"{GUARD_HOLD_SECONDS}s"
# per request, as the benchmark's TPOT ((e2e - ttft) / (tokens - 1)); vLLM before 0.11 only had
# the per-token histogram
LIVE_HISTOGRAMS = {
    LIVE_TTFT_METRIC: ("vllm:time_to_first_token_seconds",),
    LIVE_TPOT_METRIC: (
        "vllm:request_time_per_output_token_seconds",
        "vllm:time_per_output_token_seconds",
    ),
}
GUARD_PERCENTILES = (50, 90, 95, 99)


def guard_quantile(percentile: int) -> str:
    """The `quantile` label of a percentile: 95 -> "0.95"."""
    return f"{percentile / 100:g}"


# ---- the operator's own metrics the rules use (exported by vllm_operator.metrics) ----
BENCHMARK_PASSED = "vllm_operator_benchmark_passed"
ROLLBACK_ACTIVE = "vllm_operator_rollback_active"
AUTOSCALER_SCALING_ACTIVE = "vllm_operator_autoscaler_scaling_active"

RATE_WINDOW = "5m"


@dataclass(frozen=True)
class Scope:
    """Which series a rule set covers: one service (label matchers on namespace and service)
    or every service (no matchers; the plain rules file)."""

    namespace: str | None = None
    service: str | None = None

    def sel(self, metric: str, extra: str = "") -> str:
        """`metric{namespace="..",service="..",extra}` (or the bare name in the generic scope)."""
        parts = []
        if self.namespace is not None:
            parts.append(f'namespace="{self.namespace}"')
        if self.service is not None:
            parts.append(f'service="{self.service}"')
        if extra:
            parts.append(extra)
        return f"{metric}{{{','.join(parts)}}}" if parts else metric


def _num(x: float) -> str:
    """A threshold as PromQL and people read it: 0.9, 5, 0.05 (no trailing .0)."""
    return f"{x:g}"


# ---- alerts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlertDef:
    """One alert: its PromQL condition is `query <op> threshold`, held for `id.for_`."""

    # name and `for`, shared with the API's descriptions (vllm_operator.api.alertnames)
    id: AlertName
    query: str  # the value compared (what a dashboard plots, what a live test evaluates)
    threshold: float
    summary: str
    description: str
    severity: str = "warning"
    op: str = ">"

    @property
    def name(self) -> str:
        return self.id.name

    @property
    def for_(self) -> str:
        return self.id.for_

    @property
    def expr(self) -> str:
        return f"{self.query} {self.op} {_num(self.threshold)}"


def _quantile(scope: Scope, histogram: str, q: float = 0.99) -> str:
    return (
        f"histogram_quantile({q}, sum by (namespace, service, {CANARY_OF_LABEL}, le) "
        f"(rate({scope.sel(histogram + '_bucket')}[{RATE_WINDOW}])))"
    )


SERVICE_TEXT = "{{ $labels.namespace }}/{{ $labels.service }}"
# a vLLM alert's subject: the service, or the canary of one (CANARY_OF_LABEL)
VLLM_TEXT = (
    SERVICE_TEXT + f"{{{{ if $labels.{CANARY_OF_LABEL} }}}} (the canary of "
    f"{{{{ $labels.namespace }}}}/{{{{ $labels.{CANARY_OF_LABEL} }}}}: a new revision on "
    "trial, not a serving pod){{ end }}"
)
BY_SERVICE = f"by (namespace, service, {CANARY_OF_LABEL})"
VALUE_TEXT = '{{ $value | printf "%.3g" }}'


def vllm_alerts(scope: Scope, t: AlertThresholds) -> list[AlertDef]:
    """The reference lab's six alerts on vLLM 0.32's metric names.

    Time per output token uses vllm:inter_token_latency_seconds: like the lab's
    vllm:time_per_output_token_seconds it was renamed from, it observes every gap between two
    output tokens, so its p99 sees decode stalls (preemption, a long prefill batched in).
    vllm:request_time_per_output_token_seconds observes one mean per request, which averages a
    stall away over the request's tokens and would under-report the p99 the lab's 50 ms is about.
    """
    s = VLLM_TEXT
    return [
        AlertDef(
            id=names.KV_CACHE_USAGE_HIGH,
            query=f"max {BY_SERVICE} ({scope.sel('vllm:kv_cache_usage_perc')})",
            threshold=t.kv_cache_usage,
            summary=f"vLLM {s}: KV cache {{{{ $value | humanizePercentage }}}} full",
            description=(
                f"The fullest pod of {s} uses more than {_num(t.kv_cache_usage * 100)}% of its "
                f"KV cache (vllm:kv_cache_usage_perc) {names.KV_CACHE_USAGE_HIGH.held}: new "
                "requests queue and running ones get preempted. Add replicas, lower "
                "max-num-seqs or max-model-len, or give the cache more GPU memory."
            ),
        ),
        AlertDef(
            id=names.E2E_LATENCY_P99_HIGH,
            query=_quantile(scope, "vllm:e2e_request_latency_seconds"),
            threshold=t.e2e_latency_p99_seconds,
            summary=f"vLLM {s}: end-to-end latency p99 {VALUE_TEXT} s",
            description=(
                f"The 99th percentile of request latency of {s} "
                f"(vllm:e2e_request_latency_seconds) is above "
                f"{_num(t.e2e_latency_p99_seconds)} s {names.E2E_LATENCY_P99_HIGH.held}."
            ),
        ),
        AlertDef(
            id=names.TTFT_P99_HIGH,
            query=_quantile(scope, "vllm:time_to_first_token_seconds"),
            threshold=t.ttft_p99_seconds,
            summary=f"vLLM {s}: time to first token p99 {VALUE_TEXT} s",
            description=(
                f"The 99th percentile of time to first token of {s} "
                f"(vllm:time_to_first_token_seconds) is above {_num(t.ttft_p99_seconds)} s "
                f"{names.TTFT_P99_HIGH.held}: requests wait in the queue or prefill is saturated."
            ),
        ),
        AlertDef(
            id=names.TPOT_P99_HIGH,
            query=_quantile(scope, "vllm:inter_token_latency_seconds"),
            threshold=t.tpot_p99_seconds,
            summary=f"vLLM {s}: time per output token p99 {VALUE_TEXT} s",
            description=(
                f"The 99th percentile of the time between output tokens of {s} "
                f"(vllm:inter_token_latency_seconds) is above {_num(t.tpot_p99_seconds)} s "
                f"{names.TPOT_P99_HIGH.held}: decode batches are too large or stalled by "
                "preemption."
            ),
        ),
        AlertDef(
            id=names.REQUESTS_WAITING_HIGH,
            query=(
                f"max {BY_SERVICE} (sum by (namespace, service, {CANARY_OF_LABEL}, pod) "
                f"({scope.sel('vllm:num_requests_waiting')}))"
            ),
            threshold=t.waiting_requests,
            summary=f"vLLM {s}: {VALUE_TEXT} requests waiting on one pod",
            description=(
                f"A pod of {s} has more than {_num(t.waiting_requests)} requests waiting "
                f"(vllm:num_requests_waiting) {names.REQUESTS_WAITING_HIGH.held}: the "
                "autoscaler is off, at its maximum, or not keeping up."
            ),
        ),
        AlertDef(
            id=names.PREEMPTIONS_HIGH,
            query=(
                f"sum {BY_SERVICE} (rate({scope.sel('vllm:num_preemptions_total')}[{RATE_WINDOW}]))"
            ),
            threshold=t.preemptions_per_second,
            summary=f"vLLM {s}: {VALUE_TEXT} preemptions/s",
            description=(
                f"{s} preempts more than {_num(t.preemptions_per_second)} requests per second "
                f"(vllm:num_preemptions_total) {names.PREEMPTIONS_HIGH.held}: the KV cache is "
                "too small for the load; preempted requests are recomputed, which wastes GPU "
                "time."
            ),
        ),
    ]


def operator_alerts(scope: Scope) -> list[AlertDef]:
    """The operator's own alerts, on the gauges of vllm_operator.metrics."""
    s = SERVICE_TEXT
    return [
        AlertDef(
            id=names.BENCHMARK_GATE_FAILED,
            query=scope.sel(BENCHMARK_PASSED),
            op="==",
            threshold=0,
            summary=f"vLLM {s}: revision {{{{ $labels.revision }}}} failed its benchmark gates",
            description=(
                f"The newest benchmarked revision of {s} did not meet "
                "spec.benchmark.thresholds; kubectl describe vllmservice shows which "
                "(status.benchmark.failures)."
            ),
        ),
        AlertDef(
            id=names.ROLLED_BACK,
            query=scope.sel(ROLLBACK_ACTIVE),
            op="==",
            threshold=1,
            summary=f"vLLM {s}: rolled back to revision {{{{ $labels.revision }}}}",
            description=(
                f"The spec of {s} asks for a revision that failed its benchmark gates, so the "
                "operator runs revision {{ $labels.revision }}, the last one that passed, "
                "until the spec changes again."
            ),
        ),
        AlertDef(
            id=names.AUTOSCALER_METRIC_UNAVAILABLE,
            query=scope.sel(AUTOSCALER_SCALING_ACTIVE),
            op="==",
            threshold=0,
            summary=f"vLLM {s}: the autoscaler cannot get its metric",
            description=(
                f"The HorizontalPodAutoscaler of {s} reports ScalingActive=False "
                f"{names.AUTOSCALER_METRIC_UNAVAILABLE.held} "
                f"(no custom metrics API, or no {BAND_METRIC} series for the pods): it cannot "
                "scale. Check prometheus-adapter, the recording rules and the PodMonitor."
            ),
        ),
    ]


def alert_rule(a: AlertDef, runbook_url: str) -> dict[str, Any]:
    return {
        "alert": a.name,
        "expr": a.expr,
        "for": a.for_,
        "labels": {"severity": a.severity},
        "annotations": {
            "summary": a.summary,
            "description": a.description,
            "runbook_url": f"{runbook_url}#{a.name.lower()}",
        },
    }


# ---- the band (autoscaling) -----------------------------------------------------------------


def band_rules(scope: Scope, raw_metric: str, high: float, low: float) -> list[dict[str, Any]]:
    """Recording rules of the per-pod band metric the HPA targets (with target `high`).

    With A the per-pod average of the raw queue over the service's pods, every pod of the
    service reports
        B = max(A, 1.2 high)  when A > high   -> usage ratio >= 1.2: scale up (proportionally)
        B = high              when low < A <= high -> ratio exactly 1: hold
        B = A                 when A <= low   -> ratio <= low/high: scale down
    and the HPA's scale-down stabilization window (scaleDownStabilizationSeconds, 300 s) turns
    "scale down" into "scale down only when A stayed <= low for the whole window", because the
    HPA acts on the highest recommendation of that window.

    The bounds compare the sum S of the pods' queues with the bound times the pod count N
    (S > high N, S <= low N), never A itself: queue lengths are integers, so averages of exactly
    a bound are common, and avg() adds the pods into a running mean that lands a rounding error
    either side of the integer depending on the order of the pods (issue 19: at exactly 20 some
    services scaled up). S and N of integers are exact, and A = S / N is the correctly rounded
    quotient, exactly the bound when S = bound N.
    """
    per_pod = f"sum by (namespace, service, pod) ({scope.sel(raw_metric)})"
    total, pods = scope.sel(QUEUE_SUM_RECORD), scope.sel(QUEUE_PODS_RECORD)
    avg = scope.sel(QUEUE_AVG_RECORD)
    band = scope.sel(BAND_SERVICE_RECORD)
    return [
        {"record": QUEUE_SUM_RECORD, "expr": f"sum by (namespace, service) ({per_pod})"},
        {"record": QUEUE_PODS_RECORD, "expr": f"count by (namespace, service) ({per_pod})"},
        {"record": QUEUE_AVG_RECORD, "expr": f"{total} / {pods}"},
        {
            "record": BAND_SERVICE_RECORD,
            "expr": (
                f"clamp_min({avg} and {total} > {_num(high)} * {pods},"
                f" {_num(SCALE_UP_FLOOR * high)})"
                f" or ({avg} and {total} <= {_num(low)} * {pods})"
                f" or 0 * {avg} + {_num(high)}"
            ),
        },
        {
            "record": BAND_METRIC,
            "expr": (
                f"group by (namespace, service, pod) ({scope.sel(raw_metric)})"
                f" * on (namespace, service) group_left {band}"
            ),
        },
    ]


def in_flight_rules(scope: Scope) -> list[dict[str, Any]]:
    """The per-pod requests in flight (running + waiting) the capacity target is compared
    with. `or` keeps a pod that exports one of the two gauges only (the other is 0 there)."""
    running = f"sum by (namespace, service, pod) ({scope.sel(RUNNING_METRIC)})"
    waiting = f"sum by (namespace, service, pod) ({scope.sel(WAITING_METRIC)})"
    return [
        {
            "record": IN_FLIGHT_METRIC,
            "expr": f"({running} + {waiting}) or {running} or {waiting}",
        }
    ]


def guard_rules(
    scope: Scope, percentiles: tuple[int, ...], metrics: tuple[str, ...]
) -> list[dict[str, Any]]:
    """The live latency guard's per-pod series (LIVE_TTFT_METRIC, LIVE_TPOT_METRIC), one rule
    per metric and percentile: the lowest of the service's percentile over GUARD_HOLD (a breach
    that holds, not one evaluation's)."""
    serving = f'{CANARY_OF_LABEL}=""'
    pods = f"group by (namespace, service, pod) ({scope.sel(RUNNING_METRIC, serving)})"
    idle = f"0 * count by (namespace, service) ({scope.sel(RUNNING_METRIC, serving)})"
    rules = []
    for metric in metrics:
        rates = " or ".join(
            f"sum by (namespace, service, le) "
            f"(rate({scope.sel(h + '_bucket', serving)}[{GUARD_WINDOW}]))"
            for h in LIVE_HISTOGRAMS[metric]
        )
        for p in percentiles:
            q = guard_quantile(p)
            now = f"(histogram_quantile({q}, {rates}) >= 0) or {idle}"
            live = f"min_over_time(({now})[{GUARD_HOLD}:{GUARD_STEP}])"
            rules.append(
                {
                    "record": metric,
                    "expr": (
                        f"{pods} * on (namespace, service) group_left"
                        f" max by (namespace, service) ({live})"
                    ),
                    "labels": {"quantile": q},
                }
            )
    return rules


def objective_guard(svc: Service) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """The guard a service's objective asks for: (its percentile,), the latencies it names;
    None without an objective, with latencyGuard off, or without autoscaling."""
    o = svc.spec.objective
    if o is None or not o.latency_guard or not svc.spec.autoscaling.enabled:
        return None
    metrics = tuple(
        m
        for m, target in ((LIVE_TTFT_METRIC, o.ttft_seconds), (LIVE_TPOT_METRIC, o.tpot_seconds))
        if target is not None
    )
    return (o.percentile,), metrics


# ---- rule groups ----------------------------------------------------------------------------


def rule_groups(
    scope: Scope,
    thresholds: AlertThresholds,
    runbook_url: str,
    band: tuple[str, float, float] | None,
    guard: tuple[tuple[int, ...], tuple[str, ...]] | None = None,
) -> list[dict[str, Any]]:
    """Prometheus rule groups (the `groups:` of a rules file, the spec of a PrometheusRule).
    `band` is (raw metric, high, low), or None without autoscaling; `guard` (percentiles,
    live metrics) the live latency guard's series, or None."""
    groups: list[dict[str, Any]] = []
    if band is not None:
        raw, high, low = band
        groups.append(
            {
                "name": "vllm-autoscaling-band",
                "rules": band_rules(scope, raw, high, low) + in_flight_rules(scope),
            }
        )
    if guard is not None:
        groups.append({"name": "vllm-latency-guard", "rules": guard_rules(scope, *guard)})
    groups.append(
        {
            "name": "vllm-alerts",
            "rules": [alert_rule(a, runbook_url) for a in vllm_alerts(scope, thresholds)],
        }
    )
    groups.append(
        {
            "name": "vllm-operator-alerts",
            "rules": [alert_rule(a, runbook_url) for a in operator_alerts(scope)],
        }
    )
    return groups


def service_scope(svc: Service) -> Scope:
    return Scope(namespace=svc.namespace, service=svc.name)


def render_prometheus_rule(svc: Service, settings: OperatorSettings) -> dict[str, Any] | None:
    m = svc.spec.monitoring
    if not m.enabled:
        return None
    a = svc.spec.autoscaling
    band = (a.metric_name, a.target_queue_depth, a.scale_down_queue_depth) if a.enabled else None
    meta = metadata(svc, component="monitoring")
    meta["labels"] = {**settings.monitoring_labels, **meta["labels"]}
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": meta,
        "spec": {
            "groups": rule_groups(
                service_scope(svc), m.alerts, settings.runbook_url, band, objective_guard(svc)
            )
        },
    }


def pod_relabelings() -> list[dict[str, Any]]:
    """Scrape-time relabelling of a vLLM pod's target (PodMonitor syntax): the `service` label
    every rule groups by. namespace and pod are added by the Prometheus Operator itself."""
    return [
        {
            "sourceLabels": [SERVICE_RELABEL_SOURCE],
            "targetLabel": "service",
            "action": "replace",
        },
        {
            "sourceLabels": list(CANARY_OF_SOURCES),
            "regex": CANARY_OF_REGEX,
            "targetLabel": CANARY_OF_LABEL,
            "replacement": "$1",
            "action": "replace",
        },
    ]


def render_pod_monitor(svc: Service, settings: OperatorSettings) -> dict[str, Any] | None:
    m = svc.spec.monitoring
    if not (m.enabled and m.pod_monitor):
        return None
    meta = metadata(svc, component="monitoring")
    meta["labels"] = {**settings.monitoring_labels, **meta["labels"]}
    server = labels(svc)["app.kubernetes.io/component"]
    instance = selector_labels(svc)["app.kubernetes.io/instance"]
    return {
        "apiVersion": MONITORING_API,
        "kind": "PodMonitor",
        "metadata": meta,
        "spec": {
            # the server pods and the canary's (the benchmark Job's pods have other labels):
            # a canary's series carry service <name>-canary (its instance label), so no rule
            # and no autoscaler of the service counts it; a bake compares it with the stable
            # pods, as observe/live.py reads them
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/name": selector_labels(svc)["app.kubernetes.io/name"]
                },
                "matchExpressions": [
                    {
                        "key": "app.kubernetes.io/instance",
                        "operator": "In",
                        "values": [instance, canary_name(svc)],
                    },
                    {
                        "key": "app.kubernetes.io/component",
                        "operator": "In",
                        "values": [server, CANARY_COMPONENT],
                    },
                ],
            },
            "podMetricsEndpoints": [
                {
                    "port": PORT_NAME,
                    "path": "/metrics",
                    "interval": settings.scrape_interval,
                    "relabelings": pod_relabelings(),
                }
            ],
        },
    }


def render_monitoring(svc: Service, settings: OperatorSettings) -> list[dict[str, Any]]:
    """Every monitoring.coreos.com object of the service (apply them only where the Prometheus
    Operator's CRDs exist)."""
    rendered = [render_prometheus_rule(svc, settings), render_pod_monitor(svc, settings)]
    return [m for m in rendered if m is not None]
