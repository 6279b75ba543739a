#!/usr/bin/env bash
# The device calls of issue 34 items 1 and 4 and issue 33 item 2 (PLAN.md, "Issue 34/33 on
# the GPU"), one warm stretch: short commands for the `run` tool (2,000 characters a call).
#   session34.sh first      call 1 (part000 + install.sh, TAR_SHA256, manifest.json carried):
#                           the models built in the background (run_all.sh PARTS=none)
#   session34.sh piece      calls 2..18: the carried piece aside
#   session34.sh go [SECS]  call 19 (part018): wait for the models, install vLLM, then the
#                           parts in the background (setsid), then wait up to SECS (450)
#   session34.sh wait [SECS]  later calls: wait for the parts up to SECS (520), pack
# Every call ends with the parts' progress and $OUT/gpu-results.tar.gz (results + logs).
set -uo pipefail
WORK=${WORK:-/root/gpu-work}
PARTS34=${PARTS34:-startup-anatomy capacity-check sleep-wake startup-anatomy-tinyllama}
mkdir -p "$WORK/logs" "$WORK/pieces" "$WORK/results"
pieces() { cp -n .gpu-wheels/pieces/*.part* "$WORK/pieces/" 2>/dev/null; echo "pieces on the host: $(ls "$WORK/pieces" | wc -l)"; }
pack() {
  [ -n "${OUT:-}" ] || return 0
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$WORK/results/card.txt" 2>&1
  tar -czf "$OUT/gpu-results.tar.gz" -C "$WORK" --exclude='*.tmp' results logs 2>/dev/null
  ls -la "$OUT"
}
wait_parts() {
  local secs=$1 t0; t0=$(date +%s)
  while [ ! -f "$WORK/bg2.done" ] && [ $(( $(date +%s) - t0 )) -lt "$secs" ]; do sleep 2; done
  grep -v '^\s*$' "$WORK/logs/bg2.log" | tail -40
  [ -f "$WORK/bg2.done" ] && echo "BG2 DONE" || echo "BG2 RUNNING"
}
case ${1:-} in
  first)
    setsid nohup bash -c "OUT=$WORK/out-bg PARTS=none bash benchmarks/gpu/run_all.sh 500; touch $WORK/bg.done" \
      > "$WORK/logs/bg1.log" 2>&1 < /dev/null &
    sleep 3; pieces; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader ;;
  piece) pieces; tail -2 "$WORK/logs/bg1.log" ;;
  go)
    pieces
    for _ in $(seq 150); do [ -f "$WORK/bg.done" ] && break; sleep 2; done
    tail -3 "$WORK/logs/bg1.log"
    PARTS=none bash benchmarks/gpu/run_all.sh 300 | grep -v '^total\|^-\|^d'
    setsid nohup bash -c "OUT=$WORK/out-bg2 PARTS='$PARTS34' bash benchmarks/gpu/run_all.sh ${BUDGET34:-1300}; touch $WORK/bg2.done" \
      > "$WORK/logs/bg2.log" 2>&1 < /dev/null &
    sleep 2; wait_parts "${2:-450}"; pack ;;
  wait) wait_parts "${2:-520}"; pack ;;
  stop)  # the background parts and the server, at once
    [ -f "$WORK/server.json" ] && /opt/torch/.venv/bin/python3 benchmarks/gpu/labs.py stop-server --work "$WORK"
    pack ;;
  *) echo "usage: session34.sh first|piece|go [SECS]|wait [SECS]|stop"; exit 2 ;;
esac
