"""`vllm-bench run --preset`: every preset sends what its lab sends, request by request (the
endpoint: lab 1 completions, lab 2 chat; the body: the lab's texts verbatim, its sampling,
its output lengths, its order, stopping at EOS), reports the lab's own figures beside the
runner's, an argument given as well still wins, and the synthetic default is unchanged. The
scenarios run in process against a client whose transport records each request (endpoint
and JSON body, and the prefix-cache resets between them) and answers at once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rich.console import Console

from vllm_bench import lab_texts
from vllm_bench.cli import config_from_args, parse_args
from vllm_bench.client import Budget, Completion, OpenAIClient, Request
from vllm_bench.metrics import MetricsSnapshot, parse_metrics
from vllm_bench.presets import PRESETS, PrefixStep
from vllm_bench.report import summary_tables
from vllm_bench.results import SCHEMA_PATH, build_document, validation_errors
from vllm_bench.runner import scenario_document
from vllm_bench.scenarios import batching, capacity, prefix, streaming
from vllm_bench.scenarios.base import BenchConfig, Context, NoProgress, ScenarioResult
from vllm_bench.workload import PromptFactory

METRICS_TEXT = (Path(__file__).parent / "bench_data" / "vllm-0.32-metrics.txt").read_text()
BASE = ["run", "--url", "http://h:8000", "--model", "m"]
LAB1 = lab_texts.lab1()
LAB2 = lab_texts.lab2()
RESET = ("POST /reset_prefix_cache", None)
UNSET_TOKENS = 20  # what the fake answers to a request without max_tokens

Sent = tuple[str, dict[str, Any] | None]  # ("POST /v1/...", body) or RESET


class RecordingClient(OpenAIClient):
    """Our client with its transport replaced: every request is kept as (endpoint, JSON
    body), each answer is a non-empty completion of the asked length (per prompt of a list),
    or an empty one for a prompt in `empty_prompts`; /metrics is a real vLLM scrape."""

    def __init__(self, empty_prompts: Collection[str] = ()) -> None:
        super().__init__("http://127.0.0.1:9", "m", Budget(60))
        self.sent: list[Sent] = []
        self.empty_prompts = set(empty_prompts)

    async def _stream(self, request: Request, temperature: float | None = None) -> Completion:
        body = request.body(self.model, temperature)
        self.sent.append((f"POST {request.path}", body))
        prompts = body["prompt"] if isinstance(body.get("prompt"), list) else [None]
        tokens = (request.max_tokens or UNSET_TOKENS) * len(prompts)
        if isinstance(body.get("prompt"), str) and body["prompt"] in self.empty_prompts:
            tokens = 0
        return Completion(
            started=0.0,
            latency=0.01,
            ttft=0.001,
            token_times=[0.001 * (i + 1) for i in range(tokens)],
            prompt_tokens=12,
            output_tokens=tokens,
            text="x" * tokens,
            finish_reason="length",
        )

    async def metrics(self, only: Collection[str] | None = None) -> MetricsSnapshot:
        return parse_metrics(METRICS_TEXT, only=only)

    async def reset_prefix_cache(self) -> bool:
        self.sent.append(RESET)
        return True


def run_scenario(
    config: BenchConfig, scenario: Any, empty_prompts: Collection[str] = ()
) -> tuple[list[Sent], ScenarioResult]:
    client = RecordingClient(empty_prompts)
    ctx = Context(
        client=client,
        config=config,
        prompts=PromptFactory(config.seed),
        progress=NoProgress(),
        max_model_len=2048,
        cache_config={"enable_prefix_caching": "True"},
    )
    result = ScenarioResult()
    asyncio.run(scenario.run(ctx, result))
    return client.sent, result


def bodies(sent: list[Sent], endpoint: str | None = None) -> list[dict[str, Any]]:
    """The generation requests' bodies, each checked to have gone to `endpoint`."""
    out = []
    for where, body in sent:
        if body is None:
            continue
        if endpoint is not None:
            assert where == f"POST {endpoint}", body
        out.append(body)
    return out


def preset_config(*args: str) -> BenchConfig:
    return config_from_args(parse_args([*BASE, *args]))


