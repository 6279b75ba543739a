"""The benchmark runner's pure parts: statistics, the knee, SSE decoding, /metrics parsing
on a captured vLLM 0.32 scrape, URL checks, budgets, the empty-completion policy, the
result document (schema, status, exit codes) and the report made from a document."""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vllm_bench.cli import build_parser, config_from_args
from vllm_bench.client import BenchError, Budget, Completion, OpenAIClient, Request, SseDecoder
from vllm_bench.metrics import (
    CACHE_CONFIG_INFO,
    POLLED,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    counter_delta,
    parse_metrics,
)
from vllm_bench.promql import quantile_query, state_queries
from vllm_bench.report import summary_tables, write_html, write_plots
from vllm_bench.results import (
    build_document,
    exit_code,
    headline,
    run_status,
    validation_errors,
    write_document,
)
from vllm_bench.rounds import merge_summaries, summary_spread
from vllm_bench.runner import normalise_url, scenario_document
from vllm_bench.scenarios.base import BenchConfig, ScenarioResult, empty_counts
from vllm_bench.scenarios.batching import (
    bracket,
    ladder_levels,
    ladder_requests,
    meets,
    saturation_point,
)
from vllm_bench.scenarios.capacity import max_sequences
from vllm_bench.stats import distribution, knee, peak_overlap, percentile, spread
from vllm_bench.workload import PromptFactory

METRICS_TEXT = (Path(__file__).parent / "bench_data" / "vllm-0.32-metrics.txt").read_text()


# --- statistics -------------------------------------------------------------------------


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 95, 99, 100])
def test_percentile_matches_numpy_linear_interpolation(q: float) -> None:
    values = [0.31, 0.02, 5.0, 1.25, 0.7, 0.7, 3.3]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_nothing_is_none_and_q_is_checked() -> None:
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


def test_distribution() -> None:
    d = distribution([1.0, 2.0, 3.0, 4.0])
    assert d == pytest.approx(
        {"count": 4, "mean": 2.5, "min": 1.0, "p50": 2.5, "p95": 3.85, "p99": 3.97, "max": 4.0}
    )
    assert distribution([])["p50"] is None


def test_peak_overlap_counts_requests_in_flight_together() -> None:
    assert peak_overlap([]) == 0
    assert peak_overlap([(0, 1), (1, 2), (2, 3)]) == 1  # back to back: never two at once
    assert peak_overlap([(0, 10), (1, 2), (1.5, 3), (2.5, 4)]) == 3
    assert peak_overlap([(0, 1)] * 5) == 5


def test_knee_is_where_latency_starts_growing_faster_than_throughput() -> None:
    ladder = [
        (1, 100.0, 0.20),
        (2, 195.0, 0.21),  # x1.95 throughput, x1.05 latency: still buying throughput
        (4, 380.0, 0.22),
        (8, 600.0, 0.28),
        (16, 700.0, 0.48),  # x1.17 throughput, x1.71 latency: past the knee
        (32, 710.0, 0.95),
    ]
    assert knee(ladder) == 8


def test_knee_is_the_top_of_an_unsaturated_ladder_and_none_when_empty() -> None:
    assert knee([(1, 100.0, 0.2), (2, 200.0, 0.2), (4, 400.0, 0.21)]) == 4
    assert knee([(1, 100.0, 0.2)]) == 1
    assert knee([]) is None


def test_ladder_levels_and_kv_capacity_arithmetic() -> None:
    assert ladder_levels(32) == [1, 2, 4, 8, 16, 32]
    assert ladder_levels(20) == [1, 2, 4, 8, 16, 20]
    assert ladder_levels(1) == [1]
    assert [ladder_requests(c) for c in (1, 4, 8, 32)] == [8, 12, 24, 96]
    # 8192 blocks of 32 tokens; a 2048-token sequence needs 64 blocks
    assert max_sequences(8192, 32, 2048) == 128
    assert max_sequences(8192, 32, 33) == 4096  # 33 tokens take two blocks
    assert max_sequences(40, 32, 2048) == 0


# --- SSE --------------------------------------------------------------------------------


def _decode(lines: list[str]) -> list[str]:
    decoder = SseDecoder()
    events = [e for line in lines if (e := decoder.feed(line)) is not None]
    if (rest := decoder.flush()) is not None:
        events.append(rest)
    return events


