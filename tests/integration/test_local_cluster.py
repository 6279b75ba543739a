"""The foundation: the local control plane behaves like a cluster users deploy to."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.support import wait_for
from vllm_localenv.cluster import GPU_PRODUCT_LABEL, LocalCluster, pinned_versions

pytestmark = pytest.mark.cluster


def gpu_deployment(name: str, replicas: int, gpus: int) -> client.V1Deployment:
    labels = {"app": name}
    container = client.V1Container(
        name="server",
        image="registry.example/vllm:test",
        resources=client.V1ResourceRequirements(
            limits={"nvidia.com/gpu": str(gpus)}, requests={"cpu": "1", "memory": "1Gi"}
        ),
    )
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(containers=[container]),
            ),
        ),
    )


def test_cluster_answers_with_the_pinned_version(cluster: LocalCluster) -> None:
    assert cluster.get("/readyz") == b"ok"
    version = json.loads(cluster.get("/version"))
    assert version["gitVersion"] == f"v{pinned_versions()['K8S_VERSION']}"
    assert cluster.server.startswith("https://127.0.0.1:")


def test_gpu_nodes_are_ready_with_eight_gpus(api_client: client.ApiClient) -> None:
    nodes = client.CoreV1Api(api_client).list_node().items
    gpu_nodes = [n for n in nodes if GPU_PRODUCT_LABEL in (n.metadata.labels or {})]
    assert len(gpu_nodes) >= 2
    for node in gpu_nodes:
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        ready = {c.type: c.status for c in node.status.conditions}
        assert ready.get("Ready") == "True", node.metadata.name


def test_gpu_deployment_becomes_ready_and_gpus_are_accounted(
    api_client: client.ApiClient, namespace: str
) -> None:
    apps = client.AppsV1Api(api_client)
    core = client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(namespace, gpu_deployment("fits", replicas=3, gpus=4))
    wait_for(
        "3 ready replicas",
        lambda: (
            (
                apps.read_namespaced_deployment(
                    name="fits", namespace=namespace
                ).status.ready_replicas
                or 0
            )
            == 3
        ),
    )
    pods = core.list_namespaced_pod(namespace, label_selector="app=fits").items
    assert {p.status.phase for p in pods} == {"Running"}
    assert all(p.spec.node_name.startswith("gpu-node-") for p in pods)
    # 3 pods x 4 GPUs need both 8-GPU nodes: the scheduler really accounts for nvidia.com/gpu
    assert len({p.spec.node_name for p in pods}) == 2

    apps.create_namespaced_deployment(namespace, gpu_deployment("too-big", replicas=1, gpus=9))

    def unschedulable() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector="app=too-big").items
        return any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            for p in pods
            for c in (p.status.conditions or [])
        )

    wait_for("a 9-GPU pod to be unschedulable", unschedulable)


def test_deleting_an_owner_garbage_collects_its_children(
    api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
    )
    core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="child", owner_references=[ref])),
    )
    core.delete_namespaced_config_map("owner", namespace)

    def child_gone() -> bool:
        names = {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}
        return "child" not in names

    wait_for("the owned ConfigMap to be garbage-collected", child_gone)


def test_hpa_controller_acts_on_an_hpa(api_client: client.ApiClient, namespace: str) -> None:
    apps = client.AppsV1Api(api_client)
    autoscaling = client.AutoscalingV2Api(api_client)
    apps.create_namespaced_deployment(namespace, gpu_deployment("scaled", replicas=1, gpus=1))
    hpa = client.V2HorizontalPodAutoscaler(
        metadata=client.V1ObjectMeta(name="scaled"),
        spec=client.V2HorizontalPodAutoscalerSpec(
            scale_target_ref=client.V2CrossVersionObjectReference(
                api_version="apps/v1", kind="Deployment", name="scaled"
            ),
            min_replicas=1,
            max_replicas=4,
            metrics=[
                client.V2MetricSpec(
                    type="Pods",
                    pods=client.V2PodsMetricSource(
                        metric=client.V2MetricIdentifier(name="vllm:num_requests_waiting"),
                        target=client.V2MetricTarget(type="AverageValue", average_value="20"),
                    ),
                )
            ],
        ),
    )
    autoscaling.create_namespaced_horizontal_pod_autoscaler(namespace, hpa)

    def conditions() -> dict[str, str]:
        got = autoscaling.read_namespaced_horizontal_pod_autoscaler("scaled", namespace)
        return {c.type: c.status for c in (got.status.conditions or [])}

    seen = wait_for("HPA conditions", conditions)
    # no custom-metrics adapter is installed, so the controller reports it cannot get the metric
    assert seen.get("AbleToScale") == "True"
    assert "ScalingActive" in seen


def test_job_completes(api_client: client.ApiClient, namespace: str) -> None:
    batch = client.BatchV1Api(api_client)
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="bench"),
        spec=client.V1JobSpec(
            backoff_limit=0,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[
                        client.V1Container(name="bench", image="registry.example/bench:test")
                    ],
                )
            ),
        ),
    )
    batch.create_namespaced_job(namespace, job)

    def complete() -> bool:
        status = batch.read_namespaced_job("bench", namespace).status
        return any(c.type == "Complete" and c.status == "True" for c in (status.conditions or []))

    wait_for("the Job to complete", complete)
    assert batch.read_namespaced_job("bench", namespace).status.succeeded == 1
