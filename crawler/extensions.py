"""Scrapy extensions of the crawler project."""

import ctypes
import ctypes.util
import gc
import logging
import os
from collections.abc import Callable

from scrapy import signals
from scrapy.crawler import Crawler
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.task import LoopingCall

from crawler.context import cluster_settings
from settings.process import Watchdog, guard_signals
from settings.procfs import resident_mb

logger = logging.getLogger(__name__)

# The close reason of a spider past its memory bound (MemoryBound).
RECYCLE_REASON = "recycle"


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
    again (manager/launcher.py), and what it held comes back once its heartbeat is gone.
    It watches from the crawler's set-up on: the scheduler's first round (registering
    the job, its first take) runs before the engine starts and may hang too."""

    def __init__(self, crawler: Crawler, bound: float) -> None:
        self.crawler = crawler
        self.watchdog = Watchdog(bound, f"spider {crawler.spidercls.name} (pid {os.getpid()})")
        self.loop = LoopingCall(self.watchdog.beat)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "LoopWatchdog":
        bound = float(cluster_settings(crawler.settings)["CRAWLCLUSTER_WATCHDOG_SECONDS"]
                      .get("crawler", 0))
        extension = cls(crawler, bound)
        crawler.signals.connect(extension.engine_stopped, signal=signals.engine_stopped)
        if bound > 0:
            extension.watchdog.start()
            extension.loop.start(1.0)
        return extension

    def engine_stopped(self) -> None:
        if self.loop.running:
            self.loop.stop()
        self.watchdog.stop()


# glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD = 128 * 1024     # bytes: glibc's starting value, kept (not raised by frees)
ARENA_MAX = 2                   # arenas shared by the process's threads


def _libc() -> ctypes.CDLL | None:
    """glibc, or None where the C library is another (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    if libc is None or not hasattr(libc, "malloc_trim") or not hasattr(libc, "mallopt"):
        return None
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return libc


def _malloc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)``, or None without glibc."""
    libc = _libc()
    return None if libc is None else lambda: int(libc.malloc_trim(0))


def tune_malloc() -> bool:
    """Keep large blocks out of glibc's heaps, and its heaps few.

    glibc serves a block of ``M_MMAP_THRESHOLD`` bytes or more with its own mapping,
    returned to the system when freed, but raises that threshold to the size of every
    such block freed: after a few large pages, their bodies and texts come from the
    heaps and stay there. Fixing it keeps them out. Each thread that allocates may get
    its own heap (arena) up to 8 per core; two are enough for a spider, whose work is
    on its reactor thread."""
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and libc.mallopt(M_ARENA_MAX, ARENA_MAX))


class MemoryBound:
    """Keeps a spider's memory down, and starts it afresh past a bound.

    Every ``CRAWLCLUSTER_MEMORY_TRIM_SECONDS`` (0: never) the memory the spider freed
    goes back to the system. A large page (hundreds of KB of HTML, its lxml tree, its
    text) takes memory that Python frees after the page, but glibc's allocator keeps
    the freed pages mapped, so without ``malloc_trim`` a spider's resident memory stayed
    at the high-water mark of its largest pages for good (bench/soak.py). A trim takes
    a few milliseconds.

    What a trim cannot give back (what a month on the real web leaves in Scrapy's,
    lxml's and Python's own structures) is bounded by
    ``CRAWLCLUSTER_SPIDER_MEMORY_LIMIT_MB``: a long-running spider (no idle timeout)
    past it after a trim closes as on SIGTERM (its downloads finish, its items are
    stored, the tasks it had not started go back to the pools) and exits with
    ``EXIT_RECYCLE``; its manager starts it again at once (manager/launcher.py).
    Scrapy's ``MEMUSAGE_LIMIT_MB`` does the same without the restart, on the peak.
    """

    recycled = False     # this process's spider closed to be started again

    def __init__(self, crawler: Crawler | None, every: float, limit_mb: float,
                 trim: Callable[[], int] | None, recyclable: bool = True) -> None:
        self.crawler = crawler
        self.every = every
        self.limit_mb = limit_mb
        self.trim = trim
        self.recyclable = recyclable
        self.warned = False
        self.loop: LoopingCall | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "MemoryBound":
        settings = cluster_settings(crawler.settings)
        extension = cls(crawler, settings.getfloat("CRAWLCLUSTER_MEMORY_TRIM_SECONDS"),
                        settings.getfloat("CRAWLCLUSTER_SPIDER_MEMORY_LIMIT_MB"),
                        _malloc_trim(),
                        recyclable=settings.getfloat("CRAWLCLUSTER_IDLE_TIMEOUT") == 0)
        crawler.signals.connect(extension.engine_started, signal=signals.engine_started)
        crawler.signals.connect(extension.engine_stopped, signal=signals.engine_stopped)
        return extension

    def engine_started(self) -> None:
        if self.trim is not None:
            tune_malloc()
        if self.every > 0:
            self.loop = LoopingCall(self.check)
            self.loop.start(self.every, now=False)

    def engine_stopped(self) -> None:
        if self.loop is not None and self.loop.running:
            self.loop.stop()

    def check(self) -> None:
        """Trim; then close the spider to be started again if it is past its bound."""
        if self.trim is not None:
            self.trim()
        rss = resident_mb()
        if not self.limit_mb or rss is None or rss <= self.limit_mb or MemoryBound.recycled:
            return
        if not self.recyclable or self.crawler is None or self.crawler.engine is None:
            if not self.warned:
                logger.warning("resident memory %.0f MB is past "
                               "CRAWLCLUSTER_SPIDER_MEMORY_LIMIT_MB (%.0f), but a spider "
                               "with an idle timeout is not started again: running on",
                               rss, self.limit_mb)
                self.warned = True
            return
        MemoryBound.recycled = True
        logger.warning("resident memory %.0f MB is past CRAWLCLUSTER_SPIDER_MEMORY_LIMIT_MB "
                       "(%.0f) after a trim: closing, for the manager to start this spider "
                       "again", rss, self.limit_mb)
        if self.crawler.stats is not None:
            self.crawler.stats.set_value("crawlcluster/memory/recycled_at_mb", round(rss))
        deferred_from_coro(self.crawler.engine.close_spider_async(reason=RECYCLE_REASON))
