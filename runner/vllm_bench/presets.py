"""The reference labs' own workloads, as presets of the runner (`vllm-bench run --preset`).

The runner's default workload is synthetic (workload.py): prompts of random words sized in
tokens, a fixed output length (`ignore_eos`), greedy decoding. It measures better (no two
requests share a cache block, every request costs the same, a run compares with the next);
a preset instead sends what a lab sends, so that a lab's figures can be reproduced as it ran
them: its prompts (verbatim), its API (lab 1 completion-style prompts, lab 2 chat messages,
so that the model's chat template applies), its sampling settings, its output lengths, its
order, and generation that stops at EOS (the labs set no `ignore_eos`: `max_tokens` is a cap).

Every text comes from lab_texts.py (a verbatim copy of the labs' texts, with provenance and a
digest); none is a stand-in any more, so `stand_ins` (recorded in result.json as
`config.presetStandIns`) is empty for every preset.

A preset is a list of the lab's steps. Each scenario sends the runner's own phases (which
measure better: many requests, percentiles, like compared with like) with the preset's
texts, and beside them the lab's step as the lab ran it, whose figures it reports by the
lab's own definitions under `lab` in result.json (scenarios/base.py: LabFigures):

- lab1 (TinyLlama, completions): capacity sends the lab's first prompt (0.7 / 60 tokens /
  seed 42; the greedy fallback prompt when its output is empty) and computes the lab's
  max concurrency (kv_tokens / 1024); batching sends the lab's serial baseline (the first 4
  prompts in ONE request, a list prompt, as one llm.generate call) and the lab's batch (the
  32 in one request), speed-up = the batch's tokens/s over the baseline's; prefix sends the
  lab's prefix prompt twice, cold after POST /reset_prefix_cache, then warm (temperature 0,
  32 tokens), speed-up = cold / warm wall time. Lab 1 has no streaming step.
- lab2 (Llama-3-8B, chat, max_model_len 2048): capacity sends the lab's smoke prompt (no
  sampling settings: the lab set none); batching sends the lab's sequential run (the 5 naive
  prompts one at a time, 200 tokens, 0.7) and its concurrent run (the 10 concurrent prompts
  at once, 150 tokens, 0.7: per-request latencies, wall, average, tokens, tokens/s);
  streaming the lab's streaming prompt (300 tokens, 0.7): TTFT, total, tokens, tokens/s.
- lab2-512: lab 2's max_model_len 512 run: the third prompt list at once, 100 tokens, 0.7.

benchmarks/gpu/labs.py passes `--preset` to the runner.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from vllm_bench import lab_texts


@dataclass(frozen=True)
class Sampling:
    """A lab step's sampling settings; None: the lab sets none (the server's default)."""

    max_tokens: int | None = None
    temperature: float | None = None
    seed: int | None = None


@dataclass(frozen=True)
class Step:
    """One step of a lab: its prompts, its sampling, and how it sends them: `one_request`
    sends all the prompts in one completions request (a list prompt, as the lab's one
    `llm.generate(prompts)` call); otherwise one request per prompt. `source` names the
    keys of lab_texts.json the step comes from."""

    prompts: tuple[str, ...]
    sampling: Sampling
    source: str
    one_request: bool = False


@dataclass(frozen=True)
class PrefixStep:
    """Lab 1's prefix-caching step: `prompt` (the shared system prompt, then the user turn)
    sent twice, cold after a prefix-cache reset, then warm."""

    shared_prefix: str
    prompt: str
    sampling: Sampling
    source: str

    @property
    def question(self) -> str:
        """What follows the shared prefix in the lab's prompt."""
        return self.prompt.removeprefix(self.shared_prefix)

    @property
    def estimated_prefix_tokens(self) -> int:
        """The lab's own estimate of the shared prefix's tokens: len(shared_prefix) // 4."""
        return len(self.shared_prefix) // 4

    def segments(self) -> list[str]:
        """The shared prefix's paragraphs (the instruction, the examples' heading, each
        example, the closing line): the runner's reordered phase rotates them."""
        return self.shared_prefix.removesuffix("\n\n").split("\n\n")

    @staticmethod
    def join(segments: list[str]) -> str:
        """Paragraphs back into a prefix; join(segments()) is the lab's shared prefix."""
        return "\n\n".join(segments) + "\n\n"


