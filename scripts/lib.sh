# Shared by the build scripts (source it after setting SCRIPT): the cache layout and the
# have/stamp/timed helpers. Binaries go into ${VLLM_OPERATOR_CACHE:-~/.cache/vllm-operator}/bin,
# outside the clone, so every checkout and CI run on this machine shares one build; each binary
# carries a NAME.version stamp, so a warm run skips it.
# shellcheck shell=bash
# shellcheck source=scripts/versions.env
source "$ROOT/scripts/versions.env"
CACHE="${VLLM_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}"
BIN="$CACHE/bin"
WORK="$CACHE/gobuild"
LOGS="$CACHE/build-logs"
mkdir -p "$BIN" "$WORK" "$LOGS"

export GOFLAGS="-buildvcs=false -mod=mod"
export CGO_ENABLED=0

die() { echo "$SCRIPT: ERROR: $*" >&2; exit 1; }
have() { [ -x "$BIN/$1" ] && [ -f "$BIN/$1.version" ] && [ "$(cat "$BIN/$1.version")" = "$2" ]; }
stamp() { echo "$2" > "$BIN/$1.version"; }
timed() {  # timed NAME LOG cmd... -> runs cmd, records seconds, shows the log tail on failure
  local name=$1 log=$2; shift 2
  local t0; t0=$(date +%s)
  if ! "$@" >"$log" 2>&1; then
    echo "---- last 30 lines of $log ----" >&2; tail -n 30 "$log" >&2
    die "building $name failed (Go module(s): $MODULE_UNDER_BUILD); full log: $log"
  fi
  echo "built $name in $(( $(date +%s) - t0 ))s"
}
