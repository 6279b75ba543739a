#!/usr/bin/env bash
# The main job on the embedded local cluster:
#   1. start the cluster (or find it running), install the CRDs and RBAC, and run the
#      operator as its own ServiceAccount;
#   2. start a real vLLM server on CPU (the tiny model, served as "chat-1b" so it stands in
#      for the TinyLlama sample), apply the TinyLlama reference sample, wait for Ready;
#   3. the rollout starts a benchmark Job; kwok runs nothing inside pods, so its command is
#      run here against the local vLLM server as its pod would run it, and the operator
#      writes the measured numbers into the VLLMService's status.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=.venv/bin/python
$PY -m vllm_localenv up
eval "$($PY -m vllm_localenv env)"
$PY -m vllm_localenv operator
$PY -m vllm_localenv vllm --served-model-name chat-1b
echo
kubectl get nodes \
  -o custom-columns='NODE:.metadata.name,GPUS:.status.allocatable.nvidia\.com/gpu,PRODUCT:.metadata.labels.nvidia\.com/gpu\.product'
echo
kubectl apply -f crds/samples/tinyllama.yaml
kubectl wait --for=condition=Ready vllmservice/tinyllama --timeout=180s
kubectl get deployments,services,hpa,pdb,jobs -l serving.vllm-operator.dev/service=tinyllama
echo
echo "benchmarking the rollout (its Job's command, run here against the local vLLM server)..."
if [ "$(kubectl get vllmservice tinyllama -o jsonpath='{.status.benchmark.state}')" != "Complete" ]; then
  $PY -m vllm_localenv play-benchmark tinyllama
fi
kubectl wait --for=condition=BenchmarkComplete vllmservice/tinyllama --timeout=120s
echo
kubectl get vllmservices -o wide
echo
kubectl get vllmservice tinyllama -o jsonpath='{.status.benchmark}' | $PY -m json.tool
cat <<MSG

Use the cluster:  $($PY -m vllm_localenv env)
Logs:             .state/cluster/logs/ (operator.log, vllm.log, ...)
Stop everything:  make cluster-down
MSG
