"""The benchmark runner against the real vLLM server on CPU: every scenario end to end
through the CLI, its numbers checked against what the server itself reports, and the
failures that need a real server (a wrong model name, the run's deadline mid-scenario)."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from vllm_bench.client import Budget, OpenAIClient, Request
from vllm_bench.results import validation_errors
from vllm_localenv.vllm_server import VllmServer, free_port

pytestmark = pytest.mark.vllm

VLLM_BENCH = Path(sys.executable).parent / "vllm-bench"
OUTPUT_TOKENS = 32


def run_cli(
    *args: str, timeout: float = 400
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = Path(args[args.index("--out") + 1])
    proc = subprocess.run(
        [str(VLLM_BENCH), "run", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc, json.loads((out / "result.json").read_text())


def server_metrics(server: VllmServer) -> dict[str, Any]:
    """The server's own numbers, read independently of the runner."""
    text = requests.get(f"{server.url}/metrics", timeout=60).text
    samples = {s.name: s for f in text_string_to_metric_families(text) for s in f.samples}
    return {
        "cache": samples["vllm:cache_config_info"].labels,
        "generation": samples["vllm:generation_tokens_total"].value,
        "prompt": samples["vllm:prompt_tokens_total"].value,
    }


@pytest.fixture(scope="module")
def full_run(
    vllm_server: VllmServer, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """One run of every scenario, the naive baseline included, with the server's token
    counters read before and after."""
    out = tmp_path_factory.mktemp("bench")
    before = server_metrics(vllm_server)
    proc, doc = run_cli(
        "--url", vllm_server.url, "--model", "tiny",
        "--scenarios", "capacity,batching,prefix,streaming,naive",
        "--output-tokens", str(OUTPUT_TOKENS),
        "--requests", "32",  # submitted at once: twice the server's --max-num-seqs 16
        "--max-concurrency", "32",  # above the server's --max-num-seqs 16: requests must queue
        "--prefix-tokens", "1536",
        "--max-rps", "1000",  # the tiny model answers in ~0.2 s: 32 starts must fit in that
        "--metrics-interval-seconds", "0.1",
        "--naive-python", str(vllm_server.venv / "bin" / "python"),
        "--naive-model-dir", str(tiny_model_dir),
        "--max-duration-seconds", "360",
        "--out", str(out),
    )  # fmt: skip
    after = server_metrics(vllm_server)
    return {"proc": proc, "doc": doc, "out": out, "before": before, "after": after}


def summary(run: dict[str, Any], scenario: str) -> dict[str, Any]:
    result: dict[str, Any] = run["doc"]["scenarios"][scenario]["summary"]
    return result


def test_run_succeeds_and_the_document_validates(full_run: dict[str, Any]) -> None:
    proc, doc = full_run["proc"], full_run["doc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert doc["status"] == "ok", doc["errors"]
    assert doc["errors"] == []
    assert validation_errors(doc) == []
    assert doc["environment"]["serverVersion"] == "0.32.0"
    assert doc["environment"]["model"] == "tiny"
    assert doc["environment"]["maxModelLen"] == 2048
    assert set(doc["headline"]) == {
        "kvCacheTokens", "maxConcurrencyAtMaxModelLen", "outputTokensPerSecond", "batchingSpeedup",
        "prefixTtftSpeedup", "prefixHitRate", "ttftP50Seconds", "ttftP95Seconds",
        "outputTokensPerSecondConcurrency", "requestLatencyP99Seconds",
    }  # fmt: skip
    # the summary table is the command's output
    assert "kvCacheTokens" in proc.stdout
    assert "batching ladder" in proc.stdout


def test_output_tokens_agree_with_the_servers_counter(full_run: dict[str, Any]) -> None:
    """Every token the runner counted is one the server counted, and the other way round
    (the runner is the only client of the server while it runs)."""
    samples = [
        s
        for name, scenario in full_run["doc"]["scenarios"].items()
        for s in scenario["samples"]
        if not (name == "naive" and s["phase"] == "naive")  # those ran in transformers
    ]
    generated = full_run["after"]["generation"] - full_run["before"]["generation"]
    prompted = full_run["after"]["prompt"] - full_run["before"]["prompt"]
    warmup = full_run["doc"]["environment"]["warmup"]  # discarded, but served
    assert warmup["requests"] > 0
    assert sum(s["outputTokens"] for s in samples) + warmup["outputTokens"] == generated
    assert sum(s["promptTokens"] for s in samples) + warmup["promptTokens"] == prompted


def test_live_load_of_a_run_alone_is_none_in_every_scenario(full_run: dict[str, Any]) -> None:
    """The runner is the server's only client: in every scenario, the concurrent ladder's
    32 requests at once included, the server finished exactly the runner's requests (none
    counted late into the next scenario) and never ran one that was not the runner's."""
    live = full_run["doc"]["liveLoad"]
    assert set(live["scenarios"]) == {"capacity", "batching", "prefix", "streaming", "naive"}
    for name, window in live["scenarios"].items():
        assert window["serverRequests"] == window["ownRequests"], (name, window)
        assert window["foreignRequests"] == 0, (name, window)
        assert window["peakForeignInFlight"] == 0, (name, window)
        assert window["scrapeFailures"] == 0, (name, window)
    # sampled gauges every 0.25-0.5 s: bounds, not the exact peak (a sample can miss the
    # instant 16 ran at once). Requests waiting prove --max-num-seqs 16 was the limit; more
    # than one running proves the batch was seen at all.
    batching = live["scenarios"]["batching"]
    assert 1 < batching["peakRunning"] <= 16, batching  # --max-num-seqs
    assert batching["peakWaiting"] > 0, batching
    assert live["quiet"] is True


def test_capacity_is_what_the_server_reports(full_run: dict[str, Any]) -> None:
    cache = full_run["after"]["cache"]
    s = summary(full_run, "capacity")
    assert s["numGpuBlocks"] == int(cache["num_gpu_blocks"])
    assert s["blockSize"] == int(cache["block_size"]) == 32
    assert s["kvCacheTokens"] == int(cache["num_gpu_blocks"]) * int(cache["block_size"])
    assert s["kvCacheTokens"] == int(cache["kv_cache_size_tokens"])  # vLLM's own product
    assert s["maxModelLen"] == 2048
    # vLLM's own figure for max_model_len-long requests (a float: tokens / max_model_len)
    assert s["maxConcurrencyAtMaxModelLen"] == math.floor(float(cache["kv_cache_max_concurrency"]))
    per_request_blocks = math.ceil(s["requestTokens"] / 32)
    assert s["maxConcurrencyAtRequestSize"] == int(cache["num_gpu_blocks"]) // per_request_blocks
    assert s["firstRequestLatencySeconds"] > 0
    assert full_run["doc"]["environment"]["cacheConfig"] == {
        k: v for k, v in cache.items() if k != "engine"
    }


def test_batching_concurrent_beats_serial_and_requests_queue(full_run: dict[str, Any]) -> None:
    s = summary(full_run, "batching")
    assert s["concurrentOutputTokensPerSecond"] > s["serialOutputTokensPerSecond"] > 0
    assert s["speedupOverSerial"] > 1.5
    assert [p["concurrency"] for p in s["ladder"]] == [1, 2, 4, 8, 16, 32]
    assert s["kneeConcurrency"] in {1, 2, 4, 8, 16, 32}
    # more than --max-num-seqs 16 requests in flight at once: the server queued some
    assert s["ladder"][-1]["peakInFlight"] > 16
    assert s["peakQueueDepth"] > 0
    assert s["peakRunning"] <= 16
    assert isinstance(s["preemptions"], int)
    assert s["latencyP50Seconds"] <= s["latencyP95Seconds"] <= s["latencyP99Seconds"]
    samples = full_run["doc"]["scenarios"]["batching"]["samples"]
    assert len([x for x in samples if x["phase"] == "serial"]) == 32
    assert s["concurrentPeakInFlight"] > 16
    assert len([x for x in samples if x["phase"] == "ladder-32"]) == 96  # ladder_requests: 3c
    assert {x["outputTokens"] for x in samples} == {OUTPUT_TOKENS}  # ignore_eos: fixed length
    timeline = full_run["doc"]["scenarios"]["batching"]["serverTimeline"]
    assert max(p["waiting"] for p in timeline) == s["peakQueueDepth"]


def test_prefix_cache_warm_is_faster_and_reordering_misses(full_run: dict[str, Any]) -> None:
    s = summary(full_run, "prefix")
    assert s["coldMethod"] == "reset"  # the fixture's server runs with VLLM_SERVER_DEV_MODE=1
    assert s["prefixCachingEnabled"] is True
    assert s["warmTtftP50Seconds"] < s["coldTtftP50Seconds"]
    assert s["ttftSpeedup"] > 1
    assert s["coldHitsDelta"] == 0
    assert s["prefixCacheHitsDelta"] > 0
    # 8 warm requests of ~1536 shared tokens: nearly all of each prompt is a hit
    assert s["prefixCacheHitsDelta"] >= 8 * 1024
    assert 0.5 < s["hitRate"] <= 1
    assert s["reorderedHitsDelta"] == 0


def test_streaming_distributions(full_run: dict[str, Any]) -> None:
    s = summary(full_run, "streaming")
    assert 0 < s["ttftP50Seconds"] <= s["ttftP95Seconds"]
    assert 0 < s["itlP50Seconds"] <= s["itlP95Seconds"]
    assert 0 < s["tpotP50Seconds"] <= s["tpotP95Seconds"]
    for sample in full_run["doc"]["scenarios"]["streaming"]["samples"]:
        times = sample["tokenTimesSeconds"]
        assert sample["outputTokens"] == OUTPUT_TOKENS
        # one event per token at most: vLLM sends tokens that piled up while the API server
        # was busy (or a byte that ends inside a UTF-8 character) together in one event
        assert 2 <= len(times) <= OUTPUT_TOKENS
        assert times == sorted(times)
        assert times[0] == sample["ttftSeconds"]
        assert times[-1] <= sample["latencySeconds"]


def test_naive_transformers_is_slower_than_vllm(full_run: dict[str, Any]) -> None:
    s = summary(full_run, "naive")
    assert s["naiveDevice"] == "cpu"
    assert s["naiveOutputTokensPerSecond"] > 0
    assert s["speedup"] > 1
    naive = [x for x in full_run["doc"]["scenarios"]["naive"]["samples"] if x["phase"] == "naive"]
    assert [x["outputTokens"] for x in naive] == [OUTPUT_TOKENS] * 4


def test_plots_and_html_report(full_run: dict[str, Any]) -> None:
    out: Path = full_run["out"]
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == [
        "cold_vs_warm.png", "concurrent_requests.png", "latency_per_request.png",
        "naive_vs_vllm.png", "prefix_ttft.png", "queue_depth.png", "serial_vs_concurrent.png",
        "throughput_vs_concurrency.png", "token_timeline.png",
    ]  # fmt: skip
    for name in pngs:
        data = (out / name).read_bytes()
        assert data.startswith(b"\x89PNG")
        assert len(data) > 10_000
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(pngs)
    assert "status: <b>ok</b>" in page


def test_prefix_cold_by_never_seen_prefixes(vllm_server: VllmServer, tmp_path: Path) -> None:
    """The fallback for servers without POST /reset_prefix_cache; and a Prometheus server
    that cannot be reached fails only the optional histogram query."""
    prometheus = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    proc, doc = run_cli(
        "--url", vllm_server.url, "--model", "tiny", "--scenarios", "prefix",
        "--prefix-cold-method", "unseen-prefix", "--prefix-tokens", "1536",
        "--prometheus-url", prometheus, "--out", str(tmp_path),
    )  # fmt: skip
    s = doc["scenarios"]["prefix"]["summary"]
    assert s["coldMethod"] == "unseen-prefix"
    assert s["coldHitsDelta"] == 0
    assert s["prefixCacheHitsDelta"] > 0
    assert s["warmTtftP50Seconds"] < s["coldTtftP50Seconds"]
    assert s["reorderedHitsDelta"] == 0
    assert [(e["scenario"], e["kind"]) for e in doc["errors"]] == [("prometheus", "prometheus")]
    assert prometheus in doc["errors"][0]["message"]
    assert doc["status"] == "partial"
    assert proc.returncode == 3


def test_wrong_model_name(vllm_server: VllmServer, tmp_path: Path) -> None:
    proc, doc = run_cli("--url", vllm_server.url, "--model", "llama-70b", "--out", str(tmp_path))
    assert proc.returncode == 4
    assert "serves 'tiny', not 'llama-70b'" in proc.stderr
    assert doc["status"] == "failed"
    assert doc["errors"][0]["kind"] == "model-mismatch"
    assert validation_errors(doc) == []


def test_deadline_mid_run_keeps_what_was_measured(vllm_server: VllmServer, tmp_path: Path) -> None:
    proc, doc = run_cli(
        "--url", vllm_server.url, "--model", "tiny", "--scenarios", "capacity,batching,streaming",
        "--max-duration-seconds", "4", "--out", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 3
    assert "--max-duration-seconds=4" in proc.stderr
    assert doc["status"] == "partial"
    assert [(e["scenario"], e["kind"]) for e in doc["errors"]] == [
        ("batching", "deadline"),
        ("streaming", "skipped"),
    ]
    assert doc["headline"]["kvCacheTokens"] > 0  # capacity finished
    assert doc["scenarios"]["batching"]["samples"]  # the requests that did finish
    # the deadline cut the run (its error above); the bound leaves room for the in-flight
    # requests' wind-down on a loaded machine, far below the three scenarios run whole
    assert doc["durationSeconds"] < 4 + 30
    assert validation_errors(doc) == []


def test_empty_completions_are_flagged_and_retried(
    vllm_server: VllmServer, tiny_model_dir: Path
) -> None:
    """A model that emits only special tokens gives an empty text with tokens counted:
    allowing only EOS (skipped when detokenising) makes one on the real server."""
    eos = json.loads((tiny_model_dir / "config.json").read_text())["eos_token_id"]

    async def ask(temperature: float) -> Any:
        async with OpenAIClient(vllm_server.url, "tiny", Budget(60, 50)) as client:
            return await client.generate(
                Request(
                    max_tokens=4,
                    prompt="Once upon a time",
                    temperature=temperature,
                    extra={"allowed_token_ids": [eos]},
                )
            )

    sampled = asyncio.run(ask(0.8))
    assert sampled.empty
    assert sampled.empty_first_attempt
    assert sampled.retried  # the greedy retry was empty too
    assert sampled.output_tokens == 4
    assert len(sampled.token_times) == 4  # the tokens arrived, their text is empty
    greedy = asyncio.run(ask(0.0))
    assert greedy.empty
    assert not greedy.retried
