#!/usr/bin/env python3
"""Build an offline wheel set for a GPU host that has no network (issue 13, item 1).

Given a vLLM version, the GPU host's ``pip list --format=freeze`` and its Python version, this
resolves vLLM (plus the benchmark runner's dependencies) for that host's interpreter and
platform, keeps the host's pinned stack (torch, torchvision, torchaudio, transformers, triton),
constrains the CUDA compiler wheels to the host's CUDA, subtracts every package the host already
has at the same version, downloads the rest as wheels and packs them into ONE tar cut into
pieces of a given size:

    OUT/pieces/offline-wheels.tar.part000 ...   the pieces (carry them one per transfer)
    OUT/install.sh                              the same script that is inside the tar
    OUT/manifest.json                           wheels, versions, sizes, what they replace, argv

Inside the tar: ``wheels/*.whl``, ``install.sh``, ``SHA256SUMS`` and ``manifest.json``. On the
host, ``install.sh`` needs nothing but the host's Python: it joins the pieces (``cat``), checks
the tar's SHA-256 (``hashlib``), untars, checks every wheel against ``SHA256SUMS`` and runs
``python3 -m pip install --no-index --no-deps wheels/*.whl``.

Resolution uses ``pip install --dry-run --report`` (wheel metadata only, so torch and the CUDA
libraries the host already has are never downloaded), then ``pip download --no-deps`` of exactly
the missing ``name==version`` set with the same platform tags; each wheel's SHA-256 is checked
against the hash the index published for it.

Uses the standard library and pip only. See docs/air-gapped.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pip._vendor.packaging.requirements import Requirement  # pip is this script's one dependency

MIB = 1024 * 1024
REPO = Path(__file__).resolve().parent.parent

# GPU.md: CUDA 13.0 on the H200 host; humming-kernels[cu13] pulls these unpinned (13.5).
DEFAULT_CONSTRAINTS = (
    "nvidia-cuda-nvcc<13.1",
    "nvidia-nvvm<13.1",
    "nvidia-cuda-crt<13.1",
    "nvidia-cuda-cccl<13.1",
)
# GPU.md: the H200 host's stack that vLLM 0.26.0 pins exactly; never replace it.
DEFAULT_PINS = (
    "torch==2.11.0",
    "torchvision==0.26.0",
    "torchaudio==2.11.0",
    "transformers==5.17.0",
    "triton==3.6.0",
)
# numba 0.65 refuses numpy > 2.4 at import: the host's own numba is used.
DEFAULT_EXCLUDE = ("numba", "llvmlite")
# Brought never, when the host has them at any version: replacing the host's numpy, protobuf or
# setuptools under torch/jax is riskier than the version caps that vLLM's dependencies state
# (GPU.md: numpy 2.5.2 vs mistral-common's cap, protobuf 7.36 vs cutlass's, setuptools 81 —
# none of them mattered for serving).
DEFAULT_KEEP_HOST = ("numpy", "protobuf", "setuptools")
# The benchmark runner's own dependencies (pyproject's `bench` extra).
DEFAULT_EXTRA = (
    "aiohttp>=3.9",
    "prometheus-client>=0.20",
    "prometheus-api-client>=0.5",
    "matplotlib>=3.8",
    "rich>=13",
    "jsonschema>=4.20",
)
# torch's nvidia-nccl-cu13 exists only as manylinux_2_18; pip matches each tag exactly.
MANYLINUX_MINORS = range(5, 40)
LEGACY_PLATFORMS = ("manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def public_version(version: str) -> str:
    """`2.11.0+cu130` -> `2.11.0`: a local label does not make another release."""
    return version.split("+", 1)[0]


@dataclass(frozen=True)
class Wanted:
    name: str
    version: str
    url: str
    sha256: str | None
    requires: tuple[str, ...] = ()


def host_stack_closure(wanted: list[Wanted], roots: list[str], python_version: str) -> set[str]:
    """Canonical names that the pinned host stack (torch & co.) depends on, transitively.

    The host already runs that stack, so a package in this closure that the freeze names
    without a version is taken to be there at a version the stack accepts: its wheel (the
    CUDA libraries are hundreds of MiB) is not brought.
    """
    by_name = {w.name: w for w in wanted}
    env = {"python_version": python_version, "sys_platform": "linux", "platform_system": "Linux"}
    env |= {"platform_machine": "x86_64", "implementation_name": "cpython", "os_name": "posix"}
    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(canonical(r), frozenset()) for r in roots]
    while todo:
        name, extras = todo.pop()
        if (key := f"{name}{sorted(extras)}") in seen or name not in by_name:
            continue
        seen.add(key)
        for spec in by_name[name].requires:
            req = Requirement(spec)
            if req.marker is not None and not any(
                req.marker.evaluate({**env, "extra": extra}) for extra in (extras or {""})
            ):
                continue
            todo.append((canonical(req.name), frozenset(req.extras)))
    return {key.split("[", 1)[0] for key in seen}


def parse_freeze(text: str) -> dict[str, str | None]:
    """Host packages by canonical name -> version; None where the file names no version."""
    host: dict[str, str | None] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        if " @ " in line:  # `name @ file:///...` (pip freeze of a local install)
            host[canonical(line.split(" @ ", 1)[0])] = None
            continue
        name, sep, version = line.partition("==")
        host[canonical(name.strip())] = version.strip() if sep else None
    return host


def platform_args(python_version: str) -> list[str]:
    nodot = python_version.replace(".", "")
    args = ["--only-binary=:all:", "--python-version", python_version]
    args += ["--implementation", "cp", "--abi", f"cp{nodot}", "--abi", "abi3", "--abi", "none"]
    for minor in MANYLINUX_MINORS:
        args += ["--platform", f"manylinux_2_{minor}_x86_64"]
    for legacy in LEGACY_PLATFORMS:
        args += ["--platform", legacy]
    return args


def pip_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PIP_FIND_LINKS", None)  # local wheel folders are built for this machine, not the host
    env.setdefault("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    env.setdefault("PIP_DEFAULT_TIMEOUT", "180")
    return env


def resolve(
    pip: list[str], requirements: list[str], constraints: Path, python_version: str, work: Path
) -> list[Wanted]:
    report = work / "report.json"
    cmd = [*pip, "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report)]
    cmd += ["--target", str(work / "never-written"), "-c", str(constraints)]
    cmd += platform_args(python_version)
    cmd += requirements
    print("resolving:", shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=pip_env())
    data = json.loads(report.read_text())
    wanted = []
    for item in data["install"]:
        meta = item["metadata"]
        info = item["download_info"]
        hashes = info.get("archive_info", {}).get("hashes", {})
        wanted.append(
            Wanted(
                name=canonical(meta["name"]),
                version=meta["version"],
                url=info["url"],
                sha256=hashes.get("sha256"),
                requires=tuple(meta.get("requires_dist", [])),
            )
        )
    return sorted(wanted, key=lambda w: w.name)


def subtract(
    wanted: list[Wanted],
    host: dict[str, str | None],
    exclude: set[str],
    keep_host: set[str],
    host_stack: set[str],
) -> tuple[list[Wanted], list[dict[str, str | None]]]:
    """Split the resolve into what to bring and what to skip (with the reason)."""
    bring: list[Wanted] = []
    skipped: list[dict[str, str | None]] = []
    for w in wanted:
        have = host.get(w.name, "") if w.name in host else None
        if w.name in exclude:
            reason = "excluded"
        elif w.name in keep_host and w.name in host:
            reason = f"host keeps its own ({have or 'version unknown'})"
        elif have and public_version(have) == public_version(w.version):
            reason = "host has it"
        elif w.name in host and not have and w.name in host_stack:
            reason = "host's torch stack needs it (version unknown)"
        else:
            bring.append(w)
            continue
        skipped.append({"name": w.name, "version": w.version, "host": have, "reason": reason})
    return bring, skipped


def download(
    pip: list[str], bring: list[Wanted], python_version: str, dest: Path, work: Path
) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    reqs = work / "bring.txt"
    reqs.write_text("".join(f"{w.name}=={w.version}\n" for w in bring))
    cmd = [*pip, "download", "--no-deps", "--quiet", "-d", str(dest), "-r", str(reqs)]
    cmd += platform_args(python_version)
    print(f"downloading {len(bring)} wheels into {dest}", flush=True)
    subprocess.run(cmd, check=True, env=pip_env())
    by_name: dict[str, Path] = {}
    for path in dest.glob("*.whl"):
        by_name[canonical(path.name.split("-", 1)[0])] = path
    files = []
    for w in bring:
        path = by_name.get(w.name)
        if path is None:
            raise SystemExit(f"pip download did not produce a wheel for {w.name}=={w.version}")
        if w.sha256 and sha256_of(path) != w.sha256:
            raise SystemExit(f"{path.name}: SHA-256 differs from the index's {w.sha256}")
        files.append(path)
    stale = set(dest.glob("*.whl")) - set(files)
    for path in stale:  # wheels of an earlier build that this resolve no longer wants
        path.unlink()
    return files


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


INSTALL_SH = r"""#!/bin/sh
# Installs the offline wheel set on a host with no network; needs only that host's Python.
#   sh install.sh [PIECES_DIR] [PYTHON]
# PIECES_DIR holds offline-wheels.tar.part000...; PYTHON defaults to $PYTHON or python3.
# Run from inside the unpacked tar (wheels/ next to this script) it skips the join.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
py=${2:-${PYTHON:-python3}}
if [ ! -d "$here/wheels" ]; then
  pieces=${1:-$here/pieces}
  work=${WORK:-$here/unpacked}
  mkdir -p "$work"
  echo "joining $(ls "$pieces"/offline-wheels.tar.part* | wc -l) pieces from $pieces"
  cat "$pieces"/offline-wheels.tar.part* > "$work/offline-wheels.tar"
  "$py" - "$work/offline-wheels.tar" "$here/TAR_SHA256" <<'EOF'
