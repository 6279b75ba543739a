"""The benchmark Job schedules and pulls where the server's pods do (issue 19, item 14): the
service's nodeSelector, tolerations (with the GPU taint's) and imagePullSecrets, so that on a
cluster of tainted GPU nodes only, or with the runner image in a private registry, the Job
starts instead of timing out after 20 minutes."""

from __future__ import annotations

from typing import Any

from tests.unit.builders import service
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.render.benchmark import render_job
from vllm_operator.render.deployment import render_deployment

SETTINGS = OperatorSettings()
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def job_pod(spec: dict[str, Any], sample: str = "minimal") -> dict[str, Any]:
    pod: dict[str, Any] = render_job(service(sample, spec), SETTINGS, "aaaaaaaaaa")["spec"][
        "template"
    ]["spec"]
    return pod


def test_the_job_gets_the_services_node_selector_tolerations_and_pull_secrets() -> None:
    spec = {
        "nodeSelector": {"pool": "inference"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "llm"}],
        "imagePullSecrets": ["registry-creds"],
        "affinity": {"podAntiAffinity": {}},
        "priorityClassName": "high",
        "runtimeClassName": "nvidia",
    }
    pod = job_pod(spec)
    assert pod["nodeSelector"] == {"pool": "inference"}
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "llm"},
        GPU_TAINT,  # as the server's pods get it: GPU node pools are tainted
    ]
    assert pod["imagePullSecrets"] == [{"name": "registry-creds"}]
    # what the Job does not need: the server's affinity, priority and runtime class
    assert not {"affinity", "priorityClassName", "runtimeClassName"} & pod.keys()
    # the server's pods tolerate the same taints
    server = render_deployment(service("minimal", spec), SETTINGS, None)["spec"]["template"]
    assert server["spec"]["tolerations"] == pod["tolerations"]


def test_the_users_gpu_toleration_is_not_doubled_and_a_cpu_job_has_none() -> None:
    own = {"key": "nvidia.com/gpu", "operator": "Exists"}
    assert job_pod({"tolerations": [own]})["tolerations"] == [own]
    pod = job_pod({}, "tiny-cpu")
    assert not {"nodeSelector", "tolerations", "imagePullSecrets"} & pod.keys()


def test_the_jobs_tolerations_are_copies() -> None:
    svc = service("minimal", {"tolerations": [{"key": "a", "operator": "Exists"}]})
    pod = render_job(svc, SETTINGS, "aaaaaaaaaa")["spec"]["template"]["spec"]
    pod["tolerations"][0]["key"] = "changed"
    assert svc.spec.tolerations[0]["key"] == "a"
