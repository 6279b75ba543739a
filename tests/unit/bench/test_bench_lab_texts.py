"""The runner's copy of the labs' texts (vllm_bench/lab_texts.json) is the labs' file, byte for
byte: its sha256 is the one lab_texts.py records, and where the checkout has the project's
notes (shared/notes/lab-texts.json, beside the checkout or inside it) that file's too, so
that neither is edited without the other. And the runner's wheel ships the copy."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import tomllib
from pathlib import Path

import pytest

from vllm_bench import lab_texts

REPO = Path(__file__).resolve().parents[3]
NOTES = [
    REPO / "shared" / "notes" / "lab-texts.json",
    REPO.parent / "shared" / "notes" / "lab-texts.json",
]
RECORDED_SHA256 = "8eb255667a0749e654345e4c331d7515513ab8250556d222608d7b121e13ff4c"


def test_the_runners_copy_has_the_recorded_digest() -> None:
    assert lab_texts.SHA256 == RECORDED_SHA256
    assert hashlib.sha256(lab_texts.raw()).hexdigest() == RECORDED_SHA256
    assert lab_texts.digest() == RECORDED_SHA256


def test_the_runners_copy_is_the_labs_file() -> None:
    shared = next((p for p in NOTES if p.is_file()), None)
    if shared is None:
        pytest.skip("no shared/notes/lab-texts.json here: checked against the recorded digest")
    assert hashlib.sha256(shared.read_bytes()).hexdigest() == lab_texts.SHA256, (
        f"{shared} changed: copy it over runner/vllm_bench/lab_texts.json and record its "
        "sha256 in lab_texts.py and this test"
    )
    assert shared.read_bytes() == lab_texts.raw()


def test_the_texts_hold_both_labs() -> None:
    doc = json.loads(lab_texts.raw())
    assert set(doc) == {"lab1_tinyllama", "lab2_llama3_8b"}
    assert lab_texts.texts() == doc
    assert len(lab_texts.lab1()["batching_prompts"]) == 32
    assert len(lab_texts.lab2()["concurrent_prompts"]) == 10


def test_the_runners_wheel_ships_the_copy() -> None:
    pyproject = tomllib.loads((REPO / "runner" / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["vllm_bench"]
    assert any(fnmatch.fnmatch(lab_texts.FILE_NAME, p) for p in patterns)
    assert (REPO / "runner" / "vllm_bench" / lab_texts.FILE_NAME).is_file()
