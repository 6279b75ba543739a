"""Step 5 of the flow (status), the monitoring: the Monitoring condition (the PrometheusRule
and PodMonitor applied, or why not)."""

from __future__ import annotations

from vllm_operator.api.spec import Service
from vllm_operator.status.conditions import Cond


def _monitoring(svc: Service, crds: bool | None) -> list[Cond]:
    """The Monitoring condition: the PrometheusRule/PodMonitor applied, or why not. `crds`:
    whether the Prometheus Operator's CRDs are served (None: not looked at)."""
    m = svc.spec.monitoring
    if crds is None or not m.enabled:
        return []
    if crds:
        return [
            Cond(
                "Monitoring",
                "True",
                "Rendered",
                "PrometheusRule" + (" and PodMonitor" if m.pod_monitor else "") + " applied",
            )
        ]
    return [
        Cond(
            "Monitoring",
            "False",
            "PrometheusOperatorMissing",
            "the Prometheus Operator's CRDs (prometheusrules, podmonitors.monitoring.coreos.com) "
            "are not installed: no PrometheusRule or PodMonitor for this service; install the "
            "rules file deploy/monitoring/vllm-alerts.rules.yaml and the scrape configs "
            "deploy/monitoring/prometheus-scrape-configs.yaml in your Prometheus instead",
        )
    ]
