"""The monitoring renderers (PrometheusRule, PodMonitor), the operator's alert gauges, the
prometheus-adapter config and the local Prometheus config, as a user would meet them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY
from pydantic import ValidationError

from tests.unit.builders import service
from vllm_localenv.monitoring import (
    adapter_args,
    adapter_registration,
    operator_targets,
    pod_targets,
    prometheus_config,
    rules_file,
)
from vllm_localenv.targets import write_if_changed
from vllm_operator import metrics
from vllm_operator.api.records import Run
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.decide.gates import FAILED, PASSED
from vllm_operator.generate.monitoring import adapter_config
from vllm_operator.render.monitoring import BAND_METRIC, render_monitoring

SETTINGS = OperatorSettings()


def test_pod_monitor_scrapes_the_server_and_canary_pods_with_the_service_label() -> None:
    rule, monitor = render_monitoring(service("tinyllama"), SETTINGS)
    assert rule["kind"] == "PrometheusRule"
    assert monitor == {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": "tinyllama",
            "namespace": "ns",
            "labels": {
                "app.kubernetes.io/name": "vllm",
                "app.kubernetes.io/instance": "tinyllama",
                "app.kubernetes.io/component": "monitoring",
                "app.kubernetes.io/managed-by": "vllm-operator",
                "app.kubernetes.io/part-of": "vllm-operator",
                "serving.vllm-operator.dev/service": "tinyllama",
            },
            "ownerReferences": [
                {
                    "apiVersion": "serving.vllm-operator.dev/v1alpha1",
                    "kind": "VLLMService",
                    "name": "tinyllama",
                    "uid": "uid-1",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "selector": {
                "matchLabels": {"app.kubernetes.io/name": "vllm"},
                "matchExpressions": [
                    {
                        "key": "app.kubernetes.io/instance",
                        "operator": "In",
                        "values": ["tinyllama", "tinyllama-canary"],
                    },
                    {
                        "key": "app.kubernetes.io/component",
                        "operator": "In",
                        "values": ["server", "canary"],
                    },
                ],
            },
            "podMetricsEndpoints": [
                {
                    "port": "http",
                    "path": "/metrics",
                    "interval": "15s",
                    "relabelings": [
                        {
                            "sourceLabels": [
                                "__meta_kubernetes_pod_label_app_kubernetes_io_instance"
                            ],
                            "targetLabel": "service",
                            "action": "replace",
                        },
                        {  # a canary's series: the service it is the canary of
                            "sourceLabels": [
                                "__meta_kubernetes_pod_label_app_kubernetes_io_component",
                                "__meta_kubernetes_pod_label_serving_vllm_operator_dev_service",
                            ],
                            "regex": "canary;(.+)",
                            "targetLabel": "canary_of",
                            "replacement": "$1",
                            "action": "replace",
                        },
                    ],
                }
            ],
        },
    }


def test_prometheus_rule_is_scoped_to_the_service_and_carries_its_thresholds() -> None:
    svc = service(
        "tinyllama",
        {
            "autoscaling": {
                "metricName": "vllm:num_requests_waiting",
                "targetQueueDepth": 12,
                "scaleDownQueueDepth": 3,
            },
            "monitoring": {"alerts": {"kvCacheUsage": 0.8, "ttftP99Seconds": 1.5}},
        },
    )
    settings = OperatorSettings(monitoring_labels={"release": "prometheus"})
    (rule,) = [m for m in render_monitoring(svc, settings) if m["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    groups = {g["name"]: g["rules"] for g in rule["spec"]["groups"]}
    assert list(groups) == ["vllm-autoscaling-band", "vllm-alerts", "vllm-operator-alerts"]
    alerts = {r["alert"]: r for r in groups["vllm-alerts"] + groups["vllm-operator-alerts"]}
    sel = 'namespace="ns",service="tinyllama"'
    assert alerts["VLLMKVCacheUsageHigh"]["expr"] == (
        f"max by (namespace, service, canary_of) (vllm:kv_cache_usage_perc{{{sel}}}) > 0.8"
    )
    assert alerts["VLLMTTFTP99High"]["expr"].endswith(") > 1.5")
    assert alerts["VLLMTTFTP99High"]["for"] == "2m"
    assert alerts["VLLME2ELatencyP99High"]["expr"].endswith(") > 5")  # default kept
    assert alerts["VLLMAutoscalerMetricUnavailable"]["expr"] == (
        f"vllm_operator_autoscaler_scaling_active{{{sel}}} == 0"
    )
    assert alerts["VLLMTPOTP99High"]["annotations"]["runbook_url"] == (
        f"{SETTINGS.runbook_url}#vllmtpotp99high"
    )
    band = {r["record"]: r["expr"] for r in groups["vllm-autoscaling-band"]}
    assert band[BAND_METRIC].startswith(
        f"group by (namespace, service, pod) (vllm:num_requests_waiting{{{sel}}})"
    )
    total = f"namespace_service:vllm_queue_depth:sum{{{sel}}}"
    pods = f"namespace_service:vllm_queue_depth:pods{{{sel}}}"
    service_band = band["namespace_service:vllm_operator_queue_depth_band"]
    assert f"{total} > 12 * {pods}, 14.4)" in service_band
    assert f"{total} <= 3 * {pods})" in service_band


def test_no_band_rules_without_autoscaling_and_nothing_when_monitoring_is_off() -> None:
    plain = service("minimal")
    (rule, _) = render_monitoring(plain, SETTINGS)
    assert [g["name"] for g in rule["spec"]["groups"]] == ["vllm-alerts", "vllm-operator-alerts"]
    no_pm = service("minimal", {"monitoring": {"podMonitor": False}})
    assert [m["kind"] for m in render_monitoring(no_pm, SETTINGS)] == ["PrometheusRule"]
    assert render_monitoring(service("minimal", {"monitoring": {"enabled": False}}), SETTINGS) == []


def test_band_bounds_must_be_ordered() -> None:
    with pytest.raises(ValidationError, match="scaleDownQueueDepth must be < "):
        service("tinyllama", {"autoscaling": {"targetQueueDepth": 5, "scaleDownQueueDepth": 5}})


# ---- the operator's gauges ------------------------------------------------------------------


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def run(revision: str, created: str, state: str = "Complete", verdict: str | None = None) -> Run:
    return Run(revision, f"r-{revision}", created, state, "{}", verdict=verdict)


def test_gate_gauge_follows_the_newest_judged_run() -> None:
    ns, svc = "gauge-ns", "gate"
    runs = [run("old", "2026-01-01T00:00:00Z", verdict=PASSED)]
    metrics.record_runs(ns, svc, runs)
    assert sample("vllm_operator_benchmark_passed", namespace=ns, service=svc, revision="old") == 1
    runs.append(run("new", "2026-01-02T00:00:00Z", verdict=FAILED))
    metrics.record_runs(ns, svc, runs)
    assert sample("vllm_operator_benchmark_passed", namespace=ns, service=svc, revision="new") == 0
    assert (
        sample("vllm_operator_benchmark_passed", namespace=ns, service=svc, revision="old") is None
    )
    # a newer revision is being measured: no verdict to alert on
    runs.append(run("newer", "2026-01-03T00:00:00Z", state="Running"))
    metrics.record_runs(ns, svc, runs)
    assert (
        sample("vllm_operator_benchmark_passed", namespace=ns, service=svc, revision="new") is None
    )


def test_rollback_and_autoscaler_gauges_set_and_clear() -> None:
    ns, svc = "gauge-ns", "rb"
    metrics.record_rollback(ns, svc, "abc")
    assert sample("vllm_operator_rollback_active", namespace=ns, service=svc, revision="abc") == 1
    metrics.record_rollback(ns, svc, None)
    assert (
        sample("vllm_operator_rollback_active", namespace=ns, service=svc, revision="abc") is None
    )
    metrics.record_autoscaler(ns, svc, "False")
    assert sample("vllm_operator_autoscaler_scaling_active", namespace=ns, service=svc) == 0
    metrics.record_autoscaler(ns, svc, "True")
    assert sample("vllm_operator_autoscaler_scaling_active", namespace=ns, service=svc) == 1
    metrics.forget(ns, svc)
    assert sample("vllm_operator_autoscaler_scaling_active", namespace=ns, service=svc) is None


# ---- prometheus-adapter and the local Prometheus --------------------------------------------


def test_adapter_serves_the_band_metric_per_pod() -> None:
    band = adapter_config()["rules"][0]
    assert band["seriesQuery"] == f'{BAND_METRIC}{{namespace!="",pod!=""}}'
    assert band["resources"]["overrides"] == {
        "namespace": {"resource": "namespace"},
        "pod": {"resource": "pod"},
    }
    assert band["name"]["as"] == BAND_METRIC


def test_local_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: scripts/build-monitoring.sh installs it")
        pytest.skip("promtool is missing")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    cfg = tmp_path / "prometheus.yml"
    # Debian's prometheus 2.42 has no Kubernetes discovery: the file_sd form is what it runs
    targets = tmp_path / "pods.json"
    cfg.write_text(
        prometheus_config(kubeconfig, [rules_file()], ["127.0.0.1:8081"], pod_targets_file=targets)
    )
    proc = subprocess.run(
        [promtool, "check", "config", str(cfg)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 23 rules found" in proc.stdout
    doc = yaml.safe_load(cfg.read_text())
    assert doc["scrape_configs"][0]["file_sd_configs"][0]["files"] == [str(targets)]
    assert doc["scrape_configs"][1]["honor_labels"] is True
    # without fixed operator targets, file_sd alone: only the vLLM job
    alone = prometheus_config(kubeconfig, [rules_file()], pod_targets_file=targets)
    assert "kubernetes_sd_configs" not in alone
    # the Kubernetes-discovery form (a Prometheus built with it, or the one in a cluster)
    doc = yaml.safe_load(prometheus_config(kubeconfig, [rules_file()]))
    assert doc["scrape_configs"][0]["kubernetes_sd_configs"] == [
        {"role": "pod", "kubeconfig_file": str(kubeconfig)}
    ]


def test_pod_targets_select_running_server_pods_with_their_labels() -> None:
    def pod(name: str, component: str = "server", phase: str = "Running") -> dict:
        return {
            "metadata": {
                "name": name,
                "namespace": "team",
                "labels": {
                    "app.kubernetes.io/name": "vllm",
                    "app.kubernetes.io/instance": "llama",
                    "app.kubernetes.io/component": component,
                    "app.kubernetes.io/managed-by": "vllm-operator",
                },
                "annotations": {"prometheus.io/scrape": "true", "prometheus.io/path": "/metrics"},
            },
            "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8000}]}]},
            "status": {"phase": phase, "podIP": "10.1.0.7"},
        }

    pods = [pod("llama-0"), pod("llama-bench", component="benchmark"), pod("x", phase="Pending")]
    assert pod_targets(pods) == [
        {
            "targets": ["10.1.0.7:8000"],
            "labels": {
                "__metrics_path__": "/metrics",
                "namespace": "team",
                "pod": "llama-0",
                "service": "llama",
            },
        }
    ]


def test_local_pipeline_finds_the_operator_through_file_sd(tmp_path: Path) -> None:
    """What LocalCluster runs: the operator's pods (and operators on the host) by file_sd."""
    kubeconfig, pods = tmp_path / "kubeconfig", tmp_path / "pods.json"
    files = [tmp_path / "operator.json", tmp_path / "host-operators" / "*.json"]
    doc = yaml.safe_load(
        prometheus_config(
            kubeconfig, [rules_file()], pod_targets_file=pods, operator_targets_files=files
        )
    )
    assert doc["scrape_configs"][1] == {
        "job_name": "vllm-operator",
        "scrape_interval": "5s",
        "honor_labels": True,
        "file_sd_configs": [{"files": [str(f) for f in files], "refresh_interval": "5s"}],
    }
    operator_pod = {
        "metadata": {"name": "vllm-operator-abc", "namespace": "vllm-operator-system"},
        "spec": {
            "containers": [
                {
                    "ports": [
                        {"name": "liveness", "containerPort": 8080},
                        {"name": "metrics", "containerPort": 8081},
                    ]
                }
            ]
        },
        "status": {"phase": "Running", "podIP": "10.85.0.9"},
    }
    pending = {**operator_pod, "status": {"phase": "Pending"}}
    assert operator_targets([operator_pod, pending]) == [{"targets": ["10.85.0.9:8081"]}]
    assert operator_targets([pending]) == []