def test_sse_decoder_follows_the_event_stream_rules() -> None:
    lines = [
        ": a comment (keep-alive ping)",
        'data: {"a": 1}',
        "",
        "event: message",
        "id: 7",
        "data:first line",  # no space after the colon
        "data: second line",
        "",
        "",  # extra blank lines are no events
        'data: {"b": 2}\r',  # CRLF line endings
        "\r",
        "data: [DONE]",  # the stream may end without the final blank line
    ]
    assert _decode(lines) == ['{"a": 1}', "first line\nsecond line", '{"b": 2}', "[DONE]"]


# --- /metrics ---------------------------------------------------------------------------


def test_parses_a_captured_vllm_metrics_scrape() -> None:
    snap = parse_metrics(METRICS_TEXT, model="tiny")
    cache = snap.info_labels(CACHE_CONFIG_INFO)
    assert cache is not None
    assert cache["block_size"] == "32"
    assert cache["num_gpu_blocks"] == "8192"
    assert cache["enable_prefix_caching"] == "True"
    assert "engine" not in cache
    assert snap.counter(PREFIX_CACHE_HITS) == 50080.0
    assert snap.counter("vllm:prefix_cache_hits_total") == 50080.0  # either spelling
    assert snap.counter(PREFIX_CACHE_QUERIES) == 134455.0
    assert snap.gauge("vllm:num_requests_waiting") == 0.0
    assert snap.gauge("vllm:no_such_metric") is None
    # another served model's samples do not count
    assert parse_metrics(METRICS_TEXT, model="other").counter(PREFIX_CACHE_HITS) is None


def test_parsing_only_some_families_gives_the_same_values() -> None:
    full = parse_metrics(METRICS_TEXT, model="tiny")
    only = parse_metrics(METRICS_TEXT, model="tiny", only=(*POLLED, PREFIX_CACHE_HITS))
    for name in POLLED:
        assert only.gauge(name) == full.gauge(name) is not None
    assert only.counter(PREFIX_CACHE_HITS) == full.counter(PREFIX_CACHE_HITS) == 50080.0
    assert only.info_labels(CACHE_CONFIG_INFO) is None  # dropped
    assert len(only.samples) < len(full.samples) / 20


def test_counter_delta_sums_engines() -> None:
    before = parse_metrics(
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 5\n',
        model="m",
    )
    after = parse_metrics(
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 74\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 37\n',
        model="m",
    )
    assert counter_delta(before, after, PREFIX_CACHE_HITS) == 96
    assert counter_delta(before, after, "vllm:num_preemptions") is None


def test_metrics_that_are_not_prometheus_text_are_rejected() -> None:
    with pytest.raises(ValueError, match="invalid metric name"):
        parse_metrics("<html><body>not metrics</body></html>\n")


def test_prometheus_quantile_query() -> None:
    assert quantile_query("vllm:time_to_first_token_seconds", 0.95, "tiny", 41.2) == (
        "histogram_quantile(0.95, sum by (le) "
        '(increase(vllm:time_to_first_token_seconds_bucket{model_name="tiny"}[42s])))'
    )


def test_prometheus_server_state_queries() -> None:
    assert state_queries("tiny", 9.5) == {
        "requestsWaiting": {
            "max": 'max(max_over_time(vllm:num_requests_waiting{model_name="tiny"}[10s]))',
            "mean": 'avg(avg_over_time(vllm:num_requests_waiting{model_name="tiny"}[10s]))',
        },
        "requestsRunning": {
            "max": 'max(max_over_time(vllm:num_requests_running{model_name="tiny"}[10s]))',
            "mean": 'avg(avg_over_time(vllm:num_requests_running{model_name="tiny"}[10s]))',
        },
        "kvCacheUsage": {
            "max": 'max(max_over_time(vllm:kv_cache_usage_perc{model_name="tiny"}[10s]))',
            "mean": 'avg(avg_over_time(vllm:kv_cache_usage_perc{model_name="tiny"}[10s]))',
        },
        "preemptions": {
            "total": 'sum(increase(vllm:num_preemptions_total{model_name="tiny"}[10s]))'
        },
    }