def lab(result: ScenarioResult) -> dict[str, Any]:
    doc: dict[str, Any] = result.extra["lab"]
    return doc


def chat(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


# --- the presets' texts and settings ----------------------------------------------------


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_sends_the_labs_own_texts(name: str) -> None:
    config = preset_config("--preset", name)
    assert PRESETS[name].stand_ins == ()
    doc = config.as_document()
    assert doc["preset"] == name
    assert doc["presetStandIns"] == []
    assert doc["presetTextsSha256"] == lab_texts.SHA256
    assert (doc["presetMaxTokens"], doc["presetTemperature"]) == (None, None)
    jsonschema.validate(doc, json.loads(SCHEMA_PATH.read_text())["properties"]["config"])


def test_lab1_preset_sets_the_labs_numbers() -> None:
    config = preset_config("--preset", "lab1")
    assert (config.requests, config.output_tokens, config.temperature) == (32, 40, 0.7)
    assert (config.sampling_seed, config.seed, config.ignore_eos) == (42, 42, False)
    assert config.streaming_requests == 8  # lab 1 streams nothing: the runner's default
    lab1 = PRESETS["lab1"]
    assert lab1.api == "completions"
    assert lab1.prompts == tuple(LAB1["batching_prompts"])
    assert lab1.prompts[7] == "Tell me one interesting fact about the number 7."
    assert lab1.prefix is not None
    assert len(lab1.prefix.shared_prefix) == 1902
    assert lab1.prefix.prompt == LAB1["prefix_prompt"]
    assert lab1.prefix.question == "User: Explain what Kubernetes readiness probes do.\nAssistant:"
    assert PrefixStep.join(lab1.prefix.segments()) == lab1.prefix.shared_prefix
    assert lab1.engine == LAB1["engine"]


@pytest.mark.parametrize(("name", "tokens"), [("lab2", 150), ("lab2-512", 100)])
def test_lab2_presets_set_the_labs_numbers(name: str, tokens: int) -> None:
    config = preset_config("--preset", name)
    assert (config.requests, config.output_tokens, config.temperature) == (10, tokens, 0.7)
    assert (config.sampling_seed, config.ignore_eos, config.streaming_requests) == (None, False, 1)
    assert PRESETS[name].api == "chat"


def test_an_argument_given_with_the_preset_wins() -> None:
    config = preset_config("--preset", "lab1", "--output-tokens", "64", "--ignore-eos")
    assert (config.output_tokens, config.ignore_eos, config.temperature) == (64, True, 0.7)
    assert (config.preset_max_tokens, config.preset_temperature) == (64, None)
    sent, _ = run_scenario(config, capacity)
    (first,) = bodies(sent)
    assert (first["max_tokens"], first["temperature"], first["ignore_eos"]) == (64, 0.7, True)
    config = preset_config("--temperature", "0.2", "--preset", "lab1")
    assert (config.temperature, config.preset_temperature) == (0.2, 0.2)
    sent, _ = run_scenario(config, prefix)
    assert {b["temperature"] for b in bodies(sent)} == {0.2}  # the lab's 0 replaced too
    sent, _ = run_scenario(preset_config("--preset", "lab2", "--output-tokens", "4"), capacity)
    assert bodies(sent)[0]["max_tokens"] == 4  # the smoke request, which sets none itself


# --- lab 1 ------------------------------------------------------------------------------


def test_lab1_capacity_sends_the_first_prompt_and_reports_the_labs_formula() -> None:
    sent, result = run_scenario(preset_config("--preset", "lab1"), capacity)
    (first,) = bodies(sent, "/v1/completions")
    assert first == {
        "model": "m",
        "max_tokens": 60,
        "temperature": 0.7,
        "ignore_eos": False,
        "stream": True,
        "stream_options": {"include_usage": True},
        "seed": 42,
        "prompt": "Question: What is a GPU used for in machine learning?\nAnswer:",
    }
    figures = lab(result)["figures"]
    kv = result.summary["kvCacheTokens"]
    assert figures["kvCacheTokens"] == kv
    assert figures["maxConcurrency"] == round(kv / 1024, 2)  # the lab's kv_tokens / 1024
    assert figures["fallbackUsed"] is False
    assert figures["firstPromptLatencySeconds"] == result.summary["firstRequestLatencySeconds"]
    assert lab(result)["runnerFigures"]["maxConcurrency"] == "maxConcurrencyAtMaxModelLen"


def test_lab1_capacity_sends_the_greedy_fallback_when_the_first_output_is_empty() -> None:
    sent, result = run_scenario(
        preset_config("--preset", "lab1"), capacity, empty_prompts={LAB1["first_prompt"]}
    )
    first, fallback = bodies(sent, "/v1/completions")  # no greedy retry of the first prompt
    assert first["prompt"] == LAB1["first_prompt"]
    assert fallback["prompt"] == "The GPU is used in machine learning because"
    assert (fallback["temperature"], fallback["max_tokens"]) == (0.0, 80)
    assert "seed" not in fallback  # the lab's fallback sets none
    figures = lab(result)["figures"]
    assert figures["fallbackUsed"] is True
    assert figures["fallbackOutputTokens"] == 80
    assert [s["phase"] for s in result.samples] == ["first-request", "first-fallback"]


def test_lab1_batching_sends_the_labs_baseline_and_batch_then_the_runners_phases() -> None:
    sent, result = run_scenario(
        preset_config("--preset", "lab1", "--max-concurrency", "2"), batching
    )
    sent_bodies = bodies(sent, "/v1/completions")
    baseline, batch = sent_bodies[:2]
    serial, concurrent, ladder = sent_bodies[2:34], sent_bodies[34:66], sent_bodies[66:]
    prompts = [f"Tell me one interesting fact about the number {i}." for i in range(32)]
    assert baseline["prompt"] == prompts[:4]  # the first 4 in ONE request
    assert batch["prompt"] == prompts  # the 32 in one request
    assert [b["prompt"] for b in serial] == prompts
    assert sorted(b["prompt"] for b in concurrent) == sorted(prompts)
    assert len(ladder) == 16  # levels 1 and 2, 8 requests each: the lab's prompts from the first
    assert {b["prompt"] for b in ladder} == set(prompts[:8])
    for body in sent_bodies:
        assert body["model"] == "m"
        assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.7, 40, 42)
        assert body["ignore_eos"] is False  # max_tokens is a cap, as in the lab
        assert "messages" not in body
    doc = lab(result)
    figures = doc["figures"]
    assert figures["baselineOutputTokens"] == 4 * 40
    assert figures["batchOutputTokens"] == 32 * 40
    assert figures["speedup"] == pytest.approx(
        figures["batchOutputTokensPerSecond"] / figures["baselineOutputTokensPerSecond"], rel=1e-3
    )
    assert doc["runnerFigures"]["speedup"] == "speedupOverSerial"
    assert "speedupOverSerial" in result.summary
    assert [s["phase"] for s in result.samples if s["phase"].startswith("lab-")] == [
        "lab-baseline",
        "lab-batch",
    ]


