"""The host's packages come from one list (scripts/host-packages.tsv): the install script
installs exactly its packages, the real node checks its commands, and every command the local
environment runs or a test looks up is either listed there, built by the project's scripts,
part of the machine image, or optional by design. Adding a tool without listing it fails here."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from vllm_localenv import host_packages, node

ROOT = Path(__file__).resolve().parents[3]

# on every machine of the project's kind before any script runs (the env's polyglot image)
BASE_SYSTEM = {"sh", "bash", "tar", "kill", "id", "python", "python3", "git", "go", "timeout"}
# built into ~/.cache/vllm-operator/bin by scripts/build-*.sh (cached by version)
BUILT_BY_SCRIPTS = {"kubectl", "helm", "vllm-bench"}
# optional by design: the kind e2e tier is skipped cleanly where Docker is absent
OPTIONAL = {"docker", "kind"}


def _listed_commands() -> set[str]:
    return {c for p in host_packages.load() for c in p.commands}


def test_install_script_installs_exactly_the_listed_packages() -> None:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-node-deps.sh"), "--list"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert out == [p.name for p in host_packages.load()]
    assert "nftables" in out  # the package a fresh machine once lacked


def test_the_node_checks_every_node_row_and_names_the_installer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(host_packages, "_present", lambda command: command != "nft")
    assert node.missing_host_tools() == ["nft (Debian nftables)"]
    assert host_packages.INSTALLER in host_packages.install_hint()
    node_rows = [p for p in host_packages.load() if p.purpose == "node"]
    assert {"containerd", "runc", "nft", "conntrack", "/usr/lib/cni/bridge"} <= {
        c for p in node_rows for c in p.commands
    }


def test_every_command_run_or_looked_up_is_accounted_for() -> None:
    # commands the local environment runs (run("ip", ...), Popen(["tar", ...]), which("nft"))
    # and tools the tests look up with shutil.which(); the unit tests' own run() calls use
    # placeholder names and are not scanned
    runs = re.compile(
        r"""(?:\brun\(\s*|Popen\(\s*\[\s*|subprocess\.run\(\s*\[\s*|which\()"""
        r"""["']([A-Za-z][A-Za-z0-9_.+-]*)["']"""
    )
    which = re.compile(r"""which\(["']([A-Za-z][A-Za-z0-9_.+-]*)["']""")
    used: dict[str, str] = {}
    for path in sorted((ROOT / "localenv" / "vllm_localenv").glob("*.py")):
        for name in runs.findall(path.read_text()):
            used.setdefault(name, str(path.relative_to(ROOT)))
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for name in which.findall(path.read_text()):
            used.setdefault(name, str(path.relative_to(ROOT)))
    assert {"ip", "nft", "iptables-restore", "buildah"} <= used.keys()  # the scan sees them
    known = _listed_commands() | BASE_SYSTEM | BUILT_BY_SCRIPTS | OPTIONAL
    unaccounted = {name: where for name, where in used.items() if name not in known}
    assert not unaccounted, (
        f"commands used but in no list: {unaccounted}; add their Debian package to "
        "scripts/host-packages.tsv, or build them in scripts/"
    )


def test_parse_names_the_line_of_a_malformed_row() -> None:
    with pytest.raises(ValueError, match=":2:"):
        host_packages.parse("containerd\tnode\tcontainerd\nbroken row\n")
