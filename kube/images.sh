#!/usr/bin/env bash
# Build Strom's container images here and load them into the single-node cluster's containerd.
#
#   kube/images.sh [IMAGE...]  base image (once), then the images named (strom, strom-operator,
#                              strom-spark; default all three), each loaded into the node if up
#
# No container registry is reachable from this machine, so the Dockerfiles' `python:3.11-slim`
# base is replaced (build argument PYTHON_IMAGE) by an equivalent made from Debian bookworm:
# debootstrap --variant=minbase with python3 (3.11), python3-venv and ca-certificates, and a
# virtualenv at /usr/local so /usr/local/bin/python3 and pip behave as in the official image
# (Debian's own Python refuses pip installs: "externally managed"). Builds run with buildah in
# chroot isolation (cgroup v1 here; no runc needed for RUN steps) and the host network (pip and
# uv fetch from PyPI as on any build machine). Images are exported as OCI archives and imported
# with `ctr -n k8s.io images import` into the node's containerd (which pulls nothing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${STROM_IMAGES_CACHE:-$HOME/.cache/strom/images}"
BASE="strom.local/python:3.11-slim-bookworm"
TAG="${STROM_IMAGE_TAG:-dev}"
SOCK="${STROM_KUBE_RUN:-/run/kubestrom}/containerd/containerd.sock"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
export BUILDAH_ISOLATION=chroot

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'images: error: %s\n' "$*" >&2; exit 1; }
now() { date +%s; }

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, buildah storage, the node's containerd)"
for tool in buildah debootstrap ctr; do
    command -v "$tool" >/dev/null 2>&1 \
        || die "$tool is missing (Debian packages: buildah debootstrap containerd)"
done
mkdir -p "$CACHE"

if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
    t=$(now)
    rootfs="$CACHE/rootfs-bookworm"
    if [ ! -x "$rootfs/usr/bin/python3" ]; then
        rm -rf "$rootfs"
        say "debootstrap bookworm (minbase + python3, python3-venv, ca-certificates)"
        nice -n 19 debootstrap --variant=minbase \
            --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$MIRROR" \
            >"$CACHE/debootstrap.log" 2>&1 || die "debootstrap failed (see $CACHE/debootstrap.log)"
    fi
    chroot "$rootfs" /usr/bin/python3 -m venv /usr/local
    chroot "$rootfs" /usr/local/bin/python3 -m pip --version >/dev/null
    rm -rf "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"*
    ctr_id=$(buildah from scratch)
    mnt=$(buildah mount "$ctr_id")
    cp -a "$rootfs/." "$mnt/"
    buildah umount "$ctr_id" >/dev/null
    buildah config --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env LANG=C.UTF-8 --cmd python3 \
        --label org.opencontainers.image.description="Debian bookworm + Python 3.11 venv at /usr/local (python:3.11-slim equivalent)" \
        "$ctr_id"
    buildah commit --rm "$ctr_id" "$BASE" >/dev/null
    say "base image $BASE in $(( $(now) - t )) s"
fi

# This machine's TLS trust (its CA bundle may hold a proxy's CA that Debian's bundle lacks) is
# lent to the RUN steps, not baked into the images: the host's bundle, a pip.conf and a uv.toml
# that point pip and uv at it.
TRUST=(-v "/etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro")
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$CACHE/pip.conf"
printf 'native-tls = true\n' >"$CACHE/uv.toml"
TRUST+=(-v "$CACHE/pip.conf:/etc/pip.conf:ro" -v "$CACHE/uv.toml:/etc/uv/uv.toml:ro")

build() {  # name dockerfile context
    local image="strom.local/$1:$TAG" t
    t=$(now)
    nice -n 19 buildah bud --network host --layers --build-arg "PYTHON_IMAGE=$BASE" "${TRUST[@]}" \
        -f "$2" -t "$image" "$3" >"$CACHE/$1.build.log" 2>&1 \
        || die "building $image failed (see $CACHE/$1.build.log)"
    # The archive is rewritten only when the image changed (the Spark image's is ~800 MB).
    local id
    # sed reads all of buildah's output: with `head -1` buildah could be killed by SIGPIPE when
    # the image has several names (one line each), and pipefail + set -e ended the script silently.
    id="$(buildah images --noheading --no-trunc --format '{{.ID}}' "$image" | sed -n 1p)"
    if [ ! -s "$CACHE/$1.tar" ] || [ "$(cat "$CACHE/$1.id" 2>/dev/null)" != "$id" ]; then
        buildah push "$image" "oci-archive:$CACHE/$1.tar.tmp:$image" >/dev/null 2>&1 \
            || die "buildah push $image failed"
        mv "$CACHE/$1.tar.tmp" "$CACHE/$1.tar"
        printf '%s\n' "$id" >"$CACHE/$1.id"
    fi
    if [ -S "$SOCK" ]; then
        ctr --address "$SOCK" -n k8s.io images import "$CACHE/$1.tar" >/dev/null \
            || die "ctr could not import $image into the node"
    fi
    say "$image: $(( $(now) - t )) s, $(du -h "$CACHE/$1.tar" | cut -f1) (OCI archive)"
}

[ $# -gt 0 ] || set -- strom strom-operator strom-spark
for name in "$@"; do
    case "$name" in
        strom) build strom "$ROOT/broker-image/Dockerfile" "$ROOT/broker-image" ;;
        strom-operator) build strom-operator "$ROOT/operator/Dockerfile" "$ROOT" ;;
        # The same base + Java 17 (Debian) + pyspark and strom-spark, its own entrypoint.
        strom-spark) build strom-spark "$ROOT/spark-jobs/Dockerfile" "$ROOT" ;;
        *) die "unknown image '$name' (strom, strom-operator or strom-spark)" ;;
    esac
done
[ -S "$SOCK" ] && say "loaded into the node ($SOCK)" || say "the node is not up: images left in $CACHE"
