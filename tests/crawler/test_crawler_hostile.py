"""Hostile pages: lying or missing charsets, binary and huge bodies, malformed HTML,
redirect loops, redirects and links to unsafe schemes, an endless calendar. A real
crawl (dispatcher, spider, Redis, MongoDB, nginx) must finish, store the right text,
never leave http(s) and stay inside its bounds."""

import re
from collections import Counter

import pytest

from manager.local.crawl import run_crawl, submit
from manager.local.ports import free_port
from manager.local.sitegen import BAD_LINKS, HOSTILE_TITLE, MANY_LINKS, generate_hostile_site
from manager.local.staticsite import StaticSite
from master.crawls import CrawlStore
from master.frontier import Frontier
from settings.clients import redis_client

HOSTILE_RULE = {"rules": [{"allow": ["/hostile/"], "follow": True,
                           "fields": {"title": "//h1/text()"}}]}


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    port = free_port()
    manifest, locations = generate_hostile_site(root, port)
    with StaticSite(root / "www", ["127.0.0.1"], port, root / "run",
                    locations=locations) as site:
        yield manifest, site


def crawl(settings, site, crawlid, tmp_path, **limits):
    manifest, served = site
    since = len(served.access_log())
    submit(settings, {"crawlid": crawlid, "spider_type": "universal",
                      "url": manifest["start_url"], "rule": HOSTILE_RULE, **limits})
    (tmp_path / crawlid).mkdir()
    assert run_crawl(settings, "universal", tmp_path / crawlid) == [0]   # no crash
    return Counter(entry["path"] for entry in served.access_log()[since:]
                   if entry["path"] != "/robots.txt")


def spider_log(tmp_path, crawlid):
    return (tmp_path / crawlid / "spider0.log").read_text()


def refused_pages(log):
    """The spider's ``crawlcluster/pages/refused/<reason>`` stats, as it dumped them."""
    return {reason: int(count) for reason, count in
            re.findall(r"'crawlcluster/pages/refused/(\w+)': (\d+)", log)}


def test_hostile_pages_are_survived_and_read_right(test_settings, redis, mongo_db,
                                                   hostile_site, tmp_path):
    manifest, _ = hostile_site
    settings = test_settings.copy_with(CRAWLCLUSTER_MAX_LINKS_PER_PAGE=1000)
    fetched = crawl(settings, hostile_site, "hostile", tmp_path, maxdepth=6)
    items = {item["url"]: item for item in mongo_db["items_universal"].find(
        {"crawlid": "hostile"})}
    for url, title in manifest["titled"].items():      # lying, missing charsets; bad markup
        assert items[url]["title"] == title == HOSTILE_TITLE, url
    assert all(url.startswith("http://") for url in items)             # no file:, data:, ...
    assert not any(url.endswith(("binary.html", "huge.html")) for url in items)
    # the redirect loop is cut at its second round, not at REDIRECT_MAX_TIMES (20)
    assert fetched["/hostile/loop-a.html"] == fetched["/hostile/loop-b.html"] == 2
    loops = {path for path, count in fetched.items() if count > 1}
    assert loops == {"/hostile/loop-a.html", "/hostile/loop-b.html"}, fetched  # the rest once
    client = redis_client(test_settings, "test")
    failed = Frontier.from_settings(client, test_settings).failed("hostile")
    client.close()
    assert "redirect loop" in failed[manifest["base"] + "loop-a.html"]["reason"]
    assert "max size" in failed[manifest["base"] + "huge.html"]["reason"]   # over the limit
    assert "file:///etc/passwd" in failed[manifest["base"] + "to-file.html"]["reason"]
    # the calendar is endless; maxdepth 6 from the index (depth 0) stops it at depth 6
    calendar = [path for path in fetched if path.startswith("/hostile/calendar/")]
    assert len(calendar) == 6
    # a decompression bomb, redirects to no URL: refused, failed for good, counted
    assert "decompression" in failed[manifest["base"] + "bomb.html"]["reason"]
    for page in ("bad-port.html", "bad-ipv6.html", "overlong.html"):
        assert "invalid redirect" in failed[manifest["base"] + page]["reason"], page
    log = spider_log(tmp_path, "hostile")
    assert refused_pages(log) == {"too_big": 1, "decompressed_too_big": 1,
                                  "redirect_loop": 1, "invalid_redirect": 3}
    assert "Traceback" not in log and "Unhandled error" not in log
    # a page of too many links and one of invalid links: stored, their links bounded
    assert items[manifest["base"] + "many-links.html"]["title"] == HOSTILE_TITLE
    many = [path for path in fetched if path.startswith("/hostile/many/")]
    assert len(many) == 1000 and all(fetched[path] == 1 for path in many)
    links = CrawlStore.from_settings(redis, settings).progress("hostile")["links"]
    assert links["refused"]["links_per_page"] == MANY_LINKS - 1000
    # a port out of range and a bad IPv6 literal never become links (LinkExtractor
    # skips them); the space in a host and the empty label are refused as invalid
    assert links["refused"]["invalid"] == len(BAD_LINKS) - 2


def test_an_endless_calendar_is_bounded_by_domain_max_pages(test_settings, redis, mongo_db,
                                                            hostile_site, tmp_path):
    fetched = crawl(test_settings, hostile_site, "calendar", tmp_path, maxdepth=1000,
                    domain_max_pages=40)
    # 40 pages (tasks): loop-b.html and the loop's second round are hops of loop-a's task
    pages = len(set(fetched) - {"/hostile/loop-b.html"})
    assert pages == 40, fetched



def test_a_failing_url_is_fetched_once_per_attempt_then_fails_for_good(
        test_settings, redis, mongo_db, tmp_path):
    """Retries are the cluster's alone: a URL answering 500 is fetched exactly
    CRAWLCLUSTER_MAX_RETRIES + 1 times, then recorded as failed for good (a 503 is the
    site pushing back: tests/crawler/test_crawler_pushback.py)."""
    www = tmp_path / "www" / "127.0.0.1"
    www.mkdir(parents=True)
    (www / "index.html").write_text('<html><body><h1>i</h1><a href="/down.html">d</a>'
                                    "</body></html>")
    port = free_port()
    locations = {"127.0.0.1": ["location = /down.html { return 500; }"]}
    with StaticSite(tmp_path / "www", ["127.0.0.1"], port, tmp_path / "run",
                    locations=locations) as site:
        base = f"http://127.0.0.1:{port}"
        submit(test_settings, {"crawlid": "down", "spider_type": "universal",
                               "url": f"{base}/index.html",
                               "rule": {"rules": [{"allow": [r"\.html$"], "follow": True}]}})
        (tmp_path / "logs").mkdir()
        assert run_crawl(test_settings, "universal", tmp_path / "logs") == [0]
        fetched = Counter(entry["path"] for entry in site.access_log())
    attempts = test_settings.getint("CRAWLCLUSTER_MAX_RETRIES") + 1
    assert fetched["/down.html"] == attempts, fetched
    client = redis_client(test_settings, "test")
    failed = Frontier.from_settings(client, test_settings).failed("down")
    client.close()
    assert failed == {f"{base}/down.html": {"reason": "HTTP 500", "attempts": attempts}}
