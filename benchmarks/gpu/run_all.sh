#!/usr/bin/env bash
# One device call's worth of the GPU labs (issue 13). Run from the repository root on the GPU
# host:  bash benchmarks/gpu/run_all.sh [BUDGET_SECONDS]     (default 540: inside a 10-min call)
# PARTS="vs-upstream" MODELS="tinyllama" bash ...: only those parts, only those models built.
#
# Restartable: every step records its result under $WORK (default /root/gpu-work, which stays
# while the machine is warm) and is skipped next time. Steps, in order:
#   1. take any wheel piece carried in .gpu-wheels/ (pieces/, install.sh, TAR_SHA256) aside
#   2. install vLLM from the pieces once all of them are there (manifest.json says how many)
#   3. build the random-weight models (needs only the host's torch; runs before vLLM is there)
#   4. the lab parts (benchmarks/gpu/labs.py), each started only if its estimate fits the
#      budget left
#   5. pack WORK/results into $OUT/gpu-results.tar.gz (JSON + the runner's PNG plots)
set -uo pipefail
BUDGET=${1:-540}
WORK=${WORK:-/root/gpu-work}
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-$WORK/out}
MODELS=${MODELS:-tinyllama llama3-8b}
START=$(date +%s)
mkdir -p "$WORK/pieces" "$WORK/results" "$WORK/logs" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/runner"  # vllm_bench (runner/)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
say() { echo "[$(date +%H:%M:%S) +$(( $(date +%s) - START ))s] $*"; }

# 1. pieces carried in this call
if compgen -G ".gpu-wheels/pieces/offline-wheels.tar.part*" > /dev/null; then
  cp -f .gpu-wheels/pieces/offline-wheels.tar.part* "$WORK/pieces/"  # cp: never consume the source
fi
for f in install.sh TAR_SHA256 manifest.json; do
  [ -f ".gpu-wheels/$f" ] && cp -f ".gpu-wheels/$f" "$WORK/"
done
have=$(ls "$WORK/pieces" | wc -l)
want=$( [ -f "$WORK/manifest.json" ] && "$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["pieces"]))' "$WORK/manifest.json" || echo "?")
say "pieces on the host: $have of $want"

# 2. vLLM (only where a GPU is: a dry run elsewhere must not install into a local Python)
if ! command -v nvidia-smi > /dev/null; then
  say "no nvidia-smi: not the GPU host, stopping after the piece bookkeeping"
elif "$PY" -c 'import vllm' 2>/dev/null; then
  say "vllm $("$PY" -c 'import vllm; print(vllm.__version__)') is installed"
elif [ "$want" != "?" ] && [ "$have" -ge "$want" ]; then
  say "installing the offline wheel set"
  (cd "$WORK" && WORK="$WORK/unpacked" sh install.sh "$WORK/pieces" "$PY") 2>&1 | tail -5 | tee "$WORK/logs/install.log"
  "$PY" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' \
    && rm -rf "$WORK/pieces" "$WORK/unpacked"
  "$PY" -m pip list --format=freeze > "$WORK/results/host-freeze-after.txt" 2>/dev/null
else
  say "vLLM not installed yet: waiting for the remaining pieces"
fi
[ -f "$WORK/results/host-freeze-before.txt" ] || \
  "$PY" -m pip list --format=freeze > "$WORK/results/host-freeze-before.txt" 2>/dev/null

command -v nvidia-smi > /dev/null || exit 0

# 3. models (only torch + transformers needed)
need=""
for m in $MODELS; do [ -f "$WORK/models/$m/build.json" ] || need="$need $m"; done
if [ -n "$need" ] && [ "$(left)" -gt 150 ]; then
  say "building the models:$need"
  # shellcheck disable=SC2086 # one argument per model
  "$PY" benchmarks/gpu/build_models.py "$WORK/models" $need 2>&1 | tee -a "$WORK/logs/models.log" | tail -3
  for m in $need; do cp -f "$WORK/models/$m/build.json" "$WORK/results/model-$m.json"; done
fi
models_built() { for m in $MODELS; do [ -f "$WORK/models/$m/build.json" ] || return 1; done; }

# 4. lab parts: name and estimate in seconds (server start included the first time)
parts=("lab2-naive 120" "lab2-naive-fp16 120" "lab1 300" "lab1-before 60" "vs-upstream 240"
  "lab2 330" "lab2-512 200" "rendered-pod 330" "lab1-engine 200" "lab2-lab 300" "lab2-512-lab 240"
  "startup-anatomy 400" "capacity-check 300" "sleep-wake 200" "startup-anatomy-tinyllama 200")
if [ -n "${PARTS:-}" ]; then
  chosen=()
  for p in "${parts[@]}"; do
    set -- $p
    case " $PARTS " in *" $1 "*) chosen+=("$p") ;; esac
  done
  parts=("${chosen[@]}")
fi
for p in "${parts[@]}"; do
    set -- $p
    name=$1 estimate=$2
    [ -f "$WORK/results/$name.json" ] && continue
    case $name in lab2-naive*) ;; *) if ! "$PY" -c 'import vllm' 2>/dev/null; then continue; fi ;; esac
    models_built || continue
    if [ "$(left)" -lt "$estimate" ]; then say "not starting $name: $(left) s left, it needs ~$estimate s"; continue; fi
    say "part $name"
    "$PY" benchmarks/gpu/labs.py "$name" --work "$WORK" 2>&1 | tee -a "$WORK/logs/$name.log" | tail -40
done

# 5. what comes back
done_parts=$(cd "$WORK/results" && ls *.json 2>/dev/null | tr '\n' ' ')
say "results so far: $done_parts"
tar -czf "$OUT/gpu-results.tar.gz" -C "$WORK" results logs --exclude='*.tmp' 2>/dev/null
ls -la "$OUT"
remaining=$(for p in "${parts[@]}"; do set -- $p; [ -f "$WORK/results/$1.json" ] || echo -n "$1 "; done)
if [ -z "$remaining" ]; then say "ALL DONE"; else say "REMAINING: $remaining"; fi
