"""A slow domain's request sent past its token's send-by deadline takes a fresh throttle
hit as it leaves the downloader, on the test's real Redis and ZooKeeper."""

import time

import pytest
from scrapy import Request
from scrapy.core import downloader as scrapy_downloader
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.utils.test import get_crawler

from crawler import token_deadlines
from crawler.context import JobContext
from crawler.spiders.universal import UniversalSpider
from crawler.token_deadlines import DeadlineDownloader
from master.siteconfig import SiteConfig
from master.tasks import make_task

DOMAIN = "slow-site.com"


@pytest.fixture
def sending(test_settings, redis, zookeeper, mongo_db, monkeypatch):
    """``(downloader, context, sent)``: a DeadlineDownloader of a job whose Scrapy send
    only notes when it was called (``sent``), for a domain allowed 2 hits a second."""
    SiteConfig.from_settings(test_settings, zookeeper).set_limit(DOMAIN, hits=2, window=1)
    crawler = get_crawler(UniversalSpider,
                          settings_dict={**test_settings, "CRAWLCLUSTER_JOB_ID": "job",
                                         # the limit from the first hit: no slow start
                                         "CRAWLCLUSTER_PUSHBACK_START_FACTOR": 0})
    crawler.spider = crawler._create_spider()
    context = JobContext.of(crawler)
    sent: list[float] = []

    async def send(self, slot, request):
        sent.append(time.monotonic())
        return Response(request.url)

    async def blocking_sleep(seconds):         # a real wait, without a running reactor
        time.sleep(seconds)  # noqa: ASYNC251 - no reactor runs in this test

    monkeypatch.setattr(scrapy_downloader.Downloader, "_download", send)
    monkeypatch.setattr(token_deadlines, "_sleep", blocking_sleep)
    downloader = DeadlineDownloader.__new__(DeadlineDownloader)   # no handlers needed
    downloader.crawler = crawler
    yield downloader, context, sent
    context.close()


def request_with(send_by):
    task = make_task(f"http://{DOMAIN}/page", "crawl", "universal", domain=DOMAIN)
    return Request(task["url"], meta={"crawlcluster": {"task": task, "send_by": send_by}})


def finish(coroutine):
    """Run a coroutine that awaits nothing pending (its waits block instead)."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the send waited on the reactor")


def fill_window(context):
    for _ in range(2):
        assert context.queues.hit(context.job, context.spider_type, context.ip, DOMAIN) == 0.0


def test_a_request_sent_by_its_deadline_takes_no_second_throttle_hit(sending):
    downloader, context, sent = sending
    fill_window(context)
    request = request_with(time.monotonic() + 10)
    finish(downloader._download(scrapy_downloader.Slot(1, 0.0), request))
    assert len(sent) == 1                           # sent though the window is full
    assert downloader.crawler.stats.get_value("crawlcluster/throttle/late_sends") is None
    assert request.meta["crawlcluster"]["send_by"] == 0.0     # spent: a redirect re-takes


def test_a_late_request_waits_for_a_fresh_throttle_hit_and_counts_it(sending):
    downloader, context, sent = sending
    filled = time.monotonic()
    fill_window(context)
    slot = scrapy_downloader.Slot(1, 0.0)
    finish(downloader._download(slot, request_with(filled - 1)))
    # Sent only once the two hits left the window (1 s, lengthened by the grace).
    assert sent[0] - filled >= 1.0
    assert downloader.crawler.stats.get_value("crawlcluster/throttle/late_sends") == 1
    assert not slot.transferring
    # The fresh hit was counted (more than one if its answer came late): one more fills
    # the window.
    more = [context.queues.hit(context.job, context.spider_type, context.ip, DOMAIN)
            for _ in range(2)]
    assert more[1] > 0


def test_a_late_request_to_a_domain_blacklisted_since_its_throttle_take_is_refused(
        sending, zookeeper, test_settings):
    downloader, context, sent = sending
    SiteConfig.from_settings(test_settings, zookeeper).blacklist_add(DOMAIN)
    deadline = time.monotonic() + 15
    while not context.site_config.is_blacklisted(DOMAIN) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert context.site_config.is_blacklisted(DOMAIN)
    with pytest.raises(IgnoreRequest, match="blacklisted"):
        finish(downloader._download(scrapy_downloader.Slot(1, 0.0), request_with(0.5)))
    assert not sent


def test_a_request_to_a_paused_domain_waits_out_the_pause_whatever_its_task(sending):
    downloader, context, sent = sending
    context.paused.pause("paused-site.com", 0.4)
    task = make_task(f"http://{DOMAIN}/page", "crawl", "universal", domain=DOMAIN)
    # A redirect to the paused domain: its own URL's domain is checked, not the task's.
    request = Request("http://www.paused-site.com/moved", meta={"crawlcluster": {"task": task}})
    slot = scrapy_downloader.Slot(1, 0.0)
    began = time.monotonic()
    finish(downloader._download(slot, request))
    assert sent[0] - began >= 0.4 - 0.01
    assert downloader.crawler.stats.get_value("crawlcluster/pushback/held") == 1
    assert not slot.transferring
    began = time.monotonic()          # the pause is over: no wait, nothing counted again
    finish(downloader._download(slot, Request("http://paused-site.com/other")))
    assert sent[1] - began < 0.1
    assert downloader.crawler.stats.get_value("crawlcluster/pushback/held") == 1


def test_a_redis_slower_than_a_token_may_wait_spends_two_hits_at_most(sending, monkeypatch):
    downloader, context, sent = sending
    hits = []
    real_hit = context.queues.hit

    def slow_hit(*args, **kwargs):
        hits.append(args)
        wait = real_hit(*args, **kwargs)
        time.sleep(context.settings.getfloat("CRAWLCLUSTER_SCHEDULER_TICK") / 2 + 0.05)
        return wait

    monkeypatch.setattr(context.queues, "hit", slow_hit)
    finish(downloader._download(scrapy_downloader.Slot(1, 0.0), request_with(0.5)))
    assert len(sent) == 1
    assert len(hits) == 2            # one late answer taken again, the second kept
    assert downloader.crawler.stats.get_value("crawlcluster/throttle/late_answers") == 1
