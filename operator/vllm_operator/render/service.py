"""The Service in front of the vLLM pods (OpenAI API and /metrics on one named port)."""

from __future__ import annotations

from typing import Any

from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.render.meta import metadata, selector_labels

PORT_NAME = "http"


def render_service(svc: Service, settings: OperatorSettings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(svc),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(svc),
            "ports": [
                {
                    "name": PORT_NAME,
                    "port": svc.spec.port,
                    "targetPort": PORT_NAME,
                    "protocol": "TCP",
                    "appProtocol": "http",
                }
            ],
        },
    }


def endpoint(svc: Service, settings: OperatorSettings) -> str:
    return f"http://{svc.name}.{svc.namespace}.svc.{settings.cluster_domain}:{svc.spec.port}/v1"
