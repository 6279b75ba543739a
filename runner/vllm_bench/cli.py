"""`vllm-bench`: the command line of the benchmark runner.

    vllm-bench run --url http://HOST:8000 --model NAME \
        --scenarios capacity,batching,prefix,streaming --out DIR
    vllm-bench validate DIR/result.json

`run` writes DIR/result.json (always, also after a failure), DIR/report.html and the PNG
plots, prints a summary table, and exits 0 (all ok), 2 (usage: bad arguments or URL),
3 (server unreachable, timeouts, HTTP errors, the deadline: results are partial),
4 (the server does not serve --model) or 1 (a bug in the runner).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from vllm_bench import lab_texts, report
from vllm_bench.client import BenchError
from vllm_bench.presets import PRESETS
from vllm_bench.results import (
    EXIT_USAGE,
    build_document,
    error_record,
    exit_code,
    validation_errors,
    write_document,
)
from vllm_bench.runner import normalise_url, run_benchmark
from vllm_bench.scenarios import DEFAULT_SCENARIOS, SCENARIOS
from vllm_bench.scenarios.base import BenchConfig, ScenarioResult


class RichProgress:
    """A progress bar per phase of requests, on stderr; silent where stderr is no terminal
    (a Job's log gets one line per scenario from `_scenario_done` instead)."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @contextlib.contextmanager
    def phase(self, description: str, total: int) -> Iterator[Callable[[], None]]:
        if not self.console.is_terminal:
            yield lambda: None
            return
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console, transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda: bar.advance(task)


def _positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(text: str) -> int | float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its error message
    return parse


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _scenario_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown scenario(s) {', '.join(unknown) or '(none)'}; "
            f"choose from {', '.join(SCENARIOS)}"
        )
    return tuple(dict.fromkeys(names))


