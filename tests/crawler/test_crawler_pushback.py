"""Pushback: two spiders crawling a generated site whose one host answers 429 (with
Retry-After) above a hidden rate, judged by nginx's own log; and the middleware's parts."""

import re
from dataclasses import dataclass

import pytest

from crawler.pushback import ForbiddenBursts, block_markers
from manager.local.crawl import Crawl, submit
from manager.local.demo import UNIVERSAL_RULE
from manager.local.ports import free_port
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site
from manager.local.staticsite import RateLimit, StaticSite
from master.crawls import CrawlStore
from master.frontier import Frontier
from master.pushback import PushbackStore
from master.siteconfig import SiteConfig
from settings.errors import ConfigError
from settings.loader import default_settings

LIMITED, FREE = "127.0.0.2", "127.0.0.3"
RETRY_AFTER = 3           # seconds the limited host asks for in each 429
DEFAULT_PAUSE = 2.0       # CRAWLCLUSTER_PUSHBACK_PAUSE: after a 503 without Retry-After
HIDDEN_RATE = 4.0         # requests a second the limited host takes (a burst of 2 more)
CONFIGURED = 20           # requests a second the crawl's limit allows each host
# s after a 429 in which a request already on its way may arrive: one sent before the
# refusal came back, or sent by the other node before it took again (a process holds
# its requests to a paused domain; measured by nginx's log: 7 ms at most)
IN_FLIGHT = 0.25


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
    late = [e["time"] - at for at in refused for e in limited
            if at < e["time"] < at + pause - 0.05]
    print(f"latest arrival after a refusal, within its pause: {max(late, default=0):.3f} s")
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

    assert blocked(b'<h1 class="x">Sorry, You Have Been Blocked.</h1>')
    assert not blocked(b"<p>A post: sorry, you have been blocked by the moderators</p>")
    assert blocked(b"<html><title>Solve this CAPTCHA</title>")
    assert not blocked(b"<p>how a captcha works</p>")
    with pytest.raises(ConfigError, match=re.escape("'(unclosed'")):
        block_markers(["(unclosed"])


def test_only_a_small_successful_page_can_be_a_block_page():
    from scrapy.http import HtmlResponse

    from crawler.pushback import BLOCK_PAGE_MAX_BYTES, is_block_page

    markers = block_markers(default_settings()["CRAWLCLUSTER_PUSHBACK_BLOCK_MARKERS"])
    block = b"<html><title>Attention Required! | Cloudflare</title>"

    def page(body, status=200):
        return HtmlResponse("http://a.com/", status=status, body=body, encoding="utf-8")

    assert is_block_page(page(block), markers)
    assert not is_block_page(page(block + b" " * BLOCK_PAGE_MAX_BYTES), markers)   # content
    assert not is_block_page(page(block, status=404), markers)
    assert not is_block_page(page(block), [])


@dataclass(frozen=True)
class BlockPageLimit(RateLimit):
    """Above its rate the host answers 200 with a small "you have been blocked" page,
    as a site behind a bot filter does, instead of a refusal."""

    def directives(self, name: str) -> str:
        page = "<html><head><title>You have been blocked</title></head><body></body></html>"
        return (f"location / {{ limit_req zone={name} burst={self.burst} nodelay; "
                f"limit_req_status 429; error_page 429 =200 @blocked; }} "
                f"location @blocked {{ default_type text/html; return 200 '{page}'; }} "
                f"location = /robots.txt {{ }}")


@pytest.mark.parametrize("limit, reason", [
    (RateLimit(HIDDEN_RATE, 2, None, status=403), "403 burst"),
    (BlockPageLimit(HIDDEN_RATE, 2), "block page"),
], ids=["403 burst", "block page"])
def test_a_burst_of_403s_or_a_block_page_is_pushback_and_its_page_is_fetched_later(
        test_settings, mongo_db, redis, zookeeper, tmp_path, limit, reason):
    """A host refusing with 403s, or with a block page answered 200, above its hidden
    rate: the cluster records pushback of that reason, and every page is fetched in the
    end (a block page is never stored as the page)."""
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), hosts=(LIMITED,), details_per_host=40)
    manifest = generate_site(tmp_path / "site", spec)
    with StaticSite(tmp_path / "site" / "www", spec.hosts, spec.port, tmp_path / "run",
                    rate_limits={LIMITED: limit}) as site:
        SiteConfig.from_settings(test_settings, zookeeper).set_limit(LIMITED, hits=CONFIGURED,
                                                                    window=1)
        submit(test_settings, {"crawlid": "blocked", "spider_type": "universal",
                               "url": f"http://{LIMITED}:{site.port}/", "rule": UNIVERSAL_RULE})
        crawl = Crawl(test_settings, "universal", tmp_path, CRAWLCLUSTER_PUSHBACK_403_COUNT=3,
                      CRAWLCLUSTER_PUSHBACK_PAUSE=DEFAULT_PAUSE)
        assert crawl.wait(300) == [0]
        log = [e for e in site.access_log() if not e["path"].endswith("robots.txt")]
    pages = pages_of(manifest, LIMITED)
    if limit.status == 403:
        assert any(e["status"] == 403 for e in log), "never refused: the test shows nothing"
    states = PushbackStore.from_settings(redis, test_settings).states_of([LIMITED])
    assert LIMITED in states and states[LIMITED].reason == reason, states
    assert states[LIMITED].pushbacks >= 1
    failed = Frontier.from_settings(redis, test_settings).failed("blocked")
    assert all("robots.txt" in failure["reason"] for failure in failed.values()), failed
    items = list(mongo_db["items_universal"].find({"crawlid": "blocked"}))
    assert items and not [item["url"] for item in items if "been blocked" in str(item)]
    counts = CrawlStore.from_settings(redis, test_settings).progress("blocked")["counts"]
    assert counts["done"] == len(pages)          # every page, none given up
    assert pages <= {url_of(e, site.port) for e in log if e["status"] == 200}