# --- URL, arguments, budget ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://my-model.ns.svc:8000", "http://my-model.ns.svc:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("https://gateway.example/llm/v1/", "https://gateway.example/llm"),
        ("http://[::1]:8000/v1", "http://[::1]:8000"),
    ],
)
def test_urls_are_normalised_to_the_server_root(url: str, expected: str) -> None:
    assert normalise_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "http//missing-colon",
        "ftp://host:21",
        "127.0.0.1:8000",
        "http://host:99999",
        "http://h:8000/?x=1",
        "",
    ],
)
def test_malformed_urls_are_usage_errors(url: str) -> None:
    with pytest.raises(BenchError) as err:
        normalise_url(url)
    assert err.value.kind == "usage"
    assert "--url" in err.value.message


def test_arguments() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["run", "--url", "http://h:8000", "--model", "m", "--scenarios", "prefix,capacity,prefix"]
    )
    config = config_from_args(args)
    assert config.scenarios == ("prefix", "capacity")  # order kept, duplicates dropped
    assert config.max_duration_seconds == 600
    assert config.max_rps is None  # no default cap: the concurrency paces the starts
    assert (config.warmup_requests, config.rounds) == (8, 1)
    assert config.as_document()["maxDurationSeconds"] == 600
    with pytest.raises(SystemExit):
        parser.parse_args(
            ["run", "--url", "http://h", "--model", "m", "--scenarios", "capacity,warp"]
        )
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--url", "http://h", "--model", "m", "--requests", "0"])
    naive = parser.parse_args(["run", "--url", "http://h", "--model", "m", "--scenarios", "naive"])
    with pytest.raises(BenchError, match="--naive-model-dir"):
        config_from_args(naive)


def test_the_proxy_of_the_environment_is_used_only_when_asked() -> None:
    parser = build_parser()
    plain = config_from_args(parser.parse_args(["run", "--url", "http://h:8000", "--model", "m"]))
    proxied = config_from_args(
        parser.parse_args(["run", "--url", "http://h:8000", "--model", "m", "--proxy-from-env"])
    )
    assert (plain.proxy_from_env, proxied.proxy_from_env) == (False, True)
    assert proxied.as_document()["proxyFromEnv"] is True

    async def trust(proxy: bool) -> bool:
        client = OpenAIClient("http://h:8000", "m", Budget(10.0), proxy_from_env=proxy)
        async with client:
            return client.session.trust_env

    assert (asyncio.run(trust(False)), asyncio.run(trust(True))) == (False, True)


def test_budget_spaces_request_starts_and_stops_at_the_deadline() -> None:
    async def starts(budget: Budget, n: int) -> tuple[float, list[float]]:
        first_call = time.monotonic()
        times = []
        for _ in range(n):
            await budget.start_request()
            times.append(time.monotonic())
        return first_call, times

    first_call, times = asyncio.run(starts(Budget(60, max_rps=20), 6))
    # the i-th start is never before its slot, i/20 s after the first call; a busy machine
    # only wakes a start later than its slot (the next slot stays on the schedule, so the
    # gap between two wake-ups may be shorter: only the schedule is a property of the code)
    for i, started in enumerate(times):
        assert started - first_call >= i / 20 - 0.005, (i, started - first_call)

    async def past_deadline() -> None:
        budget = Budget(0.2, max_rps=5)  # the third start would be at 0.4 s
        for _ in range(3):
            await budget.start_request()

    with pytest.raises(BenchError) as err:
        asyncio.run(past_deadline())
    assert err.value.kind == "deadline"
    assert "--max-duration-seconds" in err.value.message


def test_prompts_have_about_the_asked_size() -> None:
    factory = PromptFactory(seed=3, tokens_per_word=2.0)
    assert len(factory.prompt(200).split()) == 100
    first, second = factory.prompt(50), factory.prompt(50)
    assert first != second
    segments = factory.shared_prefix(900, examples=8)
    assert len(segments) == 9
    assert 350 <= sum(len(s.split()) for s in segments) <= 550  # ~900 tokens at 2 per word
    assert len({s.split()[0] for s in segments[1:]}) > 1  # rotations start differently


# --- empty completions ------------------------------------------------------------------


