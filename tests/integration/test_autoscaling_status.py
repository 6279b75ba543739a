"""The service tells the truth about its autoscaler and its monitoring objects, on the local
cluster with its own metrics pipeline (prometheus-adapter serving custom.metrics.k8s.io,
Prometheus scraping the operator):

- kwok's pods serve no /metrics, so the HPA cannot get its metric: the VLLMService's
  AutoscalingActive condition carries the HPA's own ScalingActive reason and message, and the
  operator's gauge vllm_operator_autoscaler_scaling_active reads 0 in the cluster's Prometheus;
- without the Prometheus Operator's CRDs: Monitoring=False (PrometheusOperatorMissing), no
  PrometheusRule/PodMonitor; once they are installed the operator applies both (owned by the
  service) and Monitoring=True.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import SAMPLES, condition, get, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess
from vllm_operator.render.monitoring import MONITORING_CRDS

pytestmark = pytest.mark.cluster

CRD_DIR = Path(__file__).resolve().parents[1] / "data" / "prometheus-operator-crds"
NAME = "tinyllama"


def _query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=60) as r:
        return list(json.load(r)["data"]["result"])


@pytest.fixture
def prometheus_operator_crds(cluster: LocalCluster) -> Iterator[None]:
    files = sorted(CRD_DIR.glob("*.yaml"))
    yield None
    for f in files:  # the other tests see a cluster without the Prometheus Operator
        cluster.kubectl("delete", "-f", str(f), "--ignore-not-found", "--wait=true")


def test_autoscaler_and_monitoring_state_reach_the_status(
    cluster: LocalCluster,
    operator: OperatorProcess,
    namespace: str,
    prometheus_operator_crds: None,
) -> None:
    assert cluster.monitoring, "the test cluster runs the metrics pipeline"
    cluster.kubectl("apply", "-n", namespace, "-f", str(SAMPLES / f"{NAME}.yaml"))

    def scaling_active() -> dict[str, Any] | None:
        hpa = get(cluster, namespace, "hpa", NAME)
        return condition(hpa, "ScalingActive") or None

    hpa_cond = wait_for("the HPA's ScalingActive condition", scaling_active)
    # custom.metrics.k8s.io is served (the adapter), but no kwok pod has a series
    assert hpa_cond["status"] == "False", hpa_cond
    assert "no custom metrics API" not in hpa_cond["message"]

    def brief(c: dict[str, Any] | None) -> tuple[str, str, str]:
        return (
            (c or {}).get("status", ""),
            (c or {}).get("reason", ""),
            (c or {}).get("message", ""),
        )

    def reported() -> dict[str, Any] | None:
        """The service once its AutoscalingActive says exactly what the HPA says."""
        svc = get(cluster, namespace, "vllmservice", NAME)
        same = brief(condition(svc, "AutoscalingActive")) == brief(scaling_active())
        return svc if same else None

    svc = wait_for("the HPA's ScalingActive on the service", reported)
    assert brief(condition(svc, "AutoscalingActive"))[:2] == ("False", hpa_cond["reason"])
    hpa = get(cluster, namespace, "hpa", NAME)
    assert hpa is not None
    assert svc["status"]["autoscaling"] == {
        "horizontalPodAutoscaler": NAME,
        "currentReplicas": hpa["status"]["currentReplicas"],
        "desiredReplicas": hpa["status"]["desiredReplicas"],
        "metric": "vllm_operator:queue_depth_band",
        "targetAverageValue": "20",
        # no spec.objective: the seeds' band, and the status says where its target comes from
        "policy": "QueueBand",
        "targetFrom": "autoscaling.targetQueueDepth (scale down at <= 2 waiting per pod)",
    }
    # the operator's gauge, as the cluster's Prometheus scraped it from the host operator
    gauge = f'vllm_operator_autoscaler_scaling_active{{namespace="{namespace}"}}'
    series = wait_for("the gauge in Prometheus", lambda: _query(cluster.prometheus_url, gauge))
    assert [(s["metric"]["service"], s["value"][1]) for s in series] == [(NAME, "0")]

    # no Prometheus Operator: said in the status, nothing rendered
    monitoring = condition(svc, "Monitoring")
    assert (monitoring["status"], monitoring["reason"]) == ("False", "PrometheusOperatorMissing")
    assert "deploy/monitoring/vllm-alerts.rules.yaml" in monitoring["message"]

    # its CRDs installed: the next reconcile (drift timer) applies both objects
    for f in sorted(CRD_DIR.glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(f))
    for crd in MONITORING_CRDS.values():
        cluster.wait_crds_established(crd)

    def rendered() -> dict[str, Any] | None:
        svc = get(cluster, namespace, "vllmservice", NAME)
        return svc if condition(svc, "Monitoring").get("status") == "True" else None

    svc = wait_for("Monitoring=True", rendered)
    assert condition(svc, "Monitoring")["reason"] == "Rendered"
    uid = svc["metadata"]["uid"]
    for kind in ("prometheusrule", "podmonitor"):
        obj = get(cluster, namespace, kind, NAME)
        assert obj is not None, kind
        assert [o["uid"] for o in obj["metadata"]["ownerReferences"]] == [uid]
