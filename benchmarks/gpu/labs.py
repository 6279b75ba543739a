"""The two reference labs on the H200 through the project's runner (issue 13, items 2-4).

Runs ON the GPU host (no network), from the repository root of the device tool's work-tree
copy, with the host's Python after the offline wheels are installed:

    /opt/torch/.venv/bin/python3 benchmarks/gpu/labs.py PART [--work /root/gpu-work]

Parts (each writes WORK/results/PART.json, and is skipped when that file exists):
  lab1-before  TinyLlama: batching with the runner's old defaults (--max-rps 100, no warm-up)
  lab1         TinyLlama: capacity, batching (serial vs 32 concurrent, ladder to 64), prefix
               (cold vs warm, hit rate), streaming; --rounds 3
  vs-upstream  TinyLlama: the runner's concurrent phase against `vllm bench serve`, same
               prompts, interleaved rounds in one process (benchmarks/vs_vllm_rounds.py):
               output tokens/s and client CPU per request of each
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
import json
import os
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


def vs_upstream(work: Path) -> Any:
    """benchmarks/vs_vllm_rounds.py against the TinyLlama server: both tools in one process
    (vLLM imported once), the same prompts, interleaved rounds, and a third arm: `vllm bench
    serve` with its aiohttp session's trust_env off. Workloads (VS_UPSTREAM_WORKLOADS): the
    earlier one (128 at once, 64 out) and a longer one (512 out: fixed costs matter less);
    rounds: VS_UPSTREAM_ROUNDS (8)."""
    rounds = int(os.environ.get("VS_UPSTREAM_ROUNDS", "8"))
    workloads = os.environ.get("VS_UPSTREAM_WORKLOADS", "128x128x64 128x128x512").split()
    server = ensure_server(work, "tinyllama", 2048)
    tmp = work / "results" / "vs-upstream"  # vllm bench serve's own JSON per round come back
    out = work / "results" / "vs-upstream-rounds.json"
    cmd = [PY, str(REPO / "benchmarks" / "vs_vllm_rounds.py"), "--url", URL]
    cmd += ["--model", "tinyllama", "--tokenizer", str(work / "models" / "tinyllama")]
    cmd += ["--rounds", str(rounds), "--work", str(tmp), "--out", str(out)]
    cmd += ["--vllm-without-trust-env"]
    for w in workloads:
        cmd += ["--workload", w]
    log(f"vs-upstream: {shlex.join(cmd)}")
    env = {**os.environ, "PYTHONPATH": str(REPO / "operator")}
    tmp.mkdir(parents=True, exist_ok=True)
    # cwd: an empty folder, so that nothing there shadows a module vLLM imports
    subprocess.run(cmd, env=env, cwd=tmp, check=True)
    doc: dict[str, Any] = json.loads(out.read_text())
    return {"server": server, **doc, "labsCommand": shlex.join(cmd)}


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
    parser.add_argument("part", choices=[*PARTS, "stop-server", "start-tinyllama"])
    parser.add_argument("--work", type=Path, default=Path("/root/gpu-work"))
    args = parser.parse_args()
    if args.part == "stop-server":
        stop_server(args.work)
        return 0
    if args.part == "start-tinyllama":  # in one device call, so that a part's call has it up
        ensure_server(args.work, "tinyllama", 2048)
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
