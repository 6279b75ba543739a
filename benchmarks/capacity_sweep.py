"""Is the capacity the operator derives honest? (issue 33, item 2; numbers, not assertions.)

Against one running vLLM server it
  1. runs the benchmark runner's batching scenario as a rollout does (its ladder: 1, 2, 4, ...
     up to --max-concurrency, TTFT/TPOT percentiles per level), and derives the capacity per
     pod for the objective with the operator's own code (vllm_operator.decide.capacity);
  2. sweeps every concurrency 1, 2, 3, ... up to --max-concurrency with the same workload
     (the same runner client and prompts; --requests-per-level x c requests per level, at
     least 8), and finds the highest concurrency at which the objective still holds;
  3. prints both, and the derived figure's error against the sweep (goal: within +-15%).

A level "holds" when both latencies at the objective's percentile are within it. The sweep's
capacity is the last level before the first one that breaks (a later level that holds again
by noise does not count), so both methods read the same way.

Usage (a vLLM server at URL serving MODEL; without --url, a CPU vLLM server of the tiny test
model is started here: `make vllm` first):
  .venv/bin/python benchmarks/capacity_sweep.py [--url http://127.0.0.1:8000 --model tiny] \
      --ttft 0.5 [--tpot 0.05] [--percentile 95] [--max-concurrency 16] \
      [--input-tokens 128] [--output-tokens 32] [--out benchmarks/results/capacity/x.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "operator"), str(ROOT / "runner")]

from vllm_bench.client import Budget, OpenAIClient, Request  # noqa: E402
from vllm_bench.stats import percentile  # noqa: E402
from vllm_bench.workload import PromptFactory  # noqa: E402
from vllm_operator.api.records import Capacity, Run  # noqa: E402
from vllm_operator.api.spec import ObjectiveSpec  # noqa: E402
from vllm_operator.decide import capacity  # noqa: E402


def objective_flags(args: argparse.Namespace) -> list[str]:
    """The objective, as the operator passes it (render/benchmark.runner_args): the ladder
    then refines between the levels it crosses between; --no-refine: the powers of two alone
    (what a runner without the objective measured, for the comparison)."""
    if args.no_refine:
        return []
    flags = [("--objective-ttft", args.ttft), ("--objective-tpot", args.tpot)]
    out = [x for flag, v in flags if v is not None for x in (flag, str(v))]
    return [*out, "--objective-percentile", str(args.percentile)]


def ladder_run(args: argparse.Namespace) -> dict[str, Any]:
    """The runner's batching scenario, as the benchmark Job runs it."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable, "-m", "vllm_bench", "run", "--url", args.url, "--model", args.model,
            "--scenarios", "batching", "--out", out, "--max-concurrency",
            str(args.max_concurrency), "--input-tokens", str(args.input_tokens),
            "--output-tokens", str(args.output_tokens), "--max-duration-seconds", "3000",
            *objective_flags(args),
        ]  # fmt: skip
        env = {"PYTHONPATH": str(ROOT / "runner")}
        subprocess.run(cmd, check=True, env={**os.environ, **env})
        return dict(json.loads((Path(out) / "result.json").read_text()))


async def sweep(args: argparse.Namespace, o: ObjectiveSpec) -> list[dict[str, Any]]:
    prompts = PromptFactory(seed=7)
    levels: list[dict[str, Any]] = []
    async with OpenAIClient(args.url, args.model, Budget(3000.0)) as client:
        for c in range(1, args.max_concurrency + 1):
            n = max(8, args.requests_per_level * c)
            gate = asyncio.Semaphore(c)

            async def one(gate: asyncio.Semaphore = gate) -> Any:
                request = Request(
                    max_tokens=args.output_tokens,
                    prompt=prompts.words(args.input_tokens),
                    ignore_eos=True,
                    temperature=0.0,
                )
                async with gate:
                    return await client.generate(request)

            started = time.perf_counter()
            done = await asyncio.gather(*(one() for _ in range(n)))
            wall = time.perf_counter() - started
            steady = done[c:]  # after the first wave, as the ladder reads its levels
            ttft = percentile([d.ttft for d in steady if d.ttft is not None], o.percentile)
            tpot = percentile([d.tpot for d in steady if d.tpot is not None], o.percentile)
            holds = (o.ttft_seconds is None or (ttft is not None and ttft <= o.ttft_seconds)) and (
                o.tpot_seconds is None or (tpot is not None and tpot <= o.tpot_seconds)
            )
            levels.append(
                {"concurrency": c, "requests": n, "ttft": ttft, "tpot": tpot, "holds": holds,
                 "requestsPerSecond": round(n / wall, 3)}
            )  # fmt: skip
            print(f"sweep c={c}: ttft p{o.percentile} {ttft:.4f} tpot {tpot} holds {holds}")
            if not holds and c >= 2 and not levels[-2]["holds"]:
                break  # two levels past the break: enough
    return levels


def measure(args: argparse.Namespace, o: ObjectiveSpec) -> tuple[dict[str, Any], list[Any]]:
    """The runner's ladder, then the sweep, against the same server."""
    return ladder_run(args), asyncio.run(sweep(args, o))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url")
    p.add_argument("--model", default="tiny")
    p.add_argument("--ttft", type=float)
    p.add_argument("--tpot", type=float)
    p.add_argument("--percentile", type=int, default=95, choices=(50, 90, 95, 99))
    p.add_argument("--max-concurrency", type=int, default=16)
    p.add_argument("--input-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--requests-per-level", type=int, default=3)
    p.add_argument("--no-refine", action="store_true", help="the ladder's powers of two alone")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    o = ObjectiveSpec.model_validate(
        {"ttftSeconds": args.ttft, "tpotSeconds": args.tpot, "percentile": args.percentile}
    )
    if args.url is None:
        sys.path.insert(0, str(ROOT / "localenv"))
        from vllm_localenv.vllm_server import VllmServer, tiny_model  # noqa: PLC0415

        server = VllmServer(model=tiny_model(), log_path=Path(tempfile.mkdtemp()) / "vllm.log")
        with server.running():
            args.url = server.url
            result, levels = measure(args, o)
    else:
        result, levels = measure(args, o)
    derived = capacity.derive(o, Run("rev", "run", "", "Complete", "{}", result))
    broken = next((lvl["concurrency"] for lvl in levels if not lvl["holds"]), None)
    swept = (broken - 1) if broken is not None else levels[-1]["concurrency"]
    out: dict[str, Any] = {
        "objective": o.model_dump(by_alias=True, exclude_none=True),
        "workload": {"inputTokens": args.input_tokens, "outputTokens": args.output_tokens},
        "ladder": result["scenarios"]["batching"]["summary"]["ladder"],
        "derived": derived.__dict__ if isinstance(derived, Capacity) else derived,
        "sweep": levels,
        "sweptCapacity": swept,
    }
    if isinstance(derived, Capacity) and swept:
        out["errorPercent"] = round(100 * (derived.concurrency_per_pod - swept) / swept, 1)
    text = json.dumps(out, indent=2, default=list)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(
        f"derived {getattr(derived, 'concurrency_per_pod', derived)} per pod; swept {swept}; "
        f"error {out.get('errorPercent')}%"
    )


if __name__ == "__main__":
    main()
