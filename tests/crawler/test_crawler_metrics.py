"""Which Scrapy stats become which Prometheus counters (crawler/metrics.py)."""

import pytest

from crawler import metrics


@pytest.mark.parametrize(("stat", "counter", "labels"), [
    ("downloader/response_bytes", metrics.RESPONSE_BYTES, {}),
    ("downloader/response_status_count/404", metrics.RESPONSES, {"status": "404"}),
    ("downloader/exception_type_count/twisted.internet.error.ConnectionRefusedError",
     metrics.DOWNLOAD_ERRORS, {"kind": "ConnectionRefusedError"}),
    ("spider_exceptions/KeyError", metrics.SPIDER_ERRORS, {"kind": "KeyError"}),
    ("crawlcluster/render/pages", metrics.RENDERED, {}),
    ("crawlcluster/render/compared/needed", metrics.RENDER_COMPARED, {"outcome": "needed"}),
    ("crawlcluster/render/browsers", metrics.BROWSERS, {}),
])
def test_mirrored_stats(stat, counter, labels):
    assert metrics.mirrored(stat) == (counter, labels)


@pytest.mark.parametrize("stat", ["downloader/request_count", "log_count/INFO",
                                  "crawlcluster/links/new", "downloader/response_count",
                                  # counted with the crawl record instead (count_recorded)
                                  "crawlcluster/pages/done", "crawlcluster/items/stored"])
def test_other_stats_are_not_mirrored(stat):
    assert metrics.mirrored(stat) is None


def test_grown_stats_are_published_per_spider_type():
    from scrapy.utils.test import get_crawler

    class Spider:
        name = "testtype"

    crawler = get_crawler()
    crawler.spider = Spider()
    from scrapy.statscollectors import MemoryStatsCollector

    crawler.stats = MemoryStatsCollector(crawler)
    extension = metrics.SpiderMetrics(crawler)
    child = metrics.RESPONSES.labels(spider="testtype", status="503")
    before = child._value.get()
    crawler.stats.inc_value("downloader/response_status_count/503", 2)
    crawler.stats.inc_value("downloader/request_count")
    extension.publish()
    assert child._value.get() == before + 2
    extension.publish()
    assert child._value.get() == before + 2
    crawler.stats.inc_value("downloader/response_status_count/503")
    extension.publish()
    assert child._value.get() == before + 3


def test_recorded_counts_reach_their_counters_at_once():
    child = metrics.PAGES.labels(spider="recordtype")
    items = metrics.ITEMS.labels(spider="recordtype")
    before, items_before = child._value.get(), items._value.get()
    metrics.count_recorded("recordtype", {"pages": 3, "items": 2, "unknown": 5})
    assert child._value.get() == before + 3
    assert items._value.get() == items_before + 2
