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
import asyncio
import functools
import http.client
import json
import os
import re
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


# --- issue 34 items 1 and 4, issue 33 item 2: the rendered pod's start, sleep/wake, capacity --

RENDERED = REPO / "benchmarks" / "gpu" / "rendered-samples.json"
STAMP = REPO / "benchmarks" / "gpu" / "stamp_lines.py"
PROMPT = "The quick brown fox jumps over the lazy dog. Tell me a story about a river and a town"

# a figure of the operator's parser (observe/startup.py) against the client's own clock: the
# arrival of the log line where the phase starts and of the line that reports it
# (stamp_lines.py). serverSeconds ends where the operator's does: "Application startup
# complete"; it starts at the first stamped line (the operator's first line).
ANCHORS: dict[str, tuple[str, str]] = {
    "weightsSeconds": (r"Loading safetensors checkpoint shards:\s+0%", r"Loading weights took"),
    "modelLoadSeconds": (
        r"Loading model from scratch|Starting to load model",
        r"Model loading took",
    ),
    "compileSeconds": (r"Model loading took", r"torch\.compile took"),
    "graphCaptureSeconds": (r"Capturing CUDA graphs", r"Graph capturing finished"),
    "engineInitSeconds": (r"Model loading took", r"init engine \("),
    "serverSeconds": (
        r"\b(?:DEBUG|INFO|WARNING|ERROR)\s+\d\d-\d\d \d\d:\d\d:\d\d\b",
        r"Application startup complete",
    ),
}


def _operator_parser() -> Any:
    sys.path.insert(0, str(REPO / "operator"))  # vllm_operator (pure: pydantic only)
    from vllm_operator.observe import startup  # noqa: PLC0415 - after sys.path is set

    return startup


def _rendered_pod() -> Any:
    sys.path.insert(0, str(REPO / "benchmarks" / "gpu"))
    import rendered_pod  # noqa: PLC0415 - after sys.path is set

    return rendered_pod


