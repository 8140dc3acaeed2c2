"""Staying fresh on real servers: sitemaps (an index, a gzip child), feeds and robots.txt
seed a crawl through its rules; sources that are not XML, too big or too deep are
refused with their reason while the crawl goes on."""

import gzip
import time
from collections import Counter

import pytest

from manager.local.crawl import Crawl, run_crawl, submit
from manager.local.demo import PRECISE_RULE, UNIVERSAL_RULE
from manager.local.ports import free_port
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site, write_latest
from manager.local.staticsite import StaticSite
from master.crawls import CrawlStore

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'


def urlset(urls, lastmod="2026-11-20"):
    entries = "".join(f"<url><loc>{url}</loc><lastmod>{lastmod}</lastmod></url>"
                      for url in urls)
    return f'<?xml version="1.0"?><urlset {NS}>{entries}</urlset>'.encode()


def index(urls):
    entries = "".join(f"<sitemap><loc>{url}</loc></sitemap>" for url in urls)
    return f'<?xml version="1.0"?><sitemapindex {NS}>{entries}</sitemapindex>'.encode()


def atom(urls):
    entries = "".join(f"<entry><title>Story {n}</title><link href='{url}'/><id>{url}</id>"
                      f"<updated>2026-11-23T0{n % 10}:00:00Z</updated></entry>"
                      for n, url in enumerate(urls))
    return (f'<?xml version="1.0" encoding="utf-8"?><feed xmlns="http://www.w3.org/2005/Atom">'
            f"<title>News</title><id>urn:news</id><updated>2026-11-23T10:00:00Z</updated>"
            f"{entries}</feed>").encode()


@pytest.fixture(scope="module")
def sourced_site(tmp_path_factory):
    """A generated site whose first host also serves a sitemap index (a gzip child and a
    plain one), an Atom feed, a robots.txt naming a sitemap, and bad sources."""
    root = tmp_path_factory.mktemp("sourced")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=12, seed=5,
                    gbk_page=False)
    manifest = generate_site(root, spec)
    details = [p for p in manifest["pages"] if p["kind"] == "detail"]
    by_host = {host: [p["url"] for p in details if p["host"] == host] for host in spec.hosts}
    hosts = list(spec.hosts)
    www, base = root / "www" / hosts[0], spec.base(hosts[0])
    listed = {
        "gzip": by_host[hosts[0]][:6],
        "plain": by_host[hosts[1]][:4],
        "feed": by_host[hosts[2]][:5],
        "robots": by_host[hosts[3]][:3],
    }
    (www / "sitemap-a.xml.gz").write_bytes(gzip.compress(urlset(listed["gzip"])))
    (www / "sitemap-b.xml").write_bytes(urlset(listed["plain"]))
    (www / "sitemap_index.xml").write_bytes(index([f"{base}/sitemap-a.xml.gz",
                                                   f"{base}/sitemap-b.xml"]))
    (www / "news.atom").write_bytes(atom(listed["feed"]))
    (www / "robots-listed.xml").write_bytes(urlset(listed["robots"]))
    robots = www / "robots.txt"       # it names the generated sitemap.xml already
    robots.write_text(robots.read_text() + f"Sitemap: {base}/robots-listed.xml\n")
    listed["generated"] = by_host[hosts[0]]
    # bad sources: not XML, a gzip bomb, indexes nested too deep, 50,001 entries
    (www / "page.html").write_text("<html><body><a href='/'>home</a></body></html>")
    (www / "bomb.xml.gz").write_bytes(gzip.compress(b"<" * (60 * 1024 * 1024)))
    for level in range(6):
        (www / f"deep-{level}.xml").write_bytes(index([f"{base}/deep-{level + 1}.xml"]))
    (www / "big.xml").write_bytes(urlset(f"http://elsewhere.example/{n}"
                                         for n in range(50_001)))
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        yield manifest, served, base, listed


