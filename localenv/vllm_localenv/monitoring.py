"""The local cluster's metrics pipeline, as text and argument lists (no processes started here):
Debian's Prometheus on the host, discovering the cluster's pods through the admin kubeconfig,
and prometheus-adapter (scripts/build-monitoring.sh) serving custom.metrics.k8s.io through the
API server's aggregation layer.

What the cluster code does with them:
    cfg = prometheus_config(kubeconfig, [rules_file()], operator_targets=["127.0.0.1:8081"])
    write cfg to <state>/prometheus.yml; start prometheus_args(...)
    start adapter_args(...); apply adapter_registration(adapter_port)
The scrape and rule definitions are the ones shipped to users (vllm_operator.generate.monitoring),
so the local pipeline exercises exactly what docs/monitoring.md tells a cluster owner to install.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vllm_operator.generate.monitoring import OPERATOR_METRICS_PORT_NAME, scrape_configs

# cluster.py imports this module: the repository root is computed here, not imported from it
MONITORING_DIR = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"


def rules_file() -> Path:
    """The generic rules (alerts and the band recording rules, default thresholds)."""
    return MONITORING_DIR / "vllm-alerts.rules.yaml"


def adapter_config_file() -> Path:
    return MONITORING_DIR / "prometheus-adapter-config.yaml"


def prometheus_config(
    kubeconfig: Path,
    rule_files: list[Path],
    operator_targets: list[str] | None = None,
    *,
    pod_targets_file: Path | None = None,
    operator_targets_files: list[Path] | None = None,
    scrape_interval: str = "5s",
    evaluation_interval: str = "5s",
) -> str:
    """prometheus.yml for a Prometheus on the host: the vLLM pods and the operator (fixed
    targets when it runs on the host, e.g. 127.0.0.1:8081; else its pods by discovery).
    Short intervals: the tests wait for the autoscaler to react.

    Pod discovery: Kubernetes discovery through `kubeconfig` (the cluster's CA and client
    certificate are in it) with the relabelling shipped to users; or, for Debian's
    prometheus 2.42, which is built without Kubernetes discovery, `pod_targets_file`: a
    file_sd file that `pod_targets` fills from the API's pod list with the same selection
    and labels (rewrite it when pods change; Prometheus re-reads it by itself).
    `operator_targets_files`: file_sd files (globs allowed) naming the operator's metrics
    endpoints instead (`operator_targets` fills one from the in-cluster operator's pods; an
    operator on the host adds its own)."""
    configs = scrape_configs(
        kubernetes_sd={"kubeconfig_file": str(kubeconfig)},
        operator_targets=operator_targets,
        interval=scrape_interval,
    )
    if pod_targets_file is not None:
        vllm = configs[0]
        del vllm["kubernetes_sd_configs"], vllm["relabel_configs"]
        vllm["file_sd_configs"] = [{"files": [str(pod_targets_file)], "refresh_interval": "5s"}]
        if operator_targets_files is not None:
            op = configs[1]
            op.pop("kubernetes_sd_configs", None)
            op.pop("relabel_configs", None)
            op.pop("static_configs", None)
            op["file_sd_configs"] = [
                {"files": [str(f) for f in operator_targets_files], "refresh_interval": "5s"}
            ]
        elif operator_targets is None:  # no discovery to find the operator's pods with
            configs = [vllm]
    doc: dict[str, Any] = {
        "global": {
            "scrape_interval": scrape_interval,
            "evaluation_interval": evaluation_interval,
        },
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": configs,
    }
    return yaml.safe_dump(doc, sort_keys=False, width=10_000)


def pod_targets(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """file_sd target groups for the operator's running vLLM server and canary pods (pods as
    the API lists them): the same selection and labels as
    generate.monitoring.vllm_pod_relabel_configs()."""
    groups = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        lbl, ann = meta.get("labels") or {}, meta.get("annotations") or {}
        ip = (pod.get("status") or {}).get("podIP")
        if not ip or (pod.get("status") or {}).get("phase") != "Running":
            continue
        if (
            lbl.get("app.kubernetes.io/name"),
            lbl.get("app.kubernetes.io/component") in ("server", "canary"),
            lbl.get("app.kubernetes.io/managed-by"),
            ann.get("prometheus.io/scrape"),
        ) != ("vllm", True, "vllm-operator", "true"):
            continue
        ports = [
            p["containerPort"]
            for c in spec.get("containers") or []
            for p in c.get("ports") or []
            if p.get("name") == "http"
        ]
        if not ports:
            continue
        groups.append(
            {
                "targets": [f"{ip}:{ports[0]}"],
                "labels": {
                    "__metrics_path__": ann.get("prometheus.io/path") or "/metrics",
                    "namespace": meta.get("namespace", ""),
                    "pod": meta.get("name", ""),
                    "service": lbl.get("app.kubernetes.io/instance", ""),
                },
            }
        )
    return groups


def operator_targets(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """file_sd target groups for the operator's own running pods (API pod objects): their
    container port named `metrics` (deploy/operator.yaml), as the shipped PodMonitor selects."""
    targets = []
    for pod in pods:
        status = pod.get("status") or {}
        if not status.get("podIP") or status.get("phase") != "Running":
            continue
        targets += [
            f"{status['podIP']}:{p['containerPort']}"
            for c in (pod.get("spec") or {}).get("containers") or []
            for p in c.get("ports") or []
            if p.get("name") == OPERATOR_METRICS_PORT_NAME
        ]
    return [{"targets": sorted(targets)}] if targets else []


def prometheus_args(
    binary: str, config_file: Path, data_dir: Path, port: int, retention: str = "6h"
) -> list[str]:
    return [
        binary,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={data_dir}",
        f"--storage.tsdb.retention.time={retention}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",  # POST /-/reload after rule changes
    ]


def adapter_args(
    binary: str,
    kubeconfig: Path,
    *,
    prometheus_url: str,
    secure_port: int,
    cert_dir: Path,
    config_file: Path | None = None,
    relist_interval: str = "5s",
) -> list[str]:
    """prometheus-adapter on the host. It self-signs its serving certificate into cert_dir
    (the APIService skips TLS verification, as the upstream manifests do); it learns the
    front-proxy CA (requestheader-client-ca-file) from kube-system/extension-apiserver-
    authentication through the authentication kubeconfig."""
    return [
        binary,
        f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--prometheus-url={prometheus_url}",
        f"--config={config_file or adapter_config_file()}",
        f"--metrics-relist-interval={relist_interval}",
        "--bind-address=127.0.0.1",
        f"--secure-port={secure_port}",
        f"--cert-dir={cert_dir}",
        "--v=2",
    ]


ADAPTER_NAMESPACE = "custom-metrics"
ADAPTER_SERVICE = "prometheus-adapter"


def adapter_registration(port: int) -> list[dict[str, Any]]:
    """The API objects that route custom.metrics.k8s.io to an adapter on the host: a Service
    of type ExternalName (Endpoints/EndpointSlices reject loopback addresses) and the
    APIServices (v1beta1, v1beta2) on its port. Keep the API server's
    --enable-aggregator-routing off so it resolves the Service by name."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": ADAPTER_SERVICE, "namespace": ADAPTER_NAMESPACE},
        "spec": {
            "type": "ExternalName",
            "externalName": "localhost",
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
    }
    api_services = [
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{version}.custom.metrics.k8s.io"},
            "spec": {
                "service": {"name": ADAPTER_SERVICE, "namespace": ADAPTER_NAMESPACE, "port": port},
                "group": "custom.metrics.k8s.io",
                "version": version,
                "insecureSkipTLSVerify": True,
                "groupPriorityMinimum": 100,
                "versionPriority": priority,
            },
        }
        for version, priority in (("v1beta1", 100), ("v1beta2", 200))
    ]
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ADAPTER_NAMESPACE}}
    return [namespace, service, *api_services]