def card() -> dict[str, Any]:
    q = "name,memory.total,driver_version"
    proc = subprocess.run(
        ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    return {"nvidiaSmi": proc.stdout.strip()}


def gpu_memory_mib() -> int | None:
    proc = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return int(proc.stdout.split()[0])
    except (IndexError, ValueError):
        return None


def _http(port: int, method: str, path: str, timeout: float = 120.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=b"" if method == "POST" else None)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def healthy(port: int) -> bool:
    try:
        return _http(port, "GET", "/health", timeout=1.0)[0] == 200
    except OSError:
        return False


def stream_completion(
    port: int, model: str, prompt: str = PROMPT, max_tokens: int = 32, timeout: float = 120.0
) -> dict[str, Any]:
    """One streamed /v1/completions request, greedy: when it was sent, when its first token
    came (the first chunk with a choice), when it ended (wall clock), and the text."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    body |= {"stream": True, "ignore_eos": True}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    sent = time.time()
    first: float | None = None
    pieces: list[str] = []
    try:
        conn.request(
            "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        r = conn.getresponse()
        if r.status != 200:
            return {
                "sentAt": sent,
                "status": r.status,
                "error": r.read()[:500].decode(errors="replace"),
            }
        while line := r.readline():
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            for choice in json.loads(data).get("choices") or []:
                if first is None:
                    first = time.time()
                pieces.append(choice.get("text") or "")
    finally:
        conn.close()
    done = time.time()
    return {
        "status": 200,
        "sentAt": round(sent, 3),
        "firstTokenAt": None if first is None else round(first, 3),
        "doneAt": round(done, 3),
        "ttftSeconds": None if first is None else round(first - sent, 4),
        "chunks": len(pieces),
        "text": "".join(pieces),
    }


def read_stamps(path: Path) -> list[tuple[float, str]]:
    out: list[tuple[float, str]] = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            stamp, _, text = line.partition("\t")
            try:
                out.append((float(stamp), text))
            except ValueError:
                continue
    return out


def client_figures(stamps: list[tuple[float, str]]) -> dict[str, dict[str, Any]]:
    """Per figure of ANCHORS: the seconds between the first line matching its start and the
    first line after it matching its end, on the client's clock, and the end line's text (the
    server's own figure is the number in it)."""
    out: dict[str, dict[str, Any]] = {}
    for key, (begin, end) in ANCHORS.items():
        b, e = re.compile(begin), re.compile(end)
        start = next((i for i, (_, text) in enumerate(stamps) if b.search(text)), None)
        if start is None:
            continue
        stop = next((i for i in range(start, len(stamps)) if e.search(stamps[i][1])), None)
        if stop is None:
            continue
        out[key] = {
            "seconds": round(stamps[stop][0] - stamps[start][0], 3),
            "from": stamps[start][1][:200],
            "to": stamps[stop][1][:300],
        }
    return out


def compare_start(
    log_path: Path, stamps_path: Path, t0: float, ready_at: float | None
) -> dict[str, Any]:
    """The operator's figures of one start (its parser on the log) beside the client's."""
    startup = _operator_parser()
    text = log_path.read_text(errors="replace")
    operator = startup.engine_figures(text[: startup.MAX_LOG_BYTES])
    stamps = read_stamps(stamps_path)
    client = client_figures(stamps)
    if ready_at is not None:
        # the pod's readySeconds: the container's start to the first /health 200
        client["readySeconds"] = {
            "seconds": round(ready_at - t0, 3),
            "from": "process start",
            "to": "first /health 200 (polled every 0.2 s)",
        }
    if stamps:
        client["firstLineSeconds"] = {
            "seconds": round(stamps[0][0] - t0, 3),
            "from": "process start",
            "to": stamps[0][1][:200],
        }
    rows = []
    for key in (
        "weightsSeconds",
        "modelLoadSeconds",
        "compileSeconds",
        "graphCaptureSeconds",
        "engineInitSeconds",
        "serverSeconds",
    ):
        mine, theirs = operator.get(key), (client.get(key) or {}).get("seconds")
        rows.append(
            {
                "figure": key,
                "operator": mine,
                "client": theirs,
                "ratio": round(mine / theirs, 3) if mine is not None and theirs else None,
                "serverLine": (client.get(key) or {}).get("to"),
            }
        )
    # what the operator's serverSeconds is held against in a pod: Ready (readySeconds)
    ready = (client.get("readySeconds") or {}).get("seconds")
    if operator.get("serverSeconds") is not None and ready:
        rows.append(
            {
                "figure": "serverSeconds vs ready",
                "operator": operator["serverSeconds"],
                "client": ready,
                "ratio": round(operator["serverSeconds"] / ready, 3),
                "serverLine": "process start -> first /health 200",
            }
        )
    return {"operator": operator, "client": client, "rows": rows}


def stop_pid_group(pid: int, grace: float = 30.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            os.killpg(pid, 0)
            time.sleep(0.5)
        os.killpg(pid, signal.SIGKILL)
        time.sleep(1)
    except ProcessLookupError:
        pass


def pod_server(  # noqa: PLR0917 - one start of a rendered sample, all its knobs
    work: Path,
    sample: str,
    model: str,
    tag: str,
    scratch: Path,
    extra_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    budget: float = 480.0,
) -> dict[str, Any]:
    """Start sample `sample`'s container as rendered (rendered_pod.pod_shell: uid 65532, no
    passwd entry, the rendered env incl. USER=vllm, emptyDirs under `scratch`), its output
    through stamp_lines.py; poll /health every 0.2 s; then one streamed request. The server is
    left running (WORK/server.json: stop_server stops it)."""
    stop_server(work)
    rp = _rendered_pod()
    s = json.loads(RENDERED.read_text())[sample]
    shell, record = rp.pod_shell(
        s, sample, str(work / "models" / model), [], scratch, extra_args, extra_env
    )
    args = record["args"]
    port = int(args[args.index("--port") + 1])
    served = args[args.index("--served-model-name") + 1]
    logs = work / "logs" / "startup"
    logs.mkdir(parents=True, exist_ok=True)
    log_path, stamps_path = logs / f"{sample}-{tag}.log", logs / f"{sample}-{tag}.stamps"
    for f in (log_path, stamps_path):
        f.unlink(missing_ok=True)
    stamper = shlex.join([PY, "-u", str(STAMP), str(log_path), str(stamps_path)])
    pipeline = f"{shell} 2>&1 | {stamper}"
    log(f"pod start {sample} ({tag}): {shlex.join(args)} extra env {extra_env or {}}")
    t0 = time.time()
    proc = subprocess.Popen(
        ["bash", "-c", pipeline],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        cwd="/",
    )
    info: dict[str, Any] = {
        "pid": proc.pid,
        "args": ["pod", sample, tag, *args],
        "port": port,
        "servedModelName": served,
        "log": str(log_path),
        "stamps": str(stamps_path),
        "processStartAt": round(t0, 3),
        "pod": {k: v for k, v in record.items() if k != "shell"},
    }
    (work / "server.json").write_text(json.dumps(info))
    ready_at: float | None = None
    while True:
        if healthy(port):
            ready_at = time.time()
            break
        if proc.poll() is not None:
            info["exitCode"] = proc.returncode
            break
        if time.time() - t0 > budget:
            info["timedOut"] = True
            break
        time.sleep(0.2)
    info["readyAt"] = None if ready_at is None else round(ready_at, 3)
    info["readySeconds"] = None if ready_at is None else round(ready_at - t0, 3)
    if ready_at is not None:
        first = stream_completion(port, served)
        info["firstRequest"] = first
        if first.get("firstTokenAt"):
            info["firstTokenSeconds"] = round(first["firstTokenAt"] - t0, 3)
    info["gpuMemoryMiB"] = gpu_memory_mib()
    (work / "server.json").write_text(json.dumps(info))
    log(
        f"pod {sample} ({tag}): ready in {info['readySeconds']} s, "
        f"first token at {info.get('firstTokenSeconds')} s"
    )
    if ready_at is None:
        tail = log_path.read_text(errors="replace").splitlines()[-30:] if log_path.exists() else []
        (work / "server.json").unlink(missing_ok=True)
        stop_pid_group(proc.pid, 5)
        raise SystemExit(f"the pod's server did not start ({info}):\n" + "\n".join(tail))
    return info


def _pod_scratch(work: Path, sample: str) -> Path:
    """A pod's emptyDirs: outside /root (the pod's HOME emptyDir covers /root in its mount
    namespace before the deeper emptyDirs are bound from here)."""
    del work
    return Path("/tmp/gpu-pods") / sample


def startup_anatomy(work: Path, sample: str, model: str, keep: bool) -> dict[str, Any]:
    """Issue 34 item 1: the rendered sample started twice as the pod does: cold (fresh
    emptyDirs: vLLM's, torch's and Triton's caches empty, the compile runs) and warm (the same
    emptyDirs again: a container restarted in its pod). Per start: the operator's parser on
    the log against the client's clock (each figure's own lines as they arrived; Ready: the
    first /health 200, polled every 0.2 s). `keep`: leave the warm server running."""
    stop_server(work)  # before its emptyDirs go: a server of an earlier try may hold them
    scratch = _pod_scratch(work, sample)
    if scratch.exists():
        subprocess.run(["rm", "-rf", str(scratch)], check=False)
    starts: dict[str, Any] = {}
    for tag in ("cold", "warm"):
        info = pod_server(work, sample, model, tag, scratch)
        time.sleep(1.0)  # the first request's lines
        info["anatomy"] = compare_start(
            Path(info["log"]), Path(info["stamps"]), info["processStartAt"], info["readyAt"]
        )
        starts[tag] = info
        for row in info["anatomy"]["rows"]:
            log(
                f"  {tag} {row['figure']}: operator {row['operator']} "
                f"client {row['client']} ratio {row['ratio']}"
            )
        if tag == "cold" or not keep:
            stop_server(work)
    return {"card": card(), "sample": sample, "model": model, "starts": starts}


def _post(port: int, path: str) -> dict[str, Any]:
    t = time.perf_counter()
    status, body = _http(port, "POST", path)
    return {
        "status": status,
        "seconds": round(time.perf_counter() - t, 4),
        "body": body[:200].decode(errors="replace"),
    }


def _is_sleeping(port: int) -> Any:
    status, body = _http(port, "GET", "/is_sleeping", timeout=10)
    return json.loads(body).get("is_sleeping") if status == 200 else f"HTTP {status}"


def sleep_wake(work: Path) -> dict[str, Any]:
    """Issue 34 item 4: the llama3-8b pod with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1
    (vLLM 0.26: POST /sleep?level=1, POST /wake_up, GET /is_sleeping). Its start to the first
    streamed token; then SLEEP_WAKE_CYCLES (5) times: sleep level 1 (the call's time, GPU
    memory before/after), wake_up and the first streamed token (from the wake call), the
    greedy answer against the one before the first sleep."""
    cycles = int(os.environ.get("SLEEP_WAKE_CYCLES", "5"))
    scratch = _pod_scratch(work, "llama3-8b")  # startup-anatomy's emptyDirs: a warm restart
    cold = not scratch.exists()
    info = pod_server(
        work, "llama3-8b", "llama3-8b", "sleep-mode", scratch,
        ("--enable-sleep-mode",), {"VLLM_SERVER_DEV_MODE": "1"},
    )  # fmt: skip
    port, served = info["port"], info["servedModelName"]
    reference = stream_completion(port, served)
    awake = [stream_completion(port, served) for _ in range(3)]
    rounds: list[dict[str, Any]] = []
    for i in range(cycles):
        r: dict[str, Any] = {"cycle": i + 1, "memoryBeforeSleepMiB": gpu_memory_mib()}
        r["sleep"] = _post(port, "/sleep?level=1")
        r["isSleepingAfterSleep"] = _is_sleeping(port)
        r["memoryAfterSleepMiB"] = gpu_memory_mib()
        time.sleep(1.0)
        r["memoryAsleep1sMiB"] = gpu_memory_mib()
        t_wake = time.time()
        r["wake"] = _post(port, "/wake_up")
        answer = stream_completion(port, served)
        r["answer"] = {k: v for k, v in answer.items() if k != "text"}
        r["wakeToFirstTokenSeconds"] = (
            round(answer["firstTokenAt"] - t_wake, 4) if answer.get("firstTokenAt") else None
        )
        r["sameGreedyAnswer"] = answer.get("text") == reference.get("text")
        # the server's first answer to PROMPT was prefilled in full, as every answer after a
        # wake is (sleep drops the KV cache); the reference was a prefix-cache hit, and on
        # random fp16 weights the two prefills' near-tied logits part after a few tokens
        # (2026-12-07: every wake matched the first answer, none the reference)
        r["sameAsFirstAnswer"] = answer.get("text") == info["firstRequest"].get("text")
        r["isSleepingAfterWake"] = _is_sleeping(port)
        r["memoryAfterWakeMiB"] = gpu_memory_mib()
        if not (r["sameGreedyAnswer"] and r["sameAsFirstAnswer"]):
            r["answerText"] = answer.get("text")
        rounds.append(r)
        log(
            f"  cycle {i + 1}: sleep {r['sleep']['seconds']} s, "
            f"{r['memoryBeforeSleepMiB']} -> {r['memoryAfterSleepMiB']} MiB; "
            f"wake {r['wake']['seconds']} s, first token {r['wakeToFirstTokenSeconds']} s "
            f"after it; same answer {r['sameGreedyAnswer']}"
        )
    stop_server(work)
    wakes = [
        r["wakeToFirstTokenSeconds"] for r in rounds if r["wakeToFirstTokenSeconds"] is not None
    ]
    start = info.get("firstTokenSeconds")
    summary = {
        "startToFirstTokenSeconds": start,
        "startWasCold": cold,
        "wakeToFirstTokenMedianSeconds": statistics.median(wakes) if wakes else None,
        "wakeToFirstTokenMaxSeconds": max(wakes) if wakes else None,
        "wakeCallMedianSeconds": statistics.median(r["wake"]["seconds"] for r in rounds)
        if rounds
        else None,
        "sleepCallMedianSeconds": statistics.median(r["sleep"]["seconds"] for r in rounds)
        if rounds
        else None,
        "awakeTtftMedianSeconds": statistics.median(
            a["ttftSeconds"] for a in awake if a.get("ttftSeconds") is not None
        ),
        "speedUp": round(start / statistics.median(wakes), 1) if start and wakes else None,
        "allAnswersSame": all(r["sameGreedyAnswer"] for r in rounds),
        "allAnswersSameAsFirst": all(r["sameAsFirstAnswer"] for r in rounds),
    }
    log(f"sleep-wake: {summary}")
    return {
        "card": card(),
        "server": info,
        "reference": reference,
        "awake": awake,
        "cycles": rounds,
        "summary": summary,
    }


async def _probe_levels(
    url: str, model: str, levels: list[int], output_tokens: int
) -> list[dict[str, Any]]:
    from vllm_bench.client import Budget, OpenAIClient, Request  # noqa: PLC0415
    from vllm_bench.stats import percentile  # noqa: PLC0415
    from vllm_bench.workload import PromptFactory  # noqa: PLC0415

    prompts = PromptFactory(seed=11)
    out: list[dict[str, Any]] = []
    async with OpenAIClient(url, model, Budget(600.0)) as client:
        for c in levels:
            gate = asyncio.Semaphore(c)

            async def one(gate: asyncio.Semaphore = gate) -> Any:
                request = Request(
                    max_tokens=output_tokens,
                    prompt=prompts.words(128),
                    ignore_eos=True,
                    temperature=0.0,
                )
                async with gate:
                    return await client.generate(request)

            done = (await asyncio.gather(*(one() for _ in range(3 * c))))[c:]
            ttft = percentile([d.ttft for d in done if d.ttft is not None], 95)
            tpot = percentile([d.tpot for d in done if d.tpot is not None], 95)
            out.append({"concurrency": c, "ttftP95": ttft, "tpotP95": tpot})
            log(f"  probe c={c}: ttft p95 {ttft} tpot p95 {tpot}")
    return out


def capacity_check(work: Path) -> dict[str, Any]:
    """Issue 33 item 2: benchmarks/capacity_sweep.py against the llama3-8b pod (as rendered,
    the warm server startup-anatomy left up, or a warm restart of it): the capacity the
    operator derives from the runner's ladder against a sweep of every concurrency. The
    objective is set from a short probe so that its knee lies inside the ladder: TPOT p95 =
    the probe's at CAPACITY_KNEE (96: between the ladder's 64 and 128), TTFT p95 loose
    (4x the probe's at 128, at least 0.5 s), so TPOT binds."""
    state = work / "server.json"
    info: dict[str, Any] | None = None
    if state.exists():
        running = json.loads(state.read_text())
        if (
            running["args"][:2] == ["pod", "llama3-8b"]
            and "--enable-sleep-mode" not in running["args"]
            and healthy(running["port"])
        ):
            info = running
            log("capacity-check: reusing the running llama3-8b pod")
    if info is None:
        info = pod_server(
            work, "llama3-8b", "llama3-8b", "capacity", _pod_scratch(work, "llama3-8b")
        )
    url = f"http://127.0.0.1:{info['port']}"
    model = info["servedModelName"]
    knee = int(os.environ.get("CAPACITY_KNEE", "96"))
    top = int(os.environ.get("CAPACITY_MAX", "128"))
    probe = asyncio.run(_probe_levels(url, model, sorted({16, 64, knee, top}), 32))
    at = {p["concurrency"]: p for p in probe}
    tpot = round(float(at[knee]["tpotP95"]), 5)
    ttft = round(max(0.5, 4 * float(at[top]["ttftP95"])), 3)
    out = work / "results" / "capacity-check" / "sweep.json"
    cmd = [PY, str(REPO / "benchmarks" / "capacity_sweep.py"), "--url", url, "--model", model]
    cmd += ["--ttft", str(ttft), "--tpot", str(tpot), "--percentile", "95"]
    cmd += ["--max-concurrency", str(top), "--out", str(out)]
    log(f"capacity-check: {shlex.join(cmd)}")
    t0 = time.monotonic()
    subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(RUNNER)}, check=True)
    doc: dict[str, Any] = json.loads(out.read_text())
    return {
        "card": card(),
        "server": {k: info.get(k) for k in ("args", "port", "servedModelName", "readySeconds")},
        "probe": probe,
        "objectiveFrom": f"tpot p95 at c={knee} of the probe; ttft max(0.5, 4 x p95 at c={top})",
        "command": shlex.join(cmd),
        "sweepSeconds": round(time.monotonic() - t0, 1),
        **doc,
    }


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
    "startup-anatomy": functools.partial(
        startup_anatomy, sample="llama3-8b", model="llama3-8b", keep=True
    ),
    "capacity-check": capacity_check,
    "sleep-wake": sleep_wake,
    "startup-anatomy-tinyllama": functools.partial(
        startup_anatomy, sample="tinyllama", model="tinyllama", keep=False
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
