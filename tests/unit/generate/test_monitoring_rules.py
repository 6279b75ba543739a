"""The alert and recording rules, proven with promtool (Prometheus's own rule engine):

- every generated rules file and every rendered PrometheusRule passes `promtool check rules`;
- every alert fires above its threshold once its `for` has elapsed (not before), and stays
  silent just below it (generic file with the defaults; a PrometheusRule with per-service
  overrides that ignores other services' series);
- the autoscaler's band metric: above the band it is above the HPA's target, inside the band
  it equals the target, at or below the low bound it is below, and the HPA's own arithmetic
  on those values gives scale up / hold / scale down.

promtool is installed by the project (scripts/build-monitoring.sh, Debian's prometheus 2.42):
without it these tests fail in CI and are skipped only on a developer machine.
"""

from __future__ import annotations

import math
import os
import random
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.builders import service
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import AlertThresholds
from vllm_operator.generate.monitoring import all_queries, render_files, rule_queries
from vllm_operator.render.monitoring import (
    BAND_METRIC,
    CANARY_OF_LABEL,
    LIVE_TPOT_METRIC,
    LIVE_TTFT_METRIC,
    SCALE_UP_FLOOR,
    AlertDef,
    Scope,
    operator_alerts,
    render_prometheus_rule,
    vllm_alerts,
)

SETTINGS = OperatorSettings()
PROMTOOL = shutil.which("promtool")


@pytest.fixture(scope="module")
def promtool() -> str:
    if PROMTOOL is None:
        message = "promtool is missing: scripts/build-monitoring.sh installs it (Debian prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return PROMTOOL


