"""`vllm-bench run --preset`: a reference lab's workload reaches the requests the runner
sends (the exact prompts, temperature, sampling seed, output length, stopping at EOS), an
argument given as well still wins, and the synthetic default is unchanged. The scenarios run
in process against a client whose transport records each request body and answers at once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from vllm_bench.cli import config_from_args, parse_args
from vllm_bench.client import Budget, Completion, OpenAIClient, Request
from vllm_bench.metrics import MetricsSnapshot, parse_metrics
from vllm_bench.presets import LAB1_BATCHING_PROMPTS, PRESETS
from vllm_bench.results import SCHEMA_PATH
from vllm_bench.scenarios import batching, capacity, prefix, streaming
from vllm_bench.scenarios.base import BenchConfig, Context, NoProgress, ScenarioResult
from vllm_bench.workload import PromptFactory

METRICS_TEXT = (Path(__file__).parent / "bench_data" / "vllm-0.32-metrics.txt").read_text()
BASE = ["run", "--url", "http://h:8000", "--model", "m"]


class RecordingClient(OpenAIClient):
    """Our client with its transport replaced: every request's JSON body is kept, each
    answer is a non-empty completion of the asked length, /metrics a real vLLM scrape."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9", "m", Budget(60))
        self.bodies: list[dict[str, Any]] = []

    async def _stream(self, request: Request, temperature: float | None = None) -> Completion:
        self.bodies.append(request.body(self.model, temperature))
        return Completion(
            started=0.0,
            latency=0.01,
            ttft=0.001,
            token_times=[0.001 * (i + 1) for i in range(request.max_tokens)],
            prompt_tokens=12,
            output_tokens=request.max_tokens,
            text="x" * request.max_tokens,
            finish_reason="length",
        )

    async def metrics(self, only: Collection[str] | None = None) -> MetricsSnapshot:
        return parse_metrics(METRICS_TEXT, only=only)

    async def reset_prefix_cache(self) -> bool:
        return True


def run_scenario(config: BenchConfig, scenario: Any) -> list[dict[str, Any]]:
    client = RecordingClient()
    ctx = Context(
        client=client,
        config=config,
        prompts=PromptFactory(config.seed),
        progress=NoProgress(),
        max_model_len=2048,
        cache_config={"enable_prefix_caching": "True"},
    )
    asyncio.run(scenario.run(ctx, ScenarioResult()))
    return client.bodies


def preset_config(*args: str) -> BenchConfig:
    return config_from_args(parse_args([*BASE, *args]))


def test_lab1_preset_sets_the_labs_numbers() -> None:
    config = preset_config("--preset", "lab1")
    assert (config.requests, config.output_tokens, config.temperature) == (32, 40, 0.7)
    assert (config.sampling_seed, config.seed, config.ignore_eos) == (42, 42, False)
    assert config.preset == "lab1"
    doc = config.as_document()
    assert doc["preset"] == "lab1"
    assert doc["presetStandIns"] == ["first_prompt", "prefix_segments", "prefix_questions"]
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text())["properties"]["config"])


def test_an_argument_given_with_the_preset_wins() -> None:
    config = preset_config("--preset", "lab1", "--output-tokens", "64", "--ignore-eos")
    assert (config.output_tokens, config.ignore_eos, config.temperature) == (64, True, 0.7)
    assert preset_config("--temperature", "0.2", "--preset", "lab1").temperature == 0.2


def test_lab1_batching_sends_the_labs_32_prompts_in_each_phase() -> None:
    bodies = run_scenario(preset_config("--preset", "lab1", "--max-concurrency", "2"), batching)
    serial, concurrent, ladder = bodies[:32], bodies[32:64], bodies[64:]
    assert [b["prompt"] for b in serial] == [
        f"Tell me one interesting fact about the number {i}" for i in range(32)
    ]
    assert sorted(b["prompt"] for b in concurrent) == sorted(LAB1_BATCHING_PROMPTS)
    assert len(ladder) == 16  # levels 1 and 2, 8 requests each: the lab's prompts from the first
    assert {b["prompt"] for b in ladder} == set(LAB1_BATCHING_PROMPTS[:8])
    for body in bodies:
        assert body["model"] == "m"
        assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.7, 40, 42)
        assert body["ignore_eos"] is False  # max_tokens is a cap, as in the lab
        assert "messages" not in body


def test_lab1_first_request_and_prefix_use_the_presets_texts() -> None:
    config = preset_config("--preset", "lab1")
    lab1 = PRESETS["lab1"]
    (first,) = run_scenario(config, capacity)
    assert first["prompt"] == lab1.first_prompt
    assert (first["temperature"], first["max_tokens"], first["seed"]) == (0.7, 40, 42)
    bodies = run_scenario(config, prefix)
    warm = [b for b in bodies if b["messages"][0]["content"] == "\n".join(lab1.prefix_segments)]
    assert warm  # the cold phase (reset before each), warm-up and warm phase share the prefix
    assert [b["messages"][1]["content"] for b in warm[-len(lab1.prefix_questions) :]] == list(
        lab1.prefix_questions
    )
    assert all(b["seed"] == 42 and b["ignore_eos"] is False for b in bodies)


@pytest.mark.parametrize(("name", "tokens"), [("lab2", 150), ("lab2-512", 100)])
def test_lab2_presets_send_its_prompts_and_output_lengths(name: str, tokens: int) -> None:
    config = preset_config("--preset", name, "--max-concurrency", "1")
    assert (config.requests, config.output_tokens) == (10, tokens)
    assert config.sampling_seed is None
    bodies = run_scenario(config, batching)
    assert [b["prompt"] for b in bodies[:10]] == list(PRESETS[name].prompts)
    assert all(b["max_tokens"] == tokens and "seed" not in b for b in bodies)
    streamed = run_scenario(preset_config("--preset", name, "--streaming-requests", "3"), streaming)
    assert [b["prompt"] for b in streamed] == list(PRESETS[name].prompts[:3])


def test_without_a_preset_the_workload_is_synthetic() -> None:
    config = preset_config("--seed", "7", "--requests", "2", "--max-concurrency", "1")
    assert (config.preset, config.sampling_seed, config.ignore_eos) == (None, None, True)
    bodies = run_scenario(config, batching)
    assert len({b["prompt"] for b in bodies}) == len(bodies)  # fresh random words each
    assert all(b["ignore_eos"] is True and "seed" not in b for b in bodies)
    assert all(b["max_tokens"] == 32 and b["temperature"] == 0 for b in bodies)
