"""The runner against `vllm bench serve`: interleaved rounds in ONE Python process (numbers,
not assertions; issue 13 item 4).

Run with a Python that has vLLM installed and the runner on its path:

    PYTHONPATH=operator python benchmarks/vs_vllm_rounds.py --url URL --model NAME \
        --tokenizer MODEL_DIR [--workload 128x128x64 ...] [--rounds 4] [--out result.json]
        [--work DIR]

(--workload REQUESTSxINPUTxOUTPUT: requests sent at once, tokens in and out of each;
repeatable: the workloads run one after another in the same process.)

(benchmarks/bench_vs_vllm.py runs it against a local CPU server; benchmarks/gpu/labs.py
`vs-upstream` on the GPU host.)

What makes the two figures comparable:
  * the same workload: in each round both tools send the SAME prompts (the
    runner's English-word prompts, sized once with the server's /tokenize; `vllm bench
    serve` reads them from a ShareGPT-format file), all at once (`--max-concurrency` =
    `--num-prompts`, `--request-rate inf`), a fixed output length with ignore_eos, greedy;
    the server's prefix cache is reset (POST /reset_prefix_cache, VLLM_SERVER_DEV_MODE=1)
    before each tool, so both meet an empty cache; neither sends anything first (`vllm bench
    serve` skips its ready check by default, --ready-check-timeout-sec 0) and each opens its
    own connections (a new aiohttp session) inside its clock; the server's own counters
    (prompt, generation, prefix-cache-hit tokens) are read around each tool and recorded, as
    the evidence that the work was the same;
  * the same definition: both report output tokens / wall seconds, where the output tokens
    are the server's `usage.completion_tokens` summed over the requests and the wall clock
    runs from just before the first request is created to the completion of the last
    (the runner: `run_requests`, the batching scenario's concurrent phase; `vllm bench
    serve`: `benchmark_duration` and `output_throughput` in its result);
  * the same process, Python and aiohttp: `vllm bench serve` is called here through
    `vllm.benchmarks.serve.main` (what `vllm bench serve` runs), imported once up front, so
    its ~28 s import is paid once and is not part of any measurement;
  * the client CPU per request of both tools is time.process_time() (the whole process, all
    threads) over the same window: for the runner around its phase, for `vllm bench serve`
    from its first request's creation (its `get_request` generator starting) to its last
    request's completion (a wrapper around its request function); both divided by the
    requests. CPU / wall says how busy each client's one event loop was: near 1.0 the
    client, not the server, sets the pace of what it measures.

--vllm-without-trust-env adds a third arm: `vllm bench serve` with its aiohttp session's
trust_env off (it opens it with trust_env=True, and aiohttp then runs a ~/.netrc and a proxy
lookup in its thread pool before sending each request; on the H200 that delayed 128 requests
sent at once by ~36 ms and cost it 10-17% of its measured throughput: see
benchmarks/gpu/results/REPORT.md).

The order of the tools rotates per round. Prints one line per round, medians and the
ratio; --out keeps everything (per-round JSON of `vllm bench serve` too, under --work).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import statistics
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from vllm_bench.client import Budget, OpenAIClient, Request
from vllm_bench.metrics import parse_metrics
from vllm_bench.scenarios.base import (
    BenchConfig,
    Context,
    NoProgress,
    ScenarioResult,
    run_requests,
)
from vllm_bench.stats import peak_overlap, percentile
from vllm_bench.workload import SAMPLE_WORDS, PromptFactory

NO_TRUST = "vllmNoTrustEnv"  # the third arm's key in a round
SERVER_COUNTERS = {
    "promptTokens": "vllm:prompt_tokens",
    "generationTokens": "vllm:generation_tokens",
    "prefixCacheHitTokens": "vllm:prefix_cache_hits",
    "prefixCacheQueryTokens": "vllm:prefix_cache_queries",
    "preemptions": "vllm:num_preemptions",
    # the server's own per-request clock (from its arrival to its finish; the sum over the
    # requests): a client that lags behind its streams measures longer latencies than these
    "e2eSecondsSum": "vllm:e2e_request_latency_seconds_sum",
    "e2eCount": "vllm:e2e_request_latency_seconds_count",
    "ttftSecondsSum": "vllm:time_to_first_token_seconds_sum",
}


# --- `vllm bench serve`, in this process, with a CPU window around its benchmark ----------


class Window:
    """The main run of one `vllm bench serve` call: CPU and wall clock at its start and at
    its last completion, and each request's (start, end) for the peak in flight."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.cpu0: float | None = None
        self.wall0: float | None = None
        self.cpu1: float | None = None
        self.wall1: float | None = None
        self.spans: list[tuple[float, float]] = []