def run_promtool(promtool: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"promtool {' '.join(args)} failed:\n{out}"
    return out


def write_rules(tmp: Path, groups: list[dict[str, Any]], name: str = "rules.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=10_000))
    return path


# ---- promtool check rules -------------------------------------------------------------------


def test_generated_rules_file_passes_promtool_check(promtool: str, tmp_path: Path) -> None:
    path = tmp_path / "vllm-alerts.rules.yaml"
    path.write_text(render_files()["vllm-alerts.rules.yaml"])
    out = run_promtool(promtool, "check", "rules", str(path), cwd=tmp_path)
    assert "SUCCESS: 23 rules found" in out


def test_committed_rules_file_is_the_generated_one() -> None:
    root = Path(__file__).resolve().parents[3] / "deploy" / "monitoring"
    for name, text in render_files().items():
        assert (root / name).read_text() == text, f"{name} drifted: run make generate"


@pytest.mark.parametrize("autoscaling", [True, False])
def test_rendered_prometheus_rule_passes_promtool_check(
    promtool: str, tmp_path: Path, autoscaling: bool
) -> None:
    rule = render_prometheus_rule(
        service("tinyllama", {"autoscaling": {"enabled": autoscaling}}), SETTINGS
    )
    assert rule is not None
    out = run_promtool(
        promtool, "check", "rules", str(write_rules(tmp_path, rule["spec"]["groups"])), cwd=tmp_path
    )
    assert f"SUCCESS: {15 if autoscaling else 9} rules found" in out


def test_every_query_is_listed_for_the_live_test() -> None:
    assert len(rule_queries()) == 23
    board = all_queries("ns", "svc")[23:]
    assert len(board) == 29
    # the canary-vs-stable row selects the service's stable pods and its canary's
    assert sum('service=~"svc|svc-canary"' in q for q in board) == 4
    assert any(q.startswith(f'max({BAND_METRIC}{{namespace="ns",service="svc"}})') for q in board)
    assert not any("$" in q for q in board)  # Grafana's variables filled in


# ---- alerts: fire above after `for`, silent just below ---------------------------------------

NS, SVC = "team-a", "llama"
LABELS = f'namespace="{NS}",service="{SVC}",pod="{SVC}-0",engine="0",model_name="m"'
HISTOGRAMS = {
    "VLLME2ELatencyP99High": "vllm:e2e_request_latency_seconds",
    "VLLMTTFTP99High": "vllm:time_to_first_token_seconds",
    "VLLMTPOTP99High": "vllm:inter_token_latency_seconds",
}
STEP = 0.02  # "just above/below": the histogram's buckets lie 2% either side of the threshold


@dataclass
class Case:
    series: list[dict[str, str]]
    value: float  # the alert's $value while the condition holds
    labels: dict[str, str] = field(default_factory=dict)  # extra labels of the alert
    lag_minutes: int = 0  # until the query sees the full condition (rate windows)


def _minutes(duration: str) -> int:
    unit = duration[-1]
    return int(duration[:-1]) * {"s": 0, "m": 1, "h": 60}[unit] if duration[:-1] else 0


def _le(bound: float) -> str:
    return "+Inf" if bound == math.inf else repr(bound)


def case(alert: AlertDef, above: bool, labels: str = LABELS) -> Case:
    """Input series that put the alert's query just above (or at/just below) its threshold."""
    t = alert.threshold
    if alert.name in HISTOGRAMS:
        assert t is not None
        name = HISTOGRAMS[alert.name]
        lo, mid, hi = t * (1 - STEP), t, t * (1 + STEP)
        # every observation in (t, hi] (above) or in (lo, t] (below); 100 a minute
        counts = {lo: 0, mid: 0 if above else 100, hi: 100, math.inf: 100}
        series = [
            {
                "series": f'{name}_bucket{{{labels},le="{_le(le)}"}}',
                "values": f"0+{per_minute}x40",
            }
            for le, per_minute in counts.items()
        ]
        # p99 by linear interpolation inside the bucket that holds the observations
        value = (mid + (hi - mid) * 0.99) if above else (lo + (mid - lo) * 0.99)
        return Case(series, value, lag_minutes=5)
    if alert.name == "VLLMPreemptionsHigh":
        assert t is not None
        rate = t * (1.01 if above else 0.99)
        series = [
            {"series": f"vllm:num_preemptions_total{{{labels}}}", "values": f"0+{rate * 60!r}x40"}
        ]
        return Case(series, rate, lag_minutes=5)
    gauges = {
        "VLLMKVCacheUsageHigh": "vllm:kv_cache_usage_perc",
        "VLLMRequestsWaitingHigh": "vllm:num_requests_waiting",
    }
    if alert.name in gauges:
        assert t is not None
        value = t + 0.01 if above else t  # at the threshold is not above it
        return Case(
            [{"series": f"{gauges[alert.name]}{{{labels}}}", "values": f"{value!r}x40"}], value
        )
    # the operator's gauges: the query is already the condition
    operator = {
        "VLLMBenchmarkGateFailed": ("vllm_operator_benchmark_passed", 0, 1, {"revision": "abc"}),
        "VLLMRolledBack": ("vllm_operator_rollback_active", 1, 0, {"revision": "abc"}),
        "VLLMAutoscalerMetricUnavailable": ("vllm_operator_autoscaler_scaling_active", 0, 1, {}),
    }
    metric, firing, quiet, extra = operator[alert.name]
    own = f'namespace="{NS}",service="{SVC}"' + "".join(f',{k}="{v}"' for k, v in extra.items())
    value = firing if above else quiet
    return Case([{"series": f"{metric}{{{own}}}", "values": f"{value}x40"}], value, extra)


def expected_annotations(alert: AlertDef, c: Case, runbook_url: str) -> dict[str, str]:
    """The alert's annotation templates as Prometheus expands them."""
    subs = {
        "{{ $labels.namespace }}": NS,
        "{{ $labels.service }}": c.labels.get("service", SVC),
        "{{ $labels.revision }}": c.labels.get("revision", ""),
        "{{ $value | humanizePercentage }}": "%.4g%%" % (c.value * 100),  # Go's %.4g
        '{{ $value | printf "%.3g" }}': "%.3g" % c.value,  # noqa: UP031
    }

    canary_of = c.labels.get(CANARY_OF_LABEL, "")

    def expand(text: str) -> str:
        # {{ if $labels.canary_of }}...{{ end }}: the inner text for a canary's series only
        text = re.sub(
            r"\{\{ if \$labels\.canary_of \}\}(.*?)\{\{ end \}\}",
            lambda m: m[1] if canary_of else "",
            text,
        )
        text = text.replace("{{ $labels.canary_of }}", canary_of)
        for k, v in subs.items():
            text = text.replace(k, v)
        assert "{{" not in text, text
        return text

    return {
        "summary": expand(alert.summary),
        "description": expand(alert.description),
        "runbook_url": f"{runbook_url}#{alert.name.lower()}",
    }


def alert_tests(alerts: list[AlertDef], runbook_url: str, noise: list[dict[str, str]]) -> list:
    """One promtool test per alert and direction. `noise`: series of another service that a
    per-service rule must ignore (they are far above every threshold)."""
    tests = []
    for alert in alerts:
        hold = _minutes(alert.for_)
        above = case(alert, above=True)
        fire_at = above.lag_minutes + hold + 1
        checks: list[dict[str, Any]] = [
            {
                "eval_time": f"{fire_at}m",
                "alertname": alert.name,
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": alert.severity,
                            "namespace": NS,
                            "service": SVC,
                            **above.labels,
                        },
                        "exp_annotations": expected_annotations(alert, above, runbook_url),
                    }
                ],
            }
        ]
        if hold >= 1:  # not before its `for`: the condition cannot hold before t=0
            checks.append({"eval_time": f"{hold - 1}m", "alertname": alert.name, "exp_alerts": []})
        tests.append(
            {"interval": "1m", "input_series": above.series + noise, "alert_rule_test": checks}
        )
        below = case(alert, above=False)
        quiet_until = below.lag_minutes + hold
        tests.append(
            {
                "interval": "1m",
                "input_series": below.series,
                "alert_rule_test": [
                    {"eval_time": f"{m}m", "alertname": alert.name, "exp_alerts": []}
                    for m in (quiet_until + 1, quiet_until + 10, 39)
                ],
            }
        )
    return tests