@dataclass(frozen=True)
class Preset:
    """A lab's workload. `batching` is the step whose prompts the runner's own batching
    phases (serial, concurrent, ladder) and, where the lab has no streaming step, the
    streaming scenario cycle through; `concurrent_is_lab`: the runner's concurrent phase (all
    of `batching` at once, as separate requests) is the lab's own concurrent step. The other
    steps are sent as the lab sends them, beside the runner's phases. The numbers are the
    defaults the preset gives the run's arguments; an argument on the command line still
    wins (--output-tokens and --temperature, given, replace every step's)."""

    name: str
    lab: str
    description: str
    api: str  # "completions" (prompt) or "chat" (messages: the model's chat template)
    first: Step
    first_label: str  # the lab's name for its first request: firstPrompt, smoke
    batching: Step
    first_fallback: Step | None = None
    concurrent_is_lab: bool = False
    baseline: Step | None = None  # lab 1: the first 4 in one request; lab 2: sequential
    batch: Step | None = None  # lab 1: the 32 in one request
    prefix: PrefixStep | None = None
    streaming: Step | None = None
    max_concurrency_divisor: int | None = None  # lab 1's formula: kv_tokens / 1024
    engine: dict[str, Any] = field(default_factory=dict)
    stand_ins: tuple[str, ...] = ()

    @property
    def prompts(self) -> tuple[str, ...]:
        return self.batching.prompts

    @property
    def output_tokens(self) -> int:
        return self.batching.sampling.max_tokens or 0

    @property
    def temperature(self) -> float:
        return self.batching.sampling.temperature or 0.0

    @property
    def sampling_seed(self) -> int | None:
        return self.batching.sampling.seed

    def cycled(self, n: int) -> list[str]:
        """n of the batching step's prompts: in order, from the first again when they run
        out."""
        return list(itertools.islice(itertools.cycle(self.prompts), n))

    def argument_defaults(self) -> dict[str, object]:
        """What the preset sets, by the runner's argument names (argparse dests). Output
        tokens and temperature default to None: each step's own (cli.config_from_args)."""
        defaults: dict[str, object] = {
            "requests": len(self.prompts),
            "output_tokens": None,
            "temperature": None,
            "ignore_eos": False,
        }
        if self.streaming is not None:
            defaults["streaming_requests"] = 1  # the lab streams one request
        if self.sampling_seed is not None:
            # the lab's seed is the requests' sampling seed; the runner's own (its random words:
            # the warm-up, unseen prefixes) follows it, so that a preset run repeats exactly
            defaults.update(sampling_seed=self.sampling_seed, seed=self.sampling_seed)
        return defaults


def _sampling(doc: dict[str, Any]) -> Sampling:
    return Sampling(
        max_tokens=doc.get("max_tokens", doc.get("max_new_tokens")),
        temperature=doc.get("temperature"),
        seed=doc.get("seed"),
    )


def _lab1() -> Preset:
    t = lab_texts.lab1()
    batching = Step(
        tuple(t["batching_prompts"]),
        _sampling(t["batching_sampling"]),
        "batching_prompts, batching_sampling",
    )
    fallback = t["first_fallback_if_empty"]
    return Preset(
        name="lab1",
        lab="lab 1 (TinyLlama-1.1B-Chat)",
        description="lab 1 (TinyLlama, completions): its first prompt (0.7, 60 tokens, seed "
        "42, greedy fallback); 32 number-fact prompts (0.7, 40 tokens, seed 42), the first 4 "
        "in one request vs the 32 in one request; its shared-prefix prompt cold then warm "
        "(0, 32 tokens)",
        api="completions",
        first=Step(
            (t["first_prompt"],), _sampling(t["first_sampling"]), "first_prompt, first_sampling"
        ),
        first_label="firstPrompt",
        first_fallback=Step((fallback["prompt"],), _sampling(fallback), "first_fallback_if_empty"),
        batching=batching,
        baseline=Step(batching.prompts[:4], batching.sampling, "serial_baseline", one_request=True),
        batch=Step(batching.prompts, batching.sampling, "batching_prompts", one_request=True),
        prefix=PrefixStep(
            t["shared_prefix"],
            t["prefix_prompt"],
            _sampling(t["prefix_sampling"]),
            "shared_prefix, prefix_prompt, prefix_sampling",
        ),
        max_concurrency_divisor=int(t["max_concurrency_formula"].split("/")[1]),
        engine=dict(t["engine"]),
    )


def _lab2(name: str, description: str, prompts_key: str, sampling_key: str, main: bool) -> Preset:
    t = lab_texts.lab2()
    first = Step((t["smoke_prompt"],), Sampling(), "smoke_prompt (no sampling set)")
    concurrent = Step(
        tuple(t[prompts_key]), _sampling(t[sampling_key]), f"{prompts_key}, {sampling_key}"
    )
    sequential = Step(
        tuple(t["naive_prompts"]),
        _sampling(t["vllm_sequential_sampling"]),
        "vllm_sequential_prompts (= naive_prompts), vllm_sequential_sampling",
    )
    streaming = Step(
        (t["streaming_prompt"],),
        _sampling(t["streaming_sampling"]),
        "streaming_prompt, streaming_sampling",
    )
    return Preset(
        name=name,
        lab="lab 2 (Llama-3-8B-Instruct)",
        description=description,
        api="chat",
        first=first,
        first_label="smoke",
        batching=concurrent,
        concurrent_is_lab=True,
        baseline=sequential if main else None,
        streaming=streaming,
    )


PRESETS: dict[str, Preset] = {
    "lab1": _lab1(),
    "lab2": _lab2(
        "lab2",
        "lab 2 (Llama-3-8B, chat, max_model_len 2048): its smoke prompt; its 5 prompts one at "
        "a time (200 tokens, 0.7); its 10 concurrent prompts at once (150 tokens, 0.7); its "
        "streaming prompt (300 tokens, 0.7)",
        "concurrent_prompts",
        "concurrent_sampling",
        main=True,
    ),
    "lab2-512": _lab2(
        "lab2-512",
        "lab 2's max_model_len 512 run (chat): its 10 prompts of that run at once (100 tokens, "
        "0.7); the smoke and streaming prompts as in lab2",
        "tune_prompts_512",
        "tune_sampling_512",
        main=False,
    ),
}
