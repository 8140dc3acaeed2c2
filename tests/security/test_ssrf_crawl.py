"""SSRF through a crawl: every target of the table (tests/security/ssrfnet.py) submitted
as a crawl's URL, and reached through a redirect from a public site, is refused with its
reason, and no connection reaches its listener. The spider runs in the test's network
namespace, resolving through the test's DNS server, with the guard at its default."""

import subprocess
import sys

from manager.local.crawl import ROOT, cluster_env, submit
from master.frontier import Frontier
from settings.clients import redis_client
from tests.security.ssrfnet import SITE, TARGETS

RULE = {"rules": [{"allow": [".*"], "follow": True}]}
# Every lookup asks the DNS server again, as a name with a TTL of 0 asks for: the
# rebinding name gets its second answer (Scrapy keeps an answer for the process's life).
SPIDER_OPTIONS = ["-s", "DNSCACHE_ENABLED=False", "-s", "LOG_LEVEL=INFO"]


def crawl_in(network, settings, log_dir, timeout=240):
    """The dispatcher on the host, one spider inside the namespace, until it goes idle."""
    env = cluster_env(settings)
    with open(log_dir / "master.log", "w") as log:
        master = subprocess.Popen([sys.executable, "-m", "manager.cli", "master"], cwd=ROOT,
                                  env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        with open(log_dir / "spider.log", "w") as log:
            spider = subprocess.run(network.command(
                [sys.executable, "-m", "scrapy", "crawl", "universal", "-a", "_job=ssrf",
                 *SPIDER_OPTIONS]), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        return spider.returncode
    finally:
        master.terminate()
        master.wait(10)


def failures(settings, crawlids):
    client = redis_client(settings, "test")
    try:
        frontier = Frontier.from_settings(client, settings)
        return {crawlid: frontier.failed(crawlid) for crawlid in crawlids}
    finally:
        client.close()


def test_every_ssrf_target_is_refused_by_a_crawl_and_through_a_redirect(
        guarded_settings, redis, mongo_db, ssrf_network, tmp_path):
    seeds = {**{f"direct-{t.name}": t.url for t in TARGETS},
             **{f"redirect-{t.name}": f"http://{SITE}/r/{t.name}" for t in TARGETS},
             "public": f"http://{SITE}/index.html"}
    for crawlid, url in seeds.items():
        submit(guarded_settings, {"crawlid": crawlid, "spider_type": "universal", "url": url,
                                  "rule": RULE})
    assert crawl_in(ssrf_network, guarded_settings, tmp_path) == 0
    failed = failures(guarded_settings, seeds)
    assert ssrf_network.listeners.reached() == {}                 # nothing arrived
    assert failed["public"] == {}
    assert "/index.html" in ssrf_network.site_paths                # the crawl did run
    # the rebinding name's first (public) answer was used, its later ones were refused
    assert ssrf_network.dns.asked["rebind.ssrf.test"] >= 2
    for target in TARGETS:
        direct = failed[f"direct-{target.name}"]
        assert direct == {target.url: {"attempts": 1, "reason": direct[target.url]["reason"]}}
        assert direct[target.url]["reason"].startswith(f"refused {target.url}: ")
        assert direct[target.url]["reason"].endswith(f"({target.reason})"), direct
        assert f"/r/{target.name}" in ssrf_network.site_paths       # the redirect was met
        (why,) = failed[f"redirect-{target.name}"].values()
        assert (why["reason"].startswith(f"refused {target.url}: ")
                and why["reason"].endswith(f"({target.reason})")) or (
            # Scrapy itself follows no redirect to another scheme
            target.reason == "scheme" and why["reason"] ==
            f"HTTP 302: redirect not followed (to {target.url})"), (target, why)
        assert why["attempts"] == 1                                   # failed for good
