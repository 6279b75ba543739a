#!/usr/bin/env bash
# The main job on the embedded local cluster, all real on the real node:
#   1. start the cluster (its real node beside the simulated GPU nodes), install the CRDs and
#      RBAC, run the operator in-cluster from its image (deploy/local);
#   2. a PVC bound to a local volume holding the tiny model, and the CPU sample
#      (crds/samples/tiny-cpu.yaml): a vLLM pod on the real node, Ready on /health;
#   3. the rollout's benchmark Job runs the benchmark image against the new pod and the
#      operator puts the measured numbers into the status;
#   4. the promise (localenv/vllm_localenv/demo.py): with a client streaming through the
#      Service the whole time, a revision that cannot pass its gate is measured on a canary pod
#      outside the Service and aborted there (the stable pod keeps serving), then a good one is
#      measured on its canary, baked a minute on live traffic and promoted; a table of the revisions and the client's failed
#      requests (0) at the end. (The sample runs at 700m here: the serving pod, the canary
#      and the benchmark Job's 500m fit on the node's 2 CPUs.)
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
# a service left by an earlier demo on this cluster goes first (with its benchmark history:
# the demo's revisions would otherwise be decided already)
kubectl delete vllmservice tiny-cpu --ignore-not-found --wait=true --timeout=300s
kubectl wait --for=delete pod -l serving.vllm-operator.dev/service=tiny-cpu --timeout=300s 2>/dev/null || true
sed 's/^    cpu: "1"$/    cpu: 700m/' crds/samples/tiny-cpu.yaml | kubectl apply -f -
kubectl wait --for=condition=Ready vllmservice/tiny-cpu --timeout=600s
kubectl get deployments,services,pods,pvc -l serving.vllm-operator.dev/service=tiny-cpu -o wide
echo
# benchmarked REVISION: waits until a revision other than REVISION ("": any) is measured;
# a failed run or 20 minutes without a result end the demo with the service's benchmark status
benchmarked() {
  local before=$1 rev state deadline=$(( $(date +%s) + 1200 ))
  while :; do
    IFS=/ read -r rev state < <(kubectl get vllmservice tiny-cpu \
      -o jsonpath='{.status.benchmark.revision}/{.status.benchmark.state}{"\n"}') || true
    if [ -n "$rev" ] && [ "$rev" != "$before" ]; then
      case "$state" in
        Complete) echo "$rev"; return 0 ;;
        Failed)
          echo "demo: the benchmark of revision $rev failed:" >&2
          kubectl get vllmservice tiny-cpu -o jsonpath='{.status.benchmark}' >&2
          exit 1 ;;
      esac
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "demo: no benchmark result within 20 minutes (revision '$rev', state '$state');" \
        "kubectl describe vllmservice tiny-cpu says why" >&2
      exit 1
    fi
    sleep 2
  done
}
echo "benchmarking the rollout (a Job running the benchmark image on the real node)..."
rev1=$(benchmarked "")
kubectl get vllmservices -o wide
echo
kubectl get vllmservice tiny-cpu -o jsonpath='{.status.benchmark}' | $PY -m json.tool
echo
echo "revision $rev1 serves. Now every new revision is benchmarked on a canary before it serves:"
$PY -m vllm_localenv demo-canary tiny-cpu
echo
kubectl get vllmservices -o wide
cat <<MSG

demo finished in $(( $(date +%s) - t0 ))s
What you saw: a revision that failed its gate never served a request (measured twice on its
canary, outside the Service, then Aborted: Degraded=True, reason CanaryAborted, a Warning
event); the good one was measured on its canary, baked a minute on live traffic beside the
stable pod (status.rollout.bake: its live figures against the stable pod's), and promoted; the
client streaming through the Service never saw a failed request. Next: kubectl describe
vllmservice tiny-cpu (the events), docs/progressive-delivery.md (the bake's limits,
rollout.canary.bake, and what the operator does when a bake goes wrong), kubectl annotate vllmservice tiny-cpu
serving.vllm-operator.dev/abort=<revision> (abort a canary by hand).
Use the cluster:  $($PY -m vllm_localenv env)
Logs:             .state/cluster/logs/ (kubelet.log, containerd.log, ...); kubectl logs works too
Stop everything:  make cluster-down
MSG
