#!/usr/bin/env bash
# Proves the host install path from nothing: makes an empty Debian bookworm root with
# debootstrap (python3 only, as the machine image has it), copies the tracked files of this
# checkout into it, runs scripts/install-node-deps.sh there as CI would, then checks that every
# command of scripts/host-packages.tsv is present (localenv/vllm_localenv/host_packages.py,
# standard library only) and answers (each package's first command is run with its version flag). A package missing from
# the list, or a list row whose package does not provide its command, fails here instead of on
# a user's new machine.
#
# Usage: prove-fresh-install.sh [ROOT_DIR]   (default: a fresh folder under the cache; removed
#        after the run unless KEEP_ROOT=1). Needs root (debootstrap, chroot). Prints the time of
#        each step and the total. Environment: DEBIAN_MIRROR.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${VLLM_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}"
TARGET="${1:-$CACHE/fresh-root.$$}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
die() { echo "prove-fresh-install: ERROR: $*" >&2; exit 1; }
log() { echo "prove-fresh-install: $*"; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap and chroot)"
[ ! -e "$TARGET" ] || die "$TARGET exists: give a folder that does not"

cleanup() {
  for m in proc sys dev; do umount -l "$TARGET/$m" 2>/dev/null || true; done
  if [ "${KEEP_ROOT:-0}" != 1 ]; then rm -rf "$TARGET"; else log "kept $TARGET"; fi
}
trap cleanup EXIT
t_all=$(date +%s)

# the prover's own tool (not part of what is proven)
if ! command -v debootstrap >/dev/null; then
  log "installing debootstrap on this host to make the root"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

t0=$(date +%s)
mkdir -p "$(dirname "$TARGET")"
debootstrap --variant=minbase --include=python3,ca-certificates bookworm "$TARGET" "$MIRROR" \
  >"$TARGET.debootstrap.log" 2>&1 || { tail -n 20 "$TARGET.debootstrap.log" >&2; die "debootstrap failed"; }
rm -f "$TARGET.debootstrap.log"
log "empty root in $(( $(date +%s) - t0 ))s"

# the checkout's tracked files, as a clone has them
mkdir -p "$TARGET/src"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
  | (cd "$ROOT" && xargs -0 tar -cf - --no-recursion) | tar -C "$TARGET/src" -xf -
cp /etc/resolv.conf "$TARGET/etc/resolv.conf"
for m in proc sys dev; do mount --bind "/$m" "$TARGET/$m"; done

before=$(chroot "$TARGET" python3 /src/localenv/vllm_localenv/host_packages.py 2>&1 || true)
echo "$before" | grep -q '^missing: ' || die "the empty root already has every command: it proves nothing ($before)"
log "before the install: $(echo "$before" | grep -o ', ' | wc -l | awk '{print $1 + 1}') commands missing"

t0=$(date +%s)
chroot "$TARGET" bash /src/scripts/install-node-deps.sh
log "install-node-deps.sh in $(( $(date +%s) - t0 ))s"

chroot "$TARGET" python3 /src/localenv/vllm_localenv/host_packages.py \
  || die "install-node-deps.sh left commands missing (above)"
# each package's first command answers (a binary that is there but cannot run fails here)
while IFS=$'\t' read -r package _ commands; do
  case "$package" in ''|'#'*) continue ;; esac
  cmd=${commands%% *}
  case "$cmd" in /*) [ -x "$TARGET$cmd" ] || die "$cmd ($package) is not executable"; continue ;; esac
  ok=0
  for flag in --version -V -v version; do
    if chroot "$TARGET" timeout 20 "$cmd" $flag >/dev/null 2>&1; then ok=1; break; fi
  done
  [ "$ok" = 1 ] || die "$cmd ($package) is installed but answers none of --version, -V, -v, version"
done < "$ROOT/scripts/host-packages.tsv"
log "every command answers; proven from an empty root in $(( $(date +%s) - t_all ))s"
