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
  lab1-engine  TinyLlama at lab 1's engine settings (1024, 0.5, eager, block 16, prefix
               caching) with its workload (--preset lab1): load time, KV capacity, batching
  lab2-naive-fp16  transformers in fp16 on lab 2's 5 naive prompts at 200 tokens, sequential
  lab2-lab     Llama-3-8B as lab 2 ran it: 2048 at 0.85, --preset lab2 (150 tokens)
  lab2-512-lab the same at max_model_len 512, 0.90, 100 tokens (--preset lab2-512)
  rendered-pod the operator's rendered tinyllama container as rendered (rendered_pod.py):
               this vLLM's parser on every sample, a control without the user-name env,
               then as rendered (uid 65532, no passwd entry), timed to /health

One vLLM server runs at a time, started in its own session (setsid) so that it outlives the
device call that started it; a later part reuses it when it serves the same model with the
same settings, otherwise it is stopped and replaced. Server logs: WORK/logs/.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
# the benchmark runner (vllm_bench) lives in runner/ since the three distributions (issue 20)
RUNNER = REPO / "runner"
sys.path.insert(0, str(RUNNER))

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


def ensure_server(
    work: Path,
    name: str,
    max_model_len: int,
    settings: dict[str, str] | None = None,
    flags: tuple[str, ...] = (),
) -> dict[str, Any]:
    """`settings`: flags with values that replace LAB_SERVER's; `flags`: switches added."""
    model_dir = work / "models" / name
    args = ["--model", str(model_dir), "--served-model-name", name, "--port", str(PORT)]
    args += ["--max-model-len", str(max_model_len)]
    for flag, value in {**LAB_SERVER, **(settings or {})}.items():
        args += [flag, value]
    args += list(flags)
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
    env = {**os.environ, "PYTHONPATH": str(RUNNER)}
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
    env = {**os.environ, "PYTHONPATH": str(RUNNER)}
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


# lab 1's engine settings (LLM(...) in its notebook): max_model_len 1024, 0.5 of the GPU,
# eager mode (no CUDA graphs), block 16, prefix caching
LAB1_ENGINE = {"--gpu-memory-utilization": "0.5"}
LAB1_FLAGS = ("--enforce-eager", "--enable-prefix-caching")
# lab 2's main run keeps LAB_SERVER's 0.85 (crds/samples/llama3-8b.yaml); its max_model_len
# 512 run asks for 0.90 of the GPU (crds/samples/llama3-8b-512.yaml)
LAB2_ENGINE = {"2048": {}, "512": {"--gpu-memory-utilization": "0.90"}}


def lab1_engine(work: Path) -> dict[str, Any]:
    """Lab 1 at its own engine settings with its own workload (--preset lab1): the engine's
    load time (the server's start to /health) and KV capacity at 1024 / 0.5 / eager."""
    server = ensure_server(work, "tinyllama", 1024, LAB1_ENGINE, LAB1_FLAGS)
    doc = run_runner(
        work,
        "lab1-engine",
        "tinyllama",
        [
            *("--preset", "lab1", "--scenarios", "capacity,batching,prefix,streaming"),
            *("--max-duration-seconds", "240"),
        ],
    )
    return {"server": server, "runner": doc}


def lab2_lab(work: Path, part: str, max_model_len: int, preset: str) -> dict[str, Any]:
    """Lab 2 as it ran: 0.85 of the GPU (0.90 at 512), its output lengths (--preset: 150
    tokens at 2048, 100 at 512), ten requests one at a time and ten at once, streaming."""
    server = ensure_server(work, "llama3-8b", max_model_len, LAB2_ENGINE[str(max_model_len)])
    doc = run_runner(
        work,
        part,
        "llama3-8b",
        [
            *("--preset", preset, "--scenarios", "capacity,batching,streaming"),
            *("--requests", "10", "--max-concurrency", "10", "--streaming-requests", "10"),
            *("--max-duration-seconds", "240"),
        ],
    )
    return {"server": server, "runner": doc}


