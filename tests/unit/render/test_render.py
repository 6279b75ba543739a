"""The renderers (pure functions of the parsed Service and the settings), checked against
manifests written out by hand from the spec defaults, and the spec's own validation."""

from __future__ import annotations

import copy
import json
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from tests.unit.builders import body, service
from vllm_operator.api.quantity import parse_quantity
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import Service, VLLMServiceSpec
from vllm_operator.reconcile import describe, render_children
from vllm_operator.render.autoscaling import render_hpa, render_pdb
from vllm_operator.render.deployment import (
    SURGE_REFUSED_ANNOTATION,
    render_deployment,
    server_args,
    surge_refused,
)
from vllm_operator.render.service import endpoint, render_service

SETTINGS = OperatorSettings(cluster_domain="cluster.local")
SAMPLES = Path(__file__).resolve().parents[3] / "crds" / "samples"
# Pod Security "restricted": a home for uid 65532, which has no passwd entry in vLLM's images
HOME_ENV = [
    {"name": "HOME", "value": "/root"},
    {"name": "USER", "value": "vllm"},
    {"name": "LOGNAME", "value": "vllm"},
    {"name": "TORCHINDUCTOR_CACHE_DIR", "value": "/root/.cache/torchinductor"},
    {"name": "TRITON_CACHE_DIR", "value": "/root/.triton/cache"},
]


def labels(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "server",
        "app.kubernetes.io/managed-by": "vllm-operator",
        "app.kubernetes.io/part-of": "vllm-operator",
        "serving.vllm-operator.dev/service": name,
    }


