"""The two reference labs on the H200 through the project's runner (issue 13, items 2-4).

Runs ON the GPU host (no network), from the repository root of the device tool's work-tree
copy, with the host's Python after the offline wheels are installed:

    /opt/torch/.venv/bin/python3 benchmarks/gpu/labs.py PART [--work /root/gpu-work]

Parts (each writes WORK/results/PART.json, and is skipped when that file exists):
  lab1-before  TinyLlama: batching with the runner's old defaults (--max-rps 100, no warm-up)
  lab1         TinyLlama: capacity, batching (serial vs 32 concurrent, ladder to 64), prefix
               (cold vs warm, hit rate), streaming; --rounds 3
  vs-upstream  TinyLlama: the runner's concurrent phase against `vllm bench serve`, same
               workload, interleaved rounds: output tokens/s and client CPU per request
  lab2-naive   Llama-3-8B: transformers generate(), one request at a time (no server up)
  lab2         Llama-3-8B fp16, max_model_len 2048: capacity, batching (serial vs 10
               concurrent, ladder to 32), streaming TTFT/TPOT; --rounds 3
  lab2-512     the same server settings with max_model_len 512: capacity and throughput

One vLLM server runs at a time, started in its own session (setsid) so that it outlives the
device call that started it; a later part reuses it when it serves the same model with the
same settings, otherwise it is stopped and replaced. Server logs: WORK/logs/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "operator"))

PY = sys.executable
PORT = 8000
URL = f"http://127.0.0.1:{PORT}"
# the lab settings (GPU.md): block 16, 0.85 of the GPU, at most 256 sequences, fp16
LAB_SERVER = {
    "--dtype": "float16",
    "--gpu-memory-utilization": "0.85",
    "--block-size": "16",
    "--max-num-seqs": "256",
}
VLLM_BENCH_SERVE = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "try:\n"
    "    from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "except ImportError:  # older vLLM\n"
    "    from vllm.utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- the one vLLM server -----------------------------------------------------------------


def _get(path: str, timeout: float = 2.0) -> bytes | None:
    try:
        with urllib.request.urlopen(URL + path, timeout=timeout) as r:
            body: bytes = r.read()
            return body
    except OSError:
        return None


def stop_server(work: Path) -> None:
    state = work / "server.json"
    if not state.exists():
        return
    pid = json.loads(state.read_text())["pid"]
    try:
        os.killpg(pid, signal.SIGTERM)  # the server's own session: it and its workers
        for _ in range(60):
            os.killpg(pid, 0)
            time.sleep(1)
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    state.unlink()
    time.sleep(3)  # let the driver hand the GPU memory back


def ensure_server(work: Path, name: str, max_model_len: int) -> dict[str, Any]:
    model_dir = work / "models" / name
    args = ["--model", str(model_dir), "--served-model-name", name, "--port", str(PORT)]
    args += ["--max-model-len", str(max_model_len)]
    for flag, value in LAB_SERVER.items():
        args += [flag, value]
    state = work / "server.json"
    if state.exists():
        running = json.loads(state.read_text())
        if running["args"] == args and _get("/health") is not None:
            log(f"reusing the running server ({name}, max_model_len {max_model_len})")
            return dict(running)
        stop_server(work)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    log_path = work / "logs" / f"vllm-{name}-{max_model_len}.log"
    cmd = [PY, "-m", "vllm.entrypoints.openai.api_server", *args]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}  # POST /reset_prefix_cache for prefix
    log(f"starting: {shlex.join(cmd)}")
    t0 = time.monotonic()
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=work
        )
    info = {"pid": proc.pid, "args": args, "command": shlex.join(cmd), "log": str(log_path)}
    state.write_text(json.dumps(info))
    while _get("/health") is None:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").splitlines()[-40:]
            state.unlink()
            raise SystemExit("the vLLM server exited:\n" + "\n".join(tail))
        if time.monotonic() - t0 > 480:
            raise SystemExit(f"the vLLM server did not answer /health in 480 s ({log_path})")
        time.sleep(2)
    info["startSeconds"] = round(time.monotonic() - t0, 1)
    version = _get("/version")
    info["serverVersion"] = json.loads(version)["version"] if version else None
    state.write_text(json.dumps(info))
    log(f"server up in {info['startSeconds']} s")
    return info


# --- parts -----------------------------------------------------------------------------


def run_runner(work: Path, part: str, name: str, extra: list[str]) -> dict[str, Any]:
    out = work / "results" / part
    cmd = [PY, "-m", "vllm_bench.cli", "run", "--url", URL, "--model", name, "--out", str(out)]
    cmd += ["--timeout-seconds", "120", *extra]
    log(f"runner: {shlex.join(cmd)}")
    env = {**os.environ, "PYTHONPATH": str(REPO / "operator")}
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, check=False)
    doc: dict[str, Any] = json.loads((out / "result.json").read_text())
    doc["_gpu"] = {
        "command": shlex.join(cmd),
        "exitCode": proc.returncode,
        "wallSeconds": round(time.monotonic() - t0, 1),
    }
    return doc


def lab1_before(work: Path) -> dict[str, Any]:
    server = ensure_server(work, "tinyllama", 2048)
    doc = run_runner(
        work,
        "lab1-before",
        "tinyllama",
        [
            "--scenarios",
            "batching",
            "--max-rps",
            "100",
            "--warmup-requests",
            "0",
            "--requests",
            "32",
            "--max-concurrency",
            "32",
            "--output-tokens",
            "128",
        ],
    )
    return {"server": server, "runner": doc}


def lab1(work: Path) -> dict[str, Any]:
    server = ensure_server(work, "tinyllama", 2048)
    doc = run_runner(
        work,
        "lab1",
        "tinyllama",
        [
            "--scenarios",
            "capacity,batching,prefix,streaming",
            "--rounds",
            "3",
            "--requests",
            "32",
            "--max-concurrency",
            "64",
            "--output-tokens",
            "128",
            "--streaming-requests",
            "16",
            "--max-duration-seconds",
            "420",
        ],
    )
    return {"server": server, "runner": doc}


def lab2_naive(work: Path) -> dict[str, Any]:
    stop_server(work)  # transformers needs the GPU memory a server holds
    from vllm_bench.workload import PromptFactory  # noqa: PLC0415 - after sys.path is set

    prompts = PromptFactory(7, tokens_per_word=1.3)
    texts = [prompts.prompt(128) for _ in range(5)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "operator")}
    cmd = [PY, "-m", "vllm_bench.naive", "--model-dir", str(work / "models" / "llama3-8b")]
    cmd += ["--max-new-tokens", "128", "--device", "cuda"]
    log(f"naive: {shlex.join(cmd)}")
    proc = subprocess.run(
        cmd, input=json.dumps(texts), capture_output=True, text=True, env=env, check=True
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    # the first request pays for CUDA kernels' first launch: a warm-up, left out
    measured = result["samples"][1:]
    rates = [s["outputTokens"] / s["latencySeconds"] for s in measured]
    result["command"] = shlex.join(cmd)
    result["warmupDiscarded"] = 1
    result["outputTokensPerSecond"] = statistics.median(rates)
    result["spread"] = {"min": min(rates), "median": statistics.median(rates), "max": max(rates)}
    return result


def lab2(work: Path) -> dict[str, Any]:
    server = ensure_server(work, "llama3-8b", 2048)
    doc = run_runner(
        work,
        "lab2",
        "llama3-8b",
        [
            "--scenarios",
            "capacity,batching,streaming",
            "--rounds",
            "3",
            "--requests",
            "10",
            "--max-concurrency",
            "32",
            "--output-tokens",
            "128",
            "--streaming-requests",
            "10",
            "--max-duration-seconds",
            "420",
        ],
    )
    return {"server": server, "runner": doc}


def lab2_512(work: Path) -> dict[str, Any]:
    server = ensure_server(work, "llama3-8b", 512)
    doc = run_runner(
        work,
        "lab2-512",
        "llama3-8b",
        [
            "--scenarios",
            "capacity,batching",
            "--rounds",
            "2",
            "--requests",
            "10",
            "--max-concurrency",
            "32",
            "--output-tokens",
            "128",
            "--max-duration-seconds",
            "300",
        ],
    )
    stop_server(work)
    return {"server": server, "runner": doc}


async def _runner_concurrent(n: int, input_tokens: int, output_tokens: int, seed: int) -> Any:
    """The runner's concurrent phase alone (batching's code path: run_requests), so that a
    round is as long as one `vllm bench serve` round."""
    from vllm_bench.client import Budget, OpenAIClient, Request  # noqa: PLC0415
    from vllm_bench.scenarios.base import (  # noqa: PLC0415
        BenchConfig,
        Context,
        NoProgress,
        ScenarioResult,
        run_requests,
    )
    from vllm_bench.workload import SAMPLE_WORDS, PromptFactory  # noqa: PLC0415

    config = BenchConfig(url=URL, model="tinyllama", scenarios=("batching",), out="")
    async with OpenAIClient(URL, "tinyllama", Budget(300), max_connections=n + 8) as client:
        prompts = PromptFactory(seed)
        tokens = await client.count_tokens(prompts.calibration_text())
        if tokens:
            prompts.tokens_per_word = tokens / SAMPLE_WORDS
        ctx = Context(client, config, prompts, NoProgress(), None, {})
        requests = [
            Request(max_tokens=output_tokens, prompt=prompts.prompt(input_tokens)) for _ in range(n)
        ]
        cpu0 = time.process_time()
        phase = await run_requests(ctx, requests, n, ScenarioResult(), "concurrent")
        cpu = time.process_time() - cpu0
    return phase, cpu, prompts.tokens_per_word, [r.prompt for r in requests]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def vs_upstream(work: Path, rounds: int = 4, n: int = 128, inp: int = 128, out: int = 64) -> Any:
    server = ensure_server(work, "tinyllama", 2048)
    tmp = work / "vs-upstream"
    tmp.mkdir(exist_ok=True)
    base = [PY, "-c", VLLM_BENCH_SERVE]
    cpu0 = _children_cpu()  # what importing vllm.benchmarks costs, to subtract
    subprocess.run([*base, "--help"], capture_output=True, check=False, cwd=tmp)
    import_cpu = _children_cpu() - cpu0
    rows = []
    for i in range(rounds):
        order = ("runner", "vllm") if i % 2 == 0 else ("vllm", "runner")
        row: dict[str, Any] = {"round": i + 1, "order": list(order)}
        for tool in order:
            if tool == "runner":
                phase, cpu, tpw, _ = asyncio.run(_runner_concurrent(n, inp, out, 1000 + i))
                row["runnerOutputTokensPerSecond"] = phase.output_tokens_per_second
                row["runnerCpuMsPerRequest"] = 1000 * cpu / n
                row["runnerPeakInFlight"] = phase.peak_in_flight
                row["tokensPerWord"] = tpw
            else:
                from vllm_bench.workload import PromptFactory  # noqa: PLC0415

                factory = PromptFactory(2000 + i, tokens_per_word=row.get("tokensPerWord", 1.3))
                data = [
                    {"conversations": [{"from": "human", "value": factory.prompt(inp)},
                                       {"from": "gpt", "value": "unused"}]}
                    for _ in range(n)
                ]  # fmt: skip
                (tmp / f"prompts-{i}.json").write_text(json.dumps(data))
                cmd = [*base, "--backend", "openai", "--endpoint", "/v1/completions"]
                cmd += ["--base-url", URL, "--model", "tinyllama"]
                cmd += ["--tokenizer", str(work / "models" / "tinyllama")]
                cmd += ["--dataset-name", "sharegpt", "--dataset-path", f"prompts-{i}.json"]
                cmd += ["--sharegpt-output-len", str(out), "--num-prompts", str(n)]
                cmd += ["--max-concurrency", str(n), "--request-rate", "inf", "--ignore-eos"]
                cmd += ["--temperature", "0", "--seed", str(i), "--disable-tqdm", "--save-result"]
                cmd += ["--result-dir", str(tmp), "--result-filename", f"vllm-{i}.json"]
                cpu0 = _children_cpu()
                proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=False)
                cpu = _children_cpu() - cpu0
                if proc.returncode:
                    raise SystemExit(f"vllm bench serve failed:\n{proc.stderr[-3000:]}")
                res = json.loads((tmp / f"vllm-{i}.json").read_text())
                row["vllmOutputTokensPerSecond"] = float(res["output_throughput"])
                row["vllmCompleted"] = res["completed"]
                row["vllmCpuMsPerRequestInclImport"] = 1000 * cpu / n
                row["vllmCpuMsPerRequest"] = 1000 * max(0.0, cpu - import_cpu) / n
                row["vllmCommand"] = shlex.join(cmd)
        log(f"vs-upstream round {i + 1}: {row}")
        rows.append(row)
    runner = statistics.median(r["runnerOutputTokensPerSecond"] for r in rows)
    vllm = statistics.median(r["vllmOutputTokensPerSecond"] for r in rows)
    return {
        "server": server,
        "workload": {"requestsAtOnce": n, "inputTokens": inp, "outputTokens": out},
        "rounds": rows,
        "vllmImportCpuSeconds": import_cpu,
        "runnerOutputTokensPerSecond": runner,
        "vllmOutputTokensPerSecond": vllm,
        "ratio": runner / vllm,
        "runnerCpuMsPerRequest": statistics.median(r["runnerCpuMsPerRequest"] for r in rows),
        "vllmCpuMsPerRequest": statistics.median(r["vllmCpuMsPerRequest"] for r in rows),
    }


PARTS = {
    "lab1-before": lab1_before,
    "lab1": lab1,
    "vs-upstream": vs_upstream,
    "lab2-naive": lab2_naive,
    "lab2": lab2,
    "lab2-512": lab2_512,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=[*PARTS, "stop-server"])
    parser.add_argument("--work", type=Path, default=Path("/root/gpu-work"))
    args = parser.parse_args()
    if args.part == "stop-server":
        stop_server(args.work)
        return 0
    target = args.work / "results" / f"{args.part}.json"
    if target.exists():
        log(f"{args.part}: done before ({target})")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    result = PARTS[args.part](args.work)
    result["part"] = args.part
    result["partSeconds"] = round(time.monotonic() - t0, 1)
    result["host"] = {"python": sys.version.split()[0], "executable": PY}
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str))
    tmp.replace(target)
    log(f"{args.part}: written {target} in {result['partSeconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
