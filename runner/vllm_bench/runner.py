"""One benchmark run: check the server (URL, served model names, version, cache
configuration), size the prompts, send a discarded warm-up, run the scenarios in order
(repeated in interleaved rounds with --rounds) within the run's budget, and return the result
document. A scenario that fails is recorded in `errors` with what it
measured until then; a connection failure or the deadline stops the run (every later request
would fail the same way), and the scenarios not run are recorded as skipped.
"""

from __future__ import annotations

import asyncio
import platform
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from vllm_bench import __version__
from vllm_bench.client import BenchError, Budget, OpenAIClient
from vllm_bench.liveload import FAMILIES as LIVE_LOAD_FAMILIES
from vllm_bench.liveload import LiveLoad
from vllm_bench.liveload import document as live_load_document
from vllm_bench.metrics import CACHE_CONFIG_INFO
from vllm_bench.promql import server_histograms, server_state
from vllm_bench.results import build_document, error_record
from vllm_bench.rounds import ROUNDED_SCENARIOS, merge_summaries, summary_spread
from vllm_bench.scenarios import SCENARIOS
from vllm_bench.scenarios.base import (
    BenchConfig,
    Context,
    NoProgress,
    Progress,
    ScenarioResult,
    run_requests,
)
from vllm_bench.workload import SAMPLE_WORDS, PromptFactory

STOPS_THE_RUN = {"connection", "deadline"}

ScenarioDone = Callable[[str, ScenarioResult, BenchError | None], None]


def normalise_url(url: str) -> str:
    """The server's root URL (scheme, host, port; a trailing /v1 is dropped), or a usage
    BenchError saying what is wrong with it."""
    example = "such as http://my-model.my-namespace.svc:8000"
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise BenchError(
            "usage", f"--url {url!r} is malformed ({exc}); give one {example}"
        ) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BenchError(
            "usage", f"--url {url!r} is not an http(s) URL with a host; give one {example}"
        )
    if parts.query or parts.fragment:
        raise BenchError("usage", f"--url {url!r} must not have a query or fragment")
    path = parts.path.rstrip("/").removesuffix("/v1")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}{path}"


async def _prepare(
    client: OpenAIClient, config: BenchConfig, environment: dict[str, Any], progress: Progress
) -> Context:
    if config.wait_ready_seconds > 0:
        await client.wait_ready(config.wait_ready_seconds)
    models = await client.served_models()
    ids = [str(m.get("id")) for m in models]
    if config.model not in ids:
        raise BenchError(
            "model-mismatch",
            f"the server at {config.url} serves {', '.join(map(repr, ids)) or 'no model'}, "
            f"not {config.model!r}: pass --model with the served model name",
        )
    entry = models[ids.index(config.model)]
    max_model_len = entry.get("max_model_len")
    environment.update(
        {
            "serverVersion": await client.server_version(),
            "modelRoot": entry.get("root"),
            "maxModelLen": max_model_len if isinstance(max_model_len, int) else None,
        }
    )
    snapshot = await client.metrics()
    environment["cacheConfig"] = snapshot.info_labels(CACHE_CONFIG_INFO) or {}
    prompts = PromptFactory(config.seed)
    tokens = await client.count_tokens(prompts.calibration_text())
    if tokens:
        prompts.tokens_per_word = tokens / SAMPLE_WORDS
    environment["tokensPerWord"] = round(prompts.tokens_per_word, 4)
    return Context(
        client=client,
        config=config,
        prompts=prompts,
        progress=progress,
        max_model_len=environment["maxModelLen"],
        cache_config=environment["cacheConfig"],
    )


async def _warm_up(ctx: Context, environment: dict[str, Any]) -> None:
    """Requests of the run's shape, sent at once and thrown away: the first requests to a
    server pay for cold paths (connections, allocator growth, lazily compiled kernels) that
    would otherwise land in the serial baseline. A failure here is only noted: the scenarios
    meet the same failure and report it as theirs."""
    cfg = ctx.config
    if cfg.warmup_requests <= 0 or not set(cfg.scenarios) - {"naive"}:
        return
    # random words even with a preset: the lab's own prompts stay out of the prefix cache
    requests = [
        ctx.request(prompt=ctx.prompts.prompt(cfg.input_tokens)) for _ in range(cfg.warmup_requests)
    ]
    discarded = ScenarioResult()
    t0 = time.perf_counter()
    try:
        await run_requests(ctx, requests, len(requests), discarded, "warm-up")
    except BenchError as exc:
        environment["warmup"] = {
            "requests": len(discarded.samples),
            "seconds": round(time.perf_counter() - t0, 4),
            "error": f"{exc.kind}: {exc.message}",
        }
        return
    environment["warmup"] = {
        "requests": len(discarded.samples),
        "seconds": round(time.perf_counter() - t0, 4),
        # the server counted these too: whoever reconciles the server's counters needs them
        "promptTokens": sum(int(x.get("promptTokens") or 0) for x in discarded.samples),
        "outputTokens": sum(int(x.get("outputTokens") or 0) for x in discarded.samples),
    }


