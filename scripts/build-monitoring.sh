#!/usr/bin/env bash
# Builds the monitoring pipeline's Go binaries from the Go module proxy into the same ignored
# cache as the control plane (${VLLM_OPERATOR_CACHE:-~/.cache/vllm-operator}/bin):
#   prometheus-adapter (serves custom.metrics.k8s.io from Prometheus, for the HPA's band metric).
# Skipped when the pinned version is already present, so a warm run takes a second.
# Why a wrapper module: the Go proxy serves sigs.k8s.io/prometheus-adapter v0.12.0 but refuses
# its version list (403), so `go install ...@v0.12.0` fails; requiring it from a local module
# and building its cmd/adapter package works (cold ~7 min, 62 MB).
# Prometheus itself and promtool come from Debian (`apt-get install prometheus`, 2.42), installed
# here when missing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROMETHEUS_ADAPTER_VERSION="${PROMETHEUS_ADAPTER_VERSION:-0.12.0}"
SCRIPT=build-monitoring
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
command -v go >/dev/null || die "the go command is not installed (needed to build prometheus-adapter)"

# ---------- prometheus-adapter ----------
if ! have prometheus-adapter "v$PROMETHEUS_ADAPTER_VERSION"; then
  MODULE_UNDER_BUILD="sigs.k8s.io/prometheus-adapter@v$PROMETHEUS_ADAPTER_VERSION"
  d="$WORK/prometheus-adapter-v$PROMETHEUS_ADAPTER_VERSION"; mkdir -p "$d"
  printf 'module vllm-operator.local/adapterbuild\n\ngo %s\n\nrequire sigs.k8s.io/prometheus-adapter v%s\n' \
    "$(go env GOVERSION | sed 's/^go//' | cut -d. -f1,2)" "$PROMETHEUS_ADAPTER_VERSION" > "$d/go.mod"
  timed "prometheus-adapter v$PROMETHEUS_ADAPTER_VERSION" "$LOGS/prometheus-adapter.log" \
    bash -c "cd '$d' && go build -trimpath -ldflags '-s -w' -o '$BIN/prometheus-adapter' sigs.k8s.io/prometheus-adapter/cmd/adapter"
  stamp prometheus-adapter "v$PROMETHEUS_ADAPTER_VERSION"
else
  echo "prometheus-adapter v$PROMETHEUS_ADAPTER_VERSION present, skipping"
fi

# ---------- optional: Prometheus 3 with Kubernetes discovery ----------
# Debian's prometheus 2.42 is built without Kubernetes service discovery (the local cluster
# feeds it a file_sd file instead). VLLM_OPERATOR_BUILD_PROMETHEUS=1 builds upstream Prometheus
# from the Go module proxy (module v0.3MM.P = Prometheus 3.MM.P) into $BIN/prometheus, with
# kubernetes_sd_configs, for a pipeline that discovers pods exactly as in a real cluster.
# Measured: 24 min wall / 12 min CPU cold on 2 busy cores, 105 MB; not part of `make setup`.
PROMETHEUS_MODULE_VERSION="${PROMETHEUS_MODULE_VERSION:-0.316.0}"
if [ "${VLLM_OPERATOR_BUILD_PROMETHEUS:-0}" = 1 ]; then
  if ! have prometheus "v$PROMETHEUS_MODULE_VERSION"; then
    MODULE_UNDER_BUILD="github.com/prometheus/prometheus@v$PROMETHEUS_MODULE_VERSION"
    minor=$(echo "$PROMETHEUS_MODULE_VERSION" | cut -d. -f2); patch=$(echo "$PROMETHEUS_MODULE_VERSION" | cut -d. -f3)
    pver="3.$((10#${minor:1})).$patch"
    timed "prometheus $pver" "$LOGS/prometheus.log" \
      env GOBIN="$BIN" go install -trimpath \
        -ldflags "-s -w -X github.com/prometheus/common/version.Version=$pver" \
        "github.com/prometheus/prometheus/cmd/prometheus@v$PROMETHEUS_MODULE_VERSION"
    stamp prometheus "v$PROMETHEUS_MODULE_VERSION"
  else
    echo "prometheus (module v$PROMETHEUS_MODULE_VERSION) present, skipping"
  fi
fi

# ---------- Prometheus and promtool (Debian's prometheus 2.42) ----------
# The rule tests (tests/unit/generate/test_monitoring_rules.py) need promtool; the local cluster runs
# this Prometheus. Installed only where missing; Debian does not start it in a container.
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    t0=$(date +%s)
    apt-get update -qq >"$LOGS/prometheus-apt.log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
      >>"$LOGS/prometheus-apt.log" 2>&1 || { tail -n 20 "$LOGS/prometheus-apt.log" >&2; die "apt-get install prometheus failed"; }
    echo "installed prometheus $(prometheus --version 2>&1 | head -n1 | awk '{print $3}') in $(( $(date +%s) - t0 ))s"
  else
    die "promtool/prometheus are missing: install Debian's prometheus package (apt-get install prometheus)"
  fi
else
  echo "prometheus $(prometheus --version 2>&1 | head -n1 | awk '{print $3}') present, skipping"
fi
echo "monitoring binaries ready in $BIN"
