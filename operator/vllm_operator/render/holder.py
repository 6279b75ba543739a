"""The scale-to-zero holder of a namespace (docs/design/scale-to-zero.md; the component:
holder/vllm_holder) and, per service, what points its Service at it.

The namespace's objects (ServiceAccount, Role, RoleBinding, ConfigMap, a Deployment of two
pods on different nodes where there are two, a PodDisruptionBudget; all named HOLDER) are a
pure function of every service of the namespace that may go to zero
(autoscaling.minReplicas 0): each of their reconciles renders them byte for byte the same, so
one field manager writes them without a fight. Their ownerReferences list every such service
(none a controller), so the garbage collector removes them with the last; they carry no
service label, so a service's prune leaves them alone.

Per service: `<name>-ready`, a Service selecting only its serving pods (what the holder
forwards to: never the holder itself), and while the service has no Ready pod, the
EndpointSlice `<name>-holder` that adds the holder's Ready pods that hold it (at the service's
own port of the holder: HOLDS_FOR_ANNOTATION) to the Service's endpoints.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from typing import Any

from vllm_operator import GROUP
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service
from vllm_operator.render.canary import MANAGED_BY_LABEL, SERVICE_NAME_LABEL
from vllm_operator.render.deployment import NON_ROOT_ID
from vllm_operator.render.meta import MANAGED_BY, labels, owner_reference, selector_labels
from vllm_operator.render.service import PORT_NAME

HOLDER = "vllm-holder"
COMPONENT = "holder"
ADMIN_PORT = 9090
CONFIG_DIR = "/etc/vllm-holder"
GRACE_SECONDS = 600
# after SIGTERM a holder pod still takes new connections this long (holder --accept-seconds):
# the operator drops it from the services' slices on the pod's event, kube-proxy after that
ACCEPT_SECONDS = 20
# two pods on different nodes where there are two: a held request survives one pod's loss
# (a node drained, the pod evicted or rolled), and each takes half of every service's queue
REPLICAS = 2
# the most holder pods a service's slice lists (REPLICAS and a rolling update's surge pod)
SLICE_PODS = 3
PORT_BASE, PORT_SPAN = 18000, 10000


def holder_labels() -> dict[str, str]:
    return {
        "app.kubernetes.io/name": HOLDER,
        "app.kubernetes.io/component": COMPONENT,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "vllm-operator",
    }


def is_holder(manifest: dict[str, Any]) -> bool:
    """One of the namespace's holder objects (not a service's child: no revision of its own)."""
    labels_ = (manifest.get("metadata") or {}).get("labels") or {}
    return bool(labels_.get("app.kubernetes.io/name") == HOLDER)


def holder_ports(services: Iterable[Service]) -> dict[str, int]:
    """Each service's port on the holder: from a hash of its name, probing on in name order
    past a port taken (stable while no two names collide)."""
    taken: dict[str, int] = {}
    used: set[int] = set()
    for name in sorted({s.name for s in services}):
        port = PORT_BASE + int(hashlib.sha256(name.encode()).hexdigest(), 16) % PORT_SPAN
        while port in used:
            port = PORT_BASE + (port - PORT_BASE + 1) % PORT_SPAN
        used.add(port)
        taken[name] = port
    return taken


# on the holder's pod template: the services it was started for and the port of each
# ({"name": port}); a pod holds a service only at the port its annotation gives it, so while
# the set changes (a rolling update) the old pods go on holding the services they had
HOLDS_FOR_ANNOTATION = f"{GROUP}/holds-for"


def holds_for(ports: dict[str, int]) -> str:
    """The annotation's value: the services a holder pod holds, at their ports."""
    return json.dumps(dict(sorted(ports.items())), separators=(",", ":"))


def pod_holds(pod: dict[str, Any]) -> dict[str, int]:
    """The services a holder pod holds, at their ports ({} for another pod or a bad value)."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(HOLDS_FOR_ANNOTATION)
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}


def queue_share(queue: int) -> int:
    """Each holder pod's share of a service's hold.queue (kube-proxy spreads connections
    over the pods; rounded up, so the whole queue is always held)."""
    return max(1, math.ceil(queue / REPLICAS))


def zero_services(services: Iterable[Service], namespace: str) -> list[Service]:
    """The services of `namespace` that may go to zero, by name."""
    return sorted(
        (s for s in services if s.namespace == namespace and s.spec.autoscaling.to_zero),
        key=lambda s: s.name,
    )


def ready_name(svc: Service) -> str:
    return f"{svc.name}-ready"


def holder_slice_name(svc: Service) -> str:
    return f"{svc.name}-holder"


def holder_config(services: Iterable[Service], settings: OperatorSettings) -> dict[str, Any]:
    """The holder's config document (vllm_holder.config): one entry per service."""
    zero = list(services)
    ports = holder_ports(zero)
    return {
        "services": {
            s.name: {
                "port": ports[s.name],
                "backend": f"http://{ready_name(s)}.{s.namespace}.svc.{settings.cluster_domain}"
                f":{s.spec.port}",
                "queue": queue_share(s.spec.autoscaling.hold.queue),
                "holdTimeoutSeconds": s.spec.autoscaling.hold.timeout_seconds,
                "retryAfterSeconds": s.spec.autoscaling.hold.retry_after_seconds,
            }
            for s in zero
        }
    }


