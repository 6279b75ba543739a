"""Names, labels and owner references shared by every child."""

from __future__ import annotations

from typing import Any

from vllm_operator import API_VERSION, GROUP, KIND
from vllm_operator.api.spec import Service

MANAGED_BY = "vllm-operator"
SERVICE_LABEL = f"{GROUP}/service"


def selector_labels(svc: Service) -> dict[str, str]:
    """Stable labels that select the service's pods (never change them: selectors are
    immutable on Deployments)."""
    return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": svc.name}


def labels(svc: Service, component: str = "server") -> dict[str, str]:
    return {
        **selector_labels(svc),
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "vllm-operator",
        SERVICE_LABEL: svc.name,
    }


def owner_reference(svc: Service) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": svc.name,
        "uid": svc.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(svc: Service, name: str | None = None, component: str = "server") -> dict[str, Any]:
    return {
        "name": name or svc.name,
        "namespace": svc.namespace,
        "labels": labels(svc, component),
        "ownerReferences": [owner_reference(svc)],
    }
