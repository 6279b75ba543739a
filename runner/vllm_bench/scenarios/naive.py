"""Scenario `naive` (optional, off by default): naive transformers generate() against vLLM.

The same prompts (about --input-tokens, exactly --output-tokens out) go once through
`python -m vllm_bench.naive` (one at a time, in the interpreter given by --naive-python, on
the weights in --naive-model-dir) and once to the vLLM server, all at once. The speed-up is
vLLM's output tokens/s over the naive one's (sum of tokens over sum of generate() times).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import vllm_bench
from vllm_bench.client import BenchError, Request
from vllm_bench.scenarios.base import Context, ScenarioResult, empty_counts, rounded, run_requests


async def run_naive(
    python: str, model_dir: str, prompts: list[str], new_tokens: int, timeout: float
) -> dict[str, Any]:
    """Runs the naive subprocess and returns its JSON document."""
    package_root = str(Path(vllm_bench.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    cmd = [
        python,
        "-m",
        "vllm_bench.naive",
        "--model-dir",
        model_dir,
        "--max-new-tokens",
        str(new_tokens),
    ]
    try:
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
    except OSError as exc:
        raise BenchError("naive", f"cannot start the naive baseline with {python}: {exc}") from exc
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(prompts).encode()), timeout)
    except TimeoutError as exc:
        proc.kill()
        await proc.wait()
        raise BenchError(
            "deadline", f"the naive baseline did not finish within {timeout:.0f}s"
        ) from exc
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-5:]
        raise BenchError(
            "naive",
            f"the naive baseline failed (exit {proc.returncode}; does {python} have torch and "
            f"transformers?): " + " | ".join(tail),
        )
    lines = out.decode(errors="replace").strip().splitlines()
    try:
        doc = json.loads(lines[-1])
    except (IndexError, ValueError) as exc:
        raise BenchError("naive", f"the naive baseline printed no result: {out[-300:]!r}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("samples"), list):
        raise BenchError("naive", f"the naive baseline's result has no samples: {lines[-1][:300]}")
    return doc


async def run(ctx: Context, result: ScenarioResult) -> None:
    cfg = ctx.config
    if not cfg.naive_model_dir:
        raise BenchError(
            "usage", "the naive scenario needs --naive-model-dir (the served model's weights)"
        )
    prompts = [ctx.prompts.prompt(cfg.input_tokens) for _ in range(cfg.naive_requests)]
    naive = await run_naive(
        cfg.naive_python or sys.executable,
        cfg.naive_model_dir,
        prompts,
        cfg.output_tokens,
        max(ctx.client.budget.remaining(), 1.0),
    )
    for i, sample in enumerate(naive["samples"]):
        result.samples.append({"phase": "naive", "index": i, **sample})
    naive_seconds = sum(s["latencySeconds"] for s in naive["samples"])
    naive_tokens = sum(s["outputTokens"] for s in naive["samples"])
    naive_tps = naive_tokens / naive_seconds if naive_seconds > 0 else 0.0
    result.summary.update(
        {
            "naiveOutputTokensPerSecond": rounded(naive_tps, 3),
            "naiveLoadSeconds": naive.get("loadSeconds"),
            "naiveDevice": naive.get("device"),
        }
    )
    vllm = await run_requests(
        ctx,
        [
            Request(max_tokens=cfg.output_tokens, prompt=p, temperature=cfg.temperature)
            for p in prompts
        ],
        len(prompts),
        result,
        "vllm",
    )
    result.summary["vllmOutputTokensPerSecond"] = rounded(vllm.output_tokens_per_second, 3)
    result.summary["speedup"] = (
        rounded(vllm.output_tokens_per_second / naive_tps, 3) if naive_tps > 0 else None
    )
    result.summary.update(empty_counts(result.samples))