async def run_benchmark(
    config: BenchConfig,
    progress: Progress | None = None,
    on_scenario_done: ScenarioDone | None = None,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Runs the configured scenarios against config.url; never raises for a server-side
    failure: the document's `errors` and `status` say what happened."""
    started_at = time.time()
    errors: list[dict[str, str]] = []
    scenarios: dict[str, Any] = {}
    environment: dict[str, Any] = {
        "serverVersion": None,
        "model": config.model,
        "cacheConfig": {},
        "runnerVersion": __version__,
        "python": platform.python_version(),
    }
    budget = Budget(config.max_duration_seconds, config.max_rps)
    connections = max(config.max_concurrency, config.requests, config.naive_requests) + 8
    async with OpenAIClient(
        config.url,
        config.model,
        budget,
        timeout_seconds=config.timeout_seconds,
        api_key=api_key,
        max_connections=connections,
        proxy_from_env=config.proxy_from_env,
    ) as client:
        live = LiveLoad(
            lambda: client.metrics(only=LIVE_LOAD_FAMILIES),
            lambda: client.in_flight,
            config.live_load_interval_seconds,
        )
        try:
            ctx = await _prepare(client, config, environment, progress or NoProgress())
            await _warm_up(ctx, environment)
        except BenchError as exc:
            errors.append(error_record("setup", exc))
        else:
            await _run_scenarios(ctx, scenarios, errors, on_scenario_done, live)
    finished_at = time.time()
    extra: dict[str, Any] = {}
    if live.windows:
        extra["liveLoad"] = live_load_document(config.url, live.windows)
    if config.prometheus_url and scenarios:
        try:
            extra["serverHistograms"] = await asyncio.to_thread(
                server_histograms, config.prometheus_url, config.model, started_at, finished_at
            )
            extra["serverState"] = await asyncio.to_thread(
                server_state, config.prometheus_url, config.model, started_at, finished_at
            )
        except BenchError as exc:
            errors.append(error_record("prometheus", exc))
    return build_document(
        config=config.as_document(),
        environment=environment,
        scenarios=scenarios,
        errors=errors,
        started_at=started_at,
        finished_at=finished_at,
        extra=extra,
    )


async def _run_one(
    ctx: Context,
    name: str,
    round_number: int,
    on_scenario_done: ScenarioDone | None,
    live: LiveLoad | None = None,
) -> tuple[ScenarioResult, BenchError | None]:
    result = ScenarioResult()
    failure: BenchError | None = None
    t0 = time.perf_counter()
    try:
        if live is None:
            await SCENARIOS[name](ctx, result)
        else:
            async with live.window(name, result.samples):
                await SCENARIOS[name](ctx, result)
    except BenchError as exc:
        failure = exc
    except Exception as exc:  # noqa: BLE001 - a bug must not lose the results so far
        failure = BenchError("internal", f"{type(exc).__name__}: {exc}")
    result.elapsed_seconds = time.perf_counter() - t0
    if ctx.config.rounds > 1:
        for sample in result.samples:
            sample["round"] = round_number
    if on_scenario_done:
        on_scenario_done(
            name if ctx.config.rounds == 1 else f"{name}#{round_number}", result, failure
        )
    return result, failure


def scenario_document(rounds: list[ScenarioResult]) -> dict[str, Any]:
    """One scenario's document from its rounds: one round as it is; several as the median
    summary, every round's samples (tagged `round`), the last round's extra series, the
    number of rounds and the spread of each figure."""
    if len(rounds) == 1:
        return rounds[0].as_document()
    summaries = [r.summary for r in rounds]
    merged = ScenarioResult(
        summary=merge_summaries(summaries),
        samples=[sample for r in rounds for sample in r.samples],
        extra=rounds[-1].extra,
        elapsed_seconds=sum(r.elapsed_seconds for r in rounds),
    )
    return {**merged.as_document(), "rounds": len(rounds), "spread": summary_spread(summaries)}


async def _run_scenarios(
    ctx: Context,
    scenarios: dict[str, Any],
    errors: list[dict[str, str]],
    on_scenario_done: ScenarioDone | None,
    live: LiveLoad | None = None,
) -> None:
    names = list(ctx.config.scenarios)
    done: dict[str, list[ScenarioResult]] = {}
    failed: set[str] = set()
    for round_number in range(1, ctx.config.rounds + 1):
        for position, name in enumerate(names):
            if name in failed or (round_number > 1 and name not in ROUNDED_SCENARIOS):
                continue
            result, failure = await _run_one(ctx, name, round_number, on_scenario_done, live)
            if failure is None or name not in done:  # a failed later round keeps the others
                done.setdefault(name, []).append(result)
            scenarios[name] = scenario_document(done[name])
            if failure is None:
                continue
            failed.add(name)
            errors.append(error_record(name, failure))
            if failure.kind in STOPS_THE_RUN:
                for rest in names[position + 1 :] if round_number == 1 else []:
                    errors.append(
                        {
                            "scenario": rest,
                            "kind": "skipped",
                            "message": f"not run: the run stopped at a {failure.kind} error "
                            f"in {name}",
                        }
                    )
                return
