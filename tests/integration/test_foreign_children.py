"""An object of a child's name that the service does not own is never taken over (issue 19):
the real operator on the local control plane, with someone else's Service (and HPA) made
before the VLLMService. The operator's watch cache holds only its labelled objects, so this is
the case where the cache says "absent" and the API server says otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import apply, condition, get, items, ready, sample, wait_for
from vllm_localenv.cluster import LocalCluster
from vllm_localenv.operator_process import OperatorProcess
from vllm_operator.api.settings import OperatorSettings

pytestmark = pytest.mark.cluster

THEIR_LABELS = {"app": "theirs"}
MANAGER = OperatorSettings().field_manager  # the operator's server-side apply owner


def their_service(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "minimal", "namespace": namespace, "labels": THEIR_LABELS},
        "spec": {
            "selector": THEIR_LABELS,
            "ports": [{"name": "web", "port": 80, "targetPort": 8080}],
        },
    }


def their_hpa(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "minimal", "namespace": namespace, "labels": THEIR_LABELS},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "theirs"},
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ],
        },
    }


def managers(obj: dict[str, Any]) -> set[str]:
    return {m.get("manager", "") for m in obj["metadata"].get("managedFields") or []}


def untouched(obj: dict[str, Any] | None, before: dict[str, Any]) -> None:
    """No owner reference, label, field or field manager of the operator's on `obj`."""
    assert obj is not None
    assert obj["metadata"].get("ownerReferences") is None
    assert obj["metadata"].get("labels") == THEIR_LABELS
    assert MANAGER not in managers(obj)
    assert obj["spec"] == before["spec"]


def service_manifest(autoscaling: bool = False) -> dict[str, Any]:
    m = sample("minimal")
    m["spec"]["benchmark"] = {"enabled": False}
    if autoscaling:
        m["spec"]["autoscaling"] = {"enabled": True, "minReplicas": 1, "maxReplicas": 2}
    return m


def warnings(cluster: LocalCluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in items(cluster, namespace, "events")
        if e["involvedObject"].get("kind") == "VLLMService" and e["reason"] == reason
    ]


def test_a_foreign_service_of_the_same_name_is_left_alone_and_named_in_the_status(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, their_service(namespace))
    before = get(cluster, namespace, "service", "minimal")
    assert before is not None
    apply(cluster, namespace, service_manifest())
    refused = wait_for(
        "Ready=False/NotOwned",
        lambda: (
            (c := condition(get(cluster, namespace, "vllmservice", "minimal"), "Ready")).get(
                "reason"
            )
            == "NotOwned"
            and c
        ),
    )
    assert refused["status"] == "False"
    assert refused["message"].startswith(
        "Service minimal exists and is not owned by this VLLMService"
    )
    # retried with back-off meanwhile; the Service is as its owner made it
    wait_for("a NotOwned event", lambda: warnings(cluster, namespace, "NotOwned"))
    after = get(cluster, namespace, "service", "minimal")
    untouched(after, before)
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert len(warnings(cluster, namespace, "NotOwned")) == 1
    # its owner deletes it: the operator's own Service is created and the service serves
    cluster.kubectl("delete", "service", "minimal", "-n", namespace)
    wait_for("Ready", lambda: ready(cluster, namespace, "minimal"))
    mine = get(cluster, namespace, "service", "minimal")
    assert mine is not None
    assert mine["metadata"]["ownerReferences"][0]["kind"] == "VLLMService"
    svc = get(cluster, namespace, "vllmservice", "minimal")
    assert condition(svc, "ChildrenSynced")["status"] == "True"


def test_a_foreign_hpa_of_the_same_name_is_left_alone_and_the_service_still_serves(
    operator: OperatorProcess, cluster: LocalCluster, namespace: str
) -> None:
    apply(cluster, namespace, their_hpa(namespace))
    before = get(cluster, namespace, "hpa", "minimal")
    assert before is not None
    apply(cluster, namespace, service_manifest(autoscaling=True))
    svc = wait_for(
        "Ready with ChildrenSynced=False/NotOwned",
        lambda: (
            (s := ready(cluster, namespace, "minimal"))
            and condition(s, "ChildrenSynced").get("reason") == "NotOwned"
            and s
        ),
    )
    synced = condition(svc, "ChildrenSynced")
    assert synced["status"] == "False"
    assert synced["message"].startswith(
        "HorizontalPodAutoscaler minimal exists and is not owned by this VLLMService"
    )
    # (the HPA controller writes its status: its resourceVersion moves, its spec does not)
    untouched(get(cluster, namespace, "hpa", "minimal"), before)
