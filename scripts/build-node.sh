#!/usr/bin/env bash
# Builds what the real node needs beyond the Kubernetes binaries (kubelet and kube-proxy come
# from scripts/build-control-plane.sh): CoreDNS, from the Go module proxy, cached by version.
# The Debian packages (containerd, runc, CNI plugins, iptables, ...) come from
# scripts/install-node-deps.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/versions.env
source "$ROOT/scripts/versions.env"
CACHE="${VLLM_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}"
BIN="$CACHE/bin"
LOGS="$CACHE/build-logs"
mkdir -p "$BIN" "$LOGS"
die() { echo "build-node: ERROR: $*" >&2; exit 1; }
command -v go >/dev/null || die "the go command is not installed (needed to build CoreDNS)"
if [ -x "$BIN/coredns" ] && [ "$(cat "$BIN/coredns.version" 2>/dev/null)" = "v$COREDNS_VERSION" ]; then
  echo "coredns v$COREDNS_VERSION present, skipping"; exit 0
fi
t0=$(date +%s)
if ! env GOBIN="$BIN" GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
    go install -trimpath -ldflags '-s -w' "github.com/coredns/coredns@v$COREDNS_VERSION" >"$LOGS/coredns.log" 2>&1; then
  tail -n 30 "$LOGS/coredns.log" >&2
  die "building github.com/coredns/coredns@v$COREDNS_VERSION failed; full log: $LOGS/coredns.log"
fi
echo "v$COREDNS_VERSION" > "$BIN/coredns.version"
echo "built coredns v$COREDNS_VERSION in $(( $(date +%s) - t0 ))s"