WINDOW = Window()


class AiohttpTrustEnvSwitch:
    """Stands in for the aiohttp module inside vllm.benchmarks.serve, which opens its session
    with trust_env=True: then aiohttp (3.14) sends every request only after two thread-pool
    round trips (a ~/.netrc lookup and the proxy environment). With `off` set, that session
    gets trust_env=False (the runner's setting), the one difference of the third arm."""

    off = False

    def __getattr__(self, name: str) -> Any:
        return getattr(aiohttp, name)

    def ClientSession(self, *args: Any, **kwargs: Any) -> aiohttp.ClientSession:  # noqa: N802
        if self.off:
            kwargs["trust_env"] = False
        return aiohttp.ClientSession(*args, **kwargs)


TRUST_ENV = AiohttpTrustEnvSwitch()


@dataclass(frozen=True)
class Upstream:
    """vllm.benchmarks.serve (instrumented) and a parser of its arguments."""

    serve: Any
    parser: Any


def import_vllm_bench_serve() -> Upstream:
    """vllm.benchmarks.serve, instrumented (WINDOW), and a parser of its arguments."""
    t0 = time.perf_counter()
    # only a Python with vLLM has these (not the project's venv, which type-checks this file)
    from vllm.benchmarks import serve  # type: ignore[import-not-found]  # noqa: PLC0415

    try:
        from vllm.utils.argparse_utils import (  # type: ignore[import-not-found]  # noqa: PLC0415
            FlexibleArgumentParser,
        )
    except ImportError:  # older vLLM
        from vllm.utils import (  # type: ignore[import-not-found,unused-ignore]  # noqa: PLC0415
            FlexibleArgumentParser,
        )

    print(f"imported vllm.benchmarks.serve in {time.perf_counter() - t0:.1f} s", flush=True)
    original_get_request = serve.get_request

    async def get_request(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        # called right after `benchmark_start_time = time.perf_counter()`: the main run starts
        WINDOW.cpu0, WINDOW.wall0 = time.process_time(), time.perf_counter()
        async for item in original_get_request(*args, **kwargs):
            yield item

    original_request = serve.ASYNC_REQUEST_FUNCS["openai"]

    async def request_func(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = await original_request(*args, **kwargs)
        if WINDOW.wall0 is not None:  # not the ready check before the main run
            WINDOW.cpu1, WINDOW.wall1 = time.process_time(), time.perf_counter()
            WINDOW.spans.append((t0, WINDOW.wall1))
        return out

    serve.get_request = get_request
    serve.aiohttp = TRUST_ENV
    serve.ASYNC_REQUEST_FUNCS["openai"] = request_func
    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    return Upstream(serve, parser)


@dataclass(frozen=True)
class Workload:
    """`requests` prompts of about `input_tokens`, sent at once, `output_tokens` out each."""

    requests: int
    input_tokens: int
    output_tokens: int

    @property
    def tag(self) -> str:
        return f"{self.requests}x{self.input_tokens}x{self.output_tokens}"


def vllm_tool(
    up: Upstream, args: argparse.Namespace, w: Workload, dataset: Path, i: int, *, trust_env: bool
) -> dict[str, Any]:
    result_name = f"vllm-{w.tag}-{i}{'' if trust_env else '-no-trust-env'}.json"
    argv = [
        "--backend", "openai", "--endpoint", "/v1/completions", "--base-url", args.url,
        "--model", args.model, "--tokenizer", args.tokenizer,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset),
        "--sharegpt-output-len", str(w.output_tokens),
        "--num-prompts", str(w.requests), "--max-concurrency", str(w.requests),
        "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--seed", str(i),
        "--disable-tqdm", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--save-result", "--result-dir", str(args.work), "--result-filename", result_name,
    ]  # fmt: skip
    WINDOW.reset()
    TRUST_ENV.off = not trust_env
    gc.collect()
    try:
        up.serve.main(up.parser.parse_args(argv))
    finally:
        TRUST_ENV.off = False
    doc = json.loads((args.work / result_name).read_text())
    if WINDOW.cpu0 is None or WINDOW.cpu1 is None or WINDOW.wall1 is None:
        raise SystemExit("vllm bench serve: the CPU window was not recorded (another version?)")
    cpu = WINDOW.cpu1 - WINDOW.cpu0
    wall = WINDOW.wall1 - (WINDOW.wall0 or 0.0)
    return {
        "outputTokensPerSecond": float(doc["output_throughput"]),
        "durationSeconds": doc["duration"],
        "completed": doc["completed"],
        "totalInputTokens": doc["total_input_tokens"],
        "totalOutputTokens": doc["total_output_tokens"],
        "ttftP50Seconds": doc["median_ttft_ms"] / 1000,
        "ttftMeanSeconds": doc["mean_ttft_ms"] / 1000,
        "e2eMeanSeconds": doc.get("mean_e2el_ms", float("nan")) / 1000,
        "tpotP50Seconds": doc["median_tpot_ms"] / 1000,
        "peakInFlight": peak_overlap(WINDOW.spans),
        "clientCpuSeconds": cpu,
        "clientCpuMsPerRequest": 1000 * cpu / w.requests,
        "clientCpuPerWallSecond": cpu / wall if wall > 0 else None,
        "argv": ["vllm", "bench", "serve", *argv],
        "aiohttpTrustEnv": trust_env,
        "resultFile": result_name,
    }


# --- the runner: its concurrent phase (batching's code path) -----------------------------


async def runner_tool(args: argparse.Namespace, w: Workload, prompts: list[str]) -> dict[str, Any]:
    config = BenchConfig(url=args.url, model=args.model, scenarios=("batching",), out="")
    # the connection pool as the runner's CLI sizes it (runner.py: concurrency + 8)
    async with OpenAIClient(
        args.url, args.model, Budget(600), max_connections=w.requests + 8
    ) as client:
        ctx = Context(client, config, PromptFactory(0), NoProgress(), None, {})
        requests = [Request(max_tokens=w.output_tokens, prompt=p) for p in prompts]
        gc.collect()
        cpu0 = time.process_time()
        phase = await run_requests(ctx, requests, len(requests), ScenarioResult(), "concurrent")
        cpu = time.process_time() - cpu0
    tpots = [c.tpot for c in phase.completions if c.tpot is not None]
    return {
        "outputTokensPerSecond": phase.output_tokens_per_second,
        "durationSeconds": phase.wall_seconds,
        "completed": len(phase.completions),
        "totalInputTokens": sum(c.prompt_tokens for c in phase.completions),
        "totalOutputTokens": phase.output_tokens,
        "ttftP50Seconds": phase.ttft(50),
        "ttftMeanSeconds": statistics.mean(c.ttft for c in phase.completions if c.ttft is not None),
        "e2eMeanSeconds": statistics.mean(c.latency for c in phase.completions),
        "tpotP50Seconds": percentile(tpots, 50),
        "peakInFlight": phase.peak_in_flight,
        "clientCpuSeconds": cpu,
        "clientCpuMsPerRequest": 1000 * cpu / len(requests),
        "clientCpuPerWallSecond": cpu / phase.wall_seconds if phase.wall_seconds > 0 else None,
    }


def run_runner(args: argparse.Namespace, w: Workload, prompts: list[str]) -> dict[str, Any]:
    return asyncio.run(runner_tool(args, w, prompts))


# --- the server's side -------------------------------------------------------------------


def server_counters(url: str, model: str) -> dict[str, float | None]:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    snap = parse_metrics(text, model=model)  # whole: histograms' _sum/_count lines too
    return {key: snap.counter(name) for key, name in SERVER_COUNTERS.items()}


def reset_prefix_cache(url: str) -> bool:
    request = urllib.request.Request(url + "/reset_prefix_cache", method="POST", data=b"")
    with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=30) as r:
        return bool(r.status == 200)
    return False


