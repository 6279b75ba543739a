#!/usr/bin/env bash
# The main job on the embedded local cluster: start the cluster (or find it running), install
# the CRDs and RBAC, run the operator as its own ServiceAccount, apply the TinyLlama reference
# sample and wait until the operator reports it Ready.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=.venv/bin/python
$PY -m vllm_localenv up
eval "$($PY -m vllm_localenv env)"
$PY -m vllm_localenv operator
echo
kubectl get nodes \
  -o custom-columns='NODE:.metadata.name,GPUS:.status.allocatable.nvidia\.com/gpu,PRODUCT:.metadata.labels.nvidia\.com/gpu\.product'
echo
kubectl apply -f crds/samples/tinyllama.yaml
kubectl wait --for=condition=Ready vllmservice/tinyllama --timeout=180s
echo
kubectl get deployments,services,hpa,pdb -l serving.vllm-operator.dev/service=tinyllama
echo
kubectl get vllmservices -o wide
cat <<MSG

Use the cluster:  $($PY -m vllm_localenv env)
Operator log:     .state/cluster/logs/operator.log
Stop everything:  make cluster-down
MSG
