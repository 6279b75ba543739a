#!/usr/bin/env bash
# Runs pytest from the project's venv. "No tests collected" (exit 5) is a failure here:
# a selection that matches nothing must not pass silently.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-tests: ERROR: pytest collected no tests (exit 5); the selection '$*' matches nothing" >&2
  exit 1
fi
exit "$rc"
