"""Prompts of a chosen size in tokens, made of random English words.

The runner has no tokenizer of its own: it asks the server (/tokenize) how many tokens a
sample of its words makes and sizes prompts with that ratio; the token counts it reports are
the server's own (`usage.prompt_tokens`). Every prompt starts with different random words,
so no two prompts share a prefix-cache block by accident (a run's seed is random unless
--seed is given: rerunning against the same server does not hit the cache either).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend "
    "father power hour game line end member law car city community name president team "
    "minute idea kid body information back parent face others level office door health "
    "person art war history party result change morning reason research girl guy moment "
    "air teacher force education foot boy age policy process music market sense nation "
    "plan college interest death experience effect class control care field development "
    "role effort rate heart drug show leader light voice wife police mind price report "
    "decision son view relation town road arm difference value building action model "
    "season society tax director position player record paper space ground form event "
    "official matter center couple site project activity star table need court oil "
    "situation cost industry figure street image phone data picture practice piece land "
    "product doctor wall patient worker news test movie north love support technology step "
    "baby computer type attention film tree source organization hair window evidence "
    "population truth song energy quality stage machine "
)
WORDS = tuple(_WORD_TEXT.split())

SAMPLE_WORDS = 400  # the calibration sample: enough for a stable ratio, one cheap request


@dataclass
class PromptFactory:
    """Makes prompts of about `n` tokens; `tokens_per_word` comes from `calibrate`."""

    seed: int
    tokens_per_word: float = 1.3  # a typical BPE ratio, used when the server cannot tokenize
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)  # noqa: S311 - prompts, not secrets

    def words(self, n_tokens: int) -> str:
        count = max(1, round(n_tokens / self.tokens_per_word))
        return " ".join(self.rng.choice(WORDS) for _ in range(count))

    def calibration_text(self) -> str:
        sample = random.Random(self.seed)  # noqa: S311 - prompts, not secrets
        return " ".join(sample.choice(WORDS) for _ in range(SAMPLE_WORDS))

    def prompt(self, n_tokens: int) -> str:
        """A completions prompt of about n_tokens tokens."""
        return self.words(n_tokens)

    def shared_prefix(self, n_tokens: int, examples: int = 8) -> list[str]:
        """A system prompt made of an instruction and few-shot examples (question, answer),
        as the reference lab's shared prefix, about n_tokens long in all; returned as its
        segments, so that a caller can reorder them."""
        instruction_tokens = max(16, n_tokens // (examples + 1))
        example_tokens = max(8, (n_tokens - instruction_tokens) // examples)
        segments = [
            "You are a support assistant. Answer each question with one short sentence. "
            + self.words(instruction_tokens)
        ]
        for i in range(examples):
            q = self.words(example_tokens * 2 // 3)
            a = self.words(example_tokens // 3)
            segments.append(f"{self.rng.choice(WORDS).title()} example {i + 1}: {q}? {a}.")
        return segments
