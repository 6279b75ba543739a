"""The two reference labs' own texts, as the runner ships them: `lab_texts.json` beside this
module is a byte-for-byte copy of the project's notes file `shared/notes/lab-texts.json`
(described in `shared/notes/LAB-TEXTS.md`): every prompt, sampling setting, engine setting
and published figure of lab 1 (TinyLlama-1.1B-Chat, vLLM's offline `LLM` engine) and lab 2
(Llama-3-8B-Instruct, vLLM's OpenAI chat completions), verbatim.

Provenance: `SOURCE` names the file it was copied from and `SHA256` the digest of its
content; tests/unit/bench/test_bench_lab_texts.py checks this copy against that digest, and
against the notes file itself where the checkout has it, so that neither is edited without
the other. To take a new version of the labs' texts: copy the file over `lab_texts.json`
and record its sha256 here.

presets.py reads the texts from here; nothing else should.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib import resources
from typing import Any

SOURCE = "shared/notes/lab-texts.json"  # the project's notes (../shared/notes from a checkout)
SHA256 = "8eb255667a0749e654345e4c331d7515513ab8250556d222608d7b121e13ff4c"
FILE_NAME = "lab_texts.json"


def raw() -> bytes:
    """The shipped copy's bytes."""
    return resources.files("vllm_bench").joinpath(FILE_NAME).read_bytes()


def digest(content: bytes | None = None) -> str:
    """The sha256 of `content` (default: the shipped copy)."""
    return hashlib.sha256(raw() if content is None else content).hexdigest()


@cache
def texts() -> dict[str, Any]:
    """The labs' texts: {"lab1_tinyllama": {...}, "lab2_llama3_8b": {...}}."""
    doc: dict[str, Any] = json.loads(raw())
    return doc


def lab1() -> dict[str, Any]:
    section: dict[str, Any] = texts()["lab1_tinyllama"]
    return section


def lab2() -> dict[str, Any]:
    section: dict[str, Any] = texts()["lab2_llama3_8b"]
    return section
