#!/usr/bin/env bash
# deploy/images.sh builds the images' wheels with the images' own Python, whatever this
# machine's is: run its wheel step with a PATH on which `python`, `python3` and `pip` fail
# (and, where pyenv has it, another Python as this machine's), then check no compiled
# wheel is for another Python than the image's (cp311), the stamp names that interpreter,
# and the [render] extra's Playwright is among them.
# Run as root; a few minutes the first time (the wheels are downloaded or built).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /var/tmp/crawlcluster-wheels-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "test-image-wheels: FAIL: $*" >&2; exit 1; }

mkdir "$work/bin" "$work/wheels"
for program in python python3 pip pip3; do
  printf '#!/bin/sh\necho "host %s called: $*" >>%s/host-calls; exit 1\n' \
    "$program" "$work" >"$work/bin/$program"
  chmod +x "$work/bin/$program"
done
PATH="$work/bin:$PATH" PYENV_VERSION=3.12.1 CRAWLCLUSTER_WHEELS="$work/wheels" \
  bash deploy/images.sh wheels
[ -e "$work/host-calls" ] && fail "the host's Python was called: $(cat "$work/host-calls")"
grep -q '^cpython-311 ' "$work/wheels/.inputs" \
  || fail "the stamp does not name the image's interpreter: $(cat "$work/wheels/.inputs")"
compiled=$(cd "$work/wheels" && ls ./*.whl | grep -v -e '-none-any\.whl$' || true)
[ -n "$compiled" ] || fail "no compiled wheels built"
for name in lxml numpy hiredis; do
  echo "$compiled" | grep -q "/$name-.*-cp311-cp311-" || fail "no cp311 wheel of $name"
done
# the [render] extra the crawlcluster image installs: Playwright, for this platform
echo "$compiled" | grep -q "/playwright-.*-manylinux" || fail "no wheel of playwright ([render])"
# a wheel for one CPython version names it (cp311); abi3 and py3-none ones fit any
wrong=$(echo "$compiled" | grep -E -e '-cp3[0-9]+-cp3[0-9]+' | grep -v -e '-cp311-cp311-' || true)
[ -z "$wrong" ] || fail "wheels not for the image's Python 3.11: $wrong"
echo "test-image-wheels: ok ($(echo "$compiled" | wc -l) compiled wheels, none for another Python)"
