#!/usr/bin/env bash
# Builds every image docker-compose.yml and deploy/compose.local.yml need, with no image
# registry: a Debian 12 base made by debootstrap from Debian's packages, stand-ins for
# the servers whose official images cannot be pulled (Redis and ZooKeeper from Debian's
# packages, the Kafka-API broker and MongoDB-wire server `crawlcluster services` runs,
# Prometheus from Debian's), and the crawlcluster image on that base, installed from
# wheels built by the image's own Python (in a container: this machine's Python does not
# matter). Run as root from anywhere:
#   deploy/images.sh            # builds what is missing or whose inputs changed
#   deploy/images.sh wheels     # the Debian base, the Python image and the wheels only
#   ENGINE=docker deploy/images.sh
# An image is built again only when its inputs change (each tag names their hash; the
# engine's layer cache does the rest).
set -euo pipefail
set -- "${1:-all}"
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

build() {   # build TAG CONTAINERFILE [extra args]: only if its inputs changed
  local tag=$1 file=$2; shift 2
  say "build $tag"
  "$ENGINE" build --quiet -f "$file" -t "$tag" "$@" . >/dev/null
}

# 2. Python on the Debian base: the images' interpreter, and the builder of their wheels.
PYTHON=localhost/crawlcluster-python:3.11
build "$PYTHON" deploy/images/python.Containerfile --build-arg BASE="$BASE"

# 3. Wheels of everything crawlcluster and the stand-ins need, built by the images' own
#    Python in a container (so they fit its version and ABI, whatever this machine's
#    Python is), for the images to install with no index. The stamp names the
#    interpreter, so a new one builds them again.
WHEELS=${CRAWLCLUSTER_WHEELS:-deploy/wheels}
mkdir -p "$WHEELS"
interpreter=$("$ENGINE" run --rm "$PYTHON" python -c \
  'import sys, sysconfig; print(sys.implementation.cache_tag, sysconfig.get_platform())')
EXTRAS=render     # the extras the crawlcluster image installs (the Dockerfile's '.[render]')
stamp="$interpreter $EXTRAS $(digest pyproject.toml setup.py deploy/images/requirements-servers.txt)"
if [ "$(cat "$WHEELS/.inputs" 2>/dev/null)" != "$stamp" ]; then
  say "wheels for crawlcluster and the stand-in servers, by $interpreter in $PYTHON"
  rm -f "$WHEELS"/*.whl
  # a proxy that re-signs TLS needs this machine's certificate authorities in there too
  ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
  trust=(); [ -f "$ca" ] && trust=(-v "$ca:/etc/ssl/host-ca.crt:ro" -e PIP_CERT=/etc/ssl/host-ca.crt)
  "$ENGINE" run --rm "${trust[@]}" -v "$PWD:/src:ro" -v "$(realpath "$WHEELS"):/wheels" \
    "$PYTHON" sh -ec 'mkdir /tmp/src && cp /src/pyproject.toml /src/setup.py /src/README.md /tmp/src
      pip wheel -q --wheel-dir /wheels "/tmp/src[$0]" "setuptools>=77" -r /src/deploy/images/requirements-servers.txt
      rm -f /wheels/crawlcluster-*.whl' "$EXTRAS"   # crawlcluster itself: from the source in the image
  echo "$stamp" >"$WHEELS/.inputs"
fi
[ "$1" = wheels ] && { say "wheels in $WHEELS ($stamp)"; exit 0; }

# 4. The stand-ins, and crawlcluster.
for server in redis zookeeper kafka mongodb prometheus alertmanager; do
  build "localhost/crawlcluster-$server:local" "deploy/images/$server.Containerfile" \
    --build-arg BASE="$BASE" --build-arg PYTHON="$PYTHON"
done
build crawlcluster:0.1.0 Dockerfile --build-arg BASE="$PYTHON"
say "done: $("$ENGINE" images --format '{{.Repository}}:{{.Tag}}' | grep -c crawlcluster) images"
