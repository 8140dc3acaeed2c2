"""A Scrapy project of a user's own on the cluster (tests/crawler/userproject): its
spider, written for plain Scrapy, crawls through the frontier after one settings line
(``ADDONS``), and gives the items it gives under plain Scrapy, each page fetched once."""

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from manager.local.crawl import cluster_env
from manager.local.ports import free_port
from manager.local.sitegen import SiteSpec, generate_site
from manager.local.sitelog import check_fetched_once, fetch_summary, page_fetches
from manager.local.staticsite import StaticSite
from master.keys import Keys
from master.urls import canonical_url
from settings.clients import redis_client
from settings.loader import environment_for
from tests.faults.siteowner import SCALED, leased_now

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).parent / "userproject"


MISSING = "/no-such-page.html"    # the news spider's errback's page (404)
MEMBERS = 3
# The news spider's pages beside the site's own: the errback's, and the login's: its
# form, the POST that sets the session cookie, and the pages only a session sees.
NEWS_SPIDER_PAGES = [MISSING, "/login.html", "/login", "/members/",
                     *(f"/members/{n}.html" for n in range(1, MEMBERS + 1))]
# nginx: the form's POST sets the session and redirects; /members/ wants the session
LOGIN = [('location = /login { if ($request_method != POST) { return 405; } '
          'add_header Set-Cookie "session=ann; Path=/"; return 302 /members/; }'),
         'location /members/ { if ($cookie_session != "ann") { return 403; } }']


def write_login_pages(www):
    (www / "login.html").write_text(
        '<html><body><form action="/login" method="post"><input name="user">'
        '<input name="password" type="password"><button>Sign in</button></form></body></html>')
    (www / "members").mkdir()
    (www / "members" / "index.html").write_text("<html><body><ul>" + "".join(
        f'<li><a href="{n}.html">Notice {n}</a></li>' for n in range(1, MEMBERS + 1))
        + "</ul></body></html>")
    for n in range(1, MEMBERS + 1):
        (www / "members" / f"{n}.html").write_text(
            f"<html><body><h1>Members' notice {n}</h1></body></html>")


@pytest.fixture(scope="module")
def news_site(tmp_path_factory):
    root = tmp_path_factory.mktemp("user-spider-site")
    spec = SiteSpec(port=free_port(["127.0.0.1"]), hosts=("127.0.0.1",),
                    details_per_host=120, seed=7)
    manifest = generate_site(root, spec)
    write_login_pages(root / "www" / "127.0.0.1")
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run",
                    locations={"127.0.0.1": LOGIN}) as site:
        yield manifest, site


def scrapy_crawl(env, out, start, log, *options, spider="news"):
    """``scrapy crawl <spider>`` in the user's project, its items written to ``out``."""
    with open(log, "w") as stream:
        return subprocess.Popen(
            [sys.executable, "-m", "scrapy", "crawl", spider,
             *(["-a", f"start={start}"] if start else []),
             "-O", f"{out}:jsonlines", "-s", "LOG_LEVEL=INFO", *options],
            cwd=PROJECT, env=env, stdin=subprocess.DEVNULL, stdout=stream,
            stderr=subprocess.STDOUT)


def items_of(path):
    return sorted((json.loads(line) for line in Path(path).read_text().splitlines()),
                  key=lambda item: item["url"])


@pytest.fixture(scope="module")
def plain_scrapy_items(news_site, tmp_path_factory):
    """``items(spider)``: the items of one of the project's spiders under plain Scrapy
    (the add-on switched off), each run once."""
    manifest, _ = news_site
    found = {}

    def items(spider):
        if spider not in found:
            out = tmp_path_factory.mktemp(f"plain-{spider}")
            process = scrapy_crawl(environment_for({}), out / "plain.jsonl",
                                   manifest["start_url"], out / "plain.log", "-s", "ADDONS={}",
                                   spider=spider)
            assert process.wait(120) == 0, (out / "plain.log").read_text()[-3000:]
            found[spider] = items_of(out / "plain.jsonl")
        return found[spider]

    return items


