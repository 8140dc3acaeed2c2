"""A spider process's Prometheus metrics, served by its node's manager (``/metrics``).

The manager starts spider processes with ``PROMETHEUS_MULTIPROC_DIR`` set, so
prometheus_client keeps these values in files there and the manager sums
them over its processes (manager/metrics.py). Without it (a spider run by
hand) they stay in the process, unserved.

Most figures are Scrapy stats the crawler counts anyway: ``MetricsStatsCollector``
mirrors the ones listed in ``MIRRORED`` into counters as they are incremented.
``SpiderMetrics`` observes each response's download time.
"""

from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from scrapy.statscollectors import MemoryStatsCollector

PAGES = Counter("crawlcluster_pages", "Pages crawled: tasks finished done (a crawl record's "
                "pages)", ["spider"])
PAGE_FAILURES = Counter("crawlcluster_page_failures", "URLs failed for good", ["spider"])
ITEMS = Counter("crawlcluster_items", "Items stored in MongoDB", ["spider"])
RESPONSES = Counter("crawlcluster_responses", "Responses downloaded, by HTTP status "
                    "(robots.txt too)", ["spider", "status"])
RESPONSE_BYTES = Counter("crawlcluster_response_bytes", "Bytes of responses downloaded",
                         ["spider"])
DOWNLOAD_ERRORS = Counter("crawlcluster_download_errors", "Downloads that raised, by "
                          "exception class", ["spider", "kind"])
SPIDER_ERRORS = Counter("crawlcluster_spider_errors", "Callbacks that raised, by exception "
                        "class", ["spider", "kind"])
LATENCY = Histogram("crawlcluster_download_latency_seconds", "Time from sending a request to "
                    "its response", ["spider"],
                    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
JOB_TASKS = Gauge("crawlcluster_job_tasks", "Tasks a job has taken and not yet downloaded "
                  "(its in-memory queue and downloads in flight)", ["spider", "job"],
                  multiprocess_mode="livesum")

# Scrapy stat (or the start of one) -> (counter, the label the rest of the name fills)
MIRRORED: dict[str, tuple[Counter, str | None]] = {
    "crawlcluster/pages/done": (PAGES, None),
    "crawlcluster/pages/failed": (PAGE_FAILURES, None),
    "crawlcluster/items/stored": (ITEMS, None),
    "downloader/response_bytes": (RESPONSE_BYTES, None),
    "downloader/response_status_count/": (RESPONSES, "status"),
    "downloader/exception_type_count/": (DOWNLOAD_ERRORS, "kind"),
    "spider_exceptions/": (SPIDER_ERRORS, "kind"),
}
_PREFIXES = tuple(name for name in MIRRORED if name.endswith("/"))


def mirrored(key: str) -> tuple[Counter, dict[str, str]] | None:
    """The counter a Scrapy stat is mirrored into, and its labels besides ``spider``."""
    if key in MIRRORED:
        return MIRRORED[key][0], {}
    if key.startswith(_PREFIXES):
        prefix, rest = key.rsplit("/", 1)
        counter, label = MIRRORED[prefix + "/"]
        # an exception's class path: its last name is the kind
        return counter, {label or "": rest.rsplit(".", 1)[-1]}
    return None


class MetricsStatsCollector(MemoryStatsCollector):
    """Scrapy's in-memory stats, with the ``MIRRORED`` ones counted in Prometheus too."""

    def inc_value(self, key: str, count: int = 1, start: int = 0,
                  spider: Spider | None = None) -> None:
        super().inc_value(key, count, start)
        found = mirrored(key)
        if found is not None and count > 0:
            counter, labels = found
            name = self._crawler.spider.name if self._crawler.spider is not None else ""
            counter.labels(spider=name, **labels).inc(count)


class SpiderMetrics:
    """Observes each response's download latency (``download_latency`` in its meta);
    makes the page counters of the spider type exist from the start, at 0 (a ratio of
    them is defined before the first failure)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "SpiderMetrics":
        extension = cls(crawler)
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.response_received, signal=signals.response_received)
        return extension

    def spider_opened(self, spider: Spider) -> None:
        for counter in (PAGES, PAGE_FAILURES, ITEMS):
            counter.labels(spider=spider.name)

    def response_received(self, response: Response, request: Request, spider: Spider,
                          **_: Any) -> None:
        latency = request.meta.get("download_latency")
        if latency is not None:
            LATENCY.labels(spider=spider.name).observe(latency)


def set_job_tasks(spider_type: str, job: str, tasks: int) -> None:
    JOB_TASKS.labels(spider=spider_type, job=job).set(tasks)