def test_lab1_prefix_sends_the_labs_prompt_cold_after_a_reset_then_warm() -> None:
    sent, result = run_scenario(preset_config("--preset", "lab1"), prefix)
    lab1 = PRESETS["lab1"].prefix
    assert lab1 is not None
    lab_request = {
        "model": "m",
        "max_tokens": 32,
        "temperature": 0.0,
        "ignore_eos": False,
        "stream": True,
        "stream_options": {"include_usage": True},
        "prompt": LAB1["prefix_prompt"],
    }
    # the lab's step: a reset, then its one prompt twice (temperature 0: no seed)
    assert sent[:3] == [
        RESET,
        ("POST /v1/completions", lab_request),
        ("POST /v1/completions", lab_request),
    ]
    # the runner's: --prefix-requests 8 cold (a reset before each), a warm-up, 8 warm, reordered
    rest = sent[3:]
    assert rest[0] == RESET  # _cold_method's probe
    cold = rest[1:17]
    assert cold == [RESET, ("POST /v1/completions", lab_request)] * 8
    warm = rest[17:26]
    assert warm == [("POST /v1/completions", lab_request)] * 9  # warm-up and 8 warm
    reordered = bodies(rest[26:], "/v1/completions")
    parts = lab1.segments()
    assert len(parts) == 5
    assert [b["prompt"] for b in reordered] == [
        PrefixStep.join(parts[i:] + parts[:i]) + lab1.question for i in range(1, 5)
    ]
    figures = lab(result)["figures"]
    assert figures["coldAfterReset"] is True
    assert figures["sharedPrefixTokens"] == 1902 // 4
    # the speedup is the ratio of the unrounded times (microseconds against the fake server):
    # within what rounding each time to 6 digits (and the ratio to 3) allows, not equal to
    # the ratio of the rounded ones
    cold, warm, half = figures["coldSeconds"], figures["warmSeconds"], 5e-7
    assert warm > half
    low, high = (cold - half) / (warm + half), (cold + half) / (warm - half)
    assert low - 5e-4 <= figures["speedup"] <= high + 5e-4, (figures, low, high)
    assert lab(result)["runnerFigures"]["speedup"] == "ttftSpeedup"