def test_targets_file_is_replaced_only_when_it_changes(tmp_path: Path) -> None:
    out = tmp_path / "pods.json"
    groups = [{"targets": ["10.85.0.9:8000"], "labels": {"pod": "p"}}]
    assert write_if_changed(out, groups)
    assert json.loads(out.read_text()) == groups
    assert not write_if_changed(out, groups)
    assert write_if_changed(out, [])
    assert json.loads(out.read_text()) == []
    assert [p.name for p in tmp_path.iterdir()] == ["pods.json"]


def test_adapter_command_and_registration() -> None:
    args = adapter_args(
        "adapter",
        Path("/k"),
        prometheus_url="http://127.0.0.1:9090",
        secure_port=6443,
        cert_dir=Path("/c"),
    )
    assert "--lister-kubeconfig=/k" in args
    assert "--secure-port=6443" in args
    assert args[args.index("--prometheus-url=http://127.0.0.1:9090")]
    objs = adapter_registration(6443)
    assert [o["kind"] for o in objs] == ["Namespace", "Service", "APIService", "APIService"]
    assert objs[1]["spec"]["type"] == "ExternalName"
    assert {o["metadata"]["name"] for o in objs[2:]} == {
        "v1beta1.custom.metrics.k8s.io",
        "v1beta2.custom.metrics.k8s.io",
    }
