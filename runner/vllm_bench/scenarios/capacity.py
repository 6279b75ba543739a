"""Scenario `capacity`: how many tokens the KV cache holds and how many sequences fit.

KV-cache capacity in tokens is num_gpu_blocks x block_size, both read from the server's
vllm:cache_config_info; a sequence of L tokens needs ceil(L / block_size) blocks, so at most
floor(num_gpu_blocks / ceil(L / block_size)) such sequences are in flight at once (at L =
max_model_len and at the batching scenario's request size). The first request's latency is
measured too: run right after a rollout, it is the first request after the server became
ready. With --preset it is the lab's first request (lab 1's first prompt, and its fallback
prompt when the output is empty; lab 2's smoke prompt), and `lab` holds the lab's figures
(lab 1's max concurrency by its own formula, kv_tokens / 1024).
"""

from __future__ import annotations

import math
import time

from vllm_bench.client import BenchError, Completion, Request
from vllm_bench.metrics import CACHE_CONFIG_INFO
from vllm_bench.scenarios.base import (
    Context,
    LabFigures,
    ScenarioResult,
    rounded,
    sample_record,
)


def max_sequences(num_blocks: int, block_size: int, tokens_per_sequence: int) -> int:
    """How many sequences of this many tokens fit in the KV cache at once."""
    return num_blocks // math.ceil(tokens_per_sequence / block_size)


async def _first_request(
    ctx: Context, result: ScenarioResult, lab: LabFigures | None
) -> tuple[Completion, Request]:
    """The first request: the preset's lab's first prompt (and its fallback prompt when that
    came back empty, as lab 1 does), or random words of about --input-tokens."""
    cfg = ctx.config
    started = time.perf_counter()
    preset = ctx.preset
    if preset is None or lab is None:
        request = ctx.request(prompt=ctx.prompts.prompt(cfg.input_tokens))
        first = await ctx.client.generate(request)
        result.samples.append(sample_record(first, "first-request", 0, started))
        return first, request
    step, fallback = preset.first, preset.first_fallback
    request = ctx.preset_request(step.prompts[0], step.sampling, retry_empty=fallback is None)
    first = await ctx.client.generate(request)
    result.samples.append(sample_record(first, "first-request", 0, started))
    name = preset.first_label
    lab.add(
        f"{name}LatencySeconds",
        rounded(first.latency),
        f"the lab's first request ({step.source}): send to its last token",
        beside="firstRequestLatencySeconds",
    )
    lab.add(f"{name}OutputTokens", first.output_tokens, "its output tokens")
    if fallback is not None:
        lab.add("fallbackUsed", first.empty, "its output was empty: the fallback prompt was sent")
        if first.empty:
            again = await ctx.client.generate(
                ctx.preset_request(fallback.prompts[0], fallback.sampling)
            )
            result.samples.append(sample_record(again, "first-fallback", 0, started))
            lab.add(
                "fallbackLatencySeconds",
                rounded(again.latency),
                f"the fallback request ({fallback.source}): send to its last token",
            )
            lab.add("fallbackOutputTokens", again.output_tokens, "its output tokens")
    return first, request


async def run(ctx: Context, result: ScenarioResult) -> None:
    cfg = ctx.config
    preset = ctx.preset
    lab = LabFigures(preset, result) if preset else None
    first, request = await _first_request(ctx, result, lab)
    result.summary["firstRequestLatencySeconds"] = rounded(first.latency)

    snapshot = await ctx.client.metrics()
    labels = snapshot.info_labels(CACHE_CONFIG_INFO)
    if not labels or "num_gpu_blocks" not in labels or "block_size" not in labels:
        raise BenchError(
            "metrics",
            f"the server's /metrics has no {CACHE_CONFIG_INFO} with num_gpu_blocks and "
            "block_size (not a vLLM server, or one too old for this runner)",
        )
    try:
        blocks, block_size = int(labels["num_gpu_blocks"]), int(labels["block_size"])
    except ValueError as exc:
        raise BenchError("metrics", f"{CACHE_CONFIG_INFO} has a non-integer size: {exc}") from exc
    request_tokens = first.prompt_tokens + (request.max_tokens or cfg.output_tokens)
    result.summary.update(
        {
            "kvCacheTokens": blocks * block_size,
            "blockSize": block_size,
            "numGpuBlocks": blocks,
            "maxModelLen": ctx.max_model_len,
            "maxConcurrencyAtMaxModelLen": (
                max_sequences(blocks, block_size, ctx.max_model_len) if ctx.max_model_len else None
            ),
            "requestTokens": request_tokens,
            "maxConcurrencyAtRequestSize": max_sequences(blocks, block_size, request_tokens),
            "prefixCachingEnabled": labels.get("enable_prefix_caching") == "True",
        }
    )
    if preset is not None and lab is not None and preset.max_concurrency_divisor:
        divisor = preset.max_concurrency_divisor
        kv = blocks * block_size
        lab.add(
            "kvCacheTokens",
            kv,
            "num_gpu_blocks x block_size: the engine's KV cache in tokens",
            beside="kvCacheTokens",
        )
        lab.add(
            "maxConcurrency",
            rounded(kv / divisor, 2),
            f"kv_tokens / {divisor}, the lab's formula ({divisor}: its max_model_len); the "
            "runner's counts whole blocks per sequence",
            beside="maxConcurrencyAtMaxModelLen",
        )