def test_lab1_prefix_does_not_reset_when_told_unseen_prefix() -> None:
    sent, result = run_scenario(
        preset_config("--preset", "lab1", "--prefix-cold-method", "unseen-prefix"), prefix
    )
    assert RESET not in sent
    assert lab(result)["figures"]["coldAfterReset"] is False


def test_lab1_streaming_is_the_runners_own_on_the_labs_prompts() -> None:
    sent, result = run_scenario(
        preset_config("--preset", "lab1", "--streaming-requests", "3"), streaming
    )
    assert [b["prompt"] for b in bodies(sent, "/v1/completions")] == LAB1["batching_prompts"][:3]
    assert lab(result)["figures"] == {}
    assert "no streaming step" in lab(result)["note"]


# --- lab 2 ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lab2", "lab2-512"])
def test_lab2_capacity_sends_the_smoke_prompt_as_a_chat_without_sampling(name: str) -> None:
    sent, result = run_scenario(preset_config("--preset", name), capacity)
    (smoke,) = bodies(sent, "/v1/chat/completions")
    assert smoke == {
        "model": "m",
        "ignore_eos": False,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": chat("What is the capital of Korea?"),
    }  # no max_tokens, temperature or seed: the lab sets none
    assert "smokeLatencySeconds" in lab(result)["figures"]
    assert "maxConcurrency" not in lab(result)["figures"]  # lab 2 has no such formula


def test_lab2_batching_sends_the_sequential_run_then_the_concurrent_prompts() -> None:
    sent, result = run_scenario(
        preset_config("--preset", "lab2", "--max-concurrency", "1"), batching
    )
    sent_bodies = bodies(sent, "/v1/chat/completions")
    sequential, serial, concurrent = sent_bodies[:5], sent_bodies[5:15], sent_bodies[15:25]
    assert [b["messages"] for b in sequential] == [chat(p) for p in LAB2["naive_prompts"]]
    assert all((b["max_tokens"], b["temperature"]) == (200, 0.7) for b in sequential)
    assert [b["messages"] for b in serial] == [chat(p) for p in LAB2["concurrent_prompts"]]
    assert sorted(b["messages"][0]["content"] for b in concurrent) == sorted(
        LAB2["concurrent_prompts"]
    )
    for body in sent_bodies[5:]:
        assert (body["max_tokens"], body["temperature"]) == (150, 0.7)
    for body in sent_bodies:
        assert "prompt" not in body
        assert "seed" not in body
        assert body["ignore_eos"] is False
    figures = lab(result)["figures"]
    assert len(figures["sequentialLatencySeconds"]) == 5
    assert figures["sequentialOutputTokens"] == [200] * 5
    assert len(figures["concurrentLatencySeconds"]) == 10
    assert figures["concurrentTotalTokens"] == 1500
    assert (
        figures["concurrentOutputTokensPerSecond"]
        == result.summary["concurrentOutputTokensPerSecond"]
    )  # the same definition as the runner's, from the same phase
    assert {"concurrentWallSeconds", "concurrentAvgSeconds", "concurrentSerialSumSeconds"} <= set(
        figures
    )


