"""The runner's live-load accounting (liveload.py), pure parts: what the runner sent, foreign
requests and tokens from the server's counters on a captured vLLM 0.32 scrape, foreign
requests in flight from the poller, rounds merged, and the result document's `liveLoad`.
The window around a scenario against a real server: tests/vllm/test_bench_runner.py."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from rich.console import Console

from vllm_bench.liveload import (
    FAMILIES,
    PollStats,
    account,
    document,
    merge,
    own_traffic,
)
from vllm_bench.metrics import MetricsSnapshot, parse_metrics
from vllm_bench.report import summary_tables
from vllm_bench.results import build_document, validation_errors

METRICS_TEXT = (Path(__file__).parent / "bench_data" / "vllm-0.32-metrics.txt").read_text()


def scrape(
    *,
    length: float = 377,
    abort: float = 0,
    prompt: float = 134455,
    generation: float = 10174,
    running: float = 0,
    waiting: float = 0,
) -> MetricsSnapshot:
    """The captured scrape with these values (request_success split by finish reason)."""
    values = {
        r'vllm:request_success_total\{engine="0",finished_reason="length",model_name="tiny"\}': (
            length
        ),
        r'vllm:request_success_total\{engine="0",finished_reason="abort",model_name="tiny"\}': (
            abort
        ),
        r'vllm:prompt_tokens_total\{engine="0",model_name="tiny"\}': prompt,
        r'vllm:generation_tokens_total\{engine="0",model_name="tiny"\}': generation,
        r'vllm:num_requests_running\{engine="0",model_name="tiny"\}': running,
        r'vllm:num_requests_waiting\{engine="0",model_name="tiny"\}': waiting,
    }
    text = METRICS_TEXT
    for pattern, value in values.items():
        text, n = re.subn(rf"^({pattern}) \S+$", rf"\1 {value}", text, flags=re.M)
        assert n == 1, pattern
    return parse_metrics(text, model="tiny", only=FAMILIES)


def sample(phase: str = "p", prompt: int = 100, output: int = 32, **extra: Any) -> dict[str, Any]:
    return {"phase": phase, "promptTokens": prompt, "outputTokens": output, **extra}


def test_own_traffic_counts_what_went_to_the_server() -> None:
    samples = [
        sample(),
        sample(prompt=50, output=8),
        sample(prompt=10, output=4, retried=True),  # an empty first attempt, then the retry
        sample(phase="naive", prompt=999, output=999),  # transformers, not the server
    ]
    assert own_traffic(samples) == {"requests": 4, "promptTokens": 170, "outputTokens": 44}


def test_only_the_live_load_families_are_parsed_and_success_sums_finish_reasons() -> None:
    snap = scrape(length=10, abort=2)
    assert {s.name.removesuffix("_total") for s in snap.samples} <= set(FAMILIES)
    assert snap.counter("vllm:request_success") == 12


def test_a_quiet_window_has_no_foreign_traffic() -> None:
    before = scrape()
    after = scrape(length=377 + 3, prompt=134455 + 170, generation=10174 + 44)
    polled = PollStats()
    polled.record(scrape(running=2, waiting=1), own_in_flight=3)
    own = own_traffic([sample(), sample(prompt=50, output=8), sample(prompt=20, output=4)])
    got = account(before, after, own, polled)
    assert got == {
        "serverRequests": 3,
        "ownRequests": 3,
        "foreignRequests": 0,
        "serverPromptTokens": 170,
        "foreignPromptTokens": 0,
        "serverGenerationTokens": 44,
        "foreignGenerationTokens": 0,
        "peakRunning": 2,
        "peakWaiting": 1,
        "peakForeignInFlight": 0,
        "scrapes": 1,
        "scrapeFailures": 0,
    }


def test_foreign_requests_tokens_and_in_flight_are_what_is_not_the_runners() -> None:
    before = scrape(length=100, abort=1)
    # 5 of the runner's, 7 others' (2 of them aborted), their tokens on top of the runner's
    after = scrape(length=110, abort=3, prompt=134455 + 500 + 700, generation=10174 + 160 + 90)
    polled = PollStats()
    polled.record(scrape(running=4, waiting=0), own_in_flight=4)  # all the runner's
    polled.record(scrape(running=6, waiting=3), own_in_flight=5)  # 4 others'
    polled.record(scrape(running=2, waiting=0), own_in_flight=0)  # 2 others'
    got = account(before, after, own_traffic([sample(prompt=100)] * 5), polled)
    assert (got["serverRequests"], got["ownRequests"], got["foreignRequests"]) == (12, 5, 7)
    assert (got["foreignPromptTokens"], got["foreignGenerationTokens"]) == (700, 90)
    assert (got["peakRunning"], got["peakWaiting"], got["peakForeignInFlight"]) == (6, 3, 4)
    assert got["scrapes"] == 3


def test_foreign_counts_are_never_negative_and_unknown_without_scrapes() -> None:
    # the server restarted (counters reset): nothing is known
    restarted = account(
        scrape(length=500), scrape(length=3), own_traffic([sample()] * 5), PollStats()
    )
    assert (restarted["serverRequests"], restarted["foreignRequests"]) == (None, None)
    # the server has not counted the runner's last request yet: not negative load
    late = account(scrape(), scrape(length=377 + 4), own_traffic([sample()] * 5), PollStats())
    assert late["foreignRequests"] == 0
    unknown = account(None, scrape(), own_traffic([sample()]), PollStats(failures=1))
    assert unknown["serverRequests"] is None
    assert unknown["foreignRequests"] is None
    assert unknown["peakForeignInFlight"] is None
    assert unknown["scrapeFailures"] == 1


def test_rounds_add_up_and_peaks_are_the_highest() -> None:
    one = {"serverRequests": 10, "ownRequests": 8, "foreignRequests": 2, "peakRunning": 3,
           "peakForeignInFlight": 1, "scrapes": 4, "scrapeFailures": 0}  # fmt: skip
    two = {"serverRequests": 9, "ownRequests": 8, "foreignRequests": 1, "peakRunning": 5,
           "peakForeignInFlight": 0, "scrapes": 6, "scrapeFailures": 1}  # fmt: skip
    merged = merge([one, two])
    assert merged["serverRequests"] == 19
    assert merged["foreignRequests"] == 3
    assert merged["peakRunning"] == 5
    assert merged["peakForeignInFlight"] == 1
    assert (merged["scrapes"], merged["scrapeFailures"]) == (10, 1)
    # one round's scrape failed: the sum is not known
    assert merge([one, {**two, "foreignRequests": None}])["foreignRequests"] is None


def _window(foreign: int | None, peak: float | None) -> dict[str, Any]:
    polled = PollStats(scrapes=3, peak_running=1, peak_waiting=0, peak_foreign=peak)
    own = own_traffic([sample()])
    after = scrape(length=377 + 1 + (foreign or 0))
    return account(scrape() if foreign is not None else None, after, own, polled)


def test_the_document_says_whether_the_target_was_the_runners_alone() -> None:
    quiet = document(
        "http://10.85.0.7:8000", {"batching": [_window(0, 0)], "prefix": [_window(0, 0)]}
    )
    assert quiet["quiet"] is True
    assert quiet["target"] == "http://10.85.0.7:8000"
    assert set(quiet["scenarios"]) == {"batching", "prefix"}
    assert quiet["ownRequests"] == 2
    busy = document("u", {"batching": [_window(0, 0)], "prefix": [_window(3, 0)]})
    assert (busy["quiet"], busy["foreignRequests"]) == (False, 3)
    assert busy["scenarios"]["prefix"]["foreignRequests"] == 3
    in_flight_only = document("u", {"streaming": [_window(0, 2)]})
    assert (in_flight_only["quiet"], in_flight_only["peakForeignInFlight"]) == (False, 2)
    assert document("u", {"streaming": [_window(None, None)]})["quiet"] is None


def test_a_document_with_live_load_validates() -> None:
    live = document("http://10.85.0.7:8000", {"batching": [_window(2, 1)]})
    doc = build_document(
        config={"url": "http://10.85.0.7:8000", "model": "tiny", "scenarios": ["batching"],
                "maxDurationSeconds": 60, "maxRps": None, "liveLoadIntervalSeconds": 0.5},
        environment={"serverVersion": "0.32.0", "model": "tiny", "cacheConfig": {}},
        scenarios={},
        errors=[],
        started_at=0,
        finished_at=1,
        extra={"liveLoad": live},
    )  # fmt: skip
    assert validation_errors(doc) == []
    broken = {**doc, "liveLoad": {**live, "foreignRequests": -1, "quiet": "yes"}}
    assert len(validation_errors(broken)) == 2


def test_the_summary_shows_the_live_load_per_scenario_and_for_the_run() -> None:
    live = document(
        "http://10.85.0.7:8000", {"prefix": [_window(3, 2)], "streaming": [_window(0, 0)]}
    )
    doc = build_document(
        config={"url": "http://10.85.0.7:8000", "model": "tiny", "scenarios": [],
                "maxDurationSeconds": 60, "maxRps": None},
        environment={"serverVersion": "0.32.0", "model": "tiny", "cacheConfig": {}},
        scenarios={}, errors=[], started_at=0, finished_at=1, extra={"liveLoad": live},
    )  # fmt: skip
    console = Console(width=200, record=True, file=io.StringIO())
    (table,) = [t for t in summary_tables(doc) if "live load" in str(t.title)]
    console.print(table)
    text = console.export_text()
    assert "OTHER CLIENTS' LOAD SEEN" in text
    cells = [[c.strip() for c in line.split("│") if c.strip()] for line in text.splitlines()]
    rows = {row[0]: row[1:] for row in cells if row}
    # scenario: own, foreign requests, foreign tokens, peak running, waiting, foreign in flight
    assert rows["prefix"][:2] == ["1", "3"]
    assert rows["streaming"][:2] == ["1", "0"]
    assert rows["run"][:2] == ["2", "3"]
