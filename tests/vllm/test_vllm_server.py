"""The vLLM fixture is a real OpenAI-compatible server: completions, chat, streaming, metrics."""

from __future__ import annotations

import json

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from vllm_localenv.vllm_server import VllmServer

pytestmark = pytest.mark.vllm


def test_health(vllm_server: VllmServer) -> None:
    assert requests.get(f"{vllm_server.url}/health", timeout=60).status_code == 200


def test_completions(vllm_server: VllmServer) -> None:
    r = requests.post(
        f"{vllm_server.url}/v1/completions",
        timeout=180,
        json={
            "model": "tiny",
            "prompt": "The capital of France is",
            "max_tokens": 8,
            "ignore_eos": True,
        },
    )
    r.raise_for_status()
    body = r.json()
    assert body["model"] == "tiny"
    assert body["usage"]["completion_tokens"] == 8
    assert body["choices"][0]["text"]


def test_chat_completions_use_the_chat_template(vllm_server: VllmServer) -> None:
    r = requests.post(
        f"{vllm_server.url}/v1/chat/completions",
        timeout=180,
        json={
            "model": "tiny",
            "max_tokens": 6,
            "ignore_eos": True,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello there"},
            ],
        },
    )
    r.raise_for_status()
    body = r.json()
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["completion_tokens"] == 6
    # the template wraps each message, so the prompt is longer than the bare words
    assert body["usage"]["prompt_tokens"] > 4


def test_streaming_sends_one_event_per_token(vllm_server: VllmServer) -> None:
    with requests.post(
        f"{vllm_server.url}/v1/completions",
        timeout=180,
        stream=True,
        json={
            "model": "tiny",
            "prompt": "Once upon a time",
            "max_tokens": 10,
            "ignore_eos": True,
            "stream": True,
        },
    ) as r:
        r.raise_for_status()
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line[len(b"data: ") :] for line in r.iter_lines() if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["text"]) >= 5
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_metrics_expose_queue_depth_and_cache_config(vllm_server: VllmServer) -> None:
    text = requests.get(f"{vllm_server.url}/metrics", timeout=60).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    waiting = families["vllm:num_requests_waiting"]
    assert waiting.type == "gauge"
    assert waiting.samples[0].labels["model_name"] == "tiny"
    cache = families["vllm:cache_config_info"].samples[0].labels
    assert cache["block_size"] == "32"
    assert cache["enable_prefix_caching"] == "True"
    assert int(cache["num_gpu_blocks"]) > 0
