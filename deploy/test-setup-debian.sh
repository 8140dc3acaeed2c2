#!/usr/bin/env bash
# Runs deploy/podman-setup.sh on a fresh Debian 12 (debootstrap minbase plus python3, no
# pip) in a chroot, twice, and checks what it left: podman works (`podman info` with
# runc and netavark), podman-compose runs, the drop-in is there, the second run changed
# nothing, and no file of the packages under /etc/containers or /etc/cni was changed. Run as root; about 3 min.
set -euo pipefail
cd "$(dirname "$0")/.."
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d /var/tmp/crawlcluster-setup-test.XXXXXX)
cleanup() {
  for mount in dev/pts dev sys proc; do umount -l "$root/$mount" 2>/dev/null || true; done
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
fail() { echo "test-setup-debian: FAIL: $*" >&2; exit 1; }

echo "test-setup-debian: debootstrap bookworm minbase + python3"
debootstrap --variant=minbase --include=python3 bookworm "$root" "$MIRROR" \
  >"$root.debootstrap.log" 2>&1 || { tail "$root.debootstrap.log"; exit 1; }
rm -f "$root.debootstrap.log"
chroot "$root" python3 -m pip --version 2>/dev/null && fail "the fresh root has pip"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# pip in there trusts what this machine's pip trusts (a proxy that re-signs TLS)
cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$root/etc/host-ca.crt"
export PIP_CERT=/etc/host-ca.crt REQUESTS_CA_BUNDLE=/etc/host-ca.crt SSL_CERT_FILE=/etc/host-ca.crt
unset PIP_FIND_LINKS
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
cp deploy/podman-setup.sh "$root/podman-setup.sh"

chroot "$root" bash /podman-setup.sh </dev/null
chroot "$root" podman info --format '{{.Host.OCIRuntime.Name}} {{.Host.NetworkBackend}}' \
  | tee "$root/info" | grep -qx 'runc netavark' || fail "podman info: $(cat "$root/info")"
chroot "$root" podman-compose --version >/dev/null || fail "podman-compose does not run"
etc_after=$(chroot "$root" sh -c 'find /etc/containers -type f 2>/dev/null | sort | xargs -r sha256sum')
# every file of the packages under /etc/containers and /etc/cni as they shipped it
touched=$(chroot "$root" dpkg --verify 2>&1 | grep -e /etc/containers -e /etc/cni || true)
[ -z "$touched" ] || fail "package files changed: $touched"
[ -f "$root/etc/containers/containers.conf.d/crawlcluster.conf" ] || fail "no drop-in"

second=$(chroot "$root" bash /podman-setup.sh </dev/null)
echo "$second" | grep -q 'podman-setup: ' && fail "a second run changed something: $second"
[ "$(chroot "$root" sh -c 'find /etc/containers -type f 2>/dev/null | sort | xargs -r sha256sum')" = "$etc_after" ] \
  || fail "a second run changed /etc/containers"
echo "test-setup-debian: ok (podman info: $(cat "$root/info"))"
