"""The host's Debian packages and the commands the project runs from them.

One list, scripts/host-packages.tsv: scripts/install-node-deps.sh installs every package in
it, the real node checks the commands of its rows before it starts (node.py), and
scripts/prove-fresh-install.sh checks every command in an empty Debian root after the install.
A missing command's message therefore names the script that really installs its package.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

LIST = Path(__file__).resolve().parents[2] / "scripts" / "host-packages.tsv"
INSTALLER = "scripts/install-node-deps.sh"


@dataclass(frozen=True)
class HostPackage:
    name: str
    purpose: str  # node | images | monitoring | chart
    commands: tuple[str, ...]  # names looked up on PATH, or absolute paths


def parse(text: str) -> list[HostPackage]:
    packages = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not all(f.strip() for f in fields):
            raise ValueError(
                f"{LIST.name}:{number}: want 'package<TAB>purpose<TAB>commands', got {line!r}"
            )
        packages.append(HostPackage(fields[0], fields[1], tuple(fields[2].split())))
    return packages


def load() -> list[HostPackage]:
    return parse(LIST.read_text())


def _present(command: str) -> bool:
    if command.startswith("/"):
        return Path(command).exists()
    return shutil.which(command) is not None


def missing(purposes: tuple[str, ...] | None = None) -> list[str]:
    """'command (Debian package)' for every listed command that is not on this host."""
    return [
        f"{command} (Debian {package.name})"
        for package in load()
        if purposes is None or package.purpose in purposes
        for command in package.commands
        if not _present(command)
    ]


def install_hint() -> str:
    return f"run {INSTALLER} (or `make node`), which installs every package in {LIST.name}"


def check(purposes: tuple[str, ...] | None = None) -> int:
    """Prints what is missing (and how to install it) or how much is present; the exit code."""
    absent = missing(purposes)
    if absent:
        print("missing: " + ", ".join(absent) + "; " + install_hint())
        return 1
    listed = [p for p in load() if purposes is None or p.purpose in purposes]
    count = sum(len(p.commands) for p in listed)
    print(f"host commands present: {count} of {len(listed)} packages")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standard library only, so that it runs on a bare host before anything is installed:
    `python3 localenv/vllm_localenv/host_packages.py [--purpose node]`."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--purpose",
        action="append",
        choices=sorted({p.purpose for p in load()}),
        help="only the packages for this purpose (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    return check(tuple(args.purpose) if args.purpose else None)


if __name__ == "__main__":
    sys.exit(main())