def _completion(text: str, tokens: int) -> Completion:
    return Completion(
        started=0.0,
        latency=0.5,
        ttft=0.1,
        token_times=[0.1 + i * 0.01 for i in range(tokens)],
        prompt_tokens=10,
        output_tokens=tokens,
        text=text,
        finish_reason="length",
    )


class ScriptedClient(OpenAIClient):
    """Our own client with its transport replaced by a script of answers, to test the retry
    policy in isolation (the real server path is in tests/vllm/test_bench_runner.py)."""

    def __init__(self, answers: list[Completion]) -> None:
        super().__init__("http://127.0.0.1:9", "m", Budget(60, 1000))
        self.answers = answers
        self.temperatures: list[float | None] = []

    async def _stream(self, request: Request, temperature: float | None = None) -> Completion:
        self.temperatures.append(temperature)
        return self.answers.pop(0)


def test_empty_completion_is_retried_once_greedily_when_sampling() -> None:
    client = ScriptedClient([_completion("  \n", 4), _completion("Paris", 1)])
    got = asyncio.run(client.generate(Request(max_tokens=4, prompt="q", temperature=0.8)))
    assert client.temperatures == [None, 0.0]
    assert (got.text, got.retried, got.empty_first_attempt, got.empty) == (
        "Paris",
        True,
        True,
        False,
    )


def test_empty_retry_that_stays_empty_is_reported_empty() -> None:
    client = ScriptedClient([_completion("", 0), _completion("", 3)])
    got = asyncio.run(client.generate(Request(max_tokens=4, prompt="q", temperature=1.0)))
    assert got.retried
    assert got.empty
    assert got.output_tokens == 3


def test_greedy_empty_completion_is_not_retried() -> None:
    client = ScriptedClient([_completion("", 4)])
    got = asyncio.run(client.generate(Request(max_tokens=4, prompt="q", temperature=0.0)))
    assert client.temperatures == [None]
    assert got.empty
    assert got.empty_first_attempt
    assert not got.retried


def test_non_empty_completion_is_sent_once() -> None:
    client = ScriptedClient([_completion(" a b", 2)])
    got = asyncio.run(client.generate(Request(max_tokens=2, prompt="q", temperature=0.7)))
    assert not got.empty
    assert not got.retried
    assert client.temperatures == [None]


def test_empty_counts_in_summaries() -> None:
    samples = [
        {"emptyFirstAttempt": True, "empty": False},
        {"emptyFirstAttempt": True, "empty": True},
        {"emptyFirstAttempt": False, "empty": False},
    ]
    assert empty_counts(samples) == {"emptyCompletions": 2, "emptyAfterRetry": 1}


def test_completion_timings() -> None:
    c = _completion("abc", 5)  # chunks at 0.10, 0.11, ... 0.14; latency 0.5
    assert c.itls == pytest.approx([0.01] * 4)
    assert c.tpot == pytest.approx((0.5 - 0.1) / 4)
    assert _completion("x", 1).tpot is None


# --- the document -----------------------------------------------------------------------


def _sample(phase: str, i: int, **extra: Any) -> dict[str, Any]:
    return {
        "phase": phase,
        "index": i,
        "startSeconds": 0.01 * i,
        "latencySeconds": 0.2 + 0.01 * i,
        "ttftSeconds": 0.02 + 0.001 * i,
        "tpotSeconds": 0.005,
        "promptTokens": 120,
        "outputTokens": 32,
        "finishReason": "length",
        "empty": False,
        "emptyFirstAttempt": False,
        "retried": False,
        **extra,
    }


