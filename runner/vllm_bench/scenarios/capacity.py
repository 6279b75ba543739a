"""Scenario `capacity`: how many tokens the KV cache holds and how many sequences fit.

KV-cache capacity in tokens is num_gpu_blocks x block_size, both read from the server's
vllm:cache_config_info; a sequence of L tokens needs ceil(L / block_size) blocks, so at most
floor(num_gpu_blocks / ceil(L / block_size)) such sequences are in flight at once (at L =
max_model_len and at the batching scenario's request size). The first request's latency is
measured too: run right after a rollout, it is the first request after the server became
ready.
"""

from __future__ import annotations

import math
import time

from vllm_bench.client import BenchError
from vllm_bench.metrics import CACHE_CONFIG_INFO
from vllm_bench.scenarios.base import Context, ScenarioResult, rounded, sample_record


def max_sequences(num_blocks: int, block_size: int, tokens_per_sequence: int) -> int:
    """How many sequences of this many tokens fit in the KV cache at once."""
    return num_blocks // math.ceil(tokens_per_sequence / block_size)


async def run(ctx: Context, result: ScenarioResult) -> None:
    cfg = ctx.config
    started = time.perf_counter()
    preset = ctx.preset
    prompt = preset.first_prompt if preset else ctx.prompts.prompt(cfg.input_tokens)
    first = await ctx.client.generate(ctx.request(prompt=prompt))
    result.samples.append(sample_record(first, "first-request", 0, started))
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
    request_tokens = first.prompt_tokens + cfg.output_tokens
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