def render_holder(
    namespace: str, services: Iterable[Service], settings: OperatorSettings
) -> list[dict[str, Any]]:
    """The namespace's holder objects ([] while no service of it may go to zero)."""
    zero = zero_services(services, namespace)
    if not zero:
        return []
    owners = [{**owner_reference(s), "controller": False} for s in zero]
    meta = {
        "name": HOLDER,
        "namespace": namespace,
        "labels": holder_labels(),
        "ownerReferences": owners,
    }
    config = holder_config(zero, settings)
    ports = [
        {"name": f"s-{i}", "containerPort": e["port"], "protocol": "TCP"}
        for i, e in enumerate(config["services"].values())
    ]
    # the pods roll (drain) when the set of services changes, not when a bound does
    held = holds_for({name: e["port"] for name, e in config["services"].items()})
    probe = {"periodSeconds": 5, "timeoutSeconds": 3, "failureThreshold": 3}
    container = {
        "name": COMPONENT,
        "image": settings.holder_image,
        "args": [
            f"--config={CONFIG_DIR}/config.json",
            f"--admin-port={ADMIN_PORT}",
            f"--namespace={namespace}",
            f"--grace-seconds={GRACE_SECONDS}",
            f"--accept-seconds={ACCEPT_SECONDS}",
        ],
        "ports": [{"name": "admin", "containerPort": ADMIN_PORT, "protocol": "TCP"}, *ports],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "admin"}, **probe},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "admin"}, **probe},
        "resources": {
            "requests": {"cpu": "50m", "memory": "128Mi"},
            "limits": {"memory": "1Gi"},
        },
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            # the wake: a merge patch of the service's wake annotation (an admission policy
            # can hold it to that annotation), nothing else
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": ["vllmservices"],
                    "resourceNames": [s.name for s in zero],
                    "verbs": ["patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": HOLDER},
            "subjects": [{"kind": "ServiceAccount", "name": HOLDER, "namespace": namespace}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {"config.json": json.dumps(config, sort_keys=True, indent=2)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": {"app.kubernetes.io/name": HOLDER}},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
                },
                "template": {
                    "metadata": {
                        "labels": holder_labels(),
                        "annotations": {
                            HOLDS_FOR_ANNOTATION: held,
                            "prometheus.io/scrape": "true",
                            "prometheus.io/port": str(ADMIN_PORT),
                        },
                    },
                    "spec": {
                        "serviceAccountName": HOLDER,
                        "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": HOLDER}}],
                        "terminationGracePeriodSeconds": GRACE_SECONDS + ACCEPT_SECONDS + 30,
                        # on different nodes where it can (preferred: one node still runs both)
                        "affinity": {
                            "podAntiAffinity": {
                                "preferredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "weight": 100,
                                        "podAffinityTerm": {
                                            "labelSelector": {
                                                "matchLabels": {"app.kubernetes.io/name": HOLDER}
                                            },
                                            "topologyKey": "kubernetes.io/hostname",
                                        },
                                    }
                                ]
                            }
                        },
                        "enableServiceLinks": False,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": NON_ROOT_ID,
                            "runAsGroup": NON_ROOT_ID,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                    },
                },
            },
        },
        {
            # a voluntary disruption (a node drain) takes one holder pod at a time
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": meta,
            "spec": {
                "maxUnavailable": 1,
                "selector": {"matchLabels": {"app.kubernetes.io/name": HOLDER}},
            },
        },
    ]


def render_ready_service(svc: Service) -> dict[str, Any]:
    """`<name>-ready`: the serving pods only (what the holder forwards to)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": ready_name(svc),
            "namespace": svc.namespace,
            "labels": labels(svc, COMPONENT),
            "ownerReferences": [owner_reference(svc)],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(svc),
            "ports": [
                {"name": PORT_NAME, "port": svc.spec.port, "targetPort": PORT_NAME},
            ],
        },
    }


def render_holder_slice(
    svc: Service, port: int, pods: Iterable[tuple[str, str, str]]
) -> dict[str, Any]:
    """The holder's Ready pods (name, uid, IP) as endpoints of the Service, at `port`."""
    endpoints = [
        {
            "addresses": [ip],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "targetRef": {"kind": "Pod", "namespace": svc.namespace, "name": name, "uid": uid},
        }
        for name, uid, ip in sorted(pods)
    ]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": holder_slice_name(svc),
            "namespace": svc.namespace,
            "labels": {
                **labels(svc, COMPONENT),
                SERVICE_NAME_LABEL: svc.name,
                MANAGED_BY_LABEL: f"vllm-operator.{GROUP}",
            },
            "ownerReferences": [owner_reference(svc)],
        },
        "addressType": "IPv4",
        "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP", "appProtocol": "http"}],
        "endpoints": endpoints,
    }


def with_zero(
    rendered: list[dict[str, Any]],
    svc: Service,
    settings: OperatorSettings,
    *,
    replicas: int | None,
    holder_in_path: bool,
    services: Iterable[Service],
    holder_pods: Iterable[tuple[str, str, str]],
) -> list[dict[str, Any]]:
    """The service's children with scale to zero's: the serving Deployment at `replicas`
    (None: as rendered), its `-ready` Service, the namespace's holder objects, and while
    `holder_in_path` the holder's slice, first (it joins the Service before replicas go to 0;
    it leaves, not rendered, only once a pod is Ready)."""
    others = [s for s in services if s.name != svc.name]
    everyone = [*others, svc]
    out = [
        {**m, "spec": {**m["spec"], "replicas": replicas}}
        if m["kind"] == "Deployment" and m["metadata"]["name"] == svc.name and replicas is not None
        else m
        for m in rendered
    ]
    pods = sorted(holder_pods)[:SLICE_PODS]
    first = []
    if holder_in_path and pods:
        port = holder_ports(zero_services(everyone, svc.namespace))[svc.name]
        first.append(render_holder_slice(svc, port, pods))
    return [
        *first,
        *out,
        render_ready_service(svc),
        *render_holder(svc.namespace, everyone, settings),
    ]
