"""The reference labs' own workloads, as presets of the runner (`vllm-bench run --preset`).

The runner's default workload is synthetic (workload.py): prompts of random words sized in
tokens, a fixed output length (`ignore_eos`), greedy decoding. It measures better (no two
requests share a cache block, every request costs the same, a run compares with the next);
a preset instead sends what a lab sends, so that a lab's figures can be reproduced as it ran
them: its prompts, its sampling settings, its output lengths, and generation that stops at
EOS (the lab sets no `ignore_eos`: `max_tokens` is a cap there).

This module is the one source of the lab texts: the scenarios read them from here, and
benchmarks/gpu/labs.py passes `--preset` to the runner.

Every text below says where it comes from. Texts marked STAND-IN are not the lab's: the lab's
own text was not available when the preset was written; each is listed in the preset's
`stand_ins` (recorded in result.json as `config.presetStandIns`) so that a result says
whether it ran the lab's words. Replace a stand-in with the lab's text and drop its name from
`stand_ins`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

# --- lab 1: TinyLlama-1.1B-Chat ------------------------------------------------------------

# the lab's batching prompts: 32 of them, temperature 0.7, 40 tokens, seed 42
LAB1_BATCHING_PROMPTS = tuple(
    f"Tell me one interesting fact about the number {i}" for i in range(32)
)
# STAND-IN (lab 1's first prompt)
LAB1_FIRST_PROMPT = "What is the capital of France?"
# STAND-IN (lab 1's shared few-shot prefix): an instruction and few-shot examples, as the lab's
# prefix-caching part shares; the segments are joined by newlines (the scenario reorders them
# to show that a reordered prefix gets no cache hits)
LAB1_PREFIX_SEGMENTS = (
    (
        "You are a helpful assistant that answers questions about numbers. Answer each "
        "question with one short, accurate sentence."
    ),
    "Q: What is special about the number 2? A: It is the only even prime number.",
    "Q: What is special about the number 7? A: It is the number of days in a week.",
    "Q: What is special about the number 12? A: It is the number of months in a year.",
    "Q: What is special about the number 100? A: It is the boiling point of water in Celsius.",
)
# STAND-IN (the questions that follow the shared prefix)
LAB1_PREFIX_QUESTIONS = tuple(
    f"Q: What is special about the number {n}? A:" for n in (3, 5, 8, 10, 13, 21, 42, 64)
)

# --- lab 2: Llama-3-8B-Instruct --------------------------------------------------------------

# STAND-IN (lab 2's prompts): ten requests, sent one at a time and ten at once
LAB2_PROMPTS = (
    "Explain the difference between a process and a thread.",
    "Write a short story about a robot learning to paint.",
    "What are the main causes of climate change?",
    "Describe how a transformer neural network works.",
    "Give me three tips for writing clean code.",
    "Summarize the history of the Roman Empire in a paragraph.",
    "How does a hash table handle collisions?",
    "What is the difference between TCP and UDP?",
    "Explain what a GPU is and why it helps machine learning.",
    "Write a haiku about the ocean.",
)
LAB2_OUTPUT_TOKENS = 150  # the lab's
LAB2_512_OUTPUT_TOKENS = 100  # the lab's, in its max_model_len 512 run


@dataclass(frozen=True)
class Preset:
    """A lab's workload. `prompts` are the batching scenario's (its serial and its concurrent
    phase each send all of them, in order; the ladder and streaming cycle through them);
    `first_prompt` is the capacity scenario's first request; `prefix_segments` the prefix
    scenario's shared system prompt and `prefix_questions` the user turns after it. The
    numbers are the defaults the preset gives the run's arguments; an argument on the command
    line still wins."""

    name: str
    description: str
    prompts: tuple[str, ...]
    output_tokens: int
    temperature: float
    sampling_seed: int | None
    first_prompt: str
    prefix_segments: tuple[str, ...]
    prefix_questions: tuple[str, ...]
    stand_ins: tuple[str, ...] = ()

    def cycled(self, n: int) -> list[str]:
        """n prompts: the preset's in order, from the first again when they run out."""
        return list(itertools.islice(itertools.cycle(self.prompts), n))

    def argument_defaults(self) -> dict[str, object]:
        """What the preset sets, by the runner's argument names (argparse dests)."""
        defaults: dict[str, object] = {
            "requests": len(self.prompts),
            "output_tokens": self.output_tokens,
            "temperature": self.temperature,
            "ignore_eos": False,
            "prefix_requests": len(self.prefix_questions),
        }
        if self.sampling_seed is not None:
            # the lab's seed is the requests' sampling seed; the runner's own (its random words:
            # the warm-up, unseen prefixes) follows it, so that a preset run repeats exactly
            defaults.update(sampling_seed=self.sampling_seed, seed=self.sampling_seed)
        return defaults


def _lab2(name: str, description: str, output_tokens: int) -> Preset:
    return Preset(
        name=name,
        description=description,
        prompts=LAB2_PROMPTS,
        output_tokens=output_tokens,
        temperature=0.0,  # the runner's default (STAND-IN: the lab's value)
        sampling_seed=None,
        first_prompt=LAB2_PROMPTS[0],
        prefix_segments=LAB1_PREFIX_SEGMENTS,  # lab 2 measures no prefix cache
        prefix_questions=LAB1_PREFIX_QUESTIONS,
        stand_ins=("prompts", "temperature", "first_prompt"),
    )


PRESETS: dict[str, Preset] = {
    "lab1": Preset(
        name="lab1",
        description="lab 1 (TinyLlama): 32 number-fact prompts, temperature 0.7, 40 tokens, "
        "seed 42",
        prompts=LAB1_BATCHING_PROMPTS,
        output_tokens=40,
        temperature=0.7,
        sampling_seed=42,
        first_prompt=LAB1_FIRST_PROMPT,
        prefix_segments=LAB1_PREFIX_SEGMENTS,
        prefix_questions=LAB1_PREFIX_QUESTIONS,
        stand_ins=("first_prompt", "prefix_segments", "prefix_questions"),
    ),
    "lab2": _lab2(
        "lab2",
        "lab 2 (Llama-3-8B, max_model_len 2048): 10 prompts, 150 tokens",
        LAB2_OUTPUT_TOKENS,
    ),
    "lab2-512": _lab2(
        "lab2-512",
        "lab 2's max_model_len 512 run: the same prompts, 100 tokens",
        LAB2_512_OUTPUT_TOKENS,
    ),
}
