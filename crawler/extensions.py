"""Scrapy extensions of the crawler project."""

import ctypes
import ctypes.util
import gc
import logging
import os
from collections.abc import Callable

from scrapy import signals
from scrapy.crawler import Crawler
from twisted.internet.task import LoopingCall

from crawler.context import cluster_settings
from settings.process import Watchdog, guard_signals

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


class ShutdownGuard:
    """A spider process ends within ``CRAWLCLUSTER_SHUTDOWN_TIMEOUT`` seconds of SIGTERM or
    SIGINT, whatever the servers are doing: Scrapy's own handlers still run (a graceful
    close first), and a guard ends the process if that close hangs on a server that is
    down or a client's thread keeps it alive (settings/process.py)."""

    def __init__(self, crawler: Crawler, bound: float) -> None:
        self.crawler = crawler
        self.bound = bound

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "ShutdownGuard":
        settings = cluster_settings(crawler.settings)
        extension = cls(crawler, settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT"))
        crawler.signals.connect(extension.engine_started, signal=signals.engine_started)
        return extension

    def engine_started(self) -> None:
        # Scrapy installed its handlers before the engine started: wrap them.
        spider = self.crawler.spider
        guard_signals(self.bound, f"spider {spider.name if spider else ''} "
                                  f"(pid {os.getpid()})")


class LoopWatchdog:
    """A spider whose reactor does not come round for ``CRAWLCLUSTER_WATCHDOG_SECONDS``
    (``crawler``) logs every thread's stack and exits non-zero: its manager starts it
    again (manager/launcher.py), and what it held comes back once its heartbeat is gone."""

    def __init__(self, crawler: Crawler, bound: float) -> None:
        self.crawler = crawler
        self.bound = bound
        self.watchdog: Watchdog | None = None
        self.loop: LoopingCall | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "LoopWatchdog":
        bound = float(cluster_settings(crawler.settings)["CRAWLCLUSTER_WATCHDOG_SECONDS"]
                      .get("crawler", 0))
        extension = cls(crawler, bound)
        crawler.signals.connect(extension.engine_started, signal=signals.engine_started)
        crawler.signals.connect(extension.engine_stopped, signal=signals.engine_stopped)
        return extension

    def engine_started(self) -> None:
        spider = self.crawler.spider
        self.watchdog = Watchdog(self.bound, f"spider {spider.name if spider else ''} "
                                             f"(pid {os.getpid()})").start()
        self.loop = LoopingCall(self.watchdog.beat)
        self.loop.start(1.0)

    def engine_stopped(self) -> None:
        if self.loop is not None and self.loop.running:
            self.loop.stop()
        if self.watchdog is not None:
            self.watchdog.stop()


def _malloc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: int(trim(0))


class MemoryTrim:
    """Gives the memory a spider freed back to the system every
    ``CRAWLCLUSTER_MEMORY_TRIM_SECONDS`` (0: never).

    A large page (hundreds of KB of HTML, its lxml tree, its text) takes memory that
    Python frees after the page, but glibc's allocator keeps the freed pages mapped in
    its heaps, so a spider's resident memory stayed at the high-water mark of its
    largest pages for good. ``malloc_trim`` returns them (about 35 MB of 230 in a spider
    after 100,000 pages, 2% of them 50-500 KB, in bench/soak.py) and takes a few
    milliseconds.
    """

    def __init__(self, every: float, trim: Callable[[], int] | None) -> None:
        self.every = every
        self.trim = trim
        self.loop: LoopingCall | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "MemoryTrim":
        every = cluster_settings(crawler.settings).getfloat("CRAWLCLUSTER_MEMORY_TRIM_SECONDS")
        extension = cls(every, _malloc_trim())
        crawler.signals.connect(extension.engine_started, signal=signals.engine_started)
        crawler.signals.connect(extension.engine_stopped, signal=signals.engine_stopped)
        return extension

    def engine_started(self) -> None:
        if self.every > 0 and self.trim is not None:
            self.loop = LoopingCall(self.trim)
            self.loop.start(self.every, now=False)

    def engine_stopped(self) -> None:
        if self.loop is not None and self.loop.running:
            self.loop.stop()
