#!/usr/bin/env bash
# Builds Helm and the helm-unittest plugin from the Go module proxy into the same ignored cache
# as the control plane (${VLLM_OPERATOR_CACHE:-~/.cache/vllm-operator}/bin):
#   helm            v4 (helm.sh/helm/v4/cmd/helm), ~2 min cold, 67 MB
#   helm-unittest   the `helm unittest` plugin, laid out as a local plugin in
#                   $CACHE/helm-plugins/unittest (use it with HELM_PLUGINS=$CACHE/helm-plugins)
# Each is skipped when the pinned version is already present, so a warm run takes a second.
# Why a wrapper module for helm-unittest: its go.mod replaces yaml-jsonpath with a fork, and a
# replace in a dependency is ignored by `go install pkg@version`, so we copy the replace into a
# local module that requires it (75 s cold, 38 MB).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELM_VERSION="${HELM_VERSION:-4.3.2}"
HELM_UNITTEST_VERSION="${HELM_UNITTEST_VERSION:-1.1.2}"
SCRIPT=build-helm
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
PLUGINS="$CACHE/helm-plugins"
mkdir -p "$PLUGINS"
command -v go >/dev/null || die "the go command is not installed (needed to build helm)"
GO_MINOR="$(go env GOVERSION | sed 's/^go//' | cut -d. -f1,2)"

# ---------- helm ----------
if ! have helm "v$HELM_VERSION"; then
  MODULE_UNDER_BUILD="helm.sh/helm/v4@v$HELM_VERSION"
  # without -X the binary calls itself "v4.3" (the source default); the Kubernetes version it
  # reports comes from client-go's module version and is right without ldflags in v4
  timed "helm v$HELM_VERSION" "$LOGS/helm.log" \
    env GOBIN="$BIN" go install -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION" \
      "helm.sh/helm/v4/cmd/helm@v$HELM_VERSION"
  stamp helm "v$HELM_VERSION"
else
  echo "helm v$HELM_VERSION present, skipping"
fi

# ---------- helm-unittest ----------
if ! have helm-unittest "v$HELM_UNITTEST_VERSION"; then
  MODULE_UNDER_BUILD="github.com/helm-unittest/helm-unittest@v$HELM_UNITTEST_VERSION"
  d="$WORK/helm-unittest-v$HELM_UNITTEST_VERSION"; mkdir -p "$d"
  mdir=$(cd "$d" && go mod download -json "github.com/helm-unittest/helm-unittest@v$HELM_UNITTEST_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])') \
    || die "cannot download Go module $MODULE_UNDER_BUILD from the module proxy"
  {
    printf 'module vllm-operator.local/helmunittestbuild\n\ngo %s\n\nrequire github.com/helm-unittest/helm-unittest v%s\n\n' \
      "$GO_MINOR" "$HELM_UNITTEST_VERSION"
    grep -E '^replace ' "$mdir/go.mod" || true
  } > "$d/go.mod"
  timed "helm-unittest v$HELM_UNITTEST_VERSION" "$LOGS/helm-unittest.log" \
    bash -c "cd '$d' && go build -trimpath -ldflags '-s -w' -o '$BIN/helm-unittest' github.com/helm-unittest/helm-unittest/cmd/helm-unittest"
  stamp helm-unittest "v$HELM_UNITTEST_VERSION"
else
  echo "helm-unittest v$HELM_UNITTEST_VERSION present, skipping"
fi
# a plugin directory that points at the cached binary (no install hook, nothing downloaded)
mkdir -p "$PLUGINS/unittest"
ln -sf "$BIN/helm-unittest" "$PLUGINS/unittest/untt"
cat > "$PLUGINS/unittest/plugin.yaml" <<PLUGIN
name: "unittest"
version: "$HELM_UNITTEST_VERSION"
usage: "unittest for helm charts"
description: "helm-unittest built by scripts/build-helm.sh"
ignoreFlags: false
command: "\$HELM_PLUGIN_DIR/untt"
PLUGIN
echo "helm ready in $BIN (plugins: HELM_PLUGINS=$PLUGINS)"
