#!/usr/bin/env bash
# `make setup`: everything the demo and the tests need, in two chains at once.
#
# Cold, the steps one after another took 46.7 min on a 2-core machine, and most of it was of two
# kinds: Go builds (prometheus-adapter, Helm, the Kubernetes binaries, etcd, kwok, CoreDNS:
# CPU-bound) and the Python side (the operator's venv, the vLLM venv, the container images:
# downloads, debootstrap and layer writes, much of it waiting on the network and the disk).
# So, after the host packages (apt holds a lock: one apt at a time, first):
#   chain go: monitoring -> helm -> control-plane -> node (CoreDNS)
#   chain py: venv -> vllm -> images
# Each chain's output goes to $CACHE/build-logs/setup-<chain>.log and, prefixed, to stdout;
# a failed chain fails setup and its log's tail is printed. Warm, every step is a cache hit and
# the whole takes a few seconds. SETUP_SERIAL=1 runs the steps one after another.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CACHE="${VLLM_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}"
LOGS="$CACHE/build-logs"
mkdir -p "$LOGS"
MAKE="${MAKE:-make}"
start=$(date +%s)

scripts/install-node-deps.sh

chain_go() { "$MAKE" --no-print-directory monitoring helm control-plane build-node; }
chain_py() { "$MAKE" --no-print-directory venv vllm build-images; }

if [ "${SETUP_SERIAL:-}" = 1 ]; then
  chain_go
  chain_py
  echo "setup: ready in $(( $(date +%s) - start ))s (serial)"
  exit 0
fi

run_chain() {  # name: runs chain_<name>; its output to its log and, prefixed, to stdout
  local name=$1 t0 rc=0
  t0=$(date +%s)
  "chain_$name" 2>&1 | tee "$LOGS/setup-$name.log" | sed -u "s/^/[$name] /" || rc=$?
  echo "$rc $(( $(date +%s) - t0 ))" >"$LOGS/setup-$name.rc"
}

rm -f "$LOGS"/setup-go.rc "$LOGS"/setup-py.rc
run_chain go &
run_chain py &
wait

failed=0
for name in go py; do
  read -r rc secs <"$LOGS/setup-$name.rc" || { rc=1; secs=?; }
  echo "setup: chain $name exited $rc after ${secs}s"
  if [ "$rc" != 0 ]; then
    failed=1
    echo "setup: the last lines of $LOGS/setup-$name.log:" >&2
    tail -n 30 "$LOGS/setup-$name.log" >&2
  fi
done
[ "$failed" = 0 ] || { echo "setup: FAILED" >&2; exit 1; }
echo "setup: ready in $(( $(date +%s) - start ))s"
