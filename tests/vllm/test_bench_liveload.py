"""The runner's live load against the real vLLM server on CPU: a run that has the server to
itself records no foreign load, and requests another client sends while a scenario runs are
recorded as foreign, exactly (requests and tokens; their peak in flight is a sample, reported).
The same on two replicas behind a Service: tests/node/test_one_pod.py."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.vllm.test_bench_runner import run_cli
from vllm_bench.results import validation_errors
from vllm_localenv.vllm_server import VllmServer

pytestmark = pytest.mark.vllm

FOREIGN = 6  # requests another client sends, all at once
FOREIGN_TOKENS = 48  # each generates exactly this many (ignore_eos)
FOREIGN_PROMPT = "The other tenant of this server asks about the weather in Lisbon today"
# the runner's serial requests: long enough that the burst, sent once two of them finished,
# ends well inside the scenario on a loaded CI machine (40 requests of 16 tokens were over in
# about a second there: one CI run's burst ended after the scenario and was counted nowhere)
OWN, OWN_TOKENS = 120, 32


def finished_requests(server: VllmServer) -> float:
    text = requests.get(f"{server.url}/metrics", timeout=60).text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "vllm:request_success_total"
    )


def foreign_request(server: VllmServer) -> dict[str, Any]:
    body = {
        "model": "tiny",
        "prompt": FOREIGN_PROMPT,
        "max_tokens": FOREIGN_TOKENS,
        "ignore_eos": True,
        "temperature": 0,
    }
    r = requests.post(f"{server.url}/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    return dict(r.json()["usage"])


def streaming_run(server: VllmServer, out: Path) -> tuple[Any, dict[str, Any]]:
    """The streaming scenario alone, serial, long enough for the foreign burst to fit in
    it; no warm-up: the first request the server finishes is the scenario's."""
    return run_cli(
        "--url", server.url, "--model", "tiny", "--scenarios", "streaming",
        "--streaming-requests", str(OWN), "--output-tokens", str(OWN_TOKENS),
        "--warmup-requests", "0",
        "--live-load-interval-seconds", "0.05", "--max-duration-seconds", "300",
        "--no-report", "--out", str(out),
    )  # fmt: skip


def test_a_run_alone_on_the_server_records_no_foreign_load(
    vllm_server: VllmServer, tmp_path: Path
) -> None:
    proc, doc = streaming_run(vllm_server, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert validation_errors(doc) == []
    live = doc["liveLoad"]
    samples = doc["scenarios"]["streaming"]["samples"]
    assert live["target"] == vllm_server.url
    # positive control: the server counted every request and token of the runner's
    assert live["serverRequests"] == live["ownRequests"] == len(samples) == OWN
    assert live["serverGenerationTokens"] == sum(s["outputTokens"] for s in samples)
    assert live["scrapes"] > 10
    # serial: the runner's one request at most (a sampled gauge: a bound, not the exact peak)
    assert live["peakRunning"] is not None
    assert live["peakRunning"] <= 1
    assert (live["foreignRequests"], live["foreignGenerationTokens"]) == (0, 0)
    assert live["peakForeignInFlight"] == 0
    assert live["quiet"] is True


def test_requests_of_another_client_during_a_scenario_are_foreign_load(
    vllm_server: VllmServer, tmp_path: Path
) -> None:
    start = finished_requests(vllm_server)
    usages: list[dict[str, Any]] = []
    failures: list[BaseException] = []
    sent: list[float] = []  # when the burst was sent, when its last answer came

    def other_tenant() -> None:
        try:
            deadline = time.monotonic() + 120
            # the scenario is under way: the server finished two of the runner's requests
            while finished_requests(vllm_server) < start + 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            sent.append(time.monotonic())
            with ThreadPoolExecutor(FOREIGN) as pool:
                usages.extend(pool.map(lambda _: foreign_request(vllm_server), range(FOREIGN)))
            sent.append(time.monotonic())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    tenant = threading.Thread(target=other_tenant)
    tenant.start()
    began = time.monotonic()
    proc, doc = streaming_run(vllm_server, tmp_path)
    ended = time.monotonic()
    tenant.join()
    assert not failures, failures
    assert len(sent) == 2
    assert sent[1] < ended, (
        f"the burst (sent {sent[0] - began:.1f} s into the run, answered at "
        f"{sent[-1] - began:.1f} s) ended after the run ({ended - began:.1f} s): the test's "
        "timing, not the runner's accounting"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    live = doc["liveLoad"]
    print(f"\nliveLoad with {FOREIGN} foreign requests: {json.dumps(live)}")
    assert len(usages) == FOREIGN
    # the foreign burst finished inside the scenario (the runner's serial requests outlast
    # it), so every foreign request and token is counted, and nothing of the runner's
    assert live["ownRequests"] == OWN
    assert live["foreignRequests"] == FOREIGN
    assert live["foreignGenerationTokens"] == FOREIGN * FOREIGN_TOKENS
    assert live["foreignPromptTokens"] == sum(u["prompt_tokens"] for u in usages)
    # (the burst's peak in flight is reported, not asserted: on this CPU server the scrapes the
    # runner makes every 0.05 s are answered around the burst, not during it: in 6 of 8 runs
    # here, at 48 to 512 tokens a request, no scrape saw the burst, whose requests and tokens
    # every run counted exactly; a CI run failed on it. The peak is a sample; the counts are
    # the accounting)
    assert live["peakForeignInFlight"] is not None
    assert live["peakRunning"] is not None  # (a sample too: reported, as the peak above)
    assert live["quiet"] is False
    assert live["scenarios"]["streaming"]["foreignRequests"] == FOREIGN