import hashlib, sys
tar, expected = sys.argv[1], open(sys.argv[2]).read().split()[0]
h = hashlib.sha256()
with open(tar, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
if h.hexdigest() != expected:
    sys.exit(f"tar SHA-256 {h.hexdigest()} != {expected}: a piece is missing or damaged")
print("tar SHA-256 ok")
EOF
  tar -xf "$work/offline-wheels.tar" -C "$work"
  rm -f "$work/offline-wheels.tar"
  exec sh "$work/install.sh" - "$py"
fi
cd "$here"
"$py" - <<'EOF'
import hashlib, sys
bad = []
for line in open("SHA256SUMS"):
    digest, name = line.split(None, 1)
    name = name.strip().lstrip("*")
    h = hashlib.sha256()
    with open(name, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    if h.hexdigest() != digest:
        bad.append(name)
if bad:
    sys.exit(f"checksum mismatch: {bad}")
print("wheel checksums ok")
EOF
"$py" -m pip install --no-index --no-deps --no-cache-dir wheels/*.whl
"$py" -c 'import json; m = json.load(open("manifest.json"))
print("installed", len(m["wheels"]), "wheels for vllm", m["vllm_version"])'
"""


def write_bundle(
    *,
    files: list[Path],
    bring: list[Wanted],
    skipped: list[dict[str, str | None]],
    host: dict[str, str | None],
    args: argparse.Namespace,
    out: Path,
) -> dict[str, object]:
    out.mkdir(parents=True, exist_ok=True)
    sums = "".join(f"{sha256_of(p)}  wheels/{p.name}\n" for p in files)
    wheels = [
        {
            "name": w.name,
            "version": w.version,
            "file": p.name,
            "bytes": p.stat().st_size,
            "replaces_host": host.get(w.name) if w.name in host else None,
        }
        for w, p in zip(bring, files, strict=True)
    ]
    manifest: dict[str, object] = {
        "vllm_version": args.vllm_version,
        "python_version": args.python_version,
        "host_freeze": str(args.host_freeze),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "constraints": list(args.constraint),
        "pins": list(args.pin),
        "extra": list(args.extra),
        "exclude": sorted(args.exclude),
        "keep_host": sorted(args.keep_host),
        "wheel_count": len(wheels),
        "wheel_bytes": sum(int(str(w["bytes"])) for w in wheels),
        "wheels": wheels,
        "skipped": skipped,
        "install": "python3 -m pip install --no-index --no-deps wheels/*.whl",
    }
    tar_path = out / "offline-wheels.tar"
    with tempfile.TemporaryDirectory() as tmp:
        meta = Path(tmp)
        (meta / "SHA256SUMS").write_text(sums)
        (meta / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        (meta / "install.sh").write_text(INSTALL_SH)
        with tarfile.open(tar_path, "w") as tar:  # no compression: wheels are zips already
            for name in ("install.sh", "SHA256SUMS", "manifest.json"):
                tar.add(meta / name, arcname=name)
            for p in files:
                tar.add(p, arcname=f"wheels/{p.name}")
    tar_sha = sha256_of(tar_path)
    pieces_dir = out / "pieces"
    pieces_dir.mkdir(exist_ok=True)
    for old in pieces_dir.glob("offline-wheels.tar.part*"):
        old.unlink()
    piece_bytes = args.piece_mib * MIB
    pieces = []
    with tar_path.open("rb") as f:
        for index in range(10_000):
            chunk = f.read(piece_bytes)
            if not chunk:
                break
            piece = pieces_dir / f"offline-wheels.tar.part{index:03d}"
            piece.write_bytes(chunk)
            pieces.append({"file": piece.name, "bytes": len(chunk)})
    tar_path.unlink()
    (out / "TAR_SHA256").write_text(f"{tar_sha}  offline-wheels.tar\n")
    (out / "install.sh").write_text(INSTALL_SH)
    (out / "install.sh").chmod(0o755)
    manifest["tar_sha256"] = tar_sha
    manifest["pieces"] = pieces
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--vllm-version", default="0.26.0")
    p.add_argument(
        "--host-freeze",
        type=Path,
        default=REPO / "benchmarks/gpu/h200-freeze.txt",
        help="the GPU host's `pip list --format=freeze` (default: %(default)s)",
    )
    p.add_argument("--python-version", default="3.12", help="the GPU host's Python (3.12)")
    p.add_argument(
        "--constraint", action="append", default=None, help="repeatable; default: CUDA 13.0 caps"
    )
    p.add_argument("--pin", action="append", default=None, help="repeatable; default: host stack")
    p.add_argument(
        "--extra", action="append", default=None, help="more requirements; default: runner deps"
    )
    p.add_argument("--exclude", action="append", default=None, help="never bring (numba...)")
    p.add_argument(
        "--keep-host", action="append", default=None, help="never bring if the host has any"
    )
    p.add_argument("--piece-mib", type=int, default=58, help="piece size in MiB (default 58)")
    p.add_argument("--out", type=Path, default=REPO / ".gpu-wheels", help="an ignored folder")
    p.add_argument("--pip", default=f"{sys.executable} -m pip", help="pip command to run")
    p.add_argument("--resolve-only", action="store_true", help="print the set, download nothing")
    args = p.parse_args(argv)
    args.constraint = args.constraint or list(DEFAULT_CONSTRAINTS)
    args.pin = args.pin or list(DEFAULT_PINS)
    args.extra = args.extra if args.extra is not None else list(DEFAULT_EXTRA)
    args.exclude = {canonical(n) for n in (args.exclude or DEFAULT_EXCLUDE)}
    args.keep_host = {canonical(n) for n in (args.keep_host or DEFAULT_KEEP_HOST)}

    host = parse_freeze(args.host_freeze.read_text())
    pip = shlex.split(args.pip)
    work = args.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join([*args.constraint, *args.pin]) + "\n")
    requirements = [f"vllm=={args.vllm_version}", *args.pin, *args.extra]
    wanted = resolve(pip, requirements, constraints, args.python_version, work)
    stack = host_stack_closure(wanted, [pin.split("=")[0] for pin in args.pin], args.python_version)
    bring, skipped = subtract(wanted, host, args.exclude, args.keep_host, stack)
    print(f"resolved {len(wanted)} packages; bringing {len(bring)}, skipping {len(skipped)}")
    for s in skipped:
        if s["reason"] != "host has it":
            print(f"  skip {s['name']}=={s['version']}: {s['reason']}")
    for w in bring:
        host_version = host.get(w.name) if w.name in host else None
        note = f" (replaces host {host_version or 'version unknown'})" if w.name in host else ""
        print(f"  bring {w.name}=={w.version}{note}")
    if args.resolve_only:
        return 0
    files = download(pip, bring, args.python_version, args.out / "wheels", work)
    manifest = write_bundle(
        files=files, bring=bring, skipped=skipped, host=host, args=args, out=args.out
    )
    pieces = manifest["pieces"]
    assert isinstance(pieces, list)
    print(
        f"{manifest['wheel_count']} wheels, {int(str(manifest['wheel_bytes'])) / MIB:.0f} MiB, "
        f"{len(pieces)} pieces of <= {args.piece_mib} MiB in {args.out / 'pieces'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