def meta(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": "ns",
        "labels": labels(name),
        "ownerReferences": [
            {
                "apiVersion": "serving.vllm-operator.dev/v1alpha1",
                "kind": "VLLMService",
                "name": name,
                "uid": "uid-1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def container(dep: dict[str, Any]) -> dict[str, Any]:
    (only,) = dep["spec"]["template"]["spec"]["containers"]
    return only


def pod_spec(dep: dict[str, Any]) -> dict[str, Any]:
    return dep["spec"]["template"]["spec"]


def env_by_name(dep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(dep).get("env", [])}


def flag_value(args: list[str], flag: str) -> str:
    assert args.count(flag) == 1, f"{flag} appears {args.count(flag)} times in {args}"
    return args[args.index(flag) + 1]


# ---- minimal: every field, written out --------------------------------------------------

MINIMAL_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def _probe(failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
        "successThreshold": 1,
    }


MINIMAL_DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": meta("minimal"),
    "spec": {
        "replicas": 1,
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "vllm",
                "app.kubernetes.io/instance": "minimal",
            }
        },
        # one replica: a surge pod, so that it never goes down (rollout.oneReplicaSurge)
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        },
        "revisionHistoryLimit": 10,
        "progressDeadlineSeconds": 1800 + 600,
        "template": {
            "metadata": {
                "labels": labels("minimal"),
                "annotations": {
                    "prometheus.io/scrape": "true",
                    "prometheus.io/port": "8000",
                    "prometheus.io/path": "/metrics",
                },
            },
            "spec": {
                "containers": [
                    {
                        "name": "vllm",
                        "image": "vllm/vllm-openai:v0.32.0",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"],
                        "args": [
                            "--model",
                            MINIMAL_MODEL,
                            "--served-model-name",
                            MINIMAL_MODEL,
                            "--host",
                            "0.0.0.0",
                            "--port",
                            "8000",
                            "--tensor-parallel-size",
                            "1",
                            "--gpu-memory-utilization",
                            "0.9",
                            "--dtype",
                            "auto",
                            "--enable-prefix-caching",
                            "--shutdown-timeout",
                            "105",
                        ],
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                        "ports": [{"name": "http", "containerPort": 8000, "protocol": "TCP"}],
                        "env": [
                            *HOME_ENV,
                            {"name": "HF_HOME", "value": "/root/.cache/huggingface"},
                        ],
                        "resources": {
                            "requests": {"nvidia.com/gpu": "1"},
                            "limits": {"nvidia.com/gpu": "1"},
                        },
                        "volumeMounts": [
                            {"name": "dshm", "mountPath": "/dev/shm"},
                            {"name": "model-cache", "mountPath": "/root/.cache/huggingface"},
                            {"name": "home", "mountPath": "/root"},
                            # the folder the runtime would create as root to mount into
                            {"name": "home-0", "mountPath": "/root/.cache"},
                        ],
                        # 1800 s startup budget / 10 s period
                        "startupProbe": _probe(180),
                        "readinessProbe": _probe(3),
                        "livenessProbe": _probe(6),
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "lifecycle": {"preStop": {"sleep": {"seconds": 10}}},
                    }
                ],
                "volumes": [
                    {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                    {"name": "model-cache", "emptyDir": {}},
                    {"name": "home", "emptyDir": {}},
                    {"name": "home-0", "emptyDir": {}},
                ],
                "terminationGracePeriodSeconds": 120,
                "enableServiceLinks": False,
                "automountServiceAccountToken": False,
                # Pod Security "restricted"
                "securityContext": {
                    "seccompProfile": {"type": "RuntimeDefault"},
                    "runAsNonRoot": True,
                    "runAsUser": 65532,
                    "runAsGroup": 65532,
                    "fsGroup": 65532,
                    "fsGroupChangePolicy": "OnRootMismatch",
                },
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
        },
    },
}

MINIMAL_SERVICE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": meta("minimal"),
    "spec": {
        "type": "ClusterIP",
        "selector": {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": "minimal"},
        "ports": [
            {
                "name": "http",
                "port": 8000,
                "targetPort": "http",
                "protocol": "TCP",
                "appProtocol": "http",
            }
        ],
    },
}


def test_minimal_parses_like_the_api_server_defaults_it() -> None:
    svc = service("minimal")
    assert (svc.name, svc.namespace, svc.uid, svc.generation) == ("minimal", "ns", "uid-1", 1)
    assert svc.spec == VLLMServiceSpec.model_validate({"model": {"id": MINIMAL_MODEL}})


def test_minimal_deployment_exactly() -> None:
    assert render_deployment(service("minimal"), SETTINGS) == MINIMAL_DEPLOYMENT


def test_minimal_deployment_ignores_live_replicas_without_autoscaling() -> None:
    assert render_deployment(service("minimal"), SETTINGS, 7) == MINIMAL_DEPLOYMENT


def test_minimal_service_exactly() -> None:
    assert render_service(service("minimal"), SETTINGS) == MINIMAL_SERVICE


def test_minimal_has_no_hpa_and_no_pdb() -> None:
    svc = service("minimal")
    assert render_hpa(svc, SETTINGS) is None
    assert render_pdb(svc, SETTINGS) is None  # one replica: a PDB would block drains


def test_minimal_children_are_deployment_and_service() -> None:
    children = render_children(service("minimal"), SETTINGS, None)
    assert children == [MINIMAL_DEPLOYMENT, MINIMAL_SERVICE]


def test_endpoint() -> None:
    assert endpoint(service("minimal"), SETTINGS) == "http://minimal.ns.svc.cluster.local:8000/v1"
    other = OperatorSettings(cluster_domain="corp.example")
    assert endpoint(service("llama3-8b"), other) == "http://llama3-8b.ns.svc.corp.example:9000/v1"


def test_every_call_returns_a_fresh_dict() -> None:
    svc = service("minimal")
    first = render_deployment(svc, SETTINGS)
    container(first)["args"].append("--mutated")
    pod_spec(first)["tolerations"][0]["key"] = "mutated"
    first["metadata"]["labels"]["x"] = "y"
    assert render_deployment(svc, SETTINGS) == MINIMAL_DEPLOYMENT


# ---- tinyllama ---------------------------------------------------------------------------


def test_tinyllama_args() -> None:
    dep = render_deployment(service("tinyllama"), SETTINGS)
    assert container(dep)["args"] == [
        "--model",
        "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        "--served-model-name",
        "chat-1b",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "1",
        "--gpu-memory-utilization",
        "0.85",
        "--dtype",
        "auto",
        "--enable-prefix-caching",
        "--max-model-len",
        "2048",
        "--block-size",
        "16",
        "--max-num-seqs",
        "256",
        "--shutdown-timeout",
        "105",
    ]


def test_tinyllama_resources_cpu_is_a_request_only() -> None:
    dep = render_deployment(service("tinyllama"), SETTINGS)
    assert container(dep)["resources"] == {
        "requests": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
        "limits": {"nvidia.com/gpu": "1", "memory": "16Gi"},
    }


def test_tinyllama_hpa_exactly() -> None:
    assert render_hpa(service("tinyllama"), SETTINGS) == {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": meta("tinyllama"),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "tinyllama"},
            "minReplicas": 2,
            "maxReplicas": 16,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        # the band metric (render/monitoring.py), not the raw queue
                        "metric": {"name": "vllm_operator:queue_depth_band"},
                        "target": {"type": "AverageValue", "averageValue": "20"},
                    },
                }
            ],
            "behavior": {
                "scaleDown": {
                    "stabilizationWindowSeconds": 300,
                    # past the window: half the pods a minute, at least one
                    "policies": [
                        {"type": "Pods", "value": 1, "periodSeconds": 60},
                        {"type": "Percent", "value": 50, "periodSeconds": 60},
                    ],
                    "selectPolicy": "Max",
                },
                "scaleUp": {
                    "stabilizationWindowSeconds": 0,
                    "policies": [
                        {"type": "Pods", "value": 4, "periodSeconds": 60},
                        {"type": "Percent", "value": 100, "periodSeconds": 60},
                    ],
                    "selectPolicy": "Max",
                },
            },
        },
    }


def test_tinyllama_pdb_exactly() -> None:
    assert render_pdb(service("tinyllama"), SETTINGS) == {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta("tinyllama"),
        "spec": {
            "maxUnavailable": 1,
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "vllm",
                    "app.kubernetes.io/instance": "tinyllama",
                }
            },
        },
    }


def test_tinyllama_children_are_four_kinds() -> None:
    kinds = [m["kind"] for m in render_children(service("tinyllama"), SETTINGS, None)]
    assert kinds == ["Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"]