def test_sitemaps_feeds_and_robots_seed_a_crawl_and_bad_sources_are_bounded(
        test_settings, mongo_db, redis, sourced_site, tmp_path):
    manifest, served, base, listed = sourced_site
    since = len(served.access_log())
    submit(test_settings, {
        "crawlid": "fresh", "spider_type": "universal", "url": manifest["start_url"],
        "rule": UNIVERSAL_RULE, "maxdepth": 0, "robots_sitemaps": True,
        "sitemaps": [f"{base}/sitemap_index.xml", f"{base}/page.html", f"{base}/bomb.xml.gz",
                     f"{base}/deep-0.xml", f"{base}/big.xml"],
        "feeds": [f"{base}/news.atom", f"{base}/page.html"]})
    assert run_crawl(test_settings, "universal", tmp_path, timeout=300) == [0]

    # every listed page stored once, nothing else (maxdepth 0: no page's links followed)
    items = {item["url"]: item for item in mongo_db["items_universal"].find({"crawlid": "fresh"})}
    every_listed = {url for urls in listed.values() for url in urls}
    assert set(items) == every_listed
    fetched = Counter(f"http://{e['host']}:{manifest['spec']['port']}{e['path']}"
                      for e in served.access_log()[since:])
    assert all(fetched[url] == 1 for url in every_listed), fetched.most_common(3)
    # what the sources said of each page is kept
    assert all(items[url]["lastmod"] == "2026-11-20" for url in listed["gzip"] + listed["plain"])
    story = items[listed["feed"][1]]
    assert story["feed_title"] == "Story 1" and story["published"] == "2026-11-23T01:00:00+00:00"
    assert items[listed["feed"][1]]["title"]             # the rule's own fields as well

    # the bad sources: refused with their reasons, the crawl went on
    refused = CrawlStore.from_settings(redis, test_settings).progress("fresh")["links"]["refused"]
    assert refused["sitemap_invalid"] == 1 and refused["feed_invalid"] == 1
    assert refused["sitemap_too_big"] == 1
    assert refused["sitemap_depth"] == 1              # deep-3 lists deep-4: not followed
    assert fetched[f"{base}/deep-3.xml"] == 1 and fetched[f"{base}/deep-4.xml"] == 0
    assert refused["sitemap_limit"] == 1
    assert refused["rule"] >= 50_000           # no rule takes them (nor some of the seed page)


def test_a_precise_crawl_takes_a_sitemaps_pages_as_detail_pages(
        test_settings, mongo_db, redis, sourced_site, tmp_path):
    manifest, _, base, listed = sourced_site
    # a sitemap's page has no list page to take the title from: the detail page gives it
    rule = {**PRECISE_RULE, "second_page_xpath": {**PRECISE_RULE["second_page_xpath"],
                                                  "title": "//h1/text()"}}
    submit(test_settings, {"crawlid": "fresh-precise", "spider_type": "precise",
                           "url": f"{base}/page.html", "rule": rule,
                           "sitemaps": [f"{base}/sitemap-b.xml"]})
    assert run_crawl(test_settings, "precise", tmp_path, timeout=200) == [0]
    items = {item["url"]: item for item in
             mongo_db["items_precise"].find({"crawlid": "fresh-precise"})}
    pages = {p["url"]: p for p in manifest["pages"]}
    assert set(listed["plain"]) <= set(items)
    for url in listed["plain"]:
        assert (items[url]["author"], items[url]["title"]) == (pages[url]["author"],
                                                               pages[url]["title"])
        assert items[url]["lastmod"] == "2026-11-20"


def wait_for(condition, timeout=90.0, every=0.5):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(every)