def test_lab2_512_sends_its_third_prompt_list_at_100_tokens() -> None:
    sent, result = run_scenario(
        preset_config("--preset", "lab2-512", "--max-concurrency", "1"), batching
    )
    sent_bodies = bodies(sent, "/v1/chat/completions")
    serial = sent_bodies[:10]  # no sequential step in the 512 run
    assert [b["messages"] for b in serial] == [chat(p) for p in LAB2["tune_prompts_512"]]
    assert serial[-1]["messages"] == chat("Summarize the history of AI.")
    assert all((b["max_tokens"], b["temperature"]) == (100, 0.7) for b in sent_bodies)
    figures = lab(result)["figures"]
    assert "sequentialLatencySeconds" not in figures
    assert figures["concurrentTotalTokens"] == 1000


def test_lab2_concurrent_figures_need_the_labs_ten_requests() -> None:
    _, result = run_scenario(
        preset_config("--preset", "lab2", "--requests", "3", "--max-concurrency", "1"), batching
    )
    assert "concurrentTotalTokens" not in lab(result)["figures"]
    assert "--requests 3" in lab(result)["note"]


@pytest.mark.parametrize("name", ["lab2", "lab2-512"])
def test_lab2_streaming_sends_its_streaming_prompt(name: str) -> None:
    sent, result = run_scenario(preset_config("--preset", name), streaming)
    (body,) = bodies(sent, "/v1/chat/completions")
    assert body["messages"] == chat(
        "Explain PagedAttention in vLLM and why it matters for serving."
    )
    assert (body["max_tokens"], body["temperature"], body["stream"]) == (300, 0.7, True)
    figures = lab(result)["figures"]
    assert figures["tokens"] == 300
    assert figures["ttftMs"] == pytest.approx(1.0)
    assert figures["tokensPerSecond"] == pytest.approx(300 / 0.01)


def test_lab2_prefix_is_the_runners_synthetic_workload() -> None:
    sent, result = run_scenario(preset_config("--preset", "lab2", "--prefix-requests", "2"), prefix)
    chats = bodies(sent, "/v1/chat/completions")
    assert chats
    assert all(b["messages"][0]["role"] == "system" for b in chats)
    assert "no prefix-caching step" in lab(result)["note"]


# --- the result document and the printed summary ----------------------------------------


@pytest.mark.parametrize("name", list(PRESETS))
def test_the_document_keeps_the_labs_figures_beside_the_runners(name: str) -> None:
    config = preset_config("--preset", name, "--max-concurrency", "2", "--prefix-requests", "2")
    scenarios = {
        s.__name__.rsplit(".", 1)[-1]: scenario_document([run_scenario(config, s)[1]])
        for s in (capacity, batching, prefix, streaming)
    }
    doc = build_document(
        config=config.as_document(),
        environment={"serverVersion": "0.32.0", "model": "m", "cacheConfig": {}},
        scenarios=scenarios,
        errors=[],
        started_at=0.0,
        finished_at=1.0,
    )
    assert validation_errors(doc) == []
    for scenario in scenarios.values():
        labs = scenario["lab"]
        assert labs["preset"] == name
        assert set(labs["definitions"]) == set(labs["figures"])
        assert set(labs["runnerFigures"].values()) <= set(scenario["summary"])
    console = Console(width=200, record=True)
    for table in summary_tables(doc):
        console.print(table)
    text = console.export_text()
    assert "batching (0.0 s): the runner's figures" in text
    assert "batching: lab " in text
    assert "by the lab's definitions" in text
    assert "runner's figure beside it" in text


def test_without_a_preset_the_workload_is_synthetic() -> None:
    config = preset_config("--seed", "7", "--requests", "2", "--max-concurrency", "1")
    assert (config.preset, config.sampling_seed, config.ignore_eos) == (None, None, True)
    assert config.preset_texts_sha256 is None
    sent, result = run_scenario(config, batching)
    sent_bodies = bodies(sent, "/v1/completions")
    assert len({b["prompt"] for b in sent_bodies}) == len(sent_bodies)  # fresh random words each
    assert all(b["ignore_eos"] is True and "seed" not in b for b in sent_bodies)
    assert all(b["max_tokens"] == 32 and b["temperature"] == 0 for b in sent_bodies)
    assert "lab" not in result.extra