def run_tests(promtool: str, tmp: Path, groups: list[dict[str, Any]], tests: list) -> None:
    rules = write_rules(tmp, groups)
    spec = {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests}
    (tmp / "tests.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, width=10_000))
    out = run_promtool(promtool, "test", "rules", "tests.yaml", cwd=tmp)
    assert "SUCCESS" in out


def test_every_default_alert_fires_above_its_threshold_and_not_below(
    promtool: str, tmp_path: Path
) -> None:
    groups = yaml.safe_load(render_files()["vllm-alerts.rules.yaml"])["groups"]
    alerts = vllm_alerts(Scope(), AlertThresholds()) + operator_alerts(Scope())
    assert len(alerts) == 9
    run_tests(promtool, tmp_path, groups, alert_tests(alerts, SETTINGS.runbook_url, noise=[]))


def test_per_service_overrides_and_other_services_are_ignored(
    promtool: str, tmp_path: Path
) -> None:
    overrides = {
        "kvCacheUsage": 0.75,
        "e2eLatencyP99Seconds": 12.0,
        "ttftP99Seconds": 1.5,
        "tpotP99Seconds": 0.1,
        "waitingRequests": 8,
        "preemptionsPerSecond": 0.2,
    }
    svc = service(
        "tinyllama",
        {"autoscaling": {"enabled": True}, "monitoring": {"alerts": overrides}},
    ).model_copy(update={"name": SVC, "namespace": NS})
    rule = render_prometheus_rule(svc, SETTINGS)
    assert rule is not None
    thresholds = svc.spec.monitoring.alerts
    assert thresholds.kv_cache_usage == 0.75
    alerts = vllm_alerts(Scope(NS, SVC), thresholds) + operator_alerts(Scope(NS, SVC))
    # the same alerts, far above every threshold, in another service and another namespace
    other = LABELS.replace(f'service="{SVC}"', 'service="other"')
    elsewhere = LABELS.replace(f'namespace="{NS}"', 'namespace="elsewhere"')
    noise = []
    for alert in vllm_alerts(Scope(), AlertThresholds(kv_cache_usage=0.5)):
        noise += case(alert, above=True, labels=other).series
        noise += case(alert, above=True, labels=elsewhere).series
    tests = alert_tests(alerts, SETTINGS.runbook_url, noise)
    run_tests(promtool, tmp_path, rule["spec"]["groups"], tests)


# ---- the band -------------------------------------------------------------------------------


def hpa_desired(current: int, values: list[float], target: float, tolerance: float = 0.1) -> int:
    """The HPA controller's rule for a Pods metric with an AverageValue target (all pods
    reporting): hold inside the tolerance, else ceil(current * average / target)."""
    ratio = sum(values) / len(values) / target
    if abs(1.0 - ratio) <= tolerance:
        return current
    return math.ceil(ratio * current)


# per minute, the waiting requests of the two pods of the service (pod a has two engines)
QUEUE_A_ENGINE0 = [30, 11, 10, 5, 1, 1, 1, 0, 100]
QUEUE_A_ENGINE1 = [0, 11, 10, 5, 2, 2, 1, 0, 0]
QUEUE_B = [20, 20, 20, 4, 2, 1, 2, 0, 0]
# average per pod:   25 21 20 7 2.5 2 2 0 50
EXPECTED = [
    # (band value, what the HPA does with it)
    (25, "up"),
    (20 * SCALE_UP_FLOOR, "up"),  # 21 > 20: at least the scale-up floor (24)
    (20, "hold"),  # exactly the target is inside the band
    (20, "hold"),
    (20, "hold"),  # 2.5 > 2
    (2, "down"),  # at the low bound
    (2, "down"),
    (0, "down"),
    (50, "up"),
]


def test_band_metric_holds_inside_the_band_and_moves_outside(promtool: str, tmp_path: Path) -> None:
    target, low = 20, 2  # the lab's policy
    svc = service(
        "tinyllama",
        {
            "autoscaling": {
                "enabled": True,
                "targetQueueDepth": target,
                "scaleDownQueueDepth": low,
            }
        },
    ).model_copy(update={"name": SVC, "namespace": NS})
    rule = render_prometheus_rule(svc, SETTINGS)
    assert rule is not None

    def series(pod: str, engine: str, values: list[int], svc_name: str = SVC) -> dict[str, str]:
        labels = f'namespace="{NS}",service="{svc_name}",pod="{pod}",engine="{engine}"'
        return {
            "series": f"vllm:num_requests_waiting{{{labels}}}",
            "values": " ".join(str(v) for v in values),
        }

    inputs = [
        series(f"{SVC}-a", "0", QUEUE_A_ENGINE0),
        series(f"{SVC}-a", "1", QUEUE_A_ENGINE1),
        series(f"{SVC}-b", "0", QUEUE_B),
        # another service in the namespace, always far above: must not leak into this band
        series("other-a", "0", [500] * len(QUEUE_B), svc_name="other"),
    ]
    checks = []
    for minute, (band, _) in enumerate(EXPECTED):
        checks.append(
            {
                "expr": f'{BAND_METRIC}{{namespace="{NS}"}}',
                "eval_time": f"{minute}m",
                "exp_samples": [
                    {
                        "labels": f'{BAND_METRIC}{{namespace="{NS}",pod="{SVC}-{p}",'
                        f'service="{SVC}"}}',
                        "value": band,
                    }
                    for p in ("a", "b")
                ],
            }
        )
    tests = [{"interval": "1m", "input_series": inputs, "promql_expr_test": checks}]
    run_tests(promtool, tmp_path, rule["spec"]["groups"], tests)

    # the values promtool confirmed, through the HPA's arithmetic (target = targetQueueDepth)
    hpa = svc.spec.autoscaling
    assert (hpa.target_queue_depth, hpa.scale_down_queue_depth) == (target, low)
    for band, action in EXPECTED:
        for current in range(2, 17):
            desired = hpa_desired(current, [band, band], target)
            if action == "up":
                assert band > target
                assert desired > current, (band, current)
            elif action == "hold":
                assert band == target
                assert desired == current, (band, current)
            else:
                assert band < target
                assert desired < current, (band, current)


def test_band_uses_each_services_own_bounds(promtool: str, tmp_path: Path) -> None:
    """Two services, two PrometheusRules with different bands, one Prometheus."""
    groups = []
    for name, target, low in (("small", 5, 1), ("large", 40, 10)):
        svc = service(
            "tinyllama",
            {
                "autoscaling": {
                    "enabled": True,
                    "targetQueueDepth": target,
                    "scaleDownQueueDepth": low,
                }
            },
        ).model_copy(update={"name": name, "namespace": NS})
        rule = render_prometheus_rule(svc, SETTINGS)
        assert rule is not None
        for g in rule["spec"]["groups"]:
            groups.append({**g, "name": f"{name}-{g['name']}"})
    queue = "8 3 1"  # above small's 5, inside (1, 5], at its low bound 1
    inputs = [
        {
            "series": f'vllm:num_requests_waiting{{namespace="{NS}",service="{n}",pod="{n}-0"}}',
            "values": queue,
        }
        for n in ("small", "large")
    ]
    expected = {"small": [8, 5, 1], "large": [8, 3, 1]}  # large: all <= 10, below its band
    checks = [
        {
            "expr": f'{BAND_METRIC}{{service="{n}"}}',
            "eval_time": f"{m}m",
            "exp_samples": [
                {
                    "labels": f'{BAND_METRIC}{{namespace="{NS}",pod="{n}-0",service="{n}"}}',
                    "value": expected[n][m],
                }
            ],
        }
        for n in ("small", "large")
        for m in range(3)
    ]
    run_tests(
        promtool,
        tmp_path,
        groups,
        [{"interval": "1m", "input_series": inputs, "promql_expr_test": checks}],
    )


# ---- the band at its exact thresholds -------------------------------------------------------

# Queue lengths are integers, so averages of exactly the target (20) or the low bound (2) are
# common. Prometheus's avg() adds the pods one by one into a running mean, which lands a
# rounding error above or below the integer depending on the order of the pods (issue 19).
# Every case is run with ORDERS shuffles of which pod holds which queue length.
ORDERS = 8
BAND_CASES = {
    # name: (waiting requests per pod, band value of every pod of the service)
    "at-target": ([16, 16, 20, 21, 21, 21, 25], 20),  # 140 / 7 = 20 is not above 20: hold
    "above-target": ([16, 16, 20, 21, 21, 21, 26], 20 * SCALE_UP_FLOOR),  # 20.14: up, floor
    "at-low": ([0, 0, 0, 2, 2, 2, 3, 4, 5], 2),  # 18 / 9 = 2 is at the low bound: down
    "below-low": ([0, 0, 1, 1, 2, 3, 4, 4], 15 / 8),  # 1.875: down, the average itself
}


def band_threshold_services() -> dict[str, list[int]]:
    """Service name -> the waiting requests of its pods (pod i holds element i)."""
    rng = random.Random(19)  # fixed: the same orders every run
    services = {}
    for name, (queues, _) in BAND_CASES.items():
        for k in range(ORDERS):
            order = list(queues)
            rng.shuffle(order)
            services[f"{name}-{k}"] = order
    return services


def band_threshold_test(services: dict[str, list[int]]) -> dict[str, Any]:
    """One promtool test: every service's pods and, at t=0, the band value of each pod."""
    inputs = [
        {
            "series": f'vllm:num_requests_waiting{{namespace="{NS}",service="{svc}",'
            f'pod="{svc}-{i}",engine="0"}}',
            "values": f"{queue}x2",
        }
        for svc, queues in services.items()
        for i, queue in enumerate(queues)
    ]
    checks = [
        {
            "expr": f'{BAND_METRIC}{{service="{svc}"}}',
            "eval_time": "0m",
            "exp_samples": [
                {
                    "labels": f'{BAND_METRIC}{{namespace="{NS}",pod="{svc}-{i}",service="{svc}"}}',
                    "value": BAND_CASES[svc.rsplit("-", 1)[0]][1],
                }
                for i in range(len(queues))
            ],
        }
        for svc, queues in services.items()
    ]
    return {"interval": "1m", "input_series": inputs, "promql_expr_test": checks}


def test_shipped_band_is_exact_at_its_thresholds_whatever_the_pod_order(
    promtool: str, tmp_path: Path
) -> None:
    groups = yaml.safe_load(render_files()["vllm-alerts.rules.yaml"])["groups"]
    band = [g for g in groups if g["name"] == "vllm-autoscaling-band"]
    assert band, "the shipped rules file has the band's recording rules"
    run_tests(promtool, tmp_path, band, [band_threshold_test(band_threshold_services())])


def test_rendered_band_is_exact_at_its_thresholds_whatever_the_pod_order(
    promtool: str, tmp_path: Path
) -> None:
    services = band_threshold_services()
    groups = []
    for name in services:
        svc = service(
            "tinyllama",
            {"autoscaling": {"enabled": True, "targetQueueDepth": 20, "scaleDownQueueDepth": 2}},
        ).model_copy(update={"name": name, "namespace": NS})
        rule = render_prometheus_rule(svc, SETTINGS)
        assert rule is not None
        groups += [
            {**g, "name": f"{name}-{g['name']}"}
            for g in rule["spec"]["groups"]
            if g["name"] == "vllm-autoscaling-band"
        ]
    run_tests(promtool, tmp_path, groups, [band_threshold_test(services)])


def test_a_canarys_alert_names_the_service_it_is_the_canary_of(
    promtool: str, tmp_path: Path
) -> None:
    # (issue 31: a canary's series carry service=<name>-canary, so its alerts fired as if a new
    # service were failing); scraped, its series carry canary_of=<name> (the scrape configs and
    # the PodMonitor relabel it from the pod's labels), which the alerts keep
    groups = yaml.safe_load(render_files()["vllm-alerts.rules.yaml"])["groups"]
    (alert,) = [
        a for a in vllm_alerts(Scope(), AlertThresholds()) if a.name == "VLLMKVCacheUsageHigh"
    ]
    canary = LABELS.replace(f'service="{SVC}"', f'service="{SVC}-canary",canary_of="{SVC}"')
    above = case(alert, above=True, labels=canary)
    above.labels.update({"service": f"{SVC}-canary", CANARY_OF_LABEL: SVC})
    annotations = expected_annotations(alert, above, SETTINGS.runbook_url)
    assert (
        f"vLLM {NS}/{SVC}-canary (the canary of {NS}/{SVC}: a new revision on trial"
        in (annotations["summary"])
    )
    test = {
        "interval": "1m",
        "input_series": above.series,
        "alert_rule_test": [
            {
                "eval_time": f"{above.lag_minutes + _minutes(alert.for_) + 1}m",
                "alertname": alert.name,
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "severity": alert.severity,
                            "namespace": NS,
                            "service": f"{SVC}-canary",
                            CANARY_OF_LABEL: SVC,
                        },
                        "exp_annotations": annotations,
                    }
                ],
            }
        ],
    }
    run_tests(promtool, tmp_path, groups, [test])


