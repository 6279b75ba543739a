"""What every scenario shares: the run's configuration, the context handed to a scenario,
the result a scenario fills in as it goes (so that a failure keeps what was measured), and
running a list of requests at a given concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vllm_bench.client import BenchError, Completion, OpenAIClient, Request
from vllm_bench.presets import PRESETS, Preset, Sampling
from vllm_bench.stats import peak_overlap, percentile
from vllm_bench.workload import PromptFactory


@dataclass(frozen=True)
class BenchConfig:
    """The run's settings (the CLI's arguments); recorded in the result document."""

    url: str
    model: str
    scenarios: tuple[str, ...]
    out: str
    max_duration_seconds: float = 600.0
    # None: no rate cap. A default cap of 100 starts/s held a GPU server at 25 of 32 requests
    # in flight and halved its measured throughput (issue 13); the concurrency paces instead.
    max_rps: float | None = None
    timeout_seconds: float = 120.0
    requests: int = 16
    input_tokens: int = 128
    output_tokens: int = 32
    max_concurrency: int = 32
    prefix_tokens: int = 1024
    prefix_requests: int = 8
    prefix_cold_method: str = "auto"  # auto | reset | unseen-prefix
    streaming_requests: int = 8
    streaming_concurrency: int = 1
    naive_requests: int = 4
    naive_python: str | None = None
    naive_model_dir: str | None = None
    temperature: float = 0.0
    seed: int = 0
    wait_ready_seconds: float = 0.0
    metrics_interval_seconds: float = 0.25
    live_load_interval_seconds: float = 0.5  # liveload.py: polls the target during scenarios
    prometheus_url: str | None = None
    warmup_requests: int = 8  # sent and discarded before the first scenario
    rounds: int = 1  # each scenario in ROUNDED_SCENARIOS runs this often, interleaved
    # send requests through HTTP(S)_PROXY / NO_PROXY (and ~/.netrc) as the environment says
    proxy_from_env: bool = False
    # True: exactly max_tokens out, so that runs compare; a lab's preset stops at EOS, as the lab
    ignore_eos: bool = True
    sampling_seed: int | None = None  # the requests' `seed` (vLLM's per-request sampling seed)
    preset: str | None = None  # a lab's workload (presets.py) instead of the synthetic one
    preset_stand_ins: tuple[str, ...] = ()  # the preset's texts that are not the lab's own
    # given with a preset: every step's max_tokens / temperature (None: each step's own)
    preset_max_tokens: int | None = None
    preset_temperature: float | None = None
    preset_texts_sha256: str | None = None  # the digest of the lab texts a preset sent
    # a latency objective (the operator's spec.objective): the batching ladder then also
    # measures the integer concurrencies between its last level that meets it and the first
    # that does not (batching.refine), so that the capacity is not read off a straight line
    objective_ttft_seconds: float | None = None
    objective_tpot_seconds: float | None = None
    objective_percentile: int = 95

    def as_document(self) -> dict[str, Any]:
        """camelCase keys, as in the result document."""
        doc: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            head, *rest = name.split("_")
            doc[head + "".join(w.title() for w in rest)] = (
                list(value) if isinstance(value, tuple) else value
            )
        return doc


class Progress(Protocol):
    """Progress display for long phases: `with progress.phase("serial", 16) as advance:`."""

    def phase(
        self, description: str, total: int
    ) -> contextlib.AbstractContextManager[Callable[[], None]]: ...


class NoProgress:
    """Shows nothing (library use, tests)."""

    @contextlib.contextmanager
    def phase(self, description: str, total: int) -> Iterator[Callable[[], None]]:
        yield lambda: None


@dataclass
class Context:
    """What a scenario gets: the client, settings, prompts, and what the runner learnt
    about the server before the scenarios ran."""

    client: OpenAIClient
    config: BenchConfig
    prompts: PromptFactory
    progress: Progress
    max_model_len: int | None
    cache_config: dict[str, str]

    @property
    def preset(self) -> Preset | None:
        """The lab workload the run sends, if --preset chose one."""
        return PRESETS[self.config.preset] if self.config.preset else None

    def request(
        self,
        *,
        prompt: str | None = None,
        messages: tuple[dict[str, str], ...] | None = None,
        max_tokens: int | None = None,
    ) -> Request:
        """A request with the run's sampling settings: temperature, ignore_eos, the sampling
        seed, and --output-tokens unless `max_tokens` says otherwise."""
        cfg = self.config
        return Request(
            max_tokens=cfg.output_tokens if max_tokens is None else max_tokens,
            prompt=prompt,
            messages=messages,
            ignore_eos=cfg.ignore_eos,
            temperature=cfg.temperature,
            extra={} if cfg.sampling_seed is None else {"seed": cfg.sampling_seed},
        )

    def preset_request(
        self, prompt: str | tuple[str, ...], sampling: Sampling, *, retry_empty: bool = True
    ) -> Request:
        """A request of a lab's step as the lab sends it: through the preset's API (a chat
        message or a completion-style prompt; a tuple of prompts: one completions request
        for all), with the step's sampling, unless --output-tokens or --temperature was given
        (then those, for every step); the sampling seed where the step sets one."""
        preset = self.preset
        if preset is None:
            raise RuntimeError("preset_request without a preset")
        cfg = self.config
        chat = preset.api == "chat"
        if chat and not isinstance(prompt, str):
            raise ValueError("a chat request carries one prompt")
        return Request(
            max_tokens=(
                sampling.max_tokens if cfg.preset_max_tokens is None else cfg.preset_max_tokens
            ),
            prompt=None if chat else prompt,
            messages=({"role": "user", "content": str(prompt)},) if chat else None,
            ignore_eos=cfg.ignore_eos,
            temperature=(
                sampling.temperature if cfg.preset_temperature is None else cfg.preset_temperature
            ),
            extra=(
                {"seed": cfg.sampling_seed}
                if sampling.seed is not None and cfg.sampling_seed is not None
                else {}
            ),
            retry_empty=retry_empty,
        )

    def completion_prompts(self, n: int) -> list[str]:
        """n completion prompts: the preset's (in order, cycled) or fresh random words of
        about --input-tokens each."""
        if self.preset is not None:
            return self.preset.cycled(n)
        return [self.prompts.prompt(self.config.input_tokens) for _ in range(n)]


class LabFigures:
    """A scenario's figures as the preset's lab defines them, kept beside the runner's own
    (the scenario's `summary`): result.json's `lab` of the scenario holds each figure, its
    definition (in the lab's terms) and the runner's summary figure beside it where there is
    one. Filled in as the scenario goes, so that a failure keeps what was measured."""

    def __init__(self, preset: Preset, result: ScenarioResult, note: str | None = None) -> None:
        self.document: dict[str, Any] = {
            "preset": preset.name,
            "lab": preset.lab,
            "figures": {},
            "definitions": {},
            "runnerFigures": {},
        }
        if note:
            self.document["note"] = note
        result.extra["lab"] = self.document

    def add(self, name: str, value: Any, definition: str, beside: str | None = None) -> None:
        self.document["figures"][name] = value
        self.document["definitions"][name] = definition
        if beside:
            self.document["runnerFigures"][name] = beside


@dataclass
class ScenarioResult:
    """Filled in by a scenario while it runs: `summary` (the numbers the operator and the
    report read), `samples` (one record per request) and optional extra series."""

    summary: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    elapsed_seconds: float = 0.0

    def as_document(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "samples": self.samples,
            **self.extra,
            "elapsedSeconds": round(self.elapsed_seconds, 4),
        }


def sample_record(
    c: Completion,
    phase: str,
    index: int,
    phase_start: float,
    *,
    token_times: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """One request as it appears in the result document (seconds)."""
    record: dict[str, Any] = {
        "phase": phase,
        "index": index,
        **extra,
        "startSeconds": round(c.started - phase_start, 6),
        "latencySeconds": round(c.latency, 6),
        "ttftSeconds": None if c.ttft is None else round(c.ttft, 6),
        "tpotSeconds": None if c.tpot is None else round(c.tpot, 6),
        "promptTokens": c.prompt_tokens,
        "outputTokens": c.output_tokens,
        "finishReason": c.finish_reason,
        "empty": c.empty,
        "emptyFirstAttempt": c.empty_first_attempt,
        "retried": c.retried,
    }
    if token_times:
        record["tokenTimesSeconds"] = [round(t, 6) for t in c.token_times]
    return record


@dataclass
class PhaseResult:
    """The completions of one phase, in request order, and its wall-clock duration."""

    completions: list[Completion]
    wall_seconds: float
    started: float

    @property
    def output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.completions)

    @property
    def output_tokens_per_second(self) -> float:
        return self.output_tokens / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def requests_per_second(self) -> float:
        return len(self.completions) / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def peak_in_flight(self) -> int:
        """How many requests were in flight at once at most (the rate limit or a slow
        client can keep this below the concurrency asked for)."""
        return peak_overlap([(c.started, c.started + c.latency) for c in self.completions])

    def latency(self, q: float) -> float | None:
        return percentile([c.latency for c in self.completions], q)

    def ttft(self, q: float) -> float | None:
        return percentile([c.ttft for c in self.completions if c.ttft is not None], q)

    def tpot(self, q: float) -> float | None:
        tpots = [c.tpot for c in self.completions]
        return percentile([t for t in tpots if t is not None], q)


async def run_requests(
    ctx: Context,
    requests: Sequence[Request],
    in_flight: int,
    result: ScenarioResult,
    phase: str,
    *,
    token_times: bool = False,
    **extra: Any,
) -> PhaseResult:
    """Sends `requests` with at most `in_flight` of them at a time and records each completion in
    `result.samples` as it finishes. The first failure cancels the rest and is raised; the
    samples recorded until then stay in `result`."""
    gate = asyncio.Semaphore(max(1, in_flight))
    done: dict[int, Completion] = {}
    started = time.perf_counter()

    async def one(i: int, request: Request, advance: Callable[[], None]) -> None:
        async with gate:
            c = await ctx.client.generate(request)
        done[i] = c
        result.samples.append(sample_record(c, phase, i, started, token_times=token_times, **extra))
        advance()

    with ctx.progress.phase(phase, len(requests)) as advance:
        try:
            async with asyncio.TaskGroup() as group:
                for i, request in enumerate(requests):
                    group.create_task(one(i, request, advance))
        except* BenchError as failures:
            raise failures.exceptions[0] from None
    wall = time.perf_counter() - started
    return PhaseResult([done[i] for i in sorted(done)], wall, started)


def empty_counts(samples: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many requests came back empty at first, and how many stayed empty after the
    greedy retry (see OpenAIClient.generate)."""
    return {
        "emptyCompletions": sum(1 for s in samples if s.get("emptyFirstAttempt")),
        "emptyAfterRetry": sum(1 for s in samples if s.get("empty")),
    }


def rounded(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)