@pytest.mark.parametrize(
    ("live", "expected"),
    [(None, 2), (5, 5), (2, 2), (16, 16), (40, 16), (1, 2), (0, 2)],
)
def test_autoscaled_replicas_follow_the_live_count_within_bounds(
    live: int | None, expected: int
) -> None:
    dep = render_deployment(service("tinyllama"), SETTINGS, live)
    assert dep["spec"]["replicas"] == expected


@pytest.mark.parametrize("live", [None, 0, 1, 5, 40])
def test_without_autoscaling_spec_replicas_win(live: int | None) -> None:
    svc = service("tinyllama", {"replicas": 3, "autoscaling": {"enabled": False}})
    assert render_deployment(svc, SETTINGS, live)["spec"]["replicas"] == 3
    assert render_hpa(svc, SETTINGS) is None


def test_pdb_follows_the_replica_floor() -> None:
    assert render_pdb(service("minimal", {"replicas": 2}), SETTINGS) is not None
    assert render_pdb(service("minimal", {"replicas": 0}), SETTINGS) is None
    autoscaled_from_one = {"autoscaling": {"enabled": True, "minReplicas": 1}}
    assert render_pdb(service("minimal", autoscaled_from_one), SETTINGS) is None


# ---- llama3-8b ---------------------------------------------------------------------------


def test_llama3_port_everywhere() -> None:
    svc = service("llama3-8b")
    dep = render_deployment(svc, SETTINGS)
    c = container(dep)
    assert flag_value(c["args"], "--port") == "9000"
    assert c["ports"] == [{"name": "http", "containerPort": 9000, "protocol": "TCP"}]
    assert dep["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9000"
    ports = render_service(svc, SETTINGS)["spec"]["ports"]
    assert ports == [
        {
            "name": "http",
            "port": 9000,
            "targetPort": "http",
            "protocol": "TCP",
            "appProtocol": "http",
        }
    ]
    # probes follow the named port, so they move with it
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/health", "port": "http"}


def test_llama3_engine_args() -> None:
    args = container(render_deployment(service("llama3-8b"), SETTINGS))["args"]
    assert flag_value(args, "--dtype") == "float16"
    assert flag_value(args, "--max-model-len") == "2048"
    assert flag_value(args, "--gpu-memory-utilization") == "0.85"
    assert flag_value(args, "--model") == "meta-llama/Meta-Llama-3-8B-Instruct"


def test_llama3_token_comes_from_the_secret_only() -> None:
    svc = service("llama3-8b")
    dep = render_deployment(svc, SETTINGS)
    assert container(dep)["env"] == [
        *HOME_ENV,
        {"name": "HF_HOME", "value": "/root/.cache/huggingface"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
    ]
    # no child carries a literal value for a secret variable
    for child in render_children(svc, SETTINGS, None):
        text = json.dumps(child)
        assert '"HF_TOKEN", "value"' not in text
        assert "hf_" not in text


def test_llama3_scheduling_and_shared_memory() -> None:
    dep = render_deployment(service("llama3-8b"), SETTINGS)
    spec = pod_spec(dep)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in spec[
        "volumes"
    ]
    assert container(dep)["resources"] == {
        "requests": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"},
        "limits": {"nvidia.com/gpu": "1", "memory": "64Gi"},
    }
    assert dep["spec"]["replicas"] == 2


def test_llama3_pdb_protects_two_replicas() -> None:
    pdb = render_pdb(service("llama3-8b"), SETTINGS)
    assert pdb is not None
    assert pdb["spec"]["maxUnavailable"] == 1


def test_node_selector_merges_with_gpu_product() -> None:
    svc = service("llama3-8b", {"nodeSelector": {"pool": "gpu"}})
    assert pod_spec(render_deployment(svc, SETTINGS))["nodeSelector"] == {
        "pool": "gpu",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }


# ---- variations of the minimal sample ----------------------------------------------------


def test_model_from_pvc() -> None:
    b = body("minimal")
    b["spec"]["model"] = {"pvc": {"claimName": "weights", "subPath": "/sub/"}}
    dep = render_deployment(Service.from_body(b), SETTINGS)
    c = container(dep)
    assert flag_value(c["args"], "--model") == "/models/sub"
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in c["volumeMounts"]
    assert {
        "name": "model",
        "persistentVolumeClaim": {"claimName": "weights", "readOnly": True},
    } in pod_spec(dep)["volumes"]


def test_model_from_pvc_without_sub_path() -> None:
    b = body("minimal")
    b["spec"]["model"] = {"pvc": {"claimName": "weights"}}
    args = container(render_deployment(Service.from_body(b), SETTINGS))["args"]
    assert flag_value(args, "--model") == "/models"


def test_pvc_served_model_name_defaults_to_the_model_argument() -> None:
    """Like vLLM itself: without servedModelName, clients use the --model value."""
    b = body("minimal")
    b["spec"]["model"] = {"pvc": {"claimName": "weights", "subPath": "sub"}}
    args = container(render_deployment(Service.from_body(b), SETTINGS))["args"]
    assert flag_value(args, "--served-model-name") == "/models/sub"
    assert flag_value(args, "--model") == "/models/sub"


def test_model_from_path_and_revision() -> None:
    b = body("minimal")
    b["spec"]["model"] = {"path": "/opt/model", "revision": "abc123"}
    args = container(render_deployment(Service.from_body(b), SETTINGS))["args"]
    assert flag_value(args, "--model") == "/opt/model"
    assert flag_value(args, "--served-model-name") == "/opt/model"
    assert flag_value(args, "--revision") == "abc123"


def test_model_cache_pvc() -> None:
    svc = service("minimal", {"modelCache": {"type": "PVC", "claimName": "hf-cache"}})
    dep = render_deployment(svc, SETTINGS)
    assert pod_spec(dep)["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}},
        {"name": "home", "emptyDir": {}},
        {"name": "home-0", "emptyDir": {}},
    ]
    assert container(dep)["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "model-cache", "mountPath": "/root/.cache/huggingface"},
        {"name": "home", "mountPath": "/root"},
        {"name": "home-0", "mountPath": "/root/.cache"},
    ]
    assert env_by_name(dep)["HF_HOME"] == {"name": "HF_HOME", "value": "/root/.cache/huggingface"}


def test_model_cache_empty_dir_with_limit_and_path() -> None:
    svc = service("minimal", {"modelCache": {"sizeLimit": "50Gi", "mountPath": "/cache"}})
    dep = render_deployment(svc, SETTINGS)
    assert {"name": "model-cache", "emptyDir": {"sizeLimit": "50Gi"}} in pod_spec(dep)["volumes"]
    assert {"name": "model-cache", "mountPath": "/cache"} in container(dep)["volumeMounts"]
    assert env_by_name(dep)["HF_HOME"]["value"] == "/cache"


def test_model_cache_none() -> None:
    dep = render_deployment(service("minimal", {"modelCache": {"type": "None"}}), SETTINGS)
    assert pod_spec(dep)["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
        {"name": "home", "emptyDir": {}},
    ]
    assert container(dep)["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "home", "mountPath": "/root"},
    ]
    assert container(dep)["env"] == HOME_ENV
    baseline = OperatorSettings(vllm_pod_security="baseline")
    dep = render_deployment(service("minimal", {"modelCache": {"type": "None"}}), baseline)
    assert "env" not in container(dep)  # an empty env list is left out


def test_api_key_from_secret() -> None:
    svc = service("minimal", {"apiKey": {"name": "api"}})
    assert env_by_name(render_deployment(svc, SETTINGS))["VLLM_API_KEY"] == {
        "name": "VLLM_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}},
    }


def test_user_env_after_operator_env() -> None:
    env = [
        {"name": "A", "value": "1"},
        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "b"}}},
    ]
    svc = service("minimal", {"env": env, "apiKey": {"name": "api", "key": "k"}})
    assert container(render_deployment(svc, SETTINGS))["env"] == [
        *HOME_ENV,
        {"name": "HF_HOME", "value": "/root/.cache/huggingface"},
        {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "k"}}},
        {"name": "A", "value": "1"},
        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "b"}}},
    ]


