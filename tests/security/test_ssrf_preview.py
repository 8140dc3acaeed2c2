"""SSRF through the preview: every target of the table (tests/security/ssrfnet.py) asked
for directly is refused with its reason as the preview's error, a redirect to it is shown
as the redirect (never followed), and no connection reaches its listener. The preview
runs in the test's network namespace, resolving through the test's DNS server, with the
guard at its default."""

import json
import subprocess
import sys

from manager.local.crawl import ROOT, cluster_env
from tests.security.ssrfnet import SITE, TARGETS


def previews_in(network, settings, urls):
    """``{url: the preview's status and HTML, or its error}``, previewed in the namespace."""
    done = subprocess.run(network.command(
        [sys.executable, "-m", "tests.security.preview_probe", *urls]), cwd=ROOT,
        env=cluster_env(settings, fast=False), capture_output=True, text=True, timeout=120,
        check=False)
    assert done.returncode == 0, done.stderr
    return {shown["url"]: shown for shown in map(json.loads, done.stdout.splitlines())}


def test_every_ssrf_target_is_refused_by_the_preview_and_no_redirect_is_followed(
        guarded_settings, redis, zookeeper, ssrf_network):
    redirects = {target.name: f"http://{SITE}/r/{target.name}" for target in TARGETS}
    public = f"http://{SITE}/index.html"
    shown = previews_in(ssrf_network, guarded_settings,
                        [public, *(t.url for t in TARGETS), *redirects.values()])
    assert ssrf_network.listeners.reached() == {}                 # nothing arrived
    assert shown[public]["status"] == 200 and "public" in shown[public]["html"]
    for target in TARGETS:
        error = shown[target.url].get("error", "")
        assert error.startswith(f"url: refused {target.url}: "), (target, shown[target.url])
        assert error.endswith(f"({target.reason})"), error
        redirect = shown[redirects[target.name]]
        assert redirect["status"] == 302 and "SECRET" not in redirect["html"], redirect
    # the rebinding name's first (public) answer was used, its later one refused
    assert ssrf_network.dns.asked["rebind.ssrf.test"] >= 2