# ---- the live latency guard (issue 33) ------------------------------------------------------


def test_live_latency_guard_is_the_services_percentile_on_each_serving_pod_and_0_idle(
    promtool: str, tmp_path: Path
) -> None:
    """The guard's series, evaluated by promtool: the service's p95 TTFT and TPOT over its
    serving pods (a canary's requests, however slow, left out), on every serving pod, and 0 once
    no request arrived in the last minute (not NaN: a missing metric blocks the HPA's scale-in)."""
    svc = service(
        "tinyllama",
        {"objective": {"ttftSeconds": 0.5, "tpotSeconds": 0.05, "percentile": 95}},
    ).model_copy(update={"name": SVC, "namespace": NS})
    rule = render_prometheus_rule(svc, SETTINGS)
    assert rule is not None
    guard = [g for g in rule["spec"]["groups"] if g["name"] == "vllm-latency-guard"]
    assert [r["labels"]["quantile"] for r in guard[0]["rules"]] == ["0.95", "0.95"]

    def labels(pod: str, canary: bool = False) -> str:
        extra = f',{CANARY_OF_LABEL}="{SVC}"' if canary else ""
        return f'namespace="{NS}",service="{SVC}",pod="{pod}"{extra}'

    def histogram(name: str, pod: str, buckets: dict[str, str], canary: bool = False) -> list:
        return [
            {"series": f'{name}_bucket{{{labels(pod, canary)},le="{le}"}}', "values": values}
            for le, values in buckets.items()
        ]

    # 10 requests a minute per pod for 5 minutes, then none, scraped every 15 s (the guard's
    # hold is a 15 s subquery: each step needs two samples in its 1m rate): every TTFT in
    # (0.5, 0.75] s and every TPOT in (0.025, 0.05] s, so p95 = 0.5 + 0.95 x 0.25 and
    # 0.025 + 0.95 x 0.025, held for the whole hold
    busy = "0+2.5x20 50x24"
    inputs: list[dict[str, str]] = []
    for pod in ("a", "b"):
        inputs.append({"series": f"vllm:num_requests_running{{{labels(pod)}}}", "values": "1x44"})
        inputs += histogram(
            "vllm:time_to_first_token_seconds",
            pod,
            {"0.5": "0x44", "0.75": busy, "+Inf": busy},
        )
        inputs += histogram(
            "vllm:request_time_per_output_token_seconds",
            pod,
            {"0.025": "0x44", "0.05": busy, "+Inf": busy},
        )
    # the canary: every request 10x slower, on a pod of its own
    inputs.append({"series": f"vllm:num_requests_running{{{labels('c', True)}}}", "values": "1x44"})
    inputs += histogram(
        "vllm:time_to_first_token_seconds",
        "c",
        {"0.75": "0x44", "10": busy, "+Inf": busy},
        canary=True,
    )

    def expect(metric: str, minute: int, value: float) -> dict[str, Any]:
        return {
            "expr": f'{metric}{{namespace="{NS}"}}',
            "eval_time": f"{minute}m",
            "exp_samples": [
                {
                    "labels": f'{metric}{{namespace="{NS}",pod="{p}",quantile="0.95",'
                    f'service="{SVC}"}}',
                    "value": value,
                }
                for p in ("a", "b")
            ],
        }

    checks = [
        expect(LIVE_TTFT_METRIC, 3, 0.5 + 0.95 * 0.25),
        expect(LIVE_TPOT_METRIC, 3, 0.025 + 0.95 * 0.025),
        expect(LIVE_TTFT_METRIC, 9, 0),  # idle: no request in the window
        expect(LIVE_TPOT_METRIC, 9, 0),
    ]
    run_tests(
        promtool,
        tmp_path,
        rule["spec"]["groups"],
        [{"interval": "15s", "input_series": inputs, "promql_expr_test": checks}],
    )
    # the HPA's arithmetic on what promtool confirmed: 2 pods at p95 TTFT 0.7375 s against an
    # objective of 0.5 s want ceil(2 x 0.7375 / 0.5) = 3; idle, the guard wants 0 (max: others)
    assert hpa_desired(2, [0.5 + 0.95 * 0.25] * 2, 0.5) == 3
    assert hpa_desired(2, [0.0, 0.0], 0.5) == 0