def test_optional_engine_args_in_fixed_order_and_extra_args_last() -> None:
    engine = {
        "speculativeConfig": {
            "prompt_lookup_max": 4,
            "method": "ngram",
            "num_speculative_tokens": 5,
        },
        "extraArgs": ["--seed=1", "--disable-log-stats"],
        "logRequests": True,
        "enforceEager": True,
        "quantization": "awq",
        "kvCacheDtype": "fp8",
        "enablePrefixCaching": False,
    }
    args = server_args(service("minimal", {"engine": engine}).spec)
    assert args == [
        "--model",
        MINIMAL_MODEL,
        "--served-model-name",
        MINIMAL_MODEL,
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "1",
        "--gpu-memory-utilization",
        "0.9",
        "--dtype",
        "auto",
        "--no-enable-prefix-caching",
        "--quantization",
        "awq",
        "--kv-cache-dtype",
        "fp8",
        "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}',
        "--enforce-eager",
        "--enable-log-requests",
        "--shutdown-timeout",
        "105",
        "--seed=1",
        "--disable-log-stats",
    ]


def test_speculative_config_is_compact_sorted_json_at_every_level() -> None:
    spec = {"speculativeConfig": {"b": {"z": 1, "a": [1, 2]}, "a": "x"}}
    args = server_args(service("minimal", {"engine": spec}).spec)
    assert flag_value(args, "--speculative-config") == '{"a":"x","b":{"a":[1,2],"z":1}}'


def test_log_requests_off_by_default() -> None:
    args = server_args(service("minimal").spec)
    assert "--enable-log-requests" not in args
    assert "--enforce-eager" not in args


def test_tensor_parallel_and_gpus() -> None:
    svc = service("minimal", {"engine": {"tensorParallelSize": 4}, "resources": {"gpus": 4}})
    dep = render_deployment(svc, SETTINGS)
    assert flag_value(container(dep)["args"], "--tensor-parallel-size") == "4"
    assert container(dep)["resources"] == {
        "requests": {"nvidia.com/gpu": "4"},
        "limits": {"nvidia.com/gpu": "4"},
    }