def start_master(env, tmp_path):
    with open(tmp_path / "master.log", "w") as log:
        return subprocess.Popen([sys.executable, "-m", "manager.cli", "master"], cwd=ROOT,
                                env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=log)


def wait_all(processes, master, timeout=180):
    try:
        return [process.wait(timeout) for process in processes]
    finally:
        for process in [*processes, master]:
            if process.poll() is None:
                process.terminate()
                process.wait(10)


def cluster_items(tmp_path, count):
    return sorted((item for n in range(count) for item in items_of(tmp_path / f"cluster{n}.jsonl")),
                  key=lambda item: item["url"])


def assert_each_page_once(site, since, manifest, label, also=(), missing=True):
    """nginx's log since ``since``: each page of the site fetched once, and ``also``, and
    (``missing``) the news spider's own pages (``NEWS_SPIDER_PAGES``)."""
    if missing:
        also = [manifest["start_url"].rstrip("/") + path for path in NEWS_SPIDER_PAGES] + list(also)
    fetched = page_fetches(site.access_log()[since:], site.port)
    print(f"\n{label}: nginx served {fetch_summary(fetched)}")
    check_fetched_once(fetched, [p["url"] for p in manifest["pages"]
                                 if p["kind"] in ("index", "list", "detail")] + list(also))


def test_a_user_spider_crawls_through_the_cluster_each_page_once(
        test_settings, news_site, plain_scrapy_items, tmp_path):
    manifest, site = news_site
    start = manifest["start_url"]
    expected = plain_scrapy_items("news")
    since = len(site.access_log())
    env = cluster_env(test_settings)
    master = start_master(env, tmp_path)
    # the start page also yields a request whose meta holds a set
    spiders = [scrapy_crawl(env, tmp_path / f"cluster{n}.jsonl", start,
                            tmp_path / f"spider{n}.log", "-a", "bad_meta=1") for n in range(2)]
    codes = wait_all(spiders, master)
    logs = "".join((tmp_path / f"spider{n}.log").read_text() for n in range(2))
    assert codes == [0, 0], logs[-5000:]
    assert ("spider 'news', callback 'parse_list': request meta['seen'] holds a set, which is "
            "not JSON") in logs
    assert "'crawlcluster/links/refused/not_json': 1" in logs
    assert_each_page_once(site, since, manifest, f"user spider, two processes "
                                                  f"({len(expected)} items under plain Scrapy)")
    # plain Scrapy's items, the members' pages behind the login among them
    assert members_items(start) <= {item["url"] for item in expected}
    assert cluster_items(tmp_path, 2) == expected
    client = redis_client(test_settings, "test")
    try:
        assert client.exists(Keys.from_settings(test_settings).crawl("news"))
    finally:
        client.close()


@pytest.mark.parametrize("spider, plain, kind", [
    ("news_redis", "news", "list"), ("news_redis", "news", "set"),
    ("news_redis", "news", "zset"), ("news_rules_redis", "news_rules", "list")])
def test_a_scrapy_redis_spider_reads_its_start_url_key_with_an_acknowledgement(
        test_settings, news_site, plain_scrapy_items, tmp_path, spider, plain, kind):
    """A ``RedisSpider`` or a ``RedisCrawlSpider`` with ``Rule``s fed through
    ``<name>:start_urls`` as scrapy-redis's README feeds one (a plain URL, and
    scrapy-redis's JSON form): two processes crawl the site once between them, with the
    items the same spider gives under plain Scrapy, and the key is empty at the end."""
    manifest, site = news_site
    start = manifest["start_url"]
    expected = plain_scrapy_items(plain)
    key = f"{test_settings['CRAWLCLUSTER_KEY_PREFIX']}:%(name)s:start_urls"
    spelt = key % {"name": spider}
    client = redis_client(test_settings, "test")
    entries = [start, json.dumps({"url": start + "?from=json", "meta": {"trail": []}})]
    if kind == "list":
        client.rpush(spelt, *entries)
    elif kind == "set":
        client.sadd(spelt, *entries)
    else:
        client.zadd(spelt, {entry: 1 for entry in entries})
    since = len(site.access_log())
    env = cluster_env(test_settings)
    master = start_master(env, tmp_path)
    options = ["-s", f"REDIS_START_URLS_KEY={key}",
               "-s", f"REDIS_START_URLS_AS_SET={kind == 'set'}",
               "-s", f"REDIS_START_URLS_AS_ZSET={kind == 'zset'}"]
    spiders = [scrapy_crawl(env, tmp_path / f"cluster{n}.jsonl", "", tmp_path / f"spider{n}.log",
                            *options, spider=spider) for n in range(2)]
    codes = wait_all(spiders, master)
    logs = "".join((tmp_path / f"spider{n}.log").read_text() for n in range(2))
    try:
        assert codes == [0, 0], logs[-5000:]
        assert "with an acknowledgement" in logs
        assert not client.exists(spelt)
    finally:
        client.delete(spelt)
        client.close()
    # the JSON entry's page is the start page by another URL: fetched, its links known
    assert_each_page_once(site, since, manifest, f"scrapy-redis {spider}, start URLs in a {kind}",
                          also=[start + "?from=json"], missing=spider == "news_redis")
    assert cluster_items(tmp_path, 2) == expected


