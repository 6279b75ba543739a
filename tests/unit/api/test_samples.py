"""Every sample in crds/samples parses into the VLLMService model and renders its children;
the lab samples render the engine arguments their labs measure, under the served name the
labs' client code sends. (The integration tier applies every sample to a real API server and
waits for it to become Ready: tests/integration/test_operator.py, test_crd_validation.py.)"""

from __future__ import annotations

import itertools

import pytest
import yaml

from tests.unit.builders import SAMPLES, service
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.reconcile import render_children
from vllm_operator.render.deployment import render_deployment

SETTINGS = OperatorSettings(cluster_domain="cluster.local")
NAMES = sorted(p.stem for p in SAMPLES.glob("*.yaml"))


def args_of(name: str) -> list[str]:
    dep = render_deployment(service(name), SETTINGS)
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return list(c["args"])


def pairs(args: list[str]) -> dict[str, str]:
    return dict(itertools.pairwise(args))


@pytest.mark.parametrize("name", NAMES)
def test_every_sample_parses_and_renders(name: str) -> None:
    doc = yaml.safe_load((SAMPLES / f"{name}.yaml").read_text())
    assert doc["metadata"]["name"] == name  # the file name is the object's name
    kinds = [m["kind"] for m in render_children(service(name), SETTINGS, None)]
    assert "Deployment" in kinds
    assert "Service" in kinds


def test_the_lab_samples_are_there() -> None:
    assert {"tinyllama", "tinyllama-eager", "llama3-8b", "llama3-8b-512"} <= set(NAMES)


def test_lab1_engine_sample() -> None:
    args = args_of("tinyllama-eager")
    p = pairs(args)
    assert p["--model"] == "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
    assert p["--served-model-name"] == "chat-1b"  # tinyllama.yaml's: one client for both
    assert p["--max-model-len"] == "1024"
    assert p["--gpu-memory-utilization"] == "0.5"
    assert p["--block-size"] == "16"
    assert "--enforce-eager" in args
    assert "--enable-prefix-caching" in args
    assert render_deployment(service("tinyllama-eager"), SETTINGS)["spec"]["replicas"] == 1


@pytest.mark.parametrize(
    ("name", "max_model_len", "utilization"),
    [("llama3-8b", "2048", "0.85"), ("llama3-8b-512", "512", "0.9")],
)
def test_lab2_samples(name: str, max_model_len: str, utilization: str) -> None:
    args = args_of(name)
    p = pairs(args)
    # the lab's client sends the lab's model directory as the model name
    assert p["--served-model-name"] == "/models/Meta-Llama-3-8B-Instruct"
    assert p["--port"] == "9000"
    assert p["--dtype"] == "float16"
    assert p["--max-model-len"] == max_model_len
    assert p["--gpu-memory-utilization"] == utilization
    assert "--enforce-eager" not in args