def test_custom_gpu_resource_name_gets_its_own_toleration() -> None:
    svc = service("minimal", {"resources": {"gpuResourceName": "amd.com/gpu"}})
    dep = render_deployment(svc, SETTINGS)
    assert container(dep)["resources"]["limits"] == {"amd.com/gpu": "1"}
    assert pod_spec(dep)["tolerations"] == [
        {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_rollout_recreate() -> None:
    dep = render_deployment(service("minimal", {"rollout": {"strategy": "Recreate"}}), SETTINGS)
    assert dep["spec"]["strategy"] == {"type": "Recreate"}


def test_rollout_surge() -> None:
    dep = render_deployment(
        service("minimal", {"rollout": {"maxSurge": 2, "maxUnavailable": 0}}), SETTINGS
    )
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0},
    }


def test_one_replica_surges_unless_switched_off_or_refused_for_want_of_room() -> None:
    surge = {"maxSurge": 1, "maxUnavailable": 0}
    as_set = {"maxSurge": 0, "maxUnavailable": 1}
    for spec, rolling in (
        ({}, surge),
        ({"rollout": {"oneReplicaSurge": False}}, as_set),
        ({"replicas": 2}, as_set),
        ({"autoscaling": {"enabled": True, "minReplicas": 1}}, as_set),
    ):
        dep = render_deployment(service("minimal", spec), SETTINGS)
        assert dep["spec"]["strategy"]["rollingUpdate"] == rolling, spec
    refused = render_deployment(service("minimal"), SETTINGS, no_room_for_surge="abc")
    assert refused["spec"]["strategy"]["rollingUpdate"] == as_set
    assert refused["metadata"]["annotations"][SURGE_REFUSED_ANNOTATION] == "abc"
    # refused once for a revision: for the rest of its rollout (no flapping), not the next
    svc = service("minimal")
    live = {"metadata": {"annotations": {SURGE_REFUSED_ANNOTATION: "abc"}}}
    assert surge_refused(svc, "abc", live, no_room=False) == "abc"
    assert surge_refused(svc, "def", live, no_room=False) == ""
    assert surge_refused(svc, "def", live, no_room=True) == "def"
    assert surge_refused(service("minimal", {"replicas": 2}), "def", live, no_room=True) == ""


def test_user_gpu_toleration_replaces_the_default() -> None:
    mine = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    dep = render_deployment(service("minimal", {"tolerations": [mine]}), SETTINGS)
    assert pod_spec(dep)["tolerations"] == [mine]


def test_other_user_tolerations_keep_the_default() -> None:
    spot = {"key": "spot", "operator": "Exists"}
    dep = render_deployment(service("minimal", {"tolerations": [spot]}), SETTINGS)
    assert pod_spec(dep)["tolerations"] == [
        spot,
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]


def _shutdown_timeout(spec: dict[str, Any]) -> str | None:
    args = container(render_deployment(service("minimal", spec), SETTINGS))["args"]
    return args[args.index("--shutdown-timeout") + 1] if "--shutdown-timeout" in args else None


def test_vllm_lets_requests_in_flight_finish_within_the_grace_period() -> None:
    # the default: what the grace period leaves after the preStop pause, less 5 s to exit
    assert _shutdown_timeout({}) == "105"
    assert _shutdown_timeout({"terminationGracePeriodSeconds": 600, "drainSeconds": 15}) == "580"
    assert _shutdown_timeout({"shutdownTimeoutSeconds": 30}) == "30"
    # 0: vLLM's own default (abort at once), the flag left out (images older than it)
    assert _shutdown_timeout({"shutdownTimeoutSeconds": 0}) is None
    assert _shutdown_timeout({"terminationGracePeriodSeconds": 12, "drainSeconds": 10}) is None
    # an image whose tag names a vLLM older than the flag (0.18): left out; unknown tags get it
    assert _shutdown_timeout({"image": "vllm/vllm-openai:v0.10.1"}) is None
    assert _shutdown_timeout({"image": "registry.local/vllm-cpu:0.17.1-avx512"}) is None
    assert _shutdown_timeout({"image": "vllm/vllm-openai:v0.18.0"}) == "105"
    assert _shutdown_timeout({"image": "vllm/vllm-openai:latest"}) == "105"
    assert _shutdown_timeout({"image": "localhost:5000/vllm@sha256:" + "a" * 64}) == "105"
    # the operator owns the flag: engine.extraArgs may not set it (the spec field does)
    with pytest.raises(ValidationError, match="shutdown-timeout"):
        service("minimal", {"engine": {"extraArgs": ["--shutdown-timeout=7"]}})


def test_drain_seconds_zero_has_no_pre_stop() -> None:
    dep = render_deployment(service("minimal", {"drainSeconds": 0}), SETTINGS)
    assert "lifecycle" not in container(dep)


def test_probe_settings() -> None:
    probes = {
        "startupTimeoutSeconds": 95,
        "periodSeconds": 20,
        "readinessFailureThreshold": 2,
        "livenessFailureThreshold": 9,
    }
    dep = render_deployment(service("minimal", {"probes": probes}), SETTINGS)
    c = container(dep)
    assert c["startupProbe"]["failureThreshold"] == 5  # ceil(95 / 20)
    assert c["startupProbe"]["periodSeconds"] == 20
    assert c["readinessProbe"]["failureThreshold"] == 2
    assert c["livenessProbe"]["failureThreshold"] == 9
    assert dep["spec"]["progressDeadlineSeconds"] == 95 + 600


