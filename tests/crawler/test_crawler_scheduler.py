"""The cluster scheduler: its pacing when idle (pure logic, a driven clock), and its
link path on the test's real servers (each page queued once)."""

from types import SimpleNamespace

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse
from scrapy.utils.test import get_crawler

from crawler.scheduler import ClusterScheduler, taking
from crawler.scheduler.taking import IDLE_AFTER, IDLE_LOOK, Taker
from crawler.scheduler.taskrequest import TaskRequests
from crawler.spiders import Follow
from crawler.spiders.universal import UniversalSpider
from manager.local.crawl import submit
from master.crawls import CrawlStore
from master.keys import Keys
from master.tasks import decode_task, make_task


def test_an_idle_job_looks_for_work_every_idle_look_not_every_round(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(taking.time, "monotonic", lambda: now[0])
    held = [0]
    state = SimpleNamespace(last_work=now[0], last_look=0.0, tasks_held=lambda: held[0])
    looks = []
    for _ in range(200):                                  # 10 s of 0.05 s rounds
        looks.append(not Taker.resting(state))
        now[0] += 0.05
    rounds_before_idle = round(IDLE_AFTER / 0.05)
    assert all(looks[:rounds_before_idle])                # busy a second ago: every round
    idle_looks = sum(looks[rounds_before_idle:])
    assert idle_looks <= (200 - rounds_before_idle) * 0.05 / IDLE_LOOK + 1
    held[0] = 3                                           # tasks in the downloader: busy
    assert not Taker.resting(state)
    held[0], state.last_work = 0, now[0]                  # just took work: every round again
    assert not Taker.resting(state)


# --- the link path on a real Redis: each page queued once ---------------------------------

SITE = "http://127.0.0.1:8000"
CONFIG = {"crawlid": "once", "spider_type": "universal", "url": f"{SITE}/index.html",
          "rule": {"rules": [{"allow": [r"\.html"], "follow": True}]}}


@pytest.fixture
def job_scheduler(test_settings, redis, zookeeper, mongo_db):
    """``job_scheduler(job)``: a ClusterScheduler of a universal spider on the test's
    servers (not started: the test drives its link path)."""
    submit(test_settings, CONFIG)
    made = []

    def make(job):
        crawler = get_crawler(UniversalSpider,
                              settings_dict={**test_settings, "CRAWLCLUSTER_JOB_ID": job})
        crawler.spider = crawler._create_spider()
        made.append(ClusterScheduler.from_crawler(crawler))
        return made[-1]

    yield make
    for made_scheduler in made:
        made_scheduler.context.close()


def page_yields(scheduler_, url, links):
    """A page of the crawl yielding ``links`` to the scheduler."""
    task = make_task(url, "once", "universal")
    meta = {"crawlcluster": {"task": task, "config": CONFIG, "member": "m"}}
    response = HtmlResponse(url, body=b"<html></html>", request=Request(url, meta=meta))
    scheduler_.add_links(response, [Follow(link) for link in links])


def pooled(settings, redis_client_):
    keys = Keys.from_settings(settings)
    return sorted(decode_task(member)["url"] for shard in keys.all_shards()
                  for member in redis_client_.zrange(keys.pool(shard, "universal"), 0, -1))


def test_a_page_is_queued_once_whatever_fragment_spelling_round_or_job(
        job_scheduler, test_settings, redis):
    first = job_scheduler("job-a")
    page_yields(first, f"{SITE}/index.html", [
        f"{SITE}/ref/x.html#a", f"{SITE}/ref/x.html#b", f"{SITE}/ref/x.html",
        f"{SITE}/api/../ref/x.html#c", f"{SITE}/index.html#top", "HTTP://127.0.0.1:8000/ref/x.html",
        f"{SITE}/y.html?b=2&a=1", f"{SITE}/y.html?a=1&b=2#q"])
    first.enqueue_request(Request(f"{SITE}/ref/x.html#d",
                                  meta={"crawlcluster_parent": {"task": make_task(
                                      f"{SITE}/index.html", "once", "universal"),
                                      "config": CONFIG}}))
    first.push_links()                         # one round
    assert pooled(test_settings, redis) == [f"{SITE}/index.html", f"{SITE}/ref/x.html",
                                            f"{SITE}/y.html?b=2&a=1"]

    page_yields(first, f"{SITE}/ref/x.html", [f"{SITE}/ref/x.html#e", f"{SITE}/y.html?a=1&b=2"])
    first.push_links()                         # a later round
    second = job_scheduler("job-b")
    page_yields(second, f"{SITE}/y.html", [f"{SITE}/ref/x.html#f", f"{SITE}/index.html"])
    second.push_links()                        # another job
    assert len(pooled(test_settings, redis)) == 3

    # A job killed between its push and its filter add: a page crawled again elsewhere
    # yields the link with another fragment, and the pools' window still queues it once.
    def killed(*args, **kwargs):
        raise SystemExit("killed")

    first.context.bloom.add_many = killed
    page_yields(first, f"{SITE}/ref/x.html", [f"{SITE}/z.html#one"])
    with pytest.raises(SystemExit):
        first.push_links()
    page_yields(second, f"{SITE}/y.html", [f"{SITE}/z.html#two", f"{SITE}/z.html"])
    second.push_links()
    assert pooled(test_settings, redis).count(f"{SITE}/z.html") == 1
    assert len(pooled(test_settings, redis)) == 4


def test_links_of_a_stopped_crawl_are_counted_refused_not_new(job_scheduler, test_settings,
                                                              redis):
    """A page of a crawl stopped meanwhile yields links: none is queued, and ``info``
    counts them refused as ``stopped``, not new."""
    first = job_scheduler("job-a")
    first.context.frontier.purge_crawl("once", [])           # the crawl stops
    page_yields(first, f"{SITE}/index.html", [f"{SITE}/a.html", f"{SITE}/b.html"])
    first.push_links()
    first.context.tracker.report(force=True)
    links = CrawlStore(redis, Keys.from_settings(test_settings)).progress("once")["links"]
    assert links.get("new", 0) == 0
    assert links["refused"] == {"stopped": 2}
    assert pooled(test_settings, redis) == []                # nothing queued


def test_a_job_short_of_work_pushes_a_pages_links_at_once_and_wakes_a_dispatcher(
        job_scheduler, test_settings, redis):
    """With nothing ready and room in the downloader, a page's links ask for a round at
    once (Scrapy's ``CallLaterOnce``: one for many pages), which pushes them with the
    dispatchers woken; a job with a full downloader leaves them for its tick."""
    scheduler_ = job_scheduler("job-a")
    held = [0]
    scheduler_.taker = SimpleNamespace(tasks_held=lambda: held[0])
    scheduler_.quick = SimpleNamespace(delays=[], cancel=lambda: None)
    scheduler_.quick.schedule = scheduler_.quick.delays.append
    wake = Keys.from_settings(test_settings).dispatch_wake()

    held[0] = scheduler_.concurrency               # the downloader is full: the tick
    page_yields(scheduler_, f"{SITE}/index.html", [f"{SITE}/a.html"])
    assert scheduler_.quick.delays == []
    held[0] = 2
    page_yields(scheduler_, f"{SITE}/index.html", [f"{SITE}/b.html"])
    assert scheduler_.quick.delays == [0]
    assert scheduler_.short_of_work()
    scheduler_.push_links(wake=scheduler_.short_of_work())     # what that round pushes
    assert pooled(test_settings, redis) == [f"{SITE}/{page}.html"
                                            for page in ("a", "b", "index")]
    assert redis.llen(wake) == 1


def test_a_callback_is_bound_once_so_scrapys_generator_check_stays_cached():
    """Scrapy caches its check of a callback's source under a weak reference to the
    callback: a method bound afresh for each task fell out of that cache."""
    spider = UniversalSpider.from_crawler(get_crawler(UniversalSpider), name="universal")
    requests = TaskRequests(SimpleNamespace(), spider, None)
    assert requests._callback("parse") is requests._callback("parse")
    assert requests._callback("parse") == spider.parse
    assert requests._callback("parse_feed") is requests._callback("parse_feed")
    for refused in ("start", "not_a_method", "", None, ["parse"]):
        assert requests._callback(refused) is None


def test_no_exception_leaves_a_round(job_scheduler, redis):
    """A round whose take raises something other than a Redis error logs and counts it
    and returns (its LoopingCall would stop for good otherwise); the next round runs."""
    scheduler_ = job_scheduler("job-a")

    def broken_take():
        raise ValueError("a task no Request can be made of")

    scheduler_.taker = SimpleNamespace(take=broken_take, tasks_held=lambda: 0)
    for _ in range(2):
        scheduler_.round()
    assert scheduler_.stats.get_value("crawlcluster/scheduler/round_errors") == 2


def test_one_link_a_page_keeps_what_every_source_of_the_round_said_of_it():
    """A hub's link and a sitemap's to one page in one round: one link, with the
    sitemap's lastmod (a series judges by it; the item keeps it)."""
    from crawler.scheduler.admission import NewLink
    from crawler.scheduler.linkpush import distinct_links

    parent = {"task": {"crawlid": "c"}}
    hub = NewLink("http://a/1", "http://a/1", parent, "a", "parse", {"rule_index": 1})
    sitemap = NewLink("http://a/1", "http://a/1", parent, "a", "parse",
                      {"rule_index": 1, "entry": {"lastmod": "2026-11-20"}})
    feed = NewLink("http://a/1", "http://a/1", parent, "a", "parse",
                   {"entry": {"lastmod": "2020-01-01", "published": "2026-11-19"}})
    [link] = distinct_links([hub, sitemap, feed]).values()
    assert link.extra == {"rule_index": 1,
                          "entry": {"lastmod": "2026-11-20", "published": "2026-11-19"}}
