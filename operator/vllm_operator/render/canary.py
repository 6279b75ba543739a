"""The canary: one pod of a new revision that the Service does not select (rollout.canary).

Its pods carry `app.kubernetes.io/instance: <name>-canary` where the serving pods carry
`<name>`: the Service, the serving Deployment's ReplicaSets, the PDB and the HPA's pod metrics
all select on the serving value, so no client request reaches the canary (until a bake adds
its pod to the endpoints: render_bake_endpoints), no disruption budget counts it and no
autoscaler reads its queue; Prometheus labels its series service=<name>-canary. The service
label stays, so the watch wakes the service for its events and the prune finds it once it is
not rendered.

Its pod template is the serving one's (render_pod_template) with those two labels changed;
the revision it runs is the serving template's (annotated: the label change is not a
revision of its own), so its run is the revision's run and a pass promotes exactly it.
"""

from __future__ import annotations

import copy
from typing import Any

from vllm_operator import GROUP
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.render.benchmark import REVISION_ANNOTATION, revision
from vllm_operator.render.deployment import render_pod_template
from vllm_operator.render.meta import labels, owner_reference
from vllm_operator.render.service import PORT_NAME

COMPONENT = "canary"
INSTANCE = "app.kubernetes.io/instance"


def canary_name(svc: Service) -> str:
    return f"{svc.name}-canary"


def canary_selector(svc: Service) -> dict[str, str]:
    return {"app.kubernetes.io/name": "vllm", INSTANCE: canary_name(svc)}


def canary_template(template: dict[str, Any], svc: Service) -> dict[str, Any]:
    """A serving pod template as the canary runs it (its selector labels changed only)."""
    out = copy.deepcopy(template)
    pod_labels = out["metadata"]["labels"]
    pod_labels[INSTANCE] = canary_name(svc)
    pod_labels["app.kubernetes.io/component"] = COMPONENT
    return out


def render_canary(
    svc: Service, settings: OperatorSettings, template: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The canary Deployment of the spec's revision: one replica, Recreate (a newer canary
    frees the GPU of the older before it starts), annotated with the serving revision.
    `template`: the spec's pod template where the caller rendered it already (None: rendered
    here)."""
    template = template if template is not None else render_pod_template(svc, settings)
    meta_labels = {**labels(svc, COMPONENT), INSTANCE: canary_name(svc)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": canary_name(svc),
            "namespace": svc.namespace,
            "labels": meta_labels,
            "annotations": {REVISION_ANNOTATION: revision(template)},
            "ownerReferences": [owner_reference(svc)],
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": canary_selector(svc)},
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 2,
            "progressDeadlineSeconds": svc.spec.probes.startup_timeout_seconds + 600,
            "template": canary_template(template, svc),
        },
    }


BAKE_COMPONENT = "bake"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
# the bake's verdict for the revision the canary runs ("<revision> <verdict> <message>"), on
# the canary Deployment: it outlives the bake's EndpointSlice, so an aborted canary stays
# aborted and a passed one is not baked again
BAKE_ANNOTATION = f"{GROUP}/bake"


def bake_endpoints_name(svc: Service) -> str:
    return f"{svc.name}-canary-bake"


def render_bake_endpoints(
    svc: Service, pod: str, uid: str, ip: str, port: int, *, node: str | None = None
) -> dict[str, Any]:
    """The canary's pod as one more endpoint of the Service (discovery.k8s.io/v1): kube-proxy
    and every other consumer of EndpointSlices merge the slices labelled with the Service's
    name, whoever manages them (the EndpointSlice controller leaves slices of another
    manager alone). The canary's own labels never change, so its ReplicaSet keeps it; deleting
    the slice takes it out of the endpoints again (its pod drains in its preStop)."""
    endpoint: dict[str, Any] = {
        "addresses": [ip],
        "conditions": {"ready": True, "serving": True, "terminating": False},
        "targetRef": {"kind": "Pod", "namespace": svc.namespace, "name": pod, "uid": uid},
    }
    if node:
        endpoint["nodeName"] = node
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": bake_endpoints_name(svc),
            "namespace": svc.namespace,
            "labels": {
                **labels(svc, BAKE_COMPONENT),
                INSTANCE: canary_name(svc),
                SERVICE_NAME_LABEL: svc.name,
                MANAGED_BY_LABEL: f"vllm-operator.{GROUP}",
            },
            "ownerReferences": [owner_reference(svc)],
        },
        "addressType": "IPv6" if ":" in ip else "IPv4",
        "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP", "appProtocol": "http"}],
        "endpoints": [endpoint],
    }
