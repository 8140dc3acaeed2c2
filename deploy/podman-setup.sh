#!/usr/bin/env bash
# One-time setup of podman on a Debian 12 machine (root; systemd or not; no Docker Hub
# needed), for docker-compose.yml with deploy/compose.local.yml:
# - Debian's podman with runc (crun refuses on a cgroup v1 host: "cgroups in hybrid mode
#   not supported"), netavark with iptables for the network, debootstrap for the base
#   image, all from Debian's packages;
# - podman-compose from PyPI in a virtual environment of its own (/opt/podman-compose,
#   linked from /usr/local/bin): Debian 12 ships 1.0.3, and its Python refuses pip
#   installs outside a virtual environment (PEP 668);
# - a drop-in /etc/containers/containers.conf.d/crawlcluster.conf (the host's own
#   containers.conf is left as it is): runc; ulimits below this machine's hard limits
#   (podman's defaults can be above them, and a container would not start); containers
#   that take their /etc/hosts from podman alone, not from the host. Remove that file to
#   undo it.
# Run as root; running it again changes nothing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
PACKAGES=(podman runc netavark aardvark-dns debootstrap iptables uidmap slirp4netns
          python3-venv ca-certificates)
missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'ok installed' \
    || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "podman-setup: installing ${missing[*]}"
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
fi

if ! command -v podman-compose >/dev/null; then
  echo "podman-setup: podman-compose in /opt/podman-compose"
  python3 -m venv /opt/podman-compose
  /opt/podman-compose/bin/pip install -q 'podman-compose>=1.1'
  ln -sf /opt/podman-compose/bin/podman-compose /usr/local/bin/podman-compose
fi

# 16384 each, or half this machine's hard limit if that is less (the hard limit itself
# was refused on a CI machine)
files=$(ulimit -Hn); [ "$files" = unlimited ] && files=32768
procs=$(ulimit -Hu); [ "$procs" = unlimited ] && procs=32768
files=$(( files / 2 < 16384 ? files / 2 : 16384 ))
procs=$(( procs / 2 < 16384 ? procs / 2 : 16384 ))
dropin=/etc/containers/containers.conf.d/crawlcluster.conf
wanted="# crawlcluster: deploy/podman-setup.sh (remove this file to undo it)
[containers]
default_ulimits = [\"nofile=$files:$files\", \"nproc=$procs:$procs\"]
base_hosts_file = \"none\"
[engine]
runtime = \"runc\"
[network]
network_backend = \"netavark\""
if [ "$(cat "$dropin" 2>/dev/null)" != "$wanted" ]; then
  mkdir -p "$(dirname "$dropin")"
  printf '%s\n' "$wanted" >"$dropin"
  echo "podman-setup: wrote $dropin"
fi
podman --version
podman-compose --version 2>/dev/null | head -1
