"""The spider process's GC tuning, memory trim and memory bound (unit)."""

import gc

import pytest

from crawler.extensions import (
    GarbageCollectorTuning,
    MemoryBound,
    _malloc_trim,
    tune_malloc,
)
from settings.procfs import resident_mb


@pytest.fixture
def restore_gc():
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_start_up_objects_are_frozen_and_collections_spaced(restore_gc):
    _, older, oldest = gc.get_threshold()
    GarbageCollectorTuning(20000).engine_started()
    assert gc.get_threshold() == (20000, older, oldest)
    assert gc.get_freeze_count() > 0


def test_zero_keeps_pythons_defaults(restore_gc):
    before = gc.get_threshold()
    GarbageCollectorTuning(0).engine_started()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def rss_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024


@pytest.fixture
def not_recycled():
    MemoryBound.recycled = False
    yield
    MemoryBound.recycled = False


def test_the_trim_gives_back_what_a_large_page_took():
    trim = _malloc_trim()
    assert trim is not None                    # glibc, as on every supported machine
    pages = [bytearray(4000) for _ in range(40_000)]      # 160 MB: large pages' texts
    pinned = bytearray(4000)                   # allocated last: the heap's top stays in use
    del pages
    before = rss_mb()
    MemoryBound(None, 30.0, 0, trim).check()
    assert before - rss_mb() > 50
    assert pinned


def test_zero_seconds_never_trims():
    calls = []
    extension = MemoryBound(None, 0.0, 0, lambda: calls.append(1) or 1)
    extension.engine_started()
    extension.engine_stopped()
    assert extension.loop is None and calls == []


def test_resident_memory_is_read_as_the_kernel_counts_it():
    assert abs(resident_mb() - rss_mb()) < 5


def test_large_blocks_freed_go_back_without_a_trim():
    """With the mmap threshold fixed, a freed large block is unmapped at once, even
    after larger ones (which would have raised glibc's threshold) were freed."""
    assert tune_malloc()
    for size in (4_000_000, 400_000):     # freed, these raised glibc's threshold
        block = bytearray(size)
        del block
    blocks, kept = [], []
    for _ in range(300):                  # 90 MB of large pages, among what stays
        blocks.append(bytearray(300_000))
        kept.append(bytearray(2000))
    before = rss_mb()
    del blocks
    assert before - rss_mb() > 60         # 0 with glibc's default; ~80 of the 90 MB come back
    assert kept


class FakeEngine:
    def __init__(self):
        self.reasons = []

    def close_spider_async(self, *, reason):   # Scrapy's is a coroutine
        self.reasons.append(reason)


class FakeCrawler:
    def __init__(self):
        self.engine, self.stats = FakeEngine(), None


def test_a_long_running_spider_past_its_bound_closes_once_to_be_recycled(not_recycled):
    crawler = FakeCrawler()
    bound = MemoryBound(crawler, 5.0, resident_mb() + 500, trim=lambda: 1)
    bound.check()
    assert crawler.engine.reasons == [] and not MemoryBound.recycled
    bound.limit_mb = 1.0
    bound.check()
    bound.check()
    assert crawler.engine.reasons == ["recycle"] and MemoryBound.recycled


def test_a_spider_with_an_idle_timeout_past_its_bound_runs_on(not_recycled, caplog):
    crawler = FakeCrawler()
    bound = MemoryBound(crawler, 5.0, 1.0, trim=lambda: 1, recyclable=False)
    bound.check()
    bound.check()
    assert crawler.engine.reasons == [] and not MemoryBound.recycled
    assert caplog.text.count("a spider with an idle timeout is not started again") == 1
