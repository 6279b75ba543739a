#!/usr/bin/env bash
# Installs the Debian packages the real node and the image builds need, and only those missing:
#   containerd runc containernetworking-plugins iptables conntrack  (the node's runtime and network)
#   debootstrap buildah fuse-overlayfs                              (images built without Docker)
#   prometheus lua5.1                                               (monitoring tier)
# Idempotent: when every package is installed it only runs dpkg-query (well under a second).
set -euo pipefail
PACKAGES=(containerd runc containernetworking-plugins iptables conntrack debootstrap buildah
  fuse-overlayfs prometheus lua5.1)
die() { echo "install-node-deps: ERROR: $*" >&2; exit 1; }

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done
if [ "${#missing[@]}" = 0 ]; then
  echo "node packages present (${PACKAGES[*]})"; exit 0
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
