"""The generated VLLMService CRD on a real API server: it is structural and established, the
server rejects invalid manifests with a message naming the field, accepts every sample, fills
in the schema's defaults, explains fields and scales through the scale subresource."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import wait_for
from vllm_localenv.cluster import REPO_ROOT, LocalCluster
from vllm_operator import GROUP, PLURAL, VERSION

pytestmark = pytest.mark.cluster

CRD_FILE = REPO_ROOT / "crds" / "vllmservices.yaml"
SAMPLES_DIR = REPO_ROOT / "crds" / "samples"
SAMPLES = sorted(SAMPLES_DIR.glob("*.yaml"))
CRD_NAME = f"{PLURAL}.{GROUP}"


def crd_conditions(cluster: LocalCluster) -> dict[str, dict[str, Any]]:
    crd = json.loads(cluster.kubectl("get", "crd", CRD_NAME, "-o", "json"))
    return {c["type"]: c for c in crd.get("status", {}).get("conditions", [])}


@pytest.fixture(scope="module")
def crd_installed(cluster: LocalCluster) -> str:
    """Installs the committed CRD (server-side apply, idempotent) and waits until it is
    Established. It stays installed: other modules of the session may rely on it too."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    wait_for(
        f"{CRD_NAME} to be Established",
        lambda: crd_conditions(cluster).get("Established", {}).get("status") == "True",
    )
    return CRD_NAME


def minimal() -> dict[str, Any]:
    return yaml.safe_load((SAMPLES_DIR / "minimal.yaml").read_text())


