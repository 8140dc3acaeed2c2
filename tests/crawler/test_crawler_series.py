"""A series of crawls on real servers: three runs of one lineage over a site nginx serves.

Run 1 stores every page. Before run 2 the site edits one article (and dates it in its
sitemap), dates another in its sitemap without changing it, adds one, and leaves the rest:
run 2 asks the dated ones with their validators (a 304 for the one not changed, which
writes nothing to MongoDB; the edited one stored as changed), fetches the new one, and
none of the rest. Before run 3 the site takes one article down (404) and off its lists;
run 3 asks again for everything the series has (``refetch_after`` 0), sweeping in what no
page links from the seed page, so the page gone is found, marked gone and forgotten.
The pure rules (what is a detail page, when one may have changed) have tests of their own
at the end; the storage of a series' pages is tested in test_crawler_series_versions.py."""

import time
import uuid
from collections import Counter
from types import SimpleNamespace

import pytest
from scrapy.http import Response

from crawler.scheduler.series import is_detail, may_have_changed
from crawler.series import page_state
from manager.local.crawl import run_crawl, submit
from manager.local.demo import PRECISE_RULE, UNIVERSAL_RULE
from manager.local.ports import free_port
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site, write_latest
from manager.local.staticsite import StaticSite
from master.crawls import CrawlStore
from master.keys import Keys
from master.series import PageState, SeriesPages
from master.urls import canonical_url
from settings.clients import mongo_client, redis_client

HOST = DEFAULT_HOSTS[0]


def iso_now():
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())


def run(settings, tmp_path, crawlid, url, sitemap, refetch_after):
    submit(settings, {"crawlid": crawlid, "lineage": "paper", "spider_type": "universal",
                      "url": url, "rule": UNIVERSAL_RULE, "maxdepth": 1,
                      "sitemaps": [sitemap], "refetch_after": refetch_after})
    started = time.time()
    log_dir = tmp_path / crawlid
    log_dir.mkdir()
    assert run_crawl(settings, "universal", log_dir, timeout=200) == [0]
    log = "\n".join(path.read_text() for path in log_dir.glob("*.log"))
    assert "Traceback" not in log, log[-3000:]
    return started


@pytest.fixture(scope="module")
def servers(local_servers):
    """Settings of the module's own (a module fixture cannot use ``test_settings``), and
    clients; everything they made is removed after the module."""
    token = uuid.uuid4().hex[:10]
    settings = local_servers.copy_with(CRAWLCLUSTER_KEY_PREFIX=f"test:{token}",
                                       CRAWLCLUSTER_ZOOKEEPER_ROOT=f"/crawlcluster-test/{token}",
                                       CRAWLCLUSTER_MONGODB_DATABASE=f"test_{token}")
    redis, mongo = redis_client(settings, "test"), mongo_client(settings, "test")
    yield settings, redis, mongo[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]
    keys = list(redis.scan_iter(match=Keys.from_settings(settings).pattern(), count=1000))
    if keys:
        redis.delete(*keys)
    redis.close()
    mongo.drop_database(settings["CRAWLCLUSTER_MONGODB_DATABASE"])
    mongo.close()


def site_file(root, spec, url):
    return root / "www" / HOST / url.split(f":{spec.port}/", 1)[1]


@pytest.fixture(scope="module")
def series(servers, tmp_path_factory):
    settings, redis, database = servers
    root, work = tmp_path_factory.mktemp("series"), tmp_path_factory.mktemp("series-logs")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS[:1]), hosts=DEFAULT_HOSTS[:1],
                    details_per_host=8, seed=21, gbk_page=False)
    details = [p["url"] for p in generate_site(root, spec)["pages"] if p["kind"] == "detail"]
    edited, dated, *rest = details[:6]
    runs = SimpleNamespace(settings=settings, redis=redis, port=spec.port, edited=edited,
                           dated=dated, kept=rest, added=details[6], removed=rest[-1],
                           items=database["items_universal"],
                           versions=database["versions_universal"])
    dates = dict.fromkeys(details, "2026-01-01")
    runs.hub, sitemap = write_latest(root, spec, HOST, details[:6], dates)
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        runs.started = [run(settings, work, "paper-1", runs.hub, sitemap, 86400)]
        runs.first, first_log = {d["url"]: d for d in runs.items.find()}, len(served.access_log())
        time.sleep(1.1)              # lastmod has whole seconds: dated after run 1
        page = site_file(root, spec, edited)
        page.write_text(page.read_text().replace('class="title">', 'class="title">更正：'))
        dates.update({edited: iso_now(), dated: iso_now(), runs.added: "2026-01-02"})
        write_latest(root, spec, HOST, details[:7], dates)
        runs.started.append(run(settings, work, "paper-2", runs.hub, sitemap, 86400))
        runs.second = {d["url"]: d for d in runs.items.find()}
        runs.seen = SeriesPages.from_settings(redis, settings).lookup(
            {"paper": [canonical_url(dated)]})[("paper", canonical_url(dated))].at
        second_log = len(served.access_log())
        site_file(root, spec, runs.removed).unlink()
        write_latest(root, spec, HOST, [u for u in details[:7] if u != runs.removed], dates)
        runs.started.append(run(settings, work, "paper-3", runs.hub, sitemap, 0))
        log = served.access_log()
    runs.logs = [log[:first_log], log[first_log:second_log], log[second_log:]]
    return runs


