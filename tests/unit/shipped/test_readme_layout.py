"""The README's Layout section is true to the tree: it names every top-level folder, every
package under operator/, runner/, holder/ and localenv/ and every module (and subpackage) of
operator/vllm_operator, and nothing that does not exist. The README stays the front door:
its quick start is the two commands CI and the demo run."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from vllm_localenv.cluster import REPO_ROOT

README = REPO_ROOT / "README.md"
OPERATOR = REPO_ROOT / "operator"


def layout_paths() -> list[str]:
    """The paths of the Layout section's block, repo-relative: a line indented deeper than a
    folder's line names something inside that folder."""
    text = README.read_text()
    section = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert section, "README.md has no ## Layout section"
    block = re.search(r"^```\n(.*?)^```", section[1], flags=re.MULTILINE | re.DOTALL)
    assert block, "the Layout section has no code block"
    paths: list[str] = []
    parents: list[tuple[int, str]] = []  # (indent, folder path)
    for line in block[1].splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        name = line.split()[0]
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = (parents[-1][1] if parents else "") + name
        paths.append(path)
        if name.endswith("/"):
            parents.append((indent, path))
    return paths


def top_level_folders() -> set[str]:
    """Folders at the top of the repository that hold files git knows (tracked, or new and not
    ignored): .venv, .state and the tools' caches are not part of the tree."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return {
        f.split("/", 1)[0]
        for f in files
        if "/" in f and (REPO_ROOT / f).exists() and (REPO_ROOT / f.split("/", 1)[0]).is_dir()
    }


def packages(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}


def children(paths: list[str], folder: str) -> set[str]:
    """The names the Layout lists directly inside `folder` (sub-folders without their /)."""
    out = set()
    for p in paths:
        if p.startswith(folder) and p != folder:
            rest = p[len(folder) :].rstrip("/")
            if "/" not in rest:
                out.add(rest)
    return out


def test_every_path_the_layout_names_exists() -> None:
    missing = [p for p in layout_paths() if not (REPO_ROOT / p).exists()]
    assert not missing, f"README's Layout names what does not exist: {missing}"


def test_the_layout_names_every_top_level_folder() -> None:
    named = {p.split("/", 1)[0] for p in layout_paths()}
    assert top_level_folders() - named == set(), "top-level folders missing from the Layout"
    assert named - top_level_folders() == set(), "the Layout names folders the tree lacks"


@pytest.mark.parametrize("root", ["operator", "runner", "holder", "localenv"])
def test_the_layout_names_every_package_of_each_distribution(root: str) -> None:
    named = children(layout_paths(), f"{root}/")
    found = packages(REPO_ROOT / root)
    assert found, f"{root}/ holds no package"
    assert named == found, f"missing: {found - named}, not a package: {named - found}"


def test_the_layout_names_every_module_of_the_operator() -> None:
    """Every module and subpackage of vllm_operator, and every module of each subpackage
    the Layout opens (a subpackage with no line inside it is described on its own line)."""
    paths = layout_paths()
    folders = [OPERATOR / "vllm_operator"]
    while folders:
        folder = folders.pop()
        prefix = f"{folder.relative_to(REPO_ROOT)}/"
        named = children(paths, prefix)
        subpackages = packages(folder)
        tree = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"} | subpackages
        if folder != OPERATOR / "vllm_operator" and not named:
            continue
        assert named == tree, (
            f"{prefix}: missing: {sorted(tree - named)}, not in the tree: {sorted(named - tree)}"
        )
        folders += [folder / s for s in subpackages]


def test_the_quick_start_is_two_commands() -> None:
    text = README.read_text()
    quick = re.search(r"^## Quick start.*?^```bash\n(.*?)^```", text, flags=re.M | re.S)
    assert quick, "README.md has no quick start block"
    commands = [line.split("#")[0].strip() for line in quick[1].splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]


def test_the_readme_links_resolve() -> None:
    """Relative links of the README point at files that exist, and no anchor is left over
    from a section that moved to docs/."""
    text = README.read_text()
    anchors = re.findall(r"\]\(#([^)]+)\)", text)
    headings = {
        re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
        for h in re.findall(r"^#+ (.*)$", text, flags=re.M)
    }
    assert set(anchors) <= headings, set(anchors) - headings
    for target in re.findall(r"\]\((?!https?://|#)([^)#]+)", text):
        assert (REPO_ROOT / target).exists(), target
