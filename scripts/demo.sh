#!/usr/bin/env bash
# The main job on the embedded local cluster: starts it (or finds it running) and shows it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
.venv/bin/python -m vllm_localenv up
eval "$(.venv/bin/python -m vllm_localenv env)"
echo
kubectl get nodes -L nvidia.com/gpu.product \
  -o custom-columns='NAME:.metadata.name,READY:.status.conditions[?(@.type=="Ready")].status,GPUS:.status.allocatable.nvidia\.com/gpu,PRODUCT:.metadata.labels.nvidia\.com/gpu\.product'
echo
echo "Stop it with: make cluster-down"
