"""A spider process's Prometheus metrics, served by its node's manager (``/metrics``).

The manager starts spider processes with ``PROMETHEUS_MULTIPROC_DIR`` set, so
prometheus_client keeps these values in files there and the manager sums
them over its processes (manager/metrics.py). Without it (a spider run by
hand) they stay in the process, unserved.

Most figures are Scrapy stats the crawler counts anyway: ``SpiderMetrics`` adds
what the ones listed in ``MIRRORED`` grew by to their counters every second (so
a page costs nothing more), and observes each response's download time. The counts a
crawl record holds too (pages, failures, items) are added when the record's are
(``count_recorded``): a process that ends without a last publish (killed, stopped by
its watchdog) leaves Prometheus level with the record, never behind it.
"""

from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.http import Response
from twisted.internet import task

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
RENDERED = Counter("crawlcluster_rendered_pages", "Pages rendered in a browser (a rule's "
                   "render)", ["spider"])
RENDER_REQUESTS = Counter("crawlcluster_render_requests", "Requests a rendering browser made "
                          "for its pages (scripts, styles, XHR), each through the throttle",
                          ["spider"])
RENDER_COMPARED = Counter("crawlcluster_render_compared", "Pages of render auto fetched and "
                          "rendered to compare, by outcome (needed, not_needed)",
                          ["spider", "outcome"])
LOOKS_SCRIPTED = Counter("crawlcluster_looks_scripted_pages", "Pages that looked built by "
                         "scripts in a crawl rendering none", ["spider"])
BROWSERS = Counter("crawlcluster_browsers_started", "Browsers started (first use, after a "
                   "crash, past their page count or memory bound)", ["spider"])
JOB_TASKS = Gauge("crawlcluster_job_tasks", "Tasks a job has taken and not yet downloaded "
                  "(its in-memory queue and downloads in flight)", ["spider", "job"],
                  multiprocess_mode="livesum")

# a crawl record's count -> its counter (count_recorded)
RECORDED: dict[str, Counter] = {"pages": PAGES, "failures": PAGE_FAILURES, "items": ITEMS}

# Scrapy stat (or the start of one) -> (counter, the label the rest of the name fills)
MIRRORED: dict[str, tuple[Counter, str | None]] = {
    "downloader/response_bytes": (RESPONSE_BYTES, None),
    "downloader/response_status_count/": (RESPONSES, "status"),
    "downloader/exception_type_count/": (DOWNLOAD_ERRORS, "kind"),
    "spider_exceptions/": (SPIDER_ERRORS, "kind"),
    "crawlcluster/render/pages": (RENDERED, None),
    "crawlcluster/render/requests": (RENDER_REQUESTS, None),
    "crawlcluster/render/compared/": (RENDER_COMPARED, "outcome"),
    "crawlcluster/render/looks_scripted": (LOOKS_SCRIPTED, None),
    "crawlcluster/render/browsers": (BROWSERS, None),
}
_PREFIXES = tuple(name for name in MIRRORED if name.endswith("/"))
PUBLISH_EVERY = 1.0          # seconds between publishing the stats to the counters


def count_recorded(spider: str, counts: dict[str, int]) -> None:
    """Add counts a crawl record holds too (``RECORDED``'s) to their counters now."""
    for field, count in counts.items():
        if count and field in RECORDED:
            RECORDED[field].labels(spider=spider).inc(count)


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


class SpiderMetrics:
    """Publishes the ``MIRRORED`` stats to their counters every ``PUBLISH_EVERY`` seconds
    and when the spider closes, and observes each response's download latency. The
    page counters of the spider type exist from the start, at 0, so a ratio of them is
    defined before the first failure."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.published: dict[str, int] = {}        # stat -> value last published
        self.children: dict[str, Any] = {}         # stat -> its labelled counter, or None
        self.loop: task.LoopingCall | None = None
        self.latency: Any = None                   # LATENCY's child, from spider_opened

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "SpiderMetrics":
        extension = cls(crawler)
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        crawler.signals.connect(extension.response_received, signal=signals.response_received)
        return extension

    def spider_opened(self, spider: Spider) -> None:
        for counter in (PAGES, PAGE_FAILURES, ITEMS):
            counter.labels(spider=spider.name)
        self.latency = LATENCY.labels(spider=spider.name)
        self.loop = task.LoopingCall(self.publish)
        self.loop.start(PUBLISH_EVERY, now=False)

    def spider_closed(self, spider: Spider) -> None:
        if self.loop is not None and self.loop.running:
            self.loop.stop()
        self.publish()

    def publish(self) -> None:
        """Add what each mirrored stat grew by since the last call to its counter."""
        stats, spider = self.crawler.stats, self.crawler.spider
        if stats is None or spider is None:
            return
        for key, value in list(stats.get_stats().items()):
            child = self.children.get(key, False)
            if child is False:
                child = self.children[key] = _child(spider.name, key)
            if child is not None and value > self.published.get(key, 0):
                child.inc(value - self.published.get(key, 0))
                self.published[key] = value

    def response_received(self, response: Response, request: Request, spider: Spider,
                          **_: Any) -> None:
        latency = request.meta.get("download_latency")
        if latency is not None:
            self.latency.observe(latency)


def _child(spider: str, key: str) -> Any:
    """The labelled counter a stat is published to, or None."""
    found = mirrored(key)
    if found is None:
        return None
    counter, labels = found
    return counter.labels(spider=spider, **labels)


def set_job_tasks(spider_type: str, job: str, tasks: int) -> None:
    JOB_TASKS.labels(spider=spider_type, job=job).set(tasks)