def build_parser(run_defaults: dict[str, object] | None = None) -> argparse.ArgumentParser:
    """The command line; `run_defaults` replaces defaults of `run` (a preset's)."""
    parser = argparse.ArgumentParser(
        prog="vllm-bench", description="Benchmark a vLLM OpenAI-compatible server."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="run scenarios against a server and write result.json, plots, report.html"
    )
    run.add_argument(
        "--url", required=True, help="the server's root URL, e.g. http://my-model.ns.svc:8000"
    )
    run.add_argument("--model", required=True, help="the served model name (see GET /v1/models)")
    run.add_argument(
        "--scenarios",
        type=_scenario_list,
        default=DEFAULT_SCENARIOS,
        help=f"comma-separated, in order (default {','.join(DEFAULT_SCENARIOS)}; also: naive)",
    )
    run.add_argument(
        "--out", default="bench-results", help="directory for result.json, report.html, *.png"
    )
    bounds = run.add_argument_group("bounds")
    bounds.add_argument(
        "--max-duration-seconds",
        type=_positive(float),
        default=600.0,
        help="the whole run (default 600)",
    )
    bounds.add_argument(
        "--max-rps",
        type=_positive(float),
        default=None,
        help="request starts per second at most (default: no cap; each phase's concurrency "
        "paces the starts). A cap below what the server completes holds the ladder's top "
        "levels below their concurrency (peakInFlight shows it)",
    )
    bounds.add_argument(
        "--proxy-from-env",
        action="store_true",
        help="send the requests through HTTP_PROXY/HTTPS_PROXY, minus NO_PROXY, as the "
        "environment sets them (default: straight to --url; the proxy lookup costs client CPU "
        "per request)",
    )
    bounds.add_argument(
        "--timeout-seconds",
        type=_positive(float),
        default=120.0,
        help="one request, start to last token (default 120)",
    )
    bounds.add_argument(
        "--wait-ready-seconds",
        type=float,
        default=0.0,
        help="first wait this long for /health to answer 200 (default 0)",
    )
    bounds.add_argument(
        "--metrics-interval-seconds",
        type=_positive(float),
        default=0.25,
        help="how often the batching ladder scrapes /metrics for the queue depth (default 0.25; "
        "a scrape costs vLLM's API process about 5 ms of CPU)",
    )
    bounds.add_argument(
        "--live-load-interval-seconds",
        type=_positive(float),
        default=0.5,
        help="how often the target's running and waiting requests are read during every "
        "scenario, to see load that is not the runner's (result: liveLoad; default 0.5)",
    )
    sizes = run.add_argument_group("workload")
    sizes.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default=None,
        help="send a reference lab's workload instead of the synthetic one: its prompts "
        "verbatim, its API, each step's sampling and output length, stopping at EOS, and "
        "beside the runner's figures the lab's own (arguments given as well still win; "
        "--output-tokens and --temperature then replace every step's): "
        + "; ".join(f"{p.name}: {p.description}" for p in PRESETS.values()),
    )
    sizes.add_argument(
        "--requests",
        type=_positive(int),
        default=16,
        help="requests per batching phase (default 16)",
    )
    sizes.add_argument(
        "--warmup-requests",
        type=_non_negative_int,
        default=8,
        help="requests sent at once and discarded before the first scenario (default 8; 0: none)",
    )
    sizes.add_argument(
        "--rounds",
        type=_positive(int),
        default=1,
        help="run batching, prefix and streaming this many times, interleaved; the summaries "
        "hold the median and each scenario's `spread` the min/median/max/stdev (default 1)",
    )
    sizes.add_argument(
        "--input-tokens", type=_positive(int), default=128, help="prompt size, about (default 128)"
    )
    sizes.add_argument(
        "--output-tokens",
        type=_positive(int),
        default=32,
        help="tokens generated per request, exactly (ignore_eos; default 32)",
    )
    sizes.add_argument(
        "--max-concurrency",
        type=_positive(int),
        default=32,
        help="top of the batching ladder (default 32)",
    )
    sizes.add_argument(
        "--prefix-tokens",
        type=_positive(int),
        default=1024,
        help="shared prefix size, about (default 1024)",
    )
    sizes.add_argument(
        "--prefix-requests",
        type=_positive(int),
        default=8,
        help="requests per prefix phase (default 8)",
    )
    sizes.add_argument(
        "--prefix-cold-method",
        choices=("auto", "reset", "unseen-prefix"),
        default="auto",
        help="how the prefix cache is made cold: POST /reset_prefix_cache, never-seen "
        "prefixes, or auto (reset where the server allows it)",
    )
    sizes.add_argument("--streaming-requests", type=_positive(int), default=8, help="(default 8)")
    sizes.add_argument(
        "--streaming-concurrency", type=_positive(int), default=1, help="(default 1: one at a time)"
    )
    sizes.add_argument(
        "--temperature", type=float, default=0.0, help="sampling temperature (default 0)"
    )
    sizes.add_argument(
        "--seed",
        type=int,
        default=None,
        help="prompt seed (default random, recorded in the result)",
    )
    sizes.add_argument(
        "--sampling-seed",
        type=int,
        default=None,
        help="the requests' sampling seed (vLLM's per-request `seed`; default none)",
    )
    sizes.add_argument(
        "--ignore-eos",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="generate exactly --output-tokens (default; --no-ignore-eos: stop at EOS, "
        "--output-tokens is a cap)",
    )
    objective = run.add_argument_group(
        "latency objective (batching): the ladder also measures the concurrencies between "
        "its last level that meets it and the first that does not"
    )
    objective.add_argument(
        "--objective-ttft",
        type=_positive(float),
        default=None,
        metavar="SECONDS",
        help="time to first token the objective allows",
    )
    objective.add_argument(
        "--objective-tpot",
        type=_positive(float),
        default=None,
        metavar="SECONDS",
        help="time per output token the objective allows",
    )
    objective.add_argument(
        "--objective-percentile",
        type=int,
        choices=(50, 90, 95, 99),
        default=95,
        help="the percentile both are judged at (default 95)",
    )
    naive = run.add_argument_group("naive baseline (scenario naive)")
    naive.add_argument("--naive-model-dir", help="the served model's weights on local disk")
    naive.add_argument(
        "--naive-python",
        default=None,
        help="a Python with torch and transformers (default this one)",
    )
    naive.add_argument("--naive-requests", type=_positive(int), default=4, help="(default 4)")
    more = run.add_argument_group("other")
    more.add_argument(
        "--api-key",
        default=os.environ.get("VLLM_BENCH_API_KEY"),
        help="bearer token (default $VLLM_BENCH_API_KEY)",
    )
    more.add_argument(
        "--prometheus-url",
        help="also read the server's histograms over the run from this Prometheus",
    )
    more.add_argument(
        "--no-report", action="store_true", help="write result.json only (no plots, no HTML)"
    )
    if run_defaults:
        run.set_defaults(**run_defaults)
    validate = sub.add_parser("validate", help="check a result.json against the schema")
    validate.add_argument("path", type=Path)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The arguments; with --preset, the preset's values are the defaults of what it sets, so
    that an argument on the command line still wins."""
    args = build_parser().parse_args(argv)
    if getattr(args, "preset", None):
        args = build_parser(PRESETS[args.preset].argument_defaults()).parse_args(argv)
    return args


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """The run's configuration, or a usage BenchError."""
    if "naive" in args.scenarios and not args.naive_model_dir:
        raise BenchError(
            "usage", "the naive scenario needs --naive-model-dir (the served model's weights)"
        )
    preset = PRESETS[args.preset] if args.preset else None
    # with a preset, --output-tokens and --temperature default to None: each of the lab's
    # steps sends its own; given, they replace every step's
    output_tokens = args.output_tokens
    temperature = args.temperature
    if preset is not None:
        output_tokens = preset.output_tokens if output_tokens is None else output_tokens
        temperature = preset.temperature if temperature is None else temperature
    return BenchConfig(
        url=normalise_url(args.url),
        model=args.model,
        scenarios=args.scenarios,
        out=args.out,
        max_duration_seconds=args.max_duration_seconds,
        max_rps=args.max_rps,
        timeout_seconds=args.timeout_seconds,
        proxy_from_env=args.proxy_from_env,
        requests=args.requests,
        input_tokens=args.input_tokens,
        output_tokens=output_tokens,
        max_concurrency=args.max_concurrency,
        prefix_tokens=args.prefix_tokens,
        prefix_requests=args.prefix_requests,
        prefix_cold_method=args.prefix_cold_method,
        streaming_requests=args.streaming_requests,
        streaming_concurrency=args.streaming_concurrency,
        naive_requests=args.naive_requests,
        naive_python=args.naive_python,
        naive_model_dir=args.naive_model_dir,
        temperature=temperature,
        seed=args.seed if args.seed is not None else random.SystemRandom().randrange(2**31),
        wait_ready_seconds=args.wait_ready_seconds,
        metrics_interval_seconds=args.metrics_interval_seconds,
        live_load_interval_seconds=args.live_load_interval_seconds,
        prometheus_url=args.prometheus_url,
        warmup_requests=args.warmup_requests,
        rounds=args.rounds,
        ignore_eos=args.ignore_eos,
        sampling_seed=args.sampling_seed,
        preset=args.preset,
        objective_ttft_seconds=args.objective_ttft,
        objective_tpot_seconds=args.objective_tpot,
        objective_percentile=args.objective_percentile,
        preset_stand_ins=preset.stand_ins if preset else (),
        preset_max_tokens=args.output_tokens if preset else None,
        preset_temperature=args.temperature if preset else None,
        preset_texts_sha256=lab_texts.digest() if preset else None,
    )


