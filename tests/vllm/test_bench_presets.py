"""Every preset (`vllm-bench run --preset lab1|lab2|lab2-512`) against the real vLLM server on
CPU, through the CLI, with a few tokens per request so that it is quick: each runs, its
document validates, and every scenario reports its lab's own figures beside the runner's
(what each request sends is checked request by request in tests/unit/bench/
test_bench_presets.py; here the server must accept it: list prompts, chat messages through
the model's chat template, requests without max_tokens replaced by --output-tokens)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.vllm.test_bench_runner import run_cli
from vllm_bench import lab_texts
from vllm_bench.results import validation_errors
from vllm_localenv.vllm_server import VllmServer

pytestmark = pytest.mark.vllm

TOKENS = 4  # --output-tokens: every lab step's max_tokens
SMALL = ("--output-tokens", str(TOKENS), "--max-concurrency", "2", "--warmup-requests", "2")
SCENARIOS = {
    "lab1": "capacity,batching,prefix,streaming",
    "lab2": "capacity,batching,streaming",
    "lab2-512": "capacity,batching,streaming",
}
# the lab figures each preset must report, per scenario
FIGURES = {
    "lab1": {
        "capacity": {
            "firstPromptLatencySeconds", "fallbackUsed", "kvCacheTokens", "maxConcurrency",
        },
        "batching": {
            "baselineSeconds", "baselineOutputTokensPerSecond", "batchSeconds",
            "batchOutputTokensPerSecond", "speedup",
        },
        "prefix": {"coldAfterReset", "coldSeconds", "warmSeconds", "speedup", "sharedPrefixTokens"},
        "streaming": set(),
    },
    "lab2": {
        "capacity": {"smokeLatencySeconds"},
        "batching": {
            "sequentialLatencySeconds", "sequentialAvgSeconds", "concurrentLatencySeconds",
            "concurrentWallSeconds", "concurrentAvgSeconds", "concurrentTotalTokens",
            "concurrentOutputTokensPerSecond", "concurrentSerialSumSeconds",
        },
        "streaming": {"ttftMs", "totalSeconds", "tokens", "tokensPerSecond"},
    },
    "lab2-512": {
        "capacity": {"smokeLatencySeconds"},
        "batching": {
            "concurrentLatencySeconds", "concurrentWallSeconds", "concurrentAvgSeconds",
            "concurrentTotalTokens", "concurrentOutputTokensPerSecond",
        },
        "streaming": {"ttftMs", "totalSeconds", "tokens", "tokensPerSecond"},
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def preset_runs(
    vllm_server: VllmServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Any]]:
    runs = {}
    for name, scenarios in SCENARIOS.items():
        out = tmp_path_factory.mktemp(f"preset-{name}")
        extra = ("--requests", "4", "--prefix-requests", "2") if name == "lab1" else ()
        proc, doc = run_cli(
            "--url", vllm_server.url, "--model", "tiny", "--preset", name,
            "--scenarios", scenarios, *SMALL, *extra,
            "--max-duration-seconds", "300", "--no-report", "--out", str(out),
        )  # fmt: skip
        runs[name] = {"proc": proc, "doc": doc}
    return runs


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_preset_runs_and_reports_its_labs_figures(
    preset_runs: dict[str, dict[str, Any]], name: str
) -> None:
    proc, doc = preset_runs[name]["proc"], preset_runs[name]["doc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert doc["status"] == "ok", doc["errors"]
    assert validation_errors(doc) == []
    config = doc["config"]
    assert (config["preset"], config["presetStandIns"]) == (name, [])
    assert (config["presetMaxTokens"], config["presetTextsSha256"]) == (TOKENS, lab_texts.SHA256)
    for scenario, wanted in FIGURES[name].items():
        lab = doc["scenarios"][scenario]["lab"]
        assert lab["preset"] == name
        assert wanted <= set(lab["figures"]), (scenario, lab)
        for key in wanted:
            assert lab["figures"][key] is not None, (scenario, key)
        for mine in lab["runnerFigures"].values():
            assert mine in doc["scenarios"][scenario]["summary"]
    # every request stayed within the asked tokens (per prompt of a list)
    for scenario in doc["scenarios"].values():
        for s in scenario["samples"]:
            prompts = 32 if s["phase"] == "lab-batch" else 4 if s["phase"] == "lab-baseline" else 1
            assert s["outputTokens"] <= TOKENS * prompts, s  # stops at EOS: 0 possible
            assert s["promptTokens"] > 0
    # the printed summary says which figures are whose
    assert "the runner's figures" in proc.stdout
    assert "by the lab's definitions" in proc.stdout


def test_lab1_sends_its_baseline_and_batch_in_one_request_each(
    preset_runs: dict[str, dict[str, Any]],
) -> None:
    batching = preset_runs["lab1"]["doc"]["scenarios"]["batching"]
    phases = [s["phase"] for s in batching["samples"]]
    assert phases.count("lab-baseline") == 1
    assert phases.count("lab-batch") == 1
    (baseline,) = [s for s in batching["samples"] if s["phase"] == "lab-baseline"]
    (batch,) = [s for s in batching["samples"] if s["phase"] == "lab-batch"]
    assert batch["promptTokens"] > 4 * baseline["promptTokens"]  # 32 prompts against 4
    figures = batching["lab"]["figures"]
    assert figures["batchOutputTokens"] > figures["baselineOutputTokens"]


def test_lab1_prefix_warm_hits_the_cache_after_the_reset(
    preset_runs: dict[str, dict[str, Any]],
) -> None:
    prefix = preset_runs["lab1"]["doc"]["scenarios"]["prefix"]
    assert prefix["lab"]["figures"]["coldAfterReset"] is True  # the server has DEV_MODE
    assert prefix["summary"]["hitRate"] > 0.5  # the runner's warm phase: the lab's prompt cached


def test_lab2_sends_chat_messages_through_the_chat_template(
    preset_runs: dict[str, dict[str, Any]], vllm_server: VllmServer
) -> None:
    """The smoke request's prompt is longer than its text alone: the chat template wrapped it."""
    import requests  # noqa: PLC0415

    doc = preset_runs["lab2"]["doc"]
    (first,) = doc["scenarios"]["capacity"]["samples"]
    bare = requests.post(
        f"{vllm_server.url}/tokenize",
        json={"model": "tiny", "prompt": lab_texts.lab2()["smoke_prompt"]},
        timeout=30,
    ).json()["count"]
    assert first["promptTokens"] > bare