def synthetic_document(errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    ladder = [
        {
            "concurrency": c,
            "requests": 16,
            "outputTokensPerSecond": 150.0 * min(c, 8),
            "requestsPerSecond": 5.0 * c,
            "latencyP50Seconds": 0.2 * max(1, c / 8),
            "latencyP95Seconds": 0.25 * max(1, c / 8),
        }
        for c in (1, 2, 4, 8, 16)
    ]
    empties = {"emptyCompletions": 0, "emptyAfterRetry": 0}
    scenarios = {
        "capacity": {
            "summary": {
                "firstRequestLatencySeconds": 0.2,
                "kvCacheTokens": 262144,
                "blockSize": 32,
                "numGpuBlocks": 8192,
                "maxModelLen": 2048,
                "maxConcurrencyAtMaxModelLen": 128,
                "requestTokens": 160,
                "maxConcurrencyAtRequestSize": 1638,
                "prefixCachingEnabled": True,
            },
            "samples": [_sample("first-request", 0)],
            "elapsedSeconds": 0.3,
        },
        "batching": {
            "summary": {
                "serialOutputTokensPerSecond": 150.0,
                "serialLatencyP50Seconds": 0.2,
                "concurrentOutputTokensPerSecond": 900.0,
                "speedupOverSerial": 6.0,
                "requestsPerSecond": 28.1,
                "latencyP50Seconds": 0.5,
                "latencyP95Seconds": 0.55,
                "latencyP99Seconds": 0.56,
                "ttftP50Seconds": 0.1,
                "ladder": ladder,
                "kneeConcurrency": 8,
                "kneeOutputTokensPerSecond": 1200.0,
                "kneeSaturated": True,
                "peakQueueDepth": 3.0,
                "peakRunning": 16.0,
                "preemptions": 0,
                **empties,
            },
            "samples": [_sample(p, i) for p in ("serial", "concurrent") for i in range(4)],
            "serverTimeline": [
                {"tSeconds": 0.1 * i, "waiting": float(i % 3), "running": 4.0, "kvCacheUsage": 0.01}
                for i in range(10)
            ],
            "elapsedSeconds": 9.0,
        },
        "prefix": {
            "summary": {
                "prefixCachingEnabled": True,
                "coldMethod": "reset",
                "coldTtftP50Seconds": 0.06,
                "coldHitsDelta": 0.0,
                "warmTtftP50Seconds": 0.02,
                "ttftSpeedup": 3.0,
                "prefixCacheHitsDelta": 8448.0,
                "prefixCacheQueriesDelta": 8867.0,
                "hitRate": 0.9527,
                "promptTokens": 1107,
                "reorderedTtftP50Seconds": 0.06,
                "reorderedHitsDelta": 0.0,
                **empties,
            },
            "samples": [_sample(p, i) for p in ("cold", "warm", "reordered") for i in range(3)],
            "elapsedSeconds": 4.0,
        },
        "streaming": {
            "summary": {
                "ttftP50Seconds": 0.02,
                "ttftP95Seconds": 0.04,
                "ttftP99Seconds": 0.05,
                "itlP50Seconds": 0.004,
                "itlP95Seconds": 0.009,
                "itlP99Seconds": 0.05,
                "tpotP50Seconds": 0.005,
                "tpotP95Seconds": 0.006,
                "tpotP99Seconds": 0.007,
                "outputTokensPerSecond": 170.0,
                **empties,
            },
            "samples": [
                _sample("stream", i, tokenTimesSeconds=[0.02 + 0.005 * k for k in range(32)])
                for i in range(3)
            ],
            "distributions": {"ttftSeconds": distribution([0.02, 0.03])},
            "elapsedSeconds": 1.5,
        },
        "naive": {
            "summary": {
                "naiveOutputTokensPerSecond": 40.0,
                "naiveLoadSeconds": 2.0,
                "naiveDevice": "cpu",
                "vllmOutputTokensPerSecond": 400.0,
                "speedup": 10.0,
                **empties,
            },
            "samples": [
                {
                    "phase": "naive",
                    "index": 0,
                    "latencySeconds": 0.8,
                    "promptTokens": 100,
                    "outputTokens": 32,
                }
            ],
            "elapsedSeconds": 20.0,
        },
    }
    return build_document(
        config={
            "url": "http://127.0.0.1:8000",
            "model": "tiny",
            "scenarios": list(scenarios),
            "maxDurationSeconds": 600.0,
            "maxRps": 50.0,
        },
        environment={
            "serverVersion": "0.32.0",
            "model": "tiny",
            "cacheConfig": {"block_size": "32"},
        },
        scenarios=scenarios,
        errors=errors or [],
        started_at=1_700_000_000.0,
        finished_at=1_700_000_042.5,
    )


def test_a_complete_document_validates_and_has_the_headline() -> None:
    doc = synthetic_document()
    assert validation_errors(doc) == []
    assert doc["schemaVersion"] == "2"
    assert doc["status"] == "ok"
    assert doc["startedAt"] == "2023-11-14T22:13:20.000Z"
    assert doc["headline"] == {
        "kvCacheTokens": 262144,
        "maxConcurrencyAtMaxModelLen": 128,
        "outputTokensPerSecond": 1200.0,  # at the knee (8), not the 16 sent at once (900)
        "outputTokensPerSecondConcurrency": 8,
        "batchingSpeedup": 6.0,
        "prefixTtftSpeedup": 3.0,
        "prefixHitRate": 0.9527,
        "ttftP50Seconds": 0.02,
        "ttftP95Seconds": 0.04,
        "requestLatencyP99Seconds": 0.56,  # the concurrent phase's: what a drain must cover
    }


def test_the_schema_catches_broken_documents() -> None:
    doc = synthetic_document()
    doc["schemaVersion"] = "1"  # a version-1 reader must not take a version-2 document
    doc["status"] = "fine"
    doc["scenarios"]["batching"]["summary"]["speedupOverSerial"] = "fast"
    doc["scenarios"]["prefix"]["summary"]["hitRatio"] = 0.9  # a misspelt key
    del doc["environment"]["cacheConfig"]
    problems = "\n".join(validation_errors(doc))
    for where in ("schemaVersion", "status", "speedupOverSerial", "hitRatio", "cacheConfig"):
        assert where in problems


def test_headline_leaves_out_what_was_not_measured() -> None:
    assert headline(
        {"capacity": {"summary": {"kvCacheTokens": 10, "maxConcurrencyAtMaxModelLen": None}}}
    ) == {"kvCacheTokens": 10}


def test_status_and_exit_codes() -> None:
    setup = {"scenario": "setup", "kind": "model-mismatch", "message": "m"}
    assert run_status({}, [setup]) == "failed"
    assert exit_code([setup]) == 4
    partial = [
        {"scenario": "batching", "kind": "deadline", "message": "d"},
        {"scenario": "prefix", "kind": "skipped", "message": "s"},
    ]
    assert run_status({"capacity": {}, "batching": {}}, partial) == "partial"
    assert exit_code(partial) == 3
    assert exit_code([{"scenario": "setup", "kind": "usage", "message": "u"}]) == 2
    assert exit_code([{"scenario": "streaming", "kind": "http-503", "message": "x"}]) == 3
    assert exit_code([{"scenario": "streaming", "kind": "internal", "message": "bug"}]) == 1
    assert exit_code([]) == 0
    assert run_status({"capacity": {}}, []) == "ok"


def test_non_finite_numbers_are_written_as_null(tmp_path: Path) -> None:
    doc = synthetic_document()
    doc["scenarios"]["batching"]["summary"]["speedupOverSerial"] = math.inf
    doc["scenarios"]["streaming"]["summary"]["itlP99Seconds"] = math.nan
    written = json.loads(write_document(doc, tmp_path).read_text())
    assert written["scenarios"]["batching"]["summary"]["speedupOverSerial"] is None
    assert written["scenarios"]["streaming"]["summary"]["itlP99Seconds"] is None
    assert validation_errors(written) == []


def test_report_from_a_document(tmp_path: Path) -> None:
    doc = synthetic_document(
        errors=[{"scenario": "naive", "kind": "naive", "message": "<no torch>"}]
    )
    plots = write_plots(doc, tmp_path)
    assert sorted(p.name for p in plots) == [
        "cold_vs_warm.png",
        "concurrent_requests.png",
        "latency_per_request.png",
        "naive_vs_vllm.png",
        "prefix_ttft.png",
        "queue_depth.png",
        "serial_vs_concurrent.png",
        "throughput_vs_concurrency.png",
        "token_timeline.png",
    ]
    for p in plots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert p.stat().st_size > 5000
    page = write_html(doc, tmp_path, plots).read_text()
    assert page.count("data:image/png;base64,") == 9
    assert "&lt;no torch&gt;" in page  # escaped
    assert "kvCacheTokens" in page
    titles = [str(t.title) for t in summary_tables(doc)]
    assert any("batching ladder" in t for t in titles)


def test_report_skips_plots_without_data(tmp_path: Path) -> None:
    doc = synthetic_document()
    del doc["scenarios"]["batching"], doc["scenarios"]["naive"]
    assert sorted(p.name for p in write_plots(doc, tmp_path)) == [
        "cold_vs_warm.png",
        "prefix_ttft.png",
        "token_timeline.png",
    ]


# --- GPU-rate method (issue 13): knee headline, rounds and their spread ---------------------


def _ladder(points: list[tuple[int, float, float]]) -> list[dict[str, Any]]:
    return [
        {"concurrency": c, "outputTokensPerSecond": thr, "latencyP50Seconds": lat}
        for c, thr, lat in points
    ]


def test_headline_throughput_is_taken_at_the_knee_of_the_ladder() -> None:
    # Llama-3-8B-like: doubling concurrency nearly doubles throughput up to 8; from 8 to 16
    # latency grows x1.9 while throughput grows x1.1: saturated at 8
    ladder = _ladder(
        [(1, 189.0, 0.17), (2, 364.0, 0.18), (4, 705.0, 0.18), (8, 1232.0, 0.21),
         (16, 1350.0, 0.40), (32, 1400.0, 0.80)]
    )  # fmt: skip
    assert saturation_point(ladder) == {
        "kneeConcurrency": 8,
        "kneeOutputTokensPerSecond": 1232.0,
        "kneeSaturated": True,
    }


def test_an_unsaturated_ladder_reports_its_top_and_says_so() -> None:
    # the H200 ladder of GPU.md: throughput still grows as fast as latency at 32
    ladder = _ladder(
        [(1, 189.0, 0.17), (2, 364.0, 0.176), (4, 705.0, 0.18), (8, 1232.0, 0.21),
         (16, 2168.0, 0.24), (32, 3324.0, 0.31)]
    )  # fmt: skip
    assert saturation_point(ladder) == {
        "kneeConcurrency": 32,
        "kneeOutputTokensPerSecond": 3324.0,
        "kneeSaturated": False,
    }
    # levels that measured nothing are left out; no level at all gives no knee
    unmeasured = [*ladder[:2], {**ladder[2], "outputTokensPerSecond": None}]
    assert saturation_point(unmeasured)["kneeConcurrency"] == 2
    assert saturation_point([]) == {
        "kneeConcurrency": None,
        "kneeOutputTokensPerSecond": None,
        "kneeSaturated": None,
    }


def test_spread_of_rounds() -> None:
    assert spread([100.0, 110.0, 90.0]) == {
        "n": 3, "min": 90.0, "median": 100.0, "max": 110.0, "stdev": 10.0,
    }  # fmt: skip
    assert spread([5.0, None]) == {"n": 1, "min": 5.0, "median": 5.0, "max": 5.0, "stdev": None}
    assert spread([]) == {"n": 0, "min": None, "median": None, "max": None, "stdev": None}


def test_rounds_merge_to_medians_and_record_their_spread() -> None:
    rounds = [
        {"serialOutputTokensPerSecond": 180.0, "kneeConcurrency": 32, "preemptions": 0,
         "emptyCompletions": 1, "kneeSaturated": False,
         "ladder": [{"concurrency": 1, "outputTokensPerSecond": 180.0}]},
        {"serialOutputTokensPerSecond": 190.0, "kneeConcurrency": 16, "preemptions": 2,
         "emptyCompletions": 0, "kneeSaturated": True,
         "ladder": [{"concurrency": 1, "outputTokensPerSecond": 200.0}]},
        {"serialOutputTokensPerSecond": 200.0, "kneeConcurrency": 32, "preemptions": None,
         "emptyCompletions": 0, "kneeSaturated": False,
         "ladder": [{"concurrency": 1, "outputTokensPerSecond": 190.0}]},
    ]  # fmt: skip
    assert merge_summaries(rounds) == {
        "serialOutputTokensPerSecond": 190.0,
        "kneeConcurrency": 32,  # integers keep the lower median: an integer
        "preemptions": 2,  # counts add up over the rounds
        "emptyCompletions": 1,
        "kneeSaturated": False,  # not a number: the last round's
        "ladder": [{"concurrency": 1, "outputTokensPerSecond": 190.0}],
    }
    assert summary_spread(rounds) == {
        "serialOutputTokensPerSecond": {
            "n": 3, "min": 180.0, "median": 190.0, "max": 200.0, "stdev": 10.0,
            "values": [180.0, 190.0, 200.0],
        },
        "kneeConcurrency": {
            "n": 3, "min": 16, "median": 32.0, "max": 32, "stdev": pytest.approx(9.2376, abs=1e-4),
            "values": [32, 16, 32],
        },
    }  # fmt: skip


def test_a_document_of_several_rounds_validates() -> None:
    doc = synthetic_document()
    batching = doc["scenarios"]["batching"]
    first = ScenarioResult(summary=dict(batching["summary"]), samples=batching["samples"][:2])
    second = ScenarioResult(
        summary={**batching["summary"], "kneeOutputTokensPerSecond": 1300.0},
        samples=batching["samples"][2:4],
    )
    for n, r in enumerate((first, second), start=1):
        for sample in r.samples:
            sample["round"] = n
    doc["scenarios"]["batching"] = scenario_document([first, second])
    doc["config"] |= {"maxRps": None, "warmupRequests": 8, "rounds": 2}
    doc["environment"]["warmup"] = {"requests": 8, "seconds": 0.4}
    assert validation_errors(doc) == []
    merged = doc["scenarios"]["batching"]
    assert merged["rounds"] == 2
    assert merged["summary"]["kneeOutputTokensPerSecond"] == 1250.0
    assert merged["spread"]["kneeOutputTokensPerSecond"]["values"] == [1200.0, 1300.0]
    assert [s["round"] for s in merged["samples"]] == [1, 1, 2, 2]


# --- a latency objective refines the ladder (issue 33) -------------------------------------


def _objective_ladder(ttfts: dict[int, float]) -> list[dict[str, Any]]:
    return [
        {"concurrency": c, "outputTokensPerSecond": 100.0 * c, "latencyP50Seconds": 0.1,
         "ttftP95Seconds": t, "tpotP95Seconds": 0.01}
        for c, t in ttfts.items()
    ]  # fmt: skip


def test_an_objective_brackets_the_crossing_between_two_ladder_levels() -> None:
    cfg = BenchConfig(url="u", model="m", scenarios=("batching",), out="o",
                      objective_ttft_seconds=0.1)  # fmt: skip
    ladder = _objective_ladder({1: 0.03, 2: 0.04, 4: 0.05, 8: 0.08, 16: 0.3, 32: 0.9})
    assert meets(ladder[3], cfg)
    assert not meets(ladder[4], cfg)
    assert bracket(ladder, cfg) == (8, 16)
    # neighbours, or nothing held, or everything held: nothing to refine
    assert bracket(_objective_ladder({1: 0.03, 2: 0.2}), cfg) is None
    assert bracket(_objective_ladder({1: 0.2, 2: 0.3}), cfg) is None
    assert bracket(_objective_ladder({1: 0.03, 2: 0.04}), cfg) is None
    # the bracket starts at the first failing level, even if a later one meets it by chance
    assert bracket(_objective_ladder({1: 0.03, 2: 0.04, 4: 0.2, 8: 0.09}), cfg) == (2, 4)
    # TPOT binds too; a level without the objective's percentile does not meet it
    both = BenchConfig(url="u", model="m", scenarios=("batching",), out="o",
                       objective_ttft_seconds=1.0, objective_tpot_seconds=0.005)  # fmt: skip
    assert not meets(ladder[0], both)
    p99 = BenchConfig(url="u", model="m", scenarios=("batching",), out="o",
                      objective_ttft_seconds=1.0, objective_percentile=99)  # fmt: skip
    assert not meets(ladder[0], p99)


def test_refined_levels_do_not_move_the_knee() -> None:
    ladder = _ladder(
        [(1, 189.0, 0.17), (2, 364.0, 0.18), (4, 705.0, 0.18), (8, 1232.0, 0.21),
         (16, 1350.0, 0.40), (32, 1400.0, 0.80)]
    )  # fmt: skip
    refined = sorted(
        [*ladder, {"concurrency": 12, "outputTokensPerSecond": 1340.0, "latencyP50Seconds": 0.22,
                   "refine": True}],
        key=lambda p: p["concurrency"],
    )  # fmt: skip
    assert saturation_point(refined) == saturation_point(ladder)