def members_items(start):
    """The URLs of the items only a logged-in session gets."""
    return {f"{start}members/{n}.html" for n in range(1, MEMBERS + 1)}


def test_a_user_spider_process_sigkilled_mid_crawl_loses_nothing(
        test_settings, news_site, tmp_path):
    """The user spider's processes SIGKILLed mid-crawl and started again, as their
    manager would: the tasks they held come back (issue 28's bounds, from nginx's log):
    every page fetched, none more than twice, the extra fetches at most what was in flight
    plus 1%. (The site is one host: its queue is one process's, so both are killed.)"""
    manifest, site = news_site
    start = manifest["start_url"]
    pages = [p["url"] for p in manifest["pages"] if p["kind"] in ("index", "list", "detail")]
    pages += [start.rstrip("/") + path for path in NEWS_SPIDER_PAGES]
    since = len(site.access_log())
    # the site slowed to 25 pages a second, so the crawl is mid-way when the kill lands;
    # the processes started again wait out the dead ones' heartbeats before going idle
    env = cluster_env(test_settings, **{**SCALED, "CRAWLCLUSTER_THROTTLE_HITS": "25",
                                        "CRAWLCLUSTER_IDLE_TIMEOUT": "15"})
    master = start_master(env, tmp_path)
    killed = [scrapy_crawl(env, tmp_path / f"cluster{n}.jsonl", start,
                           tmp_path / f"spider{n}.log") for n in range(2)]
    deadline = time.monotonic() + 60
    while len(site.access_log()) - since < len(pages) // 3:
        assert time.monotonic() < deadline, "the crawl did not get going"
        time.sleep(0.1)
    for spider in killed:
        spider.send_signal(signal.SIGKILL)
        spider.wait(10)
    in_flight = leased_now(test_settings)    # what the dead held (their leases outlive them)
    started_again = [scrapy_crawl(env, tmp_path / f"cluster{n}.jsonl", start,
                                  tmp_path / f"spider{n}.log") for n in (2, 3)]
    codes = wait_all(started_again, master)
    logs = "".join((tmp_path / f"spider{n}.log").read_text() for n in (2, 3))
    assert codes == [0, 0], logs[-5000:]
    fetched = page_fetches(site.access_log()[since:], site.port)
    extra = sum(fetched.values()) - len(fetched)
    allowed = in_flight + math.ceil(0.01 * len(pages))
    print(f"\nuser spider, its processes SIGKILLed mid-crawl: nginx served "
          f"{fetch_summary(fetched)}; {extra} fetched again (bound {allowed}: {in_flight} in "
          f"flight + 1%)")
    assert {canonical_url(url) for url in pages} == set(fetched)
    assert max(fetched.values()) <= 2 and extra <= allowed
    # fetched is not enough: a page refused (a 403 for a lost session) is in the log too.
    # Every members' page was served 200. (Items cannot tell here: a killed process's
    # last items die in its feed file's buffer.)
    members = [e for e in site.access_log()[since:] if e["path"].startswith("/members/")]
    assert members and {e["status"] for e in members} == {200}, members
