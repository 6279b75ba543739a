"""Input the children would refuse is refused by the spec itself (the pydantic mirrors of the
CRD's patterns and CEL rules; tests/integration/test_crd_validation.py sends the same to a
real API server): names with dots, malformed or negative quantities, resource names with a
space, a drain longer than the grace period, env names the operator sets, and every way of
spelling an operator-owned vLLM flag that vLLM's argument parser accepts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.builders import body, service
from vllm_operator.api.cel import owned_flag
from vllm_operator.api.settings import OperatorSettings
from vllm_operator.api.spec import RESERVED_ENV, Service
from vllm_operator.render.deployment import HOME_ENV, render_deployment

# each of these sets (or could set) something the operator renders, as vLLM's parser reads it
REFUSED_ARGS = [
    "--port=9000",
    "--por=9000",  # a unique prefix of --port: argparse reads it as --port
    "--served-model=x",
    "--max_model_len=100",  # vLLM reads underscores as dashes
    "--max-model=100",
    "--speculative-config.method=ngram",  # a dotted key of a JSON flag
    "--speculative_config.num_speculative_tokens=5",
    "--speculative.method=ngram",
    "--no-enable-prefix-caching",
    "--no-enforce-eager",  # a BooleanOptionalAction negation
    "--enforce-eager",
    "--config=/models/args.yaml",  # a YAML file of arguments
    "--",
    "--=x",
    "-qfp8",  # -q fp8, attached
    "-q",
    "-tp",
    "-tp2",
    "-O3",
    "-sc",
]
ACCEPTED_ARGS = [
    "--max-logprobs=5",
    "--max-num-batched-tokens",
    "8192",
    "--enable-chunked-prefill",
    "--trust-remote-code",
    "--compilation-config.level=3",  # a dotted key of a flag the operator does not own
    "--model-impl=transformers",  # starts like --model, but is not a prefix of it
    "--quantization-param-path=/x",
    "-1",  # a negative number is a value, not an option
    "-0.5",
    "plain",
]


def with_spec(spec: dict[str, Any], name: str = "minimal") -> Service:
    b = body("minimal", spec)
    b["metadata"]["name"] = name
    return Service.from_body(b)


@pytest.mark.parametrize("arg", REFUSED_ARGS)
def test_extra_args_that_reach_an_owned_flag_are_refused(arg: str) -> None:
    assert owned_flag(arg) is not None
    with pytest.raises(ValidationError, match="extraArgs"):
        with_spec({"engine": {"extraArgs": ["--max-logprobs=5", arg]}})


def test_other_extra_args_are_accepted() -> None:
    assert [a for a in ACCEPTED_ARGS if owned_flag(a) is not None] == []
    svc = with_spec({"engine": {"extraArgs": ACCEPTED_ARGS}})
    assert svc.spec.engine.extra_args == ACCEPTED_ARGS


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"resources": {"memory": "-8Gi"}}, "resources.memory"),
        ({"resources": {"cpu": "1.2.3"}}, "resources.cpu"),
        ({"resources": {"sharedMemory": "8 Gi"}}, "resources.sharedMemory"),
        ({"resources": {"gpuResourceName": "nvidia com/gpu"}}, "resources.gpuResourceName"),
        ({"resources": {"gpuResourceName": "gpu"}}, "resources.gpuResourceName"),
        ({"autoscaling": {"metricName": ""}}, "autoscaling.metricName"),
        ({"drainSeconds": 130, "terminationGracePeriodSeconds": 120}, "drainSeconds"),
        ({"drainSeconds": 30, "shutdownTimeoutSeconds": 100}, "shutdownTimeoutSeconds"),
        ({"env": [{"name": "HF_TOKEN", "value": "x"}]}, "HF_TOKEN"),
        ({"env": [{"name": "VLLM_API_KEY", "value": "x"}]}, "VLLM_API_KEY"),
        ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "duplicate"),
        ({"resources": {"memory": "9e999999999999"}}, "resources.memory"),
        ({"engine": {"kvCacheMemory": "7e65125782"}}, "kvCacheMemory"),
    ],
    ids=[
        "negative-memory",
        "cpu-1.2.3",
        "quantity-with-space",
        "resource-name-with-space",
        "resource-name-without-domain",
        "empty-metric-name",
        "drain-longer-than-grace",
        "drain-and-shutdown-longer-than-grace",
        "env-hf-token",
        "env-api-key",
        "env-duplicate",
        "memory-exponent-beyond-a-quantity",
        "kv-cache-exponent-beyond-a-quantity",
    ],
)
@pytest.mark.timeout(60, method="thread")  # computed, the huge exponents would never finish
def test_values_the_children_would_refuse_are_refused(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        with_spec(spec)


def test_values_at_the_limits_are_accepted() -> None:
    svc = with_spec(
        {
            "drainSeconds": 120,
            "terminationGracePeriodSeconds": 120,
            "resources": {"memory": "16Gi", "cpu": "500m", "gpuResourceName": "amd.com/gpu"},
        }
    )
    assert svc.spec.drain_seconds == 120


@pytest.mark.parametrize("name", ["qwen2.5-7b", "Qwen", "7b", "a_b", "-a", "a-"])
def test_a_name_its_children_cannot_take_is_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="name"):
        with_spec({}, name=name)


def test_reserved_env_names_cover_everything_the_renderer_sets() -> None:
    """A user entry may never collide with a variable the operator renders, on GPU or CPU."""
    variants = [
        {"huggingFaceToken": {"name": "hf"}, "apiKey": {"name": "key"}},
        {
            "huggingFaceToken": {"name": "hf"},
            "apiKey": {"name": "key"},
            "resources": {"gpus": 0, "cpu": "4", "memory": "16Gi"},
            "engine": {"tensorParallelSize": 1},
        },
    ]
    rendered: set[str] = set()
    for spec in variants:
        dep = render_deployment(service("minimal", spec), OperatorSettings())
        env = dep["spec"]["template"]["spec"]["containers"][0].get("env", [])
        rendered |= {e["name"] for e in env}
    assert rendered
    # the home's variables (Pod Security "restricted": a writable home and a user name for a
    # uid without a passwd entry) are the ones the user may set: the renderer then leaves its
    # own out, so the two never collide either
    home = {name for name, _ in HOME_ENV}
    assert rendered - home <= set(RESERVED_ENV), rendered - set(RESERVED_ENV)
    own = service("minimal", {"env": [{"name": "HOME", "value": "/home/me"}]})
    env = render_deployment(own, OperatorSettings())["spec"]["template"]["spec"]["containers"][0]
    assert [e for e in env["env"] if e["name"] == "HOME"] == [{"name": "HOME", "value": "/home/me"}]
