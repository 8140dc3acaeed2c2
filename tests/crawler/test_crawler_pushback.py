"""Pushback: two spiders crawling a generated site whose one host answers 429 (with
Retry-After) above a hidden rate, judged by nginx's own log; and the middleware's parts."""

import re

import pytest

from crawler.pushback import ForbiddenBursts, block_markers
from manager.local.crawl import Crawl, submit
from manager.local.demo import UNIVERSAL_RULE
from manager.local.ports import free_port
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site
from manager.local.staticsite import RateLimit, StaticSite
from master.crawls import CrawlStore
from master.frontier import Frontier
from master.siteconfig import SiteConfig
from settings.errors import ConfigError
from settings.loader import default_settings

LIMITED, FREE = "127.0.0.2", "127.0.0.3"
RETRY_AFTER = 3           # seconds the limited host asks for in each 429
DEFAULT_PAUSE = 2.0       # CRAWLCLUSTER_PUSHBACK_PAUSE: after a 503 without Retry-After
HIDDEN_RATE = 4.0         # requests a second the limited host takes (a burst of 2 more)
CONFIGURED = 20           # requests a second the crawl's limit allows each host
IN_FLIGHT = 1.0           # s after a 429 in which a request already on its way may arrive


@pytest.fixture(params=[RateLimit(HIDDEN_RATE, 2, RETRY_AFTER),
                        RateLimit(HIDDEN_RATE, 2, None, status=503)],
                ids=["429 with Retry-After", "503 without"])
def limited_site(request, tmp_path):
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), hosts=(LIMITED, FREE), details_per_host=60)
    manifest = generate_site(tmp_path / "site", spec)
    site = StaticSite(tmp_path / "site" / "www", spec.hosts, spec.port, tmp_path / "run",
                      rate_limits={LIMITED: request.param}).start()
    site.limit = request.param
    yield manifest, site
    site.stop()


def pages_of(manifest, host):
    return {p["url"] for p in manifest["pages"]
            if p["host"] == host and p["kind"] in ("index", "list", "detail")}


def url_of(entry, port):
    return f"http://{entry['host']}:{port}{entry['path']}"


def test_two_spiders_slow_down_for_a_rate_limited_host_and_lose_no_page(
        test_settings, mongo_db, redis, zookeeper, limited_site, tmp_path):
    manifest, site = limited_site
    config = SiteConfig.from_settings(test_settings, zookeeper)
    for host in (LIMITED, FREE):
        config.set_limit(host, hits=CONFIGURED, window=1)
    # One crawl: the site's pages link across its hosts.
    submit(test_settings, {"crawlid": "pushback", "spider_type": "universal",
                           "url": f"http://{LIMITED}:{site.port}/", "rule": UNIVERSAL_RULE})
    crawl = Crawl(test_settings, "universal", tmp_path, node_ips=["10.0.0.1", "10.0.0.2"],
                  CRAWLCLUSTER_PUSHBACK_PAUSE=DEFAULT_PAUSE)
    assert crawl.wait(300) == [0, 0]

    log = [e for e in site.access_log() if not e["path"].endswith("robots.txt")]
    limited = [e for e in log if e["host"] == LIMITED]
    refused = [e["time"] for e in limited if e["status"] == site.limit.status]
    served = [url_of(e, site.port) for e in limited if e["status"] == 200]
    print(f"\nlimited host: {len(limited)} requests, {len(refused)} refused, "
          f"{len(served)} pages over {limited[-1]['time'] - limited[0]['time']:.1f} s")
    # Every page of the limited host was fetched once, in the end: none given up.
    assert sorted(served) == sorted(pages_of(manifest, LIMITED))
    assert refused, "the hidden rate was never met: the test shows nothing"
    counts = CrawlStore.from_settings(redis, test_settings).progress("pushback")["counts"]
    assert counts["done"] == len(served) + len(pages_of(manifest, FREE))
    failed = Frontier.from_settings(redis, test_settings).failed("pushback")
    assert all("robots.txt" in failure["reason"] for failure in failed.values()), failed
    # The cluster slowed down for it: pushback is a small share of the requests (without
    # it, nearly every request at 5 times the hidden rate is refused and retried).
    assert len(refused) <= 0.25 * len(limited)
    # Each pause (the Retry-After, or the default) was honoured by both spiders: nothing
    # arrived after a refusal until it ran out, but what was already on its way.
    pause = site.limit.retry_after or DEFAULT_PAUSE
    for at in refused:
        early = [e for e in limited if at + IN_FLIGHT < e["time"] < at + pause - 0.05]
        assert not early, f"requests during the pause after the refusal at {at}: {early}"
    # The other host kept its speed: all its pages, while the limited host was paused.
    free = [e for e in log if e["host"] == FREE]
    assert sorted(url_of(e, site.port) for e in free if e["status"] == 200) == \
        sorted(pages_of(manifest, FREE))
    assert free[-1]["time"] - free[0]["time"] <= len(free) / CONFIGURED + 5
    assert all(e["status"] == 200 for e in free)


def test_a_burst_of_403s_is_pushback_and_single_ones_are_not():
    bursts = ForbiddenBursts(count=3, window=10.0)
    assert [bursts.add("a.com", t) for t in (0.0, 1.0)] == [False, False]
    assert bursts.add("b.com", 1.5) is False           # another domain's count alone
    assert bursts.add("a.com", 2.0) is True
    assert bursts.add("a.com", 3.0) is False           # counted afresh after a burst
    spread = ForbiddenBursts(count=3, window=1.0)
    assert not any(spread.add("a.com", t) for t in (0.0, 0.8, 1.6, 2.4))
    assert not ForbiddenBursts(count=0, window=1.0).add("a.com", 0.0)   # off


def test_block_page_markers_match_bytes_and_a_bad_one_is_named():
    markers = block_markers(default_settings()["CRAWLCLUSTER_PUSHBACK_BLOCK_MARKERS"])

    def blocked(body):
        return any(marker.search(body) for marker in markers)

    assert blocked(b"<p>Sorry, You Have Been Blocked.</p>")
    assert blocked(b"<html><title>Solve this CAPTCHA</title>")
    assert not blocked(b"<p>how a captcha works</p>")
    with pytest.raises(ConfigError, match=re.escape("'(unclosed'")):
        block_markers(["(unclosed"])
