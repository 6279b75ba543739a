"""The images' content keys (scripts/build-images.sh): an image is rebuilt exactly when one of
its inputs changes. Runs the real script (`--print-key`, `--list-inputs`) on a copy of the
repository, so no buildah, root or network is needed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
IMAGES = ("pause", "operator", "benchmark", "holder", "vllm-cpu")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The parts of the repository the images are built from, in a scratch folder."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for d in ("scripts", "images", "operator", "runner", "holder", "localenv"):
        shutil.copytree(REPO / d, tmp_path / d, ignore=ignore)
    for f in ("pyproject.toml", "README.md", ".dockerignore"):
        shutil.copy2(REPO / f, tmp_path / f)
    return tmp_path


def _run(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    res = subprocess.run(
        ["bash", str(repo / "scripts" / "build-images.sh"), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "VLLM_OPERATOR_IMAGE_BASE": "", **(env or {})},
        timeout=60,
    )
    return res.stdout


def keys(repo: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    lines = _run(repo, "--print-key", env=env).splitlines()
    out = dict(line.split() for line in lines)
    assert sorted(out) == sorted(IMAGES)
    assert _run(repo, "--print-key", "operator", env=env).strip() == out["operator"]
    return out


def inputs(repo: Path, name: str) -> list[str]:
    return _run(repo, "--list-inputs", name).split()


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {name for name in IMAGES if before[name] != after[name]}


def test_keys_are_stable_and_distinct(repo: Path) -> None:
    first = keys(repo)
    assert keys(repo) == first
    assert all(len(k) == 16 and int(k, 16) >= 0 for k in first.values())
    assert len(set(first.values())) == len(IMAGES)


def test_inputs_are_what_each_dockerfile_copies(repo: Path) -> None:
    bench = inputs(repo, "benchmark")
    assert "images/benchmark/Dockerfile" in bench
    assert {"runner/pyproject.toml", "runner/vllm_bench/cli.py"} <= set(bench)
    assert "pyproject.toml" not in bench  # the operator's distribution: not this image's
    assert any(f.startswith("runner/vllm_benchjob/") for f in bench)
    # the benchmark image leaves the operator's code out, so its key ignores it
    assert not any(f.startswith("operator/vllm_operator/") for f in bench)
    assert "operator/vllm_operator/api/spec.py" in inputs(repo, "operator")
    assert all(
        f.startswith(("operator/vllm_operator/", "images/", "pyproject", "README"))
        for f in inputs(repo, "operator")
    )
    assert inputs(repo, "vllm-cpu") == [
        "images/vllm-cpu/Dockerfile",
        "scripts/install-vllm.sh",
        "scripts/versions.env",
    ]
    assert inputs(repo, "pause") == ["images/pause/Dockerfile", "images/pause/main.go"]
    # the holder's image: its own distribution only
    holder = inputs(repo, "holder")
    assert {
        "images/holder/Dockerfile",
        "holder/pyproject.toml",
        "holder/vllm_holder/hold.py",
    } <= set(holder)
    assert all(f.startswith(("holder/", "images/holder/")) for f in holder)


def test_editing_a_copied_file_rebuilds_exactly_the_images_that_copy_it(repo: Path) -> None:
    before = keys(repo)
    cli = repo / "runner" / "vllm_bench" / "cli.py"
    cli.write_text(cli.read_text() + "\n# changed\n")
    # the operator's image holds the operator only (no runner, no harness)
    assert changed(before, keys(repo)) == {"benchmark"}

    before = keys(repo)
    spec = repo / "operator" / "vllm_operator" / "api" / "spec.py"
    spec.write_text(spec.read_text() + "\n# changed\n")
    assert changed(before, keys(repo)) == {"operator"}

    before = keys(repo)
    (repo / "runner" / "vllm_benchjob" / "new_module.py").write_text("X = 1\n")
    assert changed(before, keys(repo)) == {"benchmark"}

    before = keys(repo)
    hold = repo / "holder" / "vllm_holder" / "hold.py"
    hold.write_text(hold.read_text() + "\n# changed\n")
    assert changed(before, keys(repo)) == {"holder"}

    before = keys(repo)
    (repo / "localenv" / "vllm_localenv" / "new_module.py").write_text("X = 1\n")
    assert changed(before, keys(repo)) == set()  # the harness is in no image


def test_versions_and_dockerfiles_count_for_their_own_images(repo: Path) -> None:
    before = keys(repo)
    versions = repo / "scripts" / "versions.env"
    versions.write_text(versions.read_text().replace("VLLM_CPU_VERSION=", "VLLM_CPU_VERSION=9"))
    assert changed(before, keys(repo)) == {"vllm-cpu"}

    before = keys(repo)
    main_go = repo / "images" / "pause" / "main.go"
    main_go.write_text(main_go.read_text() + "\n// changed\n")
    assert changed(before, keys(repo)) == {"pause"}

    before = keys(repo)
    dockerfile = repo / "images" / "operator" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "\nLABEL x=y\n")
    assert changed(before, keys(repo)) == {"operator"}


def test_bytecode_and_timestamps_do_not_count(repo: Path) -> None:
    before = keys(repo)
    cache = repo / "runner" / "vllm_bench" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "cli.cpython-311.pyc").write_bytes(b"\0" * 16)
    os.utime(repo / "runner" / "vllm_bench" / "cli.py", (1, 1))
    assert keys(repo) == before


def test_another_base_image_rebuilds_everything_built_on_it(repo: Path) -> None:
    before = keys(repo)
    after = keys(repo, env={"VLLM_OPERATOR_IMAGE_BASE": "python:3.11.11-slim-bookworm"})
    assert changed(before, after) == {"operator", "benchmark", "holder", "vllm-cpu"}
