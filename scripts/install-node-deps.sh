#!/usr/bin/env bash
# Installs the Debian packages that the real node, the image builds, the monitoring tier and
# the chart's tests need, and only those missing. The list is scripts/host-packages.tsv, the
# same file the real node checks its commands against (localenv/vllm_localenv/node.py) and
# scripts/prove-fresh-install.sh proves from an empty Debian root.
# Idempotent: when every package is installed it only runs dpkg-query (well under a second).
# Usage: install-node-deps.sh [--list]   (--list prints the package names and installs nothing)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LIST="$ROOT/scripts/host-packages.tsv"
die() { echo "install-node-deps: ERROR: $*" >&2; exit 1; }
[ -r "$LIST" ] || die "$LIST is missing"
mapfile -t PACKAGES < <(awk -F'\t' '!/^#/ && NF >= 3 {print $1}' "$LIST")
[ "${#PACKAGES[@]}" -gt 0 ] || die "$LIST lists no package"
if [ "${1:-}" = --list ]; then printf '%s\n' "${PACKAGES[@]}"; exit 0; fi

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done
if [ "${#missing[@]}" = 0 ]; then
  echo "host packages present (${PACKAGES[*]})"; exit 0
fi
command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} with your package manager"
SUDO=(); [ "$(id -u)" = 0 ] || SUDO=(sudo)
echo "installing: ${missing[*]}"
t0=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
# daemons must not start on install (the harness runs its own containerd): a policy-rc.d that
# denies every start, only for the duration of this install and only when none is there
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
  "${SUDO[@]}" chmod +x /usr/sbin/policy-rc.d
  trap '"${SUDO[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
fi
"${SUDO[@]}" apt-get update -qq || die "apt-get update failed"
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
  || die "apt-get install ${missing[*]} failed"
echo "installed ${missing[*]} in $(( $(date +%s) - t0 ))s"