def lab2_naive_fp16(work: Path) -> dict[str, Any]:
    """The naive baseline as the lab loads it (fp16) on lab 2's 5 naive prompts (its chat
    template applied) and 200 tokens, one request at a time: compared with vLLM's sequential
    run of the same prompts (lab2-lab's phase lab-sequential)."""
    stop_server(work)
    from vllm_bench.presets import PRESETS  # noqa: PLC0415 - after sys.path is set

    sequential = PRESETS["lab2"].baseline  # the lab's naive prompts at its sequential sampling
    assert sequential is not None
    # the first prompt once more in front: it pays for the first kernel launches, discarded
    texts = [sequential.prompts[0], *sequential.prompts]
    # the lab's naive loop applies the model's chat template to each prompt (one user turn,
    # the generation prompt added) before generate(); naive.py tokenizes what it is given
    model_dir = work / "models" / "llama3-8b"
    chat_template: Any = True
    try:
        from transformers import AutoTokenizer  # noqa: PLC0415 - the host's, not the runner's

        tok = AutoTokenizer.from_pretrained(str(model_dir))
        texts = [
            str(
                tok.apply_chat_template(
                    [{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True
                )
            )
            for t in texts
        ]
    except Exception as exc:  # noqa: BLE001 - measured without the template, and said so
        chat_template = f"not applied: {type(exc).__name__}: {exc}"
        log(f"naive: chat template {chat_template}")
    env = {**os.environ, "PYTHONPATH": str(RUNNER)}
    cmd = [PY, "-m", "vllm_bench.naive", "--model-dir", str(model_dir)]
    cmd += ["--max-new-tokens", str(sequential.sampling.max_tokens), "--device", "cuda"]
    cmd += ["--dtype", "float16"]
    log(f"naive: {shlex.join(cmd)}")
    proc = subprocess.run(
        cmd, input=json.dumps(texts), capture_output=True, text=True, env=env, check=True
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    measured = result["samples"][1:]  # the repeated first prompt: the warm-up
    rates = [s["outputTokens"] / s["latencySeconds"] for s in measured]
    result["command"] = shlex.join(cmd)
    result["warmupDiscarded"] = 1
    result["outputTokensPerSecond"] = statistics.median(rates)
    result["secondsPerRequest"] = statistics.median(s["latencySeconds"] for s in measured)
    result["chatTemplate"] = chat_template
    # naive.py decodes greedily with min_new_tokens = max_new_tokens; the lab samples at 0.7
    # and stops at EOS (random weights here never emit it, so the length is the same)
    result["sampling"] = "greedy, exactly max_new_tokens (vllm_bench.naive)"
    result["spread"] = {"min": min(rates), "median": statistics.median(rates), "max": max(rates)}
    return result


# what the operator adds to the vLLM container's env so that torch < 2.13 starts as a uid
# without a passwd entry (issue 19, item 1): left out of the control run
POD_USER_ENV = ("USER", "LOGNAME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def rendered_pod(work: Path) -> dict[str, Any]:
    """The tinyllama sample's rendered container (benchmarks/gpu/rendered-samples.json, made
    by `rendered_pod.py render`) as rendered, on this host's vLLM: every sample's args through
    this vLLM's parser; a control run without the user-name env (torch 2.11 here); the
    container as rendered, timed to /health and one completion."""
    stop_server(work)  # the GPU memory and port 8000
    script = REPO / "benchmarks" / "gpu" / "rendered_pod.py"
    rendered = REPO / "benchmarks" / "gpu" / "rendered-samples.json"
    out = work / "results" / "rendered-pod"
    out.mkdir(parents=True, exist_ok=True)
    model = str(work / "models" / "tinyllama")
    subprocess.run([PY, str(script), "parse", str(rendered), str(out / "parse.json")], check=True)
    control = [f"--without={name}" for name in POD_USER_ENV]
    runs = {
        "control": [*control, "--budget", "240"],
        "rendered": ["--budget", "420"],
    }
    for name, extra in runs.items():
        cmd = [
            PY,
            str(script),
            "start",
            str(rendered),
            "tinyllama",
            model,
            str(out / f"{name}.json"),
        ]
        log(f"rendered pod ({name}): {shlex.join(cmd + extra)}")
        subprocess.run([*cmd, *extra], check=True)
    return {name: json.loads((out / f"{name}.json").read_text()) for name in ("parse", *runs)}


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
    env = {**os.environ, "PYTHONPATH": str(RUNNER)}
    tmp.mkdir(parents=True, exist_ok=True)
    # cwd: an empty folder, so that nothing there shadows a module vLLM imports
    subprocess.run(cmd, env=env, cwd=tmp, check=True)
    doc: dict[str, Any] = json.loads(out.read_text())
    return {"server": server, **doc, "labsCommand": shlex.join(cmd)}


PARTS: dict[str, Callable[[Path], Any]] = {
    "lab1-before": lab1_before,
    "lab1": lab1,
    "vs-upstream": vs_upstream,
    "lab2-naive": lab2_naive,
    "lab2": lab2,
    "lab2-512": lab2_512,
    "lab1-engine": lab1_engine,
    "rendered-pod": rendered_pod,
    "lab2-naive-fp16": lab2_naive_fp16,
    "lab2-lab": functools.partial(lab2_lab, part="lab2-lab", max_model_len=2048, preset="lab2"),
    "lab2-512-lab": functools.partial(
        lab2_lab, part="lab2-512-lab", max_model_len=512, preset="lab2-512"
    ),
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