def test_a_revisited_hub_answers_304_until_it_changes_then_only_new_articles_are_fetched(
        test_settings, mongo_db, redis, tmp_path_factory, tmp_path):
    """nginx's ETag: the hub's revisits ask If-None-Match and get 304 Not Modified while
    the generated site is unchanged (nothing stored); once the site writes a new version
    of the hub, the next visit finds the new articles, stores them, and fetches none of
    the old ones again."""
    root = tmp_path_factory.mktemp("changing")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=8, seed=9,
                    gbk_page=False)
    manifest = generate_site(root, spec)
    host = spec.hosts[0]
    details = [p["url"] for p in manifest["pages"]
               if p["kind"] == "detail" and p["host"] == host][:8]
    hub_url, _ = write_latest(root, spec, host, details[:5])
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        submit(test_settings, {"crawlid": "hubbed", "spider_type": "universal", "url": hub_url,
                               "rule": UNIVERSAL_RULE, "maxdepth": 1, "hubs": [hub_url],
                               "hub_span": 1, "revisit": {"min": 1, "max": 3}})
        crawl = Crawl(test_settings, "universal", tmp_path, CRAWLCLUSTER_IDLE_TIMEOUT="0")
        try:
            def stored():
                return {item["url"] for item in
                        mongo_db["items_universal"].find({"crawlid": "hubbed"})}

            def hub_statuses():
                return [e["status"] for e in served.access_log() if e["path"] == "/latest.html"]

            wait_for(lambda: hub_statuses().count(304) >= 2)
            assert stored() == set(details[:5])
            assert hub_statuses()[0] == 200 and set(hub_statuses()[1:]) == {304}

            write_latest(root, spec, host, details)   # the site's next version: 3 new
            wait_for(lambda: stored() == set(details))
            wait_for(lambda: hub_statuses()[-1] == 304)   # unchanged again after that
        finally:
            crawl.stop()
        fetched = Counter(f"http://{e['host']}:{spec.port}{e['path']}"
                          for e in served.access_log())
        assert all(fetched[url] == 1 for url in details), fetched
        assert hub_statuses().count(200) == 2           # the first visit and the change


def test_pages_a_revisited_sitemap_says_changed_are_crawled_again(
        test_settings, mongo_db, redis, tmp_path_factory, tmp_path):
    """With the Bloom filter in counting mode, a page whose lastmod in a revisited
    sitemap is newer than the sitemap's last visit is taken out of the filter and
    crawled again; an unchanged one is not. What is stored: the changed page's new version
    in place and its first kept, a page gone (404) marked gone, and `info`'s counts."""
    settings = test_settings.copy_with(CRAWLCLUSTER_BLOOM_COUNTING=True)
    root = tmp_path_factory.mktemp("lastmod")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=4, seed=3,
                    gbk_page=False)
    manifest = generate_site(root, spec)
    host = spec.hosts[0]
    old, removed, edited, new = [p["url"] for p in manifest["pages"]
                                 if p["kind"] == "detail" and p["host"] == host][:4]
    _, sitemap = write_latest(root, spec, host, [old, removed, edited], "2026-01-01")
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        submit(settings, {"crawlid": "edited", "spider_type": "universal",
                          "url": f"{spec.base(host)}/robots.txt", "rule": UNIVERSAL_RULE,
                          "maxdepth": 0, "sitemaps": [sitemap], "hub_span": 1,
                          "revisit": {"min": 1, "max": 3}})
        crawl = Crawl(settings, "universal", tmp_path, CRAWLCLUSTER_IDLE_TIMEOUT="0")
        try:
            def fetched(url):
                path = url.split(str(spec.port), 1)[1]
                return sum(e["path"] == path for e in served.access_log())

            def sitemap_visits():
                return sum(e["path"] == "/latest.xml" for e in served.access_log())

            wait_for(lambda: fetched(old) == fetched(removed) == fetched(edited) == 1
                     and sitemap_visits() >= 2)
            # edited now, in a second after the old version's last visit (lastmod has
            # whole seconds)
            wait_for(lambda: time.time() - max(e["time"] for e in served.access_log()
                                               if e["path"] == "/latest.xml") > 1.2,
                     every=0.05)
            def page_file(url):
                return root / "www" / host / url.split(str(spec.port), 1)[1].lstrip("/")

            page_file(removed).unlink()                   # gone: answered 404
            html = page_file(edited).read_bytes()
            title = b'<h1 class="title">'
            page_file(edited).write_bytes(html.replace(title, title + b"Corrected: ", 1))
            just_now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
            write_latest(root, spec, host, [old, removed, edited, new],
                         {old: "2026-01-01", removed: just_now, edited: just_now,
                          new: "2026-01-02"})
            wait_for(lambda: fetched(edited) == fetched(removed) == 2 and fetched(new) == 1)
            visits = sitemap_visits()
            wait_for(lambda: sitemap_visits() >= visits + 2)   # and revisited since
        finally:
            crawl.stop()
        assert (fetched(old), fetched(removed), fetched(edited), fetched(new)) == (1, 2, 2, 1)
        # what is stored: the new version in place, the first one kept as a version
        stored = {item["url"]: item for item in mongo_db["items_universal"].find(
            {"crawlid": "edited"})}
        assert stored[edited]["title"].startswith("Corrected: ")
        assert (stored[edited]["change"], stored[edited]["version"]) == ("changed", 2)
        earlier = list(mongo_db["versions_universal"].find({"item_id": stored[edited]["_id"]}))
        assert [v["version"] for v in earlier] == [1]
        assert not earlier[0]["title"].startswith("Corrected: ")
        assert stored[edited]["previous_hash"] == earlier[0]["content_hash"]
        assert (stored[old]["change"], stored[new]["change"]) == ("new", "new")
        assert stored[removed]["change"] == "gone"               # marked, not deleted
        changes = CrawlStore.from_settings(redis, settings).progress("edited")["changes"]
        assert (changes["changed"], changes["gone"]) == (1, 1)    # what `info` counts
        assert changes["new"] == len(stored)


