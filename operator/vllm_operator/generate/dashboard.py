"""The Grafana dashboard of a VLLMService, generated (grafanalib), never hand-edited.

The panels are plain data first (`PANELS`: title, unit, queries), so the list of every query
is available without grafanalib (`dashboard_queries`, used by a live test that evaluates each
against a real Prometheus); `build_dashboard` turns them into Grafana's JSON model.
Queries use the dashboard variables $namespace and $service and Grafana's $__rate_interval;
`concrete()` substitutes them for evaluation outside Grafana.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vllm_operator.render.monitoring import BAND_METRIC, QUEUE_AVG_RECORD

UID = "vllm-operator-service"
TITLE = "vLLM service (vllm-operator)"
SEL = 'namespace="$namespace",service="$service"'
RATE = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[Query, ...]
    description: str = ""
    kind: str = "timeseries"  # or "bargauge": one bar per revision (instant queries)


def _q(quantile: float, histogram: str) -> str:
    return (
        f"histogram_quantile({quantile}, sum by (le) (rate({histogram}_bucket{{{SEL}}}[{RATE}])))"
    )


# the service's stable pods and its canary's (render/canary.py: instance <name>-canary)
BOTH = 'namespace="$namespace",service=~"$service|$service-canary"'
V1 = f'http_requests_total{{{BOTH},handler=~"/v1/.*"}}'
V1_5XX = f'http_requests_total{{{BOTH},handler=~"/v1/.*",status="5xx"}}'


def _by_service(quantile: float, histogram: str) -> str:
    return (
        f"histogram_quantile({quantile}, sum by (service, le) "
        f"(rate({histogram}_bucket{{{BOTH}}}[{RATE}])))"
    )


def _rate(counter: str, by: str = "") -> str:
    group = f" by ({by})" if by else ""
    return f"sum{group} (rate({counter}{{{SEL}}}[{RATE}]))"


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Load",
        (
            Panel(
                "KV-cache usage per pod",
                "percentunit",
                (Query(f"max by (pod) (vllm:kv_cache_usage_perc{{{SEL}}})", "{{pod}}"),),
                "vllm:kv_cache_usage_perc (0-1). Above 0.9 for 2 minutes alerts.",
            ),
            Panel(
                "Requests waiting and running",
                "short",
                (
                    Query(f"sum by (pod) (vllm:num_requests_waiting{{{SEL}}})", "waiting {{pod}}"),
                    Query(f"sum by (pod) (vllm:num_requests_running{{{SEL}}})", "running {{pod}}"),
                ),
            ),
            Panel(
                "Autoscaler: average queue per pod and the band metric",
                "short",
                (
                    Query(f"{QUEUE_AVG_RECORD}{{{SEL}}}", "average waiting per pod"),
                    Query(f"max({BAND_METRIC}{{{SEL}}})", "band metric (the HPA's input)"),
                    Query(f"count({BAND_METRIC}{{{SEL}}})", "pods"),
                ),
                "The HPA holds while the band metric equals its target, scales up above it "
                "and down below it (after the scale-down window).",
            ),
        ),
    ),
    (
        "Latency",
        (
            Panel(
                "Time to first token",
                "s",
                (
                    Query(_q(0.5, "vllm:time_to_first_token_seconds"), "p50"),
                    Query(_q(0.99, "vllm:time_to_first_token_seconds"), "p99"),
                ),
            ),
            Panel(
                "Time per output token",
                "s",
                (
                    Query(_q(0.5, "vllm:inter_token_latency_seconds"), "p50 (inter-token)"),
                    Query(_q(0.99, "vllm:inter_token_latency_seconds"), "p99 (inter-token)"),
                    Query(
                        _q(0.99, "vllm:request_time_per_output_token_seconds"),
                        "p99 (per-request mean)",
                    ),
                ),
                "vllm:inter_token_latency_seconds observes every gap between tokens (what the "
                "TPOT alert uses); the per-request mean smooths stalls away.",
            ),
            Panel(
                "End-to-end request latency",
                "s",
                (
                    Query(_q(0.5, "vllm:e2e_request_latency_seconds"), "p50"),
                    Query(_q(0.99, "vllm:e2e_request_latency_seconds"), "p99"),
                ),
            ),
        ),
    ),
    (
        "Throughput and cache",
        (
            Panel(
                "Tokens per second",
                "short",
                (
                    Query(_rate("vllm:generation_tokens_total"), "output tokens/s"),
                    Query(_rate("vllm:prompt_tokens_total"), "prompt tokens/s"),
                ),
            ),
            Panel(
                "Requests per second",
                "reqps",
                (
                    Query(
                        _rate("vllm:request_success_total", "finished_reason"),
                        "{{finished_reason}}",
                    ),
                ),
            ),
            Panel(
                "Preemptions per second",
                "short",
                (Query(_rate("vllm:num_preemptions_total"), "preemptions/s"),),
                "Above 1/s for 5 minutes alerts: the KV cache is too small for the load.",
            ),
            Panel(
                "Prefix-cache hit rate",
                "percentunit",
                (
                    Query(
                        f"{_rate('vllm:prefix_cache_hits_total')} / "
                        f"{_rate('vllm:prefix_cache_queries_total')}",
                        "hit rate (tokens)",
                    ),
                ),
            ),
        ),
    ),
    (
        "Canary vs stable (rollout.canary: a canary's series carry service <name>-canary)",
        (
            Panel(
                "TTFT p99: canary vs stable",
                "s",
                (Query(_by_service(0.99, "vllm:time_to_first_token_seconds"), "{{service}}"),),
                "While a canary bakes on live traffic (rollout.canary.bake) it is compared with "
                "the stable pods on this (status.rollout.bake); while it is benchmarked, its "
                "line is the benchmark's load.",
            ),
            Panel(
                "Inter-token latency p99: canary vs stable",
                "s",
                (Query(_by_service(0.99, "vllm:inter_token_latency_seconds"), "{{service}}"),),
            ),
            Panel(
                "5xx share of /v1 responses: canary vs stable",
                "percentunit",
                (
                    # (no 5xx series at all is a share of 0, not a gap in the panel)
                    Query(
                        f"(sum by (service) (rate({V1_5XX}[{RATE}])) or "
                        f"0 * sum by (service) (rate({V1}[{RATE}]))) / "
                        f"sum by (service) (rate({V1}[{RATE}]))",
                        "{{service}}",
                    ),
                ),
            ),
            Panel(
                "Requests per second: canary vs stable",
                "reqps",
                (
                    Query(
                        f"sum by (service) (rate(vllm:e2e_request_latency_seconds_count{{{BOTH}}}"
                        f"[{RATE}]))",
                        "{{service}}",
                    ),
                ),
            ),
        ),
    ),
    (
        "Benchmarks per revision (the operator's gate runs)",
        tuple(
            Panel(
                title,
                unit,
                (Query(f"vllm_operator_benchmark_{metric}{{{SEL}}}", "{{revision}}"),),
                kind="bargauge",
            )
            for title, metric, unit in (
                ("Output tokens/s under load", "output_tokens_per_second", "short"),
                ("TTFT p50", "ttft_p50_seconds", "s"),
                ("TTFT p95", "ttft_p95_seconds", "s"),
                ("Batching speed-up", "batching_speedup", "short"),
                ("Prefix TTFT speed-up", "prefix_ttft_speedup", "short"),
                ("KV-cache capacity (tokens)", "kv_cache_tokens", "short"),
                ("Gate passed (newest revision)", "passed", "short"),
            )
        ),
    ),
)


def dashboard_queries() -> list[str]:
    """Every PromQL query of the dashboard (with $namespace, $service, $__rate_interval)."""
    return [q.expr for _, panels in ROWS for p in panels for q in p.queries]


def concrete(expr: str, namespace: str, service: str, rate_interval: str = "1m") -> str:
    """A dashboard query with Grafana's variables filled in, for a Prometheus without Grafana."""
    return (
        expr.replace("$namespace", namespace)
        .replace("$service", service)
        .replace("$__rate_interval", rate_interval)
    )