def test_pod_scheduling_extras() -> None:
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    svc = service(
        "minimal",
        {
            "affinity": affinity,
            "priorityClassName": "inference",
            "runtimeClassName": "nvidia",
            "imagePullSecrets": ["regcred"],
        },
    )
    spec = pod_spec(render_deployment(svc, SETTINGS))
    assert spec["affinity"] == affinity
    assert spec["priorityClassName"] == "inference"
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]


def test_pod_labels_and_annotations_cannot_override_the_operators() -> None:
    svc = service(
        "minimal",
        {
            "podLabels": {"team": "ml", "app.kubernetes.io/instance": "hijack"},
            "podAnnotations": {"note": "x", "prometheus.io/port": "1"},
        },
    )
    tmeta = render_deployment(svc, SETTINGS)["spec"]["template"]["metadata"]
    assert tmeta["labels"] == {"team": "ml", **labels("minimal")}
    assert tmeta["annotations"] == {
        "note": "x",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8000",
        "prometheus.io/path": "/metrics",
    }


def test_renderers_do_not_mutate_the_service() -> None:
    spec = {
        "tolerations": [{"key": "spot", "operator": "Exists"}],
        "affinity": {"nodeAffinity": {"x": [{"y": 1}]}},
        "nodeSelector": {"pool": "gpu"},
        "podLabels": {"team": "ml"},
        "podAnnotations": {"note": "x"},
        "env": [{"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "b"}}}],
        "engine": {"speculativeConfig": {"method": "ngram"}, "extraArgs": ["--seed=1"]},
        "autoscaling": {"enabled": True},
    }
    svc = service("minimal", spec)
    before = copy.deepcopy(svc.spec.model_dump())
    children = render_children(svc, SETTINGS, 3)
    assert svc.spec.model_dump() == before

    dep = children[0]
    ps = pod_spec(dep)
    ps["tolerations"][0]["key"] = "mutated"
    ps["tolerations"].append({"key": "more"})
    ps["affinity"]["nodeAffinity"]["x"][0]["y"] = 2
    ps["nodeSelector"]["pool"] = "mutated"
    dep["spec"]["template"]["metadata"]["labels"]["team"] = "mutated"
    dep["spec"]["template"]["metadata"]["annotations"]["note"] = "mutated"
    container(dep)["env"][-1]["valueFrom"]["configMapKeyRef"]["key"] = "mutated"
    container(dep)["args"].append("--mutated")
    assert svc.spec.model_dump() == before
    assert render_children(svc, SETTINGS, 3) != children
    assert render_children(svc, SETTINGS, 3) == render_children(svc, SETTINGS, 3)


# ---- spec validation ---------------------------------------------------------------------


def spec_with(**changes: Any) -> dict[str, Any]:
    return {"model": {"id": MINIMAL_MODEL}, **changes}


@pytest.mark.parametrize(
    "arg", ["--port=1", "--host", "--model=x", "--api-key=k", "--no-enable-prefix-caching"]
)
def test_extra_args_must_not_set_owned_args(arg: str) -> None:
    with pytest.raises(ValueError, match="extraArgs"):
        VLLMServiceSpec.model_validate(spec_with(engine={"extraArgs": ["--seed=1", arg]}))


def test_extra_args_may_set_other_args() -> None:
    extra = [
        "--seed=1",
        "--portable",
        "--hostname=x",
        "--swap-space",
        "4",
        "--max-num-batched-tokens",
    ]
    spec = VLLMServiceSpec.model_validate(spec_with(engine={"extraArgs": extra}))
    assert spec.engine.extra_args == extra


@pytest.mark.parametrize(
    "arg",
    [
        "--max_model_len=100",
        "--tensor_parallel_size=2",
        "-tp",
        "-sc",
        "--max-model",  # argparse takes an unambiguous prefix for the flag
        "--max-model=100",
        "--speculative-config.method=ngram",  # vLLM's dotted form of a JSON flag
        "--speculative_config.num_speculative_tokens",
        "--device-memory-utilization=0.5",  # vLLM's alias of --gpu-memory-utilization
        "--no-enforce-eager",
        "--kv-cache-memory-bytes=1",
    ],
)
def test_extra_args_spelling_variants_of_owned_args(arg: str) -> None:
    with pytest.raises(ValueError, match="extraArgs"):
        VLLMServiceSpec.model_validate(spec_with(engine={"extraArgs": [arg]}))


@pytest.mark.parametrize(
    "value_from",
    [
        {"secretRef": {"name": "s"}},
        {"secretKeyRef": {"name": "s", "key": "k"}, "configMapKeyRef": {"name": "c", "key": "k"}},
        {},
    ],
)
def test_env_value_from_needs_exactly_one_known_source(value_from: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="valueFrom of X must have exactly one of"):
        VLLMServiceSpec.model_validate(spec_with(env=[{"name": "X", "valueFrom": value_from}]))


def test_env_value_and_value_from_both_set() -> None:
    env = [{"name": "X", "value": "v", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    with pytest.raises(ValueError, match="set value or valueFrom, not both"):
        VLLMServiceSpec.model_validate(spec_with(env=env))


def test_tensor_parallel_must_equal_gpus() -> None:
    with pytest.raises(ValueError, match=re.escape("tensorParallelSize must equal resources.gpus")):
        VLLMServiceSpec.model_validate(spec_with(engine={"tensorParallelSize": 2}))
    with pytest.raises(ValueError, match=re.escape("tensorParallelSize must equal resources.gpus")):
        VLLMServiceSpec.model_validate(spec_with(resources={"gpus": 2}))
    ok = VLLMServiceSpec.model_validate(
        spec_with(engine={"tensorParallelSize": 2}, resources={"gpus": 2})
    )
    assert ok.engine.tensor_parallel_size == ok.resources.gpus == 2


def test_autoscaling_bounds_and_cache_claim() -> None:
    with pytest.raises(
        ValueError, match=re.escape("minReplicas must be <= autoscaling.maxReplicas")
    ):
        VLLMServiceSpec.model_validate(spec_with(autoscaling={"minReplicas": 5, "maxReplicas": 4}))
    with pytest.raises(ValueError, match="claimName is required"):
        VLLMServiceSpec.model_validate(spec_with(modelCache={"type": "PVC"}))


def test_unknown_fields_are_rejected() -> None:
    with pytest.raises(ValueError, match="extra"):
        VLLMServiceSpec.model_validate(spec_with(replica=2))


def test_describe_names_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        Service.from_body(body("minimal", {"engine": {"gpuMemoryUtilization": 1.5}}))
    assert describe(info.value) == (
        "spec.engine.gpuMemoryUtilization: Input should be less than or equal to 1"
    )
    with pytest.raises(ValidationError) as info:
        Service.from_body(body("minimal", {"engine": {"extraArgs": ["--port=1"]}}))
    assert describe(info.value) == (
        "spec.engine: Value error, engine.extraArgs: --port is set by the operator; "
        "use the spec field for it"
    )


# ---- images ------------------------------------------------------------------------------


def test_image_defaults_to_the_operator_setting_per_accelerator() -> None:
    settings = OperatorSettings(gpu_image="registry.local/vllm:gpu", cpu_image="localhost/cpu:1")
    assert container(render_deployment(service("minimal"), settings))["image"] == (
        "registry.local/vllm:gpu"
    )
    assert container(render_deployment(service("tiny-cpu"), settings))["image"] == (
        "localhost/cpu:1"
    )
    assert container(render_deployment(service("tiny-cpu"), SETTINGS))["image"] == (
        "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0"
    )


def test_spec_image_wins_over_the_default() -> None:
    for sample in ("minimal", "tiny-cpu"):
        dep = render_deployment(service(sample, {"image": "mine:1"}), SETTINGS)
        assert container(dep)["image"] == "mine:1"


def test_cpu_image_setting_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_OPERATOR_CPU_IMAGE", "localhost/vllm-cpu:0.32.0")
    assert OperatorSettings().cpu_image == "localhost/vllm-cpu:0.32.0"


# ---- serving on CPU (resources.gpus: 0) ---------------------------------------------------


def test_tiny_cpu_container_exactly() -> None:
    c = container(render_deployment(service("tiny-cpu"), SETTINGS))
    assert c["args"] == [
        "--model",
        "/models",
        "--served-model-name",
        "tiny",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "1",
        # no --gpu-memory-utilization: vLLM would apply it to the node's memory
        "--dtype",
        "auto",
        "--enable-prefix-caching",
        "--max-model-len",
        "2048",
        "--block-size",
        "32",
        "--max-num-seqs",
        "16",
        "--kv-cache-memory-bytes",
        str(2**30),
        "--enforce-eager",
        "--shutdown-timeout",
        "105",
    ]
    assert c["env"] == [
        *HOME_ENV,
        {
            "name": "VLLM_HOST_IP",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
        },
    ]
    # Guaranteed QoS, no GPU
    assert c["resources"] == {
        "requests": {"cpu": "1", "memory": "5Gi"},
        "limits": {"cpu": "1", "memory": "5Gi"},
    }
    assert c["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "model", "mountPath": "/models", "readOnly": True},
        {"name": "home", "mountPath": "/root"},
    ]


def test_tiny_cpu_pod_has_no_gpu_scheduling() -> None:
    ps = pod_spec(render_deployment(service("tiny-cpu"), SETTINGS))
    assert "tolerations" not in ps
    assert "nodeSelector" not in ps
    assert ps["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "model", "persistentVolumeClaim": {"claimName": "tiny-model", "readOnly": True}},
        {"name": "home", "emptyDir": {}},
    ]


def test_cpu_user_tolerations_and_selectors_are_kept() -> None:
    spot = {"key": "spot", "operator": "Exists"}
    svc = service("tiny-cpu", {"tolerations": [spot], "nodeSelector": {"pool": "cpu"}})
    ps = pod_spec(render_deployment(svc, SETTINGS))
    assert ps["tolerations"] == [spot]
    assert ps["nodeSelector"] == {"pool": "cpu"}


@pytest.mark.parametrize(
    ("memory", "expected"),
    [("5Gi", 5 * 2**30 // 4), ("6G", (6 * 10**9 // 4) // 2**20 * 2**20), ("3Mi", 2**20)],
)
def test_cpu_kv_cache_defaults_to_a_quarter_of_the_memory(memory: str, expected: int) -> None:
    b = body("tiny-cpu")
    del b["spec"]["engine"]["kvCacheMemory"]
    b["spec"]["resources"]["memory"] = memory
    args = server_args(Service.from_body(b).spec)
    assert flag_value(args, "--kv-cache-memory-bytes") == str(expected)


def test_gpu_kv_cache_only_when_set() -> None:
    assert "--kv-cache-memory-bytes" not in server_args(service("minimal").spec)
    args = server_args(service("minimal", {"engine": {"kvCacheMemory": "20Gi"}}).spec)
    assert flag_value(args, "--kv-cache-memory-bytes") == str(20 * 2**30)
    assert flag_value(args, "--gpu-memory-utilization") == "0.9"


def cpu_spec(**changes: Any) -> dict[str, Any]:
    spec = {
        "model": {"id": MINIMAL_MODEL},
        "resources": {"gpus": 0, "cpu": "2", "memory": "8Gi"},
    }
    for key, value in changes.items():
        spec[key] = {**spec.get(key, {}), **value}
    return spec


def test_a_cpu_spec_needs_only_cpu_and_memory() -> None:
    spec = VLLMServiceSpec.model_validate(cpu_spec())
    assert spec.resources.on_cpu
    assert spec.kv_cache_bytes == 2 * 2**30


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"resources": {"cpu": None}}, "resources.cpu and resources.memory are required"),
        ({"resources": {"memory": None}}, "resources.cpu and resources.memory are required"),
        ({"resources": {"gpuProduct": "NVIDIA-H100"}}, "resources.gpuProduct needs"),
        ({"engine": {"blockSize": 16}}, "engine.blockSize must be a multiple of 32 on CPU"),
        ({"engine": {"tensorParallelSize": 2}}, "or be 1 on CPU"),
        ({"engine": {"kvCacheMemory": "8Gi"}}, "kvCacheMemory must be less than resources.memory"),
        ({"engine": {"kvCacheMemory": "9000M"}}, "kvCacheMemory must be less than"),
        ({"engine": {"kvCacheMemory": "0"}}, "kvCacheMemory must be a positive quantity"),
        ({"engine": {"kvCacheMemory": "1.2.3"}}, "kvCacheMemory"),
    ],
)
def test_cpu_spec_rules(changes: dict[str, Any], message: str) -> None:
    spec = cpu_spec(**changes)
    spec["resources"] = {k: v for k, v in spec["resources"].items() if v is not None}
    with pytest.raises(ValueError, match=re.escape(message)):
        VLLMServiceSpec.model_validate(spec)


def test_cpu_block_sizes_of_32_multiples_pass() -> None:
    for block in (32, 64, 128):
        spec = VLLMServiceSpec.model_validate(cpu_spec(engine={"blockSize": block}))
        assert spec.engine.block_size == block
    # on GPUs 16 is fine
    assert VLLMServiceSpec.model_validate(spec_with(engine={"blockSize": 16})).engine.block_size


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Gi", 2**30),
        ("1.5Gi", 3 * 2**29),
        ("500M", 500 * 10**6),
        ("2", 2),
        ("100m", Fraction(1, 10)),
        ("2e3", 2000),
        ("1E", 10**18),
        (".5Ki", 512),
    ],
)
def test_parse_quantity(text: str, value: int | Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["1.2.3", "Gi", "1Gb", "1 Gi", ""])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a resource quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("sample", sorted(p.stem for p in SAMPLES.glob("*.yaml")))
def test_every_folder_between_home_and_a_mount_is_writable(sample: str) -> None:
    """The runtime creates a mount point's missing parent folders as root: below the writable
    HOME, each must be an emptyDir of its own, or torch's inductor cache under /root/.cache
    fails with PermissionError (the H200 run of the rendered tinyllama container), and so do
    vLLM's and FlashInfer's caches."""
    body = yaml.safe_load((SAMPLES / f"{sample}.yaml").read_text())
    body["metadata"].update(namespace="ns", uid="u", generation=1)
    dep = render_deployment(Service.from_body(body), SETTINGS)
    volumes = {v["name"]: v for v in pod_spec(dep)["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container(dep)["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in container(dep).get("env", [])}
    home = env["HOME"]
    assert "emptyDir" in mounts[home]
    for cache in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        assert env[cache].startswith(home + "/"), cache
    for path in mounts:
        if not path.startswith(home + "/"):
            continue
        parts = path.removeprefix(home + "/").split("/")
        for depth in range(1, len(parts)):
            folder = home + "/" + "/".join(parts[:depth])
            assert folder in mounts, (path, folder)
            assert "emptyDir" in mounts[folder], (path, folder)