def counted(url: str, model: str, run: Any) -> dict[str, Any]:
    """Runs one tool between two reads of the server's counters (and a prefix-cache reset
    before): what the server did for it, ready check included."""
    reset = reset_prefix_cache(url)
    before = server_counters(url, model)
    out: dict[str, Any] = run()
    after = server_counters(url, model)
    out["prefixCacheReset"] = reset
    server: dict[str, float | None] = {}
    for key in SERVER_COUNTERS:
        a, b = before[key], after[key]
        server[key] = None if a is None or b is None else b - a
    out["server"] = server
    return out


# --- rounds ------------------------------------------------------------------------------


async def tokens_per_word(args: argparse.Namespace) -> float:
    async with OpenAIClient(args.url, args.model, Budget(60)) as client:
        factory = PromptFactory(0)
        tokens = await client.count_tokens(factory.calibration_text())
    return tokens / SAMPLE_WORDS if tokens else factory.tokens_per_word


def sharegpt_file(path: Path, prompts: list[str]) -> None:
    """The prompts in the ShareGPT format `vllm bench serve` reads (its `custom` format needs
    pandas); the answer turn is unused: --sharegpt-output-len sets the length."""
    turns = [
        {"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "unused"}]}
        for p in prompts
    ]
    path.write_text(json.dumps(turns))


def rounds(
    args: argparse.Namespace, up: Upstream, w: Workload, tpw: float, seed: int
) -> dict[str, Any]:
    print(
        f"server {args.url}; {w.requests} requests at once, ~{w.input_tokens} tokens in "
        f"({tpw:.3f} tokens per word), {w.output_tokens} out (ignore_eos); "
        f"{args.rounds} rounds, alternating",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    for i in range(args.rounds):
        factory = PromptFactory(seed + i, tokens_per_word=tpw)
        prompts = [factory.prompt(w.input_tokens) for _ in range(w.requests)]
        dataset = args.work / f"prompts-{w.tag}-{i}.json"
        sharegpt_file(dataset, prompts)
        tools = {
            "runner": functools.partial(run_runner, args, w, prompts),
            "vllm": functools.partial(vllm_tool, up, args, w, dataset, i, trust_env=True),
        }
        if args.vllm_without_trust_env:
            tools[NO_TRUST] = functools.partial(vllm_tool, up, args, w, dataset, i, trust_env=False)
        names = list(tools)
        order = names[i % len(names) :] + names[: i % len(names)]  # each goes first in turn
        row: dict[str, Any] = {"round": i + 1, "order": order}
        for tool in order:
            row[tool] = counted(args.url, args.model, tools[tool])
        row["ratio"] = row["runner"]["outputTokensPerSecond"] / row["vllm"]["outputTokensPerSecond"]
        if NO_TRUST in row:
            row["ratioNoTrustEnv"] = (
                row["runner"]["outputTokensPerSecond"] / row[NO_TRUST]["outputTokensPerSecond"]
            )
        rows.append(row)
        r, v = row["runner"], row["vllm"]
        print(
            f"round {i + 1} ({' then '.join(order)}): runner {r['outputTokensPerSecond']:9.1f} "
            f"tok/s, vllm bench serve {v['outputTokensPerSecond']:9.1f} tok/s, ratio "
            f"{row['ratio']:.3f} | tokens in/out runner {r['totalInputTokens']}/"
            f"{r['totalOutputTokens']}, vllm {v['totalInputTokens']}/{v['totalOutputTokens']} | "
            f"client CPU ms/request runner {r['clientCpuMsPerRequest']:.2f} "
            f"({r['clientCpuPerWallSecond']:.2f} of a core), vllm "
            f"{v['clientCpuMsPerRequest']:.2f} ({v['clientCpuPerWallSecond']:.2f} of a core) | "
            f"server counted runner {r['server']}, vllm {v['server']}",
            flush=True,
        )
        if NO_TRUST in row:
            n = row[NO_TRUST]
            print(
                f"    vllm bench serve without trust_env {n['outputTokensPerSecond']:9.1f} tok/s, "
                f"ratio runner/it {row['ratioNoTrustEnv']:.3f}, client CPU ms/request "
                f"{n['clientCpuMsPerRequest']:.2f}",
                flush=True,
            )

    def median(tool: str, key: str) -> float:
        return float(statistics.median(row[tool][key] for row in rows))

    summary = {
        "runnerOutputTokensPerSecond": median("runner", "outputTokensPerSecond"),
        "vllmOutputTokensPerSecond": median("vllm", "outputTokensPerSecond"),
        "ratioOfMedians": median("runner", "outputTokensPerSecond")
        / median("vllm", "outputTokensPerSecond"),
        "medianRatio": statistics.median(row["ratio"] for row in rows),
        "runnerClientCpuMsPerRequest": median("runner", "clientCpuMsPerRequest"),
        "vllmClientCpuMsPerRequest": median("vllm", "clientCpuMsPerRequest"),
        "runnerClientCpuPerWallSecond": median("runner", "clientCpuPerWallSecond"),
        "vllmClientCpuPerWallSecond": median("vllm", "clientCpuPerWallSecond"),
    }
    if args.vllm_without_trust_env:
        summary |= {
            "vllmNoTrustEnvOutputTokensPerSecond": median(NO_TRUST, "outputTokensPerSecond"),
            "ratioOfMediansNoTrustEnv": median("runner", "outputTokensPerSecond")
            / median(NO_TRUST, "outputTokensPerSecond"),
            "medianRatioNoTrustEnv": statistics.median(row["ratioNoTrustEnv"] for row in rows),
            "vllmNoTrustEnvClientCpuMsPerRequest": median(NO_TRUST, "clientCpuMsPerRequest"),
        }
    within = abs(summary["ratioOfMedians"] - 1) <= 0.05
    print(
        f"median output throughput: runner {summary['runnerOutputTokensPerSecond']:.1f} tok/s, "
        f"vllm bench serve {summary['vllmOutputTokensPerSecond']:.1f} tok/s, ratio "
        f"{summary['ratioOfMedians']:.3f} ({'within' if within else 'outside'} 5%); "
        f"client CPU per request: runner {summary['runnerClientCpuMsPerRequest']:.2f} ms, "
        f"vllm bench serve {summary['vllmClientCpuMsPerRequest']:.2f} ms",
        flush=True,
    )
    if args.vllm_without_trust_env:
        print(
            f"  vllm bench serve without trust_env: "
            f"{summary['vllmNoTrustEnvOutputTokensPerSecond']:.1f} tok/s, ratio "
            f"{summary['ratioOfMediansNoTrustEnv']:.3f}, client CPU per request "
            f"{summary['vllmNoTrustEnvClientCpuMsPerRequest']:.2f} ms",
            flush=True,
        )
    return {
        "workload": {
            "requestsAtOnce": w.requests,
            "inputTokens": w.input_tokens,
            "outputTokens": w.output_tokens,
            "tokensPerWord": tpw,
            "rounds": args.rounds,
        },
        "rounds": rows,
        **summary,
    }


def workload(text: str) -> Workload:
    """REQUESTSxINPUTxOUTPUT, e.g. 128x128x64."""
    try:
        n, inp, out = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--workload {text!r}: expected REQUESTSxINPUTxOUTPUT tokens, e.g. 128x128x64"
        ) from None
    if min(n, inp, out) < 1:
        raise argparse.ArgumentTypeError(f"--workload {text!r}: every number must be >= 1")
    return Workload(n, inp, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--tokenizer", required=True, help="the model's directory")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--workload",
        type=workload,
        action="append",
        help="REQUESTSxINPUTxOUTPUT: requests sent at once, tokens in and out of each; "
        "repeat for several (default 128x128x64)",
    )
    parser.add_argument(
        "--vllm-without-trust-env",
        action="store_true",
        help="a third arm: `vllm bench serve` with its aiohttp session's trust_env off",
    )
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--work", type=Path, default=Path("vs-vllm"))
    parser.add_argument("--out", type=Path, help="write the result document here")
    args = parser.parse_args()
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)

    up = import_vllm_bench_serve()
    tpw = asyncio.run(tokens_per_word(args))
    docs = [
        rounds(args, up, w, tpw, args.seed + 100 * k)
        for k, w in enumerate(args.workload or [Workload(128, 128, 64)])
    ]
    if args.out:
        doc = {
            "command": sys.argv,
            "python": sys.version.split()[0],
            "vllmVersion": getattr(sys.modules.get("vllm"), "__version__", None),
            "workloads": docs,
        }
        args.out.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