def build_dashboard() -> dict[str, Any]:
    """Grafana's JSON model of the dashboard."""
    # grafanalib is a dev (generate-time) dependency: the operator's image does not carry it
    from grafanalib import core as g  # noqa: PLC0415
    from grafanalib._gen import DashboardEncoder  # noqa: PLC0415

    ds = "${datasource}"
    panels: list[Any] = []
    y = 0
    for row_title, row in ROWS:
        panels.append(g.RowPanel(title=row_title, gridPos=g.GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        for i, p in enumerate(row):  # three panels a line
            pos = g.GridPos(h=8, w=8, x=(i % 3) * 8, y=y + (i // 3) * 8)
            targets = [
                g.Target(
                    expr=q.expr,
                    legendFormat=q.legend,
                    refId=chr(ord("A") + k),
                    instant=p.kind == "bargauge",
                    datasource=ds,
                )
                for k, q in enumerate(p.queries)
            ]
            common = {
                "title": p.title,
                "description": p.description or None,
                "dataSource": ds,
                "targets": targets,
                "gridPos": pos,
            }
            if p.kind == "bargauge":
                panels.append(g.BarGauge(**common, format=p.unit, orientation="horizontal"))
            else:
                panels.append(g.TimeSeries(**common, unit=p.unit))
        y += (len(row) + 2) // 3 * 8

    def variable(name: str, query: str, label: str) -> Any:
        return g.Template(
            name=name, query=query, label=label, dataSource=ds, refresh=2, type="query"
        )

    dashboard = g.Dashboard(
        title=TITLE,
        uid=UID,
        description="vLLM serving metrics and the operator's benchmark figures per revision",
        tags=["vllm", "vllm-operator"],
        timezone="browser",
        refresh="30s",
        panels=panels,
        templating=g.Templating(
            list=[
                g.Template(
                    name="datasource",
                    query="prometheus",
                    type="datasource",
                    label="Data source",
                ),
                variable(
                    "namespace", "label_values(vllm:num_requests_running, namespace)", "Namespace"
                ),
                variable(
                    "service",
                    'label_values(vllm:num_requests_running{namespace="$namespace"}, service)',
                    "Service",
                ),
            ]
        ),
    ).auto_panel_ids()
    out: dict[str, Any] = json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))
    return out
