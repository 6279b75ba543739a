"""The four distributions hold what they say (issue 20, item 2): the operator's wheel is the
operator alone (no harness, no runner, no console script of theirs), the runner's holds the
runner and the Job's wrapper with its result schema, the harness is a wheel of its own, and so
is the scale-to-zero holder (issue 34), which depends on aiohttp and prometheus-client only.
Built here as pip builds them (setuptools, offline: the dev environment has it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _copy(project: Path, dest: Path) -> Path:
    """The project's files as git has them (a build writes build/ and *.egg-info beside its
    sources: the checkout stays clean)."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "."],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for f in files:
        if (project / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(project / f, dest / f)
    return dest


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    out: dict[str, zipfile.ZipFile] = {}
    projects = {
        "operator": REPO,
        "runner": REPO / "runner",
        "localenv": REPO / "localenv",
        "holder": REPO / "holder",
    }
    for name, project in projects.items():
        source = tmp_path_factory.mktemp(f"{name}-src")
        if name == "operator":  # (the repository's root: its pyproject, README and operator/)
            for part in ("pyproject.toml", "README.md"):
                shutil.copy2(REPO / part, source / part)
            _copy(REPO / "operator", source / "operator")
        else:
            _copy(project, source)
        dest = tmp_path_factory.mktemp(name)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "--disable-pip-version-check",
                "-w",
                str(dest),
                str(source),
            ],
            check=True,
            capture_output=True,
        )
        (wheel,) = dest.glob("*.whl")
        out[name] = zipfile.ZipFile(wheel)
    return out


def top_level(wheel: zipfile.ZipFile) -> set[str]:
    return {
        n.split("/", 1)[0]
        for n in wheel.namelist()
        if not n.split("/", 1)[0].endswith(".dist-info")
    }


def scripts(wheel: zipfile.ZipFile) -> str:
    (ep,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    return wheel.read(ep).decode()


def test_the_operators_wheel_is_the_operator_alone(wheels: dict[str, zipfile.ZipFile]) -> None:
    w = wheels["operator"]
    assert top_level(w) == {"vllm_operator"}
    assert "vllm_operator/runtime/main.py" in w.namelist()
    assert "vllm-operator = vllm_operator.runtime.main:main" in scripts(w)
    assert "vllm-localenv" not in scripts(w)
    assert "vllm-bench" not in scripts(w)


def test_the_runners_wheel_holds_the_runner_its_schema_and_the_jobs_wrapper(
    wheels: dict[str, zipfile.ZipFile],
) -> None:
    w = wheels["runner"]
    assert top_level(w) == {"vllm_bench", "vllm_benchjob"}
    assert "vllm_bench/schema/result.schema.json" in w.namelist()
    assert "vllm-bench = vllm_bench.cli:main" in scripts(w)
    metadata = next(n for n in w.namelist() if n.endswith(".dist-info/METADATA"))
    requires = [
        line for line in w.read(metadata).decode().splitlines() if line.startswith("Requires-Dist")
    ]
    assert not any("kopf" in r for r in requires), requires  # nothing of the operator's


def test_the_harness_is_a_distribution_of_its_own(wheels: dict[str, zipfile.ZipFile]) -> None:
    w = wheels["localenv"]
    assert top_level(w) == {"vllm_localenv"}
    assert "vllm-localenv = vllm_localenv.__main__:main" in scripts(w)


def test_the_holder_is_a_small_distribution_of_its_own(wheels: dict[str, zipfile.ZipFile]) -> None:
    w = wheels["holder"]
    assert top_level(w) == {"vllm_holder"}
    assert "vllm_holder/__main__.py" in w.namelist()
    assert "vllm-holder = vllm_holder.__main__:main" in scripts(w)
    metadata = next(n for n in w.namelist() if n.endswith(".dist-info/METADATA"))
    requires = sorted(
        line.split(":", 1)[1].strip().split(">")[0]
        for line in w.read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist")
    )
    assert requires == ["aiohttp", "prometheus-client"]