def test_a_revisited_sitemap_with_invalid_entries_keeps_the_scheduler_going(
        test_settings, mongo_db, redis, tmp_path_factory, tmp_path):
    """A revisited sitemap listing entries no URL can be made of (a port out of range,
    a bad IPv6 literal), dated as changed since its last visit: they are refused as
    invalid, and the job's rounds go on: the sitemap is revisited again and again, and
    a page it lists later is crawled."""
    settings = test_settings.copy_with(CRAWLCLUSTER_BLOOM_COUNTING=True)
    root = tmp_path_factory.mktemp("invalid-entries")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=4, seed=4,
                    gbk_page=False)
    manifest = generate_site(root, spec)
    host = spec.hosts[0]
    first, later = [p["url"] for p in manifest["pages"]
                    if p["kind"] == "detail" and p["host"] == host][:2]
    invalid = ["http://example.com:99999/news/1.html", "http://[zz]/news/2.html"]
    # changed since every visit of the next minute (a later lastmod is ignored)
    soon = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 50))
    dates = {first: "2026-01-01", later: "2026-01-01", **dict.fromkeys(invalid, soon)}
    _, sitemap = write_latest(root, spec, host, [first, *invalid], dates)
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        submit(settings, {"crawlid": "invalid-entries", "spider_type": "universal",
                          "url": f"{spec.base(host)}/robots.txt", "rule": UNIVERSAL_RULE,
                          "maxdepth": 0, "sitemaps": [sitemap], "hub_span": 1,
                          "revisit": {"min": 1, "max": 2}})
        crawl = Crawl(settings, "universal", tmp_path, CRAWLCLUSTER_IDLE_TIMEOUT="0")
        try:
            def fetched(url):
                path = url.split(str(spec.port), 1)[1]
                return sum(e["path"] == path for e in served.access_log())

            def sitemap_visits():
                return sum(e["path"] == "/latest.xml" for e in served.access_log())

            wait_for(lambda: fetched(first) == 1 and sitemap_visits() >= 3)
            write_latest(root, spec, host, [first, later, *invalid], dates)
            wait_for(lambda: fetched(later) == 1)
            visits = sitemap_visits()
            wait_for(lambda: sitemap_visits() >= visits + 2)
        finally:
            crawl.stop()
        log = "\n".join(path.read_text() for path in tmp_path.rglob("*.log"))
    assert "Traceback" not in log and "Unhandled error" not in log
    assert (fetched(first), fetched(later)) == (1, 1)
    refused = CrawlStore.from_settings(redis, settings).progress("invalid-entries")["links"]
    assert refused["refused"]["invalid"] == 2 * 2   # both, at each read (the rest: 304)