def _usage_document(args: argparse.Namespace, error: BenchError) -> dict[str, Any]:
    now = time.time()
    config = {
        "url": args.url,
        "model": args.model,
        "scenarios": list(args.scenarios),
        "maxDurationSeconds": args.max_duration_seconds,
        "maxRps": args.max_rps,
    }
    return build_document(
        config=config,
        environment={"serverVersion": None, "model": args.model, "cacheConfig": {}},
        scenarios={},
        errors=[error_record("setup", error)],
        started_at=now,
        finished_at=now,
    )


def _run(args: argparse.Namespace, console: Console) -> int:
    out = Path(args.out)
    try:
        config = config_from_args(args)
    except BenchError as exc:
        console.print(f"[red]error:[/] {exc.message}")
        write_document(_usage_document(args, exc), out)
        return EXIT_USAGE

    def scenario_done(name: str, result: ScenarioResult, failure: BenchError | None) -> None:
        took = f"{result.elapsed_seconds:.1f} s"
        if failure:
            console.print(f"[red]x {name}[/] ({took}): {failure.kind}: {failure.message}")
        else:
            console.print(f"[green]ok {name}[/] ({took})")

    console.print(
        f"vllm-bench: {config.url} model {config.model!r}, scenarios {','.join(config.scenarios)}"
    )
    doc = asyncio.run(
        run_benchmark(config, RichProgress(console), scenario_done, api_key=args.api_key)
    )
    if not args.no_report:
        try:
            plots = report.write_plots(doc, out)
            report.write_html(doc, out, plots)
        except Exception as exc:  # noqa: BLE001 - the measurements must still be written
            doc["errors"].append(
                {"scenario": "report", "kind": "report", "message": f"{type(exc).__name__}: {exc}"}
            )
    path = write_document(doc, out)
    tables = Console(highlight=False)  # the summary is the command's output: stdout
    if not tables.is_terminal:
        tables.width = 120  # a log or a pipe: do not squeeze the ladder's columns
    for table in report.summary_tables(doc):
        tables.print(table)
    for error in doc["errors"]:
        console.print(f"[red]error[/] in {error['scenario']} ({error['kind']}): {error['message']}")
    console.print(f"status {doc['status']}; results in {path}")
    return exit_code(doc["errors"])


def _validate(path: Path, console: Console) -> int:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        console.print(f"[red]error:[/] cannot read {path}: {exc}")
        return EXIT_USAGE
    problems = validation_errors(doc)
    for problem in problems:
        console.print(f"[red]invalid:[/] {problem}")
    if not problems:
        console.print(
            f"{path}: valid (schemaVersion {doc.get('schemaVersion')}, status {doc.get('status')})"
        )
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    if args.command == "validate":
        return _validate(args.path, console)
    return _run(args, console)


if __name__ == "__main__":
    sys.exit(main())
