#!/usr/bin/env bash
# The main job on the embedded local cluster, all real on the real node:
#   1. start the cluster (its real node beside the simulated GPU nodes), install the CRDs and
#      RBAC, run the operator in-cluster from its image (deploy/local);
#   2. a PVC bound to a local volume holding the tiny model, and the CPU sample
#      (crds/samples/tiny-cpu.yaml): a vLLM pod on the real node, Ready on /health;
#   3. the rollout's benchmark Job runs the benchmark image against the Service and the
#      operator puts the measured numbers into the status;
#   4. a spec change rolls the pod (maxSurge 0: two vLLM pods do not fit on this node) and the
#      new revision is benchmarked too.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY=.venv/bin/python
t0=$(date +%s)
$PY -m vllm_localenv up
eval "$($PY -m vllm_localenv env)"
$PY -m vllm_localenv deploy-operator
echo
kubectl get nodes -o custom-columns='NODE:.metadata.name,GPUS:.status.allocatable.nvidia\.com/gpu,CPU:.status.allocatable.cpu,SIMULATED:.metadata.annotations.kwok\.x-k8s\.io/node'
echo
$PY -m vllm_localenv model-volume default
kubectl apply -f crds/samples/tiny-cpu.yaml
kubectl wait --for=condition=Ready vllmservice/tiny-cpu --timeout=600s
kubectl get deployments,services,pods,pvc -l serving.vllm-operator.dev/service=tiny-cpu -o wide
echo
echo "benchmarking the rollout (a Job running the benchmark image on the real node)..."
kubectl wait --for=condition=BenchmarkComplete vllmservice/tiny-cpu --timeout=900s
rev1=$(kubectl get vllmservice tiny-cpu -o jsonpath='{.status.benchmark.revision}')
rev=$rev1 state=
kubectl get vllmservices -o wide
echo
echo "a spec change rolls the pod and benchmarks the new revision..."
kubectl patch vllmservice tiny-cpu --type=merge -p '{"spec":{"engine":{"maxNumSeqs":8}}}'
deadline=$(( $(date +%s) + 1200 ))
until [ "$rev" != "$rev1" ] && [ "$state" = "Complete" ] 2>/dev/null; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "demo: the new revision was not benchmarked within 20 minutes (revision '$rev'," \
      "state '$state'); kubectl describe vllmservice tiny-cpu says why" >&2
    exit 1
  fi
  sleep 2
  rev=$(kubectl get vllmservice tiny-cpu -o jsonpath='{.status.benchmark.revision}')
  state=$(kubectl get vllmservice tiny-cpu -o jsonpath='{.status.benchmark.state}')
  if [ "$rev" != "$rev1" ] && [ "$state" = "Failed" ]; then
    echo "demo: the new revision's benchmark failed" >&2
    kubectl get vllmservice tiny-cpu -o jsonpath='{.status.benchmark}' >&2
    exit 1
  fi
done
kubectl get vllmservices -o wide
echo
kubectl get vllmservice tiny-cpu -o jsonpath='{.status.benchmark}' | $PY -m json.tool
cat <<MSG

demo finished in $(( $(date +%s) - t0 ))s
Use the cluster:  $($PY -m vllm_localenv env)
Logs:             .state/cluster/logs/ (kubelet.log, containerd.log, ...); kubectl logs works too
Stop everything:  make cluster-down
MSG