def statuses(runs, n, url):
    """The statuses nginx answered ``url`` with in run ``n`` (1, 2 or 3)."""
    path = url.split(str(runs.port), 1)[1]
    return [entry["status"] for entry in runs.logs[n - 1] if entry["path"] == path]


def test_each_page_is_fetched_at_most_once_a_run(series):
    for log in series.logs:
        fetched = Counter(entry["path"] for entry in log)
        assert max(fetched.values()) == 1, fetched.most_common(3)


def test_a_series_second_run_asks_conditionally_and_stores_nothing_for_a_304(series):
    """The page its sitemap dates anew, unchanged on the site: asked with its validators,
    answered 304; nothing of it written to MongoDB, the series' record of it seen now."""
    assert statuses(series, 1, series.dated) == [200]
    assert statuses(series, 2, series.dated) == [304]
    assert series.second[series.dated] == series.first[series.dated]
    assert series.started[1] < series.seen < series.started[2]
    assert series.versions.count_documents({"url": series.dated}) == 0
    changes = CrawlStore.from_settings(series.redis, series.settings).progress("paper-2")
    assert changes["changes"]["not_modified"] == 1


def test_a_page_changed_since_the_last_run_is_stored_as_changed(series):
    """The edited page comes back 200, and is stored in place as changed, its first
    version kept; the page added is stored new; run 2 stores nothing else."""
    assert statuses(series, 2, series.edited) == [200]
    stored = series.second[series.edited]
    assert stored["title"].startswith("更正：") and stored["lineage"] == "paper"
    assert (stored["crawlid"], stored["change"], stored["version"]) == ("paper-2", "changed", 2)
    assert stored["_id"] == series.first[series.edited]["_id"]
    [previous] = series.versions.find({"url": series.edited})
    assert previous["title"] == series.first[series.edited]["title"]
    assert series.second[series.added]["change"] == "new"
    second = {url for url, stored in series.second.items() if stored["crawlid"] == "paper-2"}
    assert second == {series.edited, series.added}


def test_a_detail_page_not_changed_per_its_sitemap_is_not_fetched_again(series):
    """Run 2: the pages the sitemap still dates before run 1 are not fetched, however
    many links lead to them (the hub's and the sitemap's); the hub and sitemap are."""
    for url in series.kept:
        assert statuses(series, 2, url) == [], url
    assert statuses(series, 2, series.hub) == [200]
    progress = CrawlStore.from_settings(series.redis, series.settings).progress("paper-2")
    assert progress["links"]["kept"] >= len(series.kept)


def test_a_run_asks_again_for_every_page_due_and_marks_a_page_gone(series):
    """Run 3 (``refetch_after`` 0): each page the series has is asked again, the one the
    site took off its lists too (swept in from the seed page): 304s, and a 404 whose
    stored page is marked gone (its content kept), and which the series forgets; its task
    fails, as any page's 404."""
    unchanged = [series.dated, series.edited, series.added,
                 *[url for url in series.kept if url != series.removed]]
    for url in unchanged:
        assert statuses(series, 3, url) == [304], url
    assert statuses(series, 3, series.removed) == [404]
    gone = series.items.find_one({"url": series.removed})
    before = series.first[series.removed]
    assert (gone["change"], gone["crawlid"]) == ("gone", "paper-3")
    assert (gone["_id"], gone["title"], gone["content_hash"]) == (
        before["_id"], before["title"], before["content_hash"])
    pages = SeriesPages.from_settings(series.redis, series.settings)
    known = pages.lookup({"paper": [canonical_url(url) for url in (*unchanged,
                                                                   series.removed)]})
    assert {state.url for state in known.values()} == set(unchanged)
    progress = CrawlStore.from_settings(series.redis, series.settings).progress("paper-3")
    assert progress["changes"]["not_modified"] == len(unchanged)
    assert progress["changes"]["gone"] == 1 and progress["counts"]["failed"] == 1
    assert progress["links"]["swept"] >= 1