def kubectl_apply(
    cluster: LocalCluster, namespace: str, manifest: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(cluster.bin_dir / "kubectl"),
            f"--kubeconfig={cluster.kubeconfig}",
            "apply",
            "-n",
            namespace,
            "-f",
            "-",
        ],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change to the minimal manifest: sets the dotted `path` (creating objects on the way)."""

    def change(manifest: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = manifest
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    return change


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(manifest: dict[str, Any]) -> None:
        for c in changes:
            c(manifest)

    return change


TOO_LONG_NAME = "a" * 43
SINGLE_SOURCE = "set exactly one of model.id (Hugging Face id), model.path or model.pvc"
OWNED_ARG = "extraArgs must not set arguments the operator owns"
SHORT_OPTION = "extraArgs must not use short options"
NOT_A_LABEL = "metadata.name must be a DNS label"
RUNNER_FLAG = "benchmark.args must not set flags the operator sets"

CPU = {"gpus": 0, "cpu": "1", "memory": "4Gi"}

# (id, change to the minimal sample, substrings the API server's error must contain)
INVALID: list[tuple[str, Callable[[dict[str, Any]], None], tuple[str, ...]]] = [
    (
        "gpu-memory-utilization-0",
        _set("spec.engine.gpuMemoryUtilization", 0),
        ("spec.engine.gpuMemoryUtilization", "should be greater than 0"),
    ),
    (
        "gpu-memory-utilization-1.5",
        _set("spec.engine.gpuMemoryUtilization", 1.5),
        ("spec.engine.gpuMemoryUtilization", "should be less than or equal to 1"),
    ),
    (
        "block-size-24",
        _set("spec.engine.blockSize", 24),
        ("spec.engine.blockSize", "Unsupported value: 24"),
    ),
    (
        "min-replicas-above-max",
        _set("spec.autoscaling", {"minReplicas": 8, "maxReplicas": 4}),
        ("spec.autoscaling", "autoscaling.minReplicas must be <= autoscaling.maxReplicas"),
    ),
    (
        "measured-startup-min-above-timeout",
        _set(
            "spec.probes",
            {
                "startupBudget": "Measured",
                "startupTimeoutSeconds": 120,
                "measuredStartupMinSeconds": 300,
            },
        ),
        ("spec.probes", "probes.measuredStartupMinSeconds must be <= probes.startupTimeoutSeconds"),
    ),
    (
        "tensor-parallel-without-gpus",
        _both(_set("spec.engine.tensorParallelSize", 2), _set("spec.resources.gpus", 1)),
        ("engine.tensorParallelSize must equal resources.gpus",),
    ),
    # serving on CPU (resources.gpus: 0)
    (
        "cpu-without-sizing",
        _set("spec.resources", {"gpus": 0}),
        ("spec.resources", "resources.cpu and resources.memory are required"),
    ),
    (
        "cpu-tensor-parallel-2",
        _both(_set("spec.resources", CPU), _set("spec.engine.tensorParallelSize", 2)),
        ("or be 1 on CPU",),
    ),
    (
        "cpu-block-size-16",
        _both(_set("spec.resources", CPU), _set("spec.engine.blockSize", 16)),
        ("spec.engine.blockSize", "must be a multiple of 32 on CPU"),
    ),
    (
        "cpu-kv-cache-not-below-memory",
        _both(_set("spec.resources", CPU), _set("spec.engine.kvCacheMemory", "4096Mi")),
        ("spec.engine.kvCacheMemory", "must be less than resources.memory"),
    ),
    (
        "cpu-with-gpu-product",
        _set("spec.resources", {**CPU, "gpuProduct": "NVIDIA-H100-80GB-HBM3"}),
        ("resources.gpuProduct needs resources.gpus > 0",),
    ),
    (
        "kv-cache-memory-0",
        _set("spec.engine.kvCacheMemory", "0"),
        ("engine.kvCacheMemory must be a positive quantity",),
    ),
    (
        "no-model-source",
        _set("spec.model", {"revision": "main"}),
        ("spec.model", SINGLE_SOURCE),
    ),
    (
        "two-model-sources",
        _set("spec.model", {"id": "Qwen/Qwen2.5-0.5B-Instruct", "path": "/models/qwen"}),
        ("spec.model", SINGLE_SOURCE),
    ),
    (
        "extra-args-port",
        _set("spec.engine.extraArgs", ["--max-logprobs=5", "--port=9000"]),
        ("spec.engine.extraArgs", OWNED_ARG),
    ),
    (
        "extra-args-model",
        _set("spec.engine.extraArgs", ["--model", "other/model"]),
        ("spec.engine.extraArgs", OWNED_ARG),
    ),
    (
        "extra-args-underscore-spelling",
        _set("spec.engine.extraArgs", ["--max_model_len=100"]),
        ("spec.engine.extraArgs", OWNED_ARG),
    ),
    (
        "extra-args-short-form",
        _set("spec.engine.extraArgs", ["-tp", "2"]),
        ("spec.engine.extraArgs", SHORT_OPTION),
    ),
    (
        "name-too-long",
        _set("metadata.name", TOO_LONG_NAME),
        ("metadata.name must be at most 42 characters",),
    ),
    (
        "port-80",
        _set("spec.port", 80),
        ("spec.port", "should be greater than or equal to 1024"),
    ),
    (
        "dtype-int3",
        _set("spec.engine.dtype", "int3"),
        ("spec.engine.dtype", 'Unsupported value: "int3"'),
    ),
    (
        "pvc-cache-without-claim",
        _set("spec.modelCache", {"type": "PVC"}),
        ("modelCache.claimName is required when modelCache.type is PVC",),
    ),
    (
        "rollout-surge-and-unavailable-0",
        _set("spec.rollout", {"maxSurge": 0, "maxUnavailable": 0}),
        ("spec.rollout", "rollout.maxSurge and rollout.maxUnavailable cannot both be 0"),
    ),
    (
        "replicas-negative",
        _set("spec.replicas", -1),
        ("spec.replicas", "should be greater than or equal to 0"),
    ),
    (
        "memory-not-a-quantity",
        _set("spec.resources.memory", "lots"),
        ("spec.resources.memory", "should match"),
    ),
    (
        "image-empty",
        _set("spec.image", ""),
        ("spec.image", "should be at least 1 chars long"),
    ),
    # names and values that pass a loose schema but that the children refuse
    ("name-with-a-dot", _set("metadata.name", "qwen2.5-7b"), (NOT_A_LABEL,)),
    ("name-upper-case", _set("metadata.name", "Qwen"), (NOT_A_LABEL,)),
    (
        "memory-negative",
        _set("spec.resources.memory", "-8Gi"),
        ("spec.resources.memory", "should match"),
    ),
    ("cpu-1.2.3", _set("spec.resources.cpu", "1.2.3"), ("spec.resources.cpu", "should match")),
    (  # a number no one could expand (the operator once computed such a string exactly)
        "memory-exponent-beyond-a-quantity",
        _set("spec.resources.memory", "9e999999999999"),
        ("spec.resources.memory", "should match"),
    ),
    (
        "resource-name-with-a-space",
        _set("spec.resources.gpuResourceName", "nvidia com/gpu"),
        ("spec.resources.gpuResourceName", "should match"),
    ),
    (
        "metric-name-empty",
        _set("spec.autoscaling.metricName", ""),
        ("spec.autoscaling.metricName",),
    ),
    (
        "drain-longer-than-grace",
        _both(_set("spec.drainSeconds", 130), _set("spec.terminationGracePeriodSeconds", 120)),
        ("spec.drainSeconds", "must not exceed terminationGracePeriodSeconds"),
    ),
    (
        "env-duplicate-name",
        _set("spec.env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]),
        ("spec.env[1]", "Duplicate value"),
    ),
    *[
        (
            f"env-reserved-{name}",
            _set("spec.env", [{"name": name, "value": "x"}]),
            ("spec.env", "env must not set variables the operator sets"),
        )
        for name in ("HF_HOME", "HF_TOKEN", "VLLM_API_KEY", "VLLM_HOST_IP")
    ],
    # every spelling of an owned flag that vLLM's parser accepts
    *[
        (
            f"extra-args-{arg}",
            _set("spec.engine.extraArgs", ["--max-logprobs=5", arg]),
            ("spec.engine.extraArgs", SHORT_OPTION if arg[1] != "-" else OWNED_ARG),
        )
        for arg in (
            "--por=9000",
            "--served-model=x",
            "--speculative-config.method=ngram",
            "--speculative_config.method=ngram",
            "--no-enforce-eager",
            "--config=/models/args.yaml",
            "--",
            "-qfp8",
            "-O3",
            "-tp2",
        )
    ],
    # a latency objective (issue 33): a latency to meet, measured by the batching ladder
    (
        "objective-without-a-latency",
        _set("spec.objective", {"percentile": 95}),
        ("spec.objective", "objective needs ttftSeconds, tpotSeconds or both"),
    ),
    (
        "objective-percentile-97",
        _set("spec.objective", {"ttftSeconds": 0.5, "percentile": 97}),
        ("spec.objective.percentile", "Unsupported value: 97"),
    ),
    (
        "objective-without-batching",
        _both(
            _set("spec.objective", {"ttftSeconds": 0.5}),
            _set("spec.benchmark.scenarios", ["capacity", "prefix"]),
        ),
        ("spec.objective", "objective needs benchmark.enabled and the batching scenario"),
    ),
    (
        "objective-and-benchmark-args-both-set-the-shape",
        _both(
            _set("spec.objective", {"tpotSeconds": 0.05, "outputTokens": 256}),
            _set("spec.benchmark.args", ["--output-tokens=64"]),
        ),
        ("spec.benchmark.args", "must not set --input-tokens or --output-tokens"),
    ),
    # runner flags the operator sets on the benchmark Job, and ways of spelling them
    *[
        (
            f"benchmark-args-{arg}",
            _set("spec.benchmark.args", ["--requests", "4", arg]),
            ("spec.benchmark.args", RUNNER_FLAG),
        )
        for arg in (
            "--url=http://elsewhere:8000",
            "--ur",
            "--model",
            "--out=/x",
            "--api-key",
            "--",
            "-x",
        )
    ],
]


def test_crd_is_structural_and_established(cluster: LocalCluster, crd_installed: str) -> None:
    conditions = crd_conditions(cluster)
    assert "NonStructuralSchema" not in conditions, conditions["NonStructuralSchema"]
    assert conditions["Established"]["status"] == "True"
    assert conditions["NamesAccepted"]["status"] == "True"


@pytest.mark.parametrize(("change", "expected"), [pytest.param(c, e, id=i) for i, c, e in INVALID])
def test_invalid_manifest_is_rejected_naming_the_field(
    cluster: LocalCluster,
    crd_installed: str,
    namespace: str,
    change: Callable[[dict[str, Any]], None],
    expected: tuple[str, ...],
) -> None:
    manifest = copy.deepcopy(minimal())
    change(manifest)
    res = kubectl_apply(cluster, namespace, manifest)
    assert res.returncode != 0, f"accepted: {json.dumps(manifest)}\n{res.stdout}"
    for text in expected:
        assert text in res.stderr, f"{text!r} not in the server's answer:\n{res.stderr}"
    assert not cluster.kubectl("get", "vsvc", "-n", namespace, "-o", "name").strip()


def test_values_at_the_edge_of_each_rule_are_accepted(
    cluster: LocalCluster, crd_installed: str, namespace: str
) -> None:
    """The positive control of the rules above: what is close to a refused value but valid."""
    manifest = minimal()
    manifest["metadata"]["name"] = "qwen2-5-7b"
    spec = manifest["spec"]
    spec["drainSeconds"] = spec["terminationGracePeriodSeconds"] = 120
    spec["resources"] = {
        "gpus": 1,
        "memory": "16Gi",
        "cpu": "500m",
        "gpuResourceName": "amd.com/gpu",
    }
    spec["env"] = [{"name": "A", "value": "1"}, {"name": "HF_HUB_OFFLINE", "value": "1"}]
    spec["engine"] = {
        "extraArgs": [
            "--max-logprobs=5",
            "--max-num-batched-tokens",
            "8192",
            "--enable-chunked-prefill",
            "--compilation-config.level=3",
            "--model-impl=transformers",
            "-1",
        ]
    }
    spec["benchmark"] = {"args": ["--requests", "4", "--max-rps=5", "--seed", "-1"]}
    # an objective beside benchmark.args that leave its workload alone
    spec["objective"] = {"ttftSeconds": 0.5, "percentile": 99, "inputTokens": 512}
    res = kubectl_apply(cluster, namespace, manifest)
    assert res.returncode == 0, res.stderr


def test_kubectl_delete_all_leaves_the_services(
    cluster: LocalCluster, crd_installed: str, namespace: str
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(SAMPLES_DIR / "minimal.yaml"))
    cluster.kubectl("create", "configmap", "control", "-n", namespace)  # deleted by neither
    cluster.kubectl("create", "service", "clusterip", "other", "--tcp=80", "-n", namespace)
    # No --wait: what `all` covers is in kubectl's own output; waiting would only measure how
    # fast the simulated pods go away (over 120 s once in CI, with the pods already deleted).
    out = cluster.kubectl("delete", "all", "--all", "-n", namespace, "--wait=false")
    assert 'service "other" deleted' in out  # the positive control: `all` did delete
    assert "vllmservice" not in out
    assert cluster.kubectl("get", "vsvc", "-n", namespace, "-o", "name").strip() == (
        "vllmservice.serving.vllm-operator.dev/minimal"
    )


def test_the_base_of_the_invalid_manifests_is_valid(
    cluster: LocalCluster, crd_installed: str, namespace: str
) -> None:
    """Each rejection above is caused by its one change, not by the base manifest."""
    res = kubectl_apply(cluster, namespace, minimal())
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_sample_is_accepted(
    cluster: LocalCluster, crd_installed: str, namespace: str, sample: Path
) -> None:
    out = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(sample))
    assert "(server dry run)" in out


def test_schema_defaults_are_stored(
    cluster: LocalCluster, crd_installed: str, namespace: str
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(SAMPLES_DIR / "minimal.yaml"))
    spec = json.loads(cluster.kubectl("get", "vsvc/minimal", "-n", namespace, "-o", "json"))["spec"]
    assert spec["model"] == {"id": "Qwen/Qwen2.5-0.5B-Instruct"}
    assert spec["port"] == 8000
    assert spec["replicas"] == 1
    assert "image" not in spec  # the operator's setting, per accelerator
    assert spec["engine"]["gpuMemoryUtilization"] == 0.9
    assert spec["engine"]["tensorParallelSize"] == 1
    assert spec["engine"]["enablePrefixCaching"] is True
    assert spec["engine"]["dtype"] == "auto"
    assert spec["resources"]["gpus"] == 1
    assert spec["resources"]["sharedMemory"] == "8Gi"
    assert spec["modelCache"]["type"] == "EmptyDir"
    assert spec["probes"]["startupTimeoutSeconds"] == 1800
    assert spec["rollout"] == {"strategy": "RollingUpdate", "maxSurge": 0, "maxUnavailable": 1}
    assert spec["autoscaling"]["enabled"] is False
    assert spec["autoscaling"]["metricName"] == "vllm:num_requests_waiting"
    assert spec["autoscaling"]["targetQueueDepth"] == 20
    assert spec["terminationGracePeriodSeconds"] == 120


def test_kubectl_explain_shows_the_field_description(
    cluster: LocalCluster, crd_installed: str
) -> None:
    want = "--gpu-memory-utilization: fraction of GPU memory vLLM may use, in (0, 1]."

    def explained() -> str | None:
        out = cluster.kubectl(
            "explain", "vllmservice.spec.engine.gpuMemoryUtilization", check=False
        )
        flat = re.sub(r"\s+", " ", out)
        return flat if want in flat else None

    # the OpenAPI document of a new CRD is published a moment after it is Established
    flat = wait_for("kubectl explain to show the description", explained)
    assert "FIELD: gpuMemoryUtilization <number>" in flat


def test_kubectl_scale_uses_the_scale_subresource(
    cluster: LocalCluster, crd_installed: str, namespace: str
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(SAMPLES_DIR / "llama3-8b.yaml"))
    out = cluster.kubectl("scale", "vsvc/llama3-8b", "--replicas=3", "-n", namespace)
    assert "scaled" in out
    obj = json.loads(cluster.kubectl("get", "vsvc/llama3-8b", "-n", namespace, "-o", "json"))
    assert obj["spec"]["replicas"] == 3  # the sample says 2
    scale_path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/llama3-8b/scale"
    scale = json.loads(cluster.kubectl("get", "--raw", scale_path))
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 3
