#!/usr/bin/env bash
# Builds the local cluster's binaries from the Go module proxy into an ignored cache:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok.
# Each pinned binary is skipped when already present, so a warm run takes a second.
# Why a consumer module: k8s.io/kubernetes replaces every staging module with ./staging/...
# and requires them at v0.0.0, so it cannot be `go install`ed; we replace them with the
# published v0.Y.Z tags instead (the list is derived from its go.mod, it changes per release).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRIPT=build-control-plane
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
command -v go >/dev/null || die "the go command is not installed (needed to build the control plane)"

# ---------- kubernetes: apiserver, controller-manager, scheduler, kubectl ----------
K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
need_k8s=0
for b in "${K8S_BINS[@]}"; do have "$b" "v$K8S_VERSION" || need_k8s=1; done
if [ "$need_k8s" = 1 ]; then
  MODULE_UNDER_BUILD="k8s.io/kubernetes@v$K8S_VERSION"
  d="$WORK/kubernetes-v$K8S_VERSION"; mkdir -p "$d"
  modjson=$(cd "$d" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION") \
    || die "cannot download Go module k8s.io/kubernetes@v$K8S_VERSION from the module proxy"
  kmod=$(printf '%s' "$modjson" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  staging_ver="v0.${K8S_VERSION#1.}"
  {
    echo "module vllm-operator.local/k8sbuild"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//' | cut -d. -f1,2)"
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo
    echo "replace ("
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$kmod" | awk -v v="$staging_ver" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > "$d/go.mod"
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=v$K8S_VERSION"
  pkgs=(); for b in "${K8S_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  # one `go build` for all four shares the compilation of their common packages
  timed "kubernetes v$K8S_VERSION (${K8S_BINS[*]})" "$LOGS/kubernetes.log" \
    bash -c "cd '$d' && go build -trimpath -ldflags '$ldflags' -o '$BIN/' ${pkgs[*]}"
  for b in "${K8S_BINS[@]}"; do stamp "$b" "v$K8S_VERSION"; done
else
  echo "kubernetes v$K8S_VERSION binaries present, skipping"
fi

# ---------- etcd ----------
if ! have etcd "v$ETCD_VERSION"; then
  MODULE_UNDER_BUILD="go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  d="$WORK/etcd-v$ETCD_VERSION"; mkdir -p "$d"
  printf 'module vllm-operator.local/etcdbuild\n\ngo %s\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' \
    "$(go env GOVERSION | sed 's/^go//' | cut -d. -f1,2)" "$ETCD_VERSION" > "$d/go.mod"
  timed "etcd v$ETCD_VERSION" "$LOGS/etcd.log" \
    bash -c "cd '$d' && go build -trimpath -ldflags '-s -w' -o '$BIN/etcd' go.etcd.io/etcd/server/v3"
  stamp etcd "v$ETCD_VERSION"
else
  echo "etcd v$ETCD_VERSION present, skipping"
fi

# ---------- kwok ----------
if ! have kwok "v$KWOK_VERSION"; then
  MODULE_UNDER_BUILD="sigs.k8s.io/kwok@v$KWOK_VERSION"
  timed "kwok v$KWOK_VERSION" "$LOGS/kwok.log" \
    env GOBIN="$BIN" GOFLAGS=-buildvcs=false go install -trimpath -ldflags '-s -w' "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  # kwok v0.8 needs stage definitions; they ship inside the module (kustomize/stage/...)
  kdir=$(GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$BIN/kwok-stages"; mkdir -p "$BIN/kwok-stages"
  cp -r "$kdir/kustomize/stage/." "$BIN/kwok-stages/"; chmod -R u+w "$BIN/kwok-stages"
  stamp kwok "v$KWOK_VERSION"
else
  echo "kwok v$KWOK_VERSION present, skipping"
fi
echo "control-plane binaries ready in $BIN"
