#!/usr/bin/env bash
# Runs pytest from the project's venv. "No tests collected" (exit 5) is a failure here:
# a selection that matches nothing must not pass silently.
#
# With no arguments (`make test`, CI) every tier runs, as two pytest processes side by side:
# the real-node tier (`-m node`: its own cluster in .state/node-cluster, the real node's pods)
# and everything else (its own session cluster, the host vLLM server). Most of either's time
# is waiting on pods and servers, so together they take about the longer one's time (warm on
# 2 cores: ~25 min against ~47 min one after the other). Each line is prefixed with its tier;
# the exit status fails when either does. VLLM_OPERATOR_TESTS_SERIAL=1 runs one pytest over
# every tier instead; with arguments, one pytest runs them as given.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

pytest_rc() {  # pytest ARGS... -> its exit status, with "no tests collected" a failure
  .venv/bin/python -m pytest "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "run-tests: ERROR: pytest collected no tests (exit 5); the selection '$*' matches nothing" >&2
    return 1
  fi
  return "$rc"
}

if [ "$#" -gt 0 ] || [ "${VLLM_OPERATOR_TESTS_SERIAL:-}" = 1 ]; then
  pytest_rc "$@"
  exit $?
fi

# each tier's output is also kept whole (LOGS), so that a failing tier's summary can be
# printed again at the very end: the two tiers' lines interleave, and CI shows the tail
LOGS="$ROOT/.state/test-logs"
mkdir -p "$LOGS"

tier() {  # tier NAME MARKER-EXPRESSION [PYTEST-ARGS...] -> each output line prefixed "[NAME] "
  local name=$1 marker=$2 rc
  shift 2
  pytest_rc -m "$marker" "$@" 2>&1 | sed -u "s/^/[$name] /" | tee "$LOGS/$name.log"
  rc=${PIPESTATUS[0]}
  echo "[$name] run-tests: tier '$marker' exited with $rc"
  return "$rc"
}

summary() {  # summary NAME -> the tier's failures again: pytest's short summary, else its tail
  local log="$LOGS/$1.log"
  echo "run-tests: ---- tier '$1' failed; its summary (whole output: $log) ----"
  if grep -q "short test summary info" "$log"; then
    sed -n '/short test summary info/,$p' "$log" | grep -v "^\[$1\] SKIPPED"
  else
    tail -n 40 "$log"
  fi
}

start=$(date +%s)
# the cache plugin would write .pytest_cache from both processes: only the larger tier keeps it
tier node "node" -p no:cacheprovider &
node_pid=$!
tier rest "not node" &
rest_pid=$!
wait "$node_pid"
node_rc=$?
wait "$rest_pid"
rest_rc=$?
[ "$node_rc" -eq 0 ] || summary node
[ "$rest_rc" -eq 0 ] || summary rest
echo "run-tests: node tier rc=$node_rc, other tiers rc=$rest_rc, in $(( $(date +%s) - start ))s"
[ "$node_rc" -eq 0 ] && [ "$rest_rc" -eq 0 ]
