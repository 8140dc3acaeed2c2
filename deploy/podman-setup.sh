#!/usr/bin/env bash
# One-time setup of podman on a Debian 12 machine like the project's CI (root, no
# systemd, no Docker Hub), for docker-compose.yml with deploy/compose.local.yml:
# - Debian's podman with runc (crun refuses here: "cgroups in hybrid mode not
#   supported"), netavark with iptables for the network, debootstrap for the base image;
# - podman-compose from PyPI;
# - /etc/containers/containers.conf: runc; ulimits below this machine's hard limits
#   (podman's defaults are above them, and a container would not start); and containers that take their /etc/hosts from
#   podman alone, not from the host (a host that names the stand-in broker `kafka` in its
#   /etc/hosts must not pass that name on to the containers).
# Run as root; running it again changes nothing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
missing=()
for program in podman runc debootstrap iptables; do
  command -v "$program" >/dev/null || missing+=("$program")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -q
  apt-get install -y -q --no-install-recommends podman runc netavark aardvark-dns \
    debootstrap iptables uidmap slirp4netns </dev/null
fi
command -v podman-compose >/dev/null || python3 -m pip install -q 'podman-compose>=1.1'

conf=/etc/containers/containers.conf
marker="# crawlcluster: deploy/podman-setup.sh"
if ! grep -qF "$marker" "$conf" 2>/dev/null; then
  [ -f "$conf" ] && cp "$conf" "$conf.before-crawlcluster"
  mkdir -p /etc/containers
  # 16384 each, or half this machine's hard limit if that is less (the hard limit
  # itself was refused here)
  files=$(ulimit -Hn); [ "$files" = unlimited ] && files=32768
  procs=$(ulimit -Hu); [ "$procs" = unlimited ] && procs=32768
  files=$(( files / 2 < 16384 ? files / 2 : 16384 ))
  procs=$(( procs / 2 < 16384 ? procs / 2 : 16384 ))
  cat >"$conf" <<CONF
$marker
[containers]
default_ulimits = ["nofile=$files:$files", "nproc=$procs:$procs"]
base_hosts_file = "none"
[engine]
runtime = "runc"
[network]
network_backend = "netavark"
CONF
  echo "podman-setup: wrote $conf"
fi
# the CNI default network of Debian's package names plugins that are not installed
rm -f /etc/cni/net.d/87-podman-bridge.conflist
podman --version
