#!/usr/bin/env bash
# CI as a new machine and a loaded one see it (issue 30, item 2): `.ci/run` on a fresh clone of
# this checkout's HEAD, optionally with CPU hogs beside it and with the build caches moved aside.
#
#   scripts/ci-under-load.sh [--hog N] [--cold] [--runs K]
#
#   --hog N   N busy processes (one per core: 2 on the project's machine) run beside CI for its
#             whole length, at CI's own priority (a plain Python loop: no package to install)
#   --cold    ~/.cache/vllm-operator is moved aside for the run (restored afterwards, whatever
#             the outcome): every build (control plane, monitoring, images, vLLM) from nothing
#   --runs K  K runs back to back, each from its own fresh clone (stops at the first red one)
#
# Prints one line per run (rc, seconds, hog, cold) and keeps each run's log under
# /tmp/ci-under-load/; exits with the first non-zero rc.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
hog=0 cold=0 runs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --hog) hog="$2"; shift 2 ;;
    --cold) cold=1; shift ;;
    --runs) runs="$2"; shift 2 ;;
    *) echo "usage: $0 [--hog N] [--cold] [--runs K]" >&2; exit 2 ;;
  esac
done
out=/tmp/ci-under-load
mkdir -p "$out"
cache="$HOME/.cache/vllm-operator"
aside="$cache.aside-$$"
hogs=()
cleanup() {
  for p in "${hogs[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  if [ -d "$aside" ]; then
    rm -rf "$cache"
    mv "$aside" "$cache"
    echo "ci-under-load: ~/.cache/vllm-operator restored"
  fi
}
trap cleanup EXIT

for i in $(seq 1 "$runs"); do
  clone="$out/clone-$i"
  rm -rf "$clone"
  git clone -q "$repo" "$clone"
  git -C "$clone" checkout -q "$(git -C "$repo" rev-parse HEAD)"
  if [ "$cold" = 1 ] && [ "$i" = 1 ] && [ -d "$cache" ]; then
    mv "$cache" "$aside"
  fi
  hogs=()
  for _ in $(seq 1 "$hog"); do
    python3 -c 'while True: pass' &
    hogs+=("$!")
  done
  start=$(date +%s)
  rc=0
  (cd "$clone" && bash .ci/run) >"$out/run-$i.log" 2>&1 || rc=$?
  secs=$(( $(date +%s) - start ))
  for p in "${hogs[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  hogs=()
  echo "ci-under-load: run $i rc=$rc ${secs}s hog=$hog cold=$([ "$cold" = 1 ] && [ "$i" = 1 ] && echo yes || echo no) commit=$(git -C "$clone" rev-parse --short HEAD) log=$out/run-$i.log"
  rm -rf "$clone"
  [ "$rc" = 0 ] || exit "$rc"  # (a red cold run: the old caches come back, cleanup)
  # a green cold run's caches are the new ones (kept: later runs are warm on them)
  if [ -d "$aside" ]; then rm -rf "$aside"; fi
done
