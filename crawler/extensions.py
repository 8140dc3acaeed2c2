"""Scrapy extensions of the crawler project."""

import gc
import logging

from scrapy import signals
from scrapy.crawler import Crawler

logger = logging.getLogger(__name__)


class GarbageCollectorTuning:
    """Fewer cyclic garbage collections in a spider process.

    A page makes thousands of short-lived objects (headers, selectors, links,
    requests), so with Python's default threshold (700 allocations) the
    collector runs many times per page, and every full collection walks the
    whole of Scrapy, Twisted and lxml loaded in the process. Once the engine
    has started, everything allocated so far is frozen (never scanned again)
    and generation 0 is collected every ``CRAWLCLUSTER_GC_THRESHOLD``
    allocations. Memory held by unreachable cycles is still freed, only later.
    """

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "GarbageCollectorTuning":
        extension = cls(crawler.settings.getint("CRAWLCLUSTER_GC_THRESHOLD"))
        crawler.signals.connect(extension.engine_started, signal=signals.engine_started)
        return extension

    def engine_started(self) -> None:
        if self.threshold <= 0:
            return
        gc.collect()
        gc.freeze()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(self.threshold, older, oldest)
        logger.debug("GC: %d objects frozen, generation 0 threshold %d",
                     gc.get_freeze_count(), self.threshold)