def test_a_precise_series_asks_its_detail_pages_again_with_their_list_fields(
        test_settings, mongo_db, redis, tmp_path_factory, tmp_path):
    """The precise spider: list pages read each run, detail pages (with the fields their
    list gave) asked again conditionally; the items stay as run 1 stored them."""
    root = tmp_path_factory.mktemp("precise-series")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS[:1]), hosts=DEFAULT_HOSTS[:1],
                    details_per_host=6, list_page_size=3, seed=22, gbk_page=False)
    manifest = generate_site(root, spec)
    details = {p["url"] for p in manifest["pages"] if p["kind"] == "detail"}
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        for run_number in (1, 2):
            submit(test_settings, {"crawlid": f"lists-{run_number}", "lineage": "lists",
                                   "spider_type": "precise", "rule": PRECISE_RULE,
                                   "url": f"{spec.base(HOST)}/list/1.html",
                                   "refetch_after": 0})
            since = len(served.access_log())
            (tmp_path / str(run_number)).mkdir()
            assert run_crawl(test_settings, "precise", tmp_path / str(run_number),
                             timeout=200) == [0]
            if run_number == 1:
                first = {d["url"]: d for d in mongo_db["items_precise"].find()}
        second = served.access_log()[since:]
    assert set(first) == details and all(d["title"] and d["author"] for d in first.values())
    asked = {f"http://{e['host']}:{spec.port}{e['path']}": e["status"] for e in second}
    assert {url: asked.get(url) for url in details} == dict.fromkeys(details, 304)
    assert asked[f"{spec.base(HOST)}/list/2.html"] == 200
    assert {d["url"]: d for d in mongo_db["items_precise"].find()} == first
    progress = CrawlStore.from_settings(redis, test_settings).progress("lists-2")
    assert progress["changes"]["not_modified"] == len(details)


# --- the rules, without servers ------------------------------------------------------------

RULE = {"rule": {"rules": [{"allow": ["/list/"], "follow": True},
                           {"allow": ["/news/"], "fields": {"title": "//h1/text()"}}]}}


def test_detail_pages_are_those_a_rule_takes_fields_from():
    assert is_detail(RULE, "parse", {"rule_index": 1})
    assert not is_detail(RULE, "parse", {"rule_index": 0})        # a list: read each run
    assert not is_detail(RULE, "parse", None)                     # the seed
    assert not is_detail(RULE, "parse", {"rule_index": 7})
    assert is_detail({"rule": {}}, "parse_detail", {"item": {}})  # the precise spider's
    assert not is_detail(RULE, "parse_sitemap", {})


def test_a_page_may_have_changed_when_a_source_dates_it_later_or_it_is_due():
    fetched = time.time() - 3600
    state = PageState("http://a.example/1", fetched)
    later = {"entry": {"lastmod": time.strftime("%Y-%m-%dT%H:%M:%S+00:00",
                                                time.gmtime(fetched + 60))}}
    earlier = {"entry": {"lastmod": "2026-01-01"}}
    now = time.time()
    assert may_have_changed(state, later, now, 86400)
    assert may_have_changed(state, {"entry": {"published": later["entry"]["lastmod"]}},
                            now, 86400)
    assert not may_have_changed(state, earlier, now, 86400)
    assert not may_have_changed(state, None, now, 86400)
    assert may_have_changed(state, earlier, now, 3000)           # due all the same
    assert may_have_changed(state, None, now, 0)


def test_a_page_state_keeps_the_validators_a_site_gives_within_bounds():
    task = {"url": "http://a.example/1", "callback": "parse", "depth": 2, "rule_index": 1,
            "validators": {"etag": '"old"'}, "entry": {"lastmod": "2026-01-01"}}
    given = Response(task["url"], status=200, headers={
        "ETag": '"new"', "Last-Modified": "Sat, 28 Nov 2026 08:00:00 GMT"})
    state = page_state(task, given, 5.0)
    assert state.validators(5.0) == {"etag": '"new"', "modified": "Sat, 28 Nov 2026 08:00:00 GMT"}
    assert state.task == {"callback": "parse", "depth": 2, "rule_index": 1}
    # a 304 without validators keeps those it was asked with; a huge one is not kept
    assert page_state(task, Response(task["url"], status=304), 6.0).validators(6.0) == {
        "etag": '"old"'}
    huge = Response(task["url"], status=200, headers={"ETag": "x" * 5000})
    assert page_state(task, huge, 7.0).validators(7.0) == {}


def test_a_page_answered_304_for_long_is_asked_in_full_again():
    """A server answering 304 for a page that changed (a stale CDN edge, the build's
    Last-Modified) costs its versions for FULL_FETCH_EVERY at most: then the page is
    asked without its validators."""
    from master.series import FULL_FETCH_EVERY

    task = {"url": "http://a.example/1", "validators": {"etag": '"same"'}, "full_at": 100.0}
    later = 100.0 + FULL_FETCH_EVERY - 1
    not_modified = page_state(task, Response(task["url"], status=304), later)
    assert not_modified.full_at == 100.0 and not_modified.validators(later) == {
        "etag": '"same"'}
    assert not_modified.validators(100.0 + FULL_FETCH_EVERY) == {}
    full = page_state(task, Response(task["url"], status=200, headers={"ETag": '"same"'}),
                      later)
    assert full.full_at == later and full.validators(100.0 + FULL_FETCH_EVERY) == {
        "etag": '"same"'}
    assert PageState.from_json(not_modified.to_json()) == not_modified
