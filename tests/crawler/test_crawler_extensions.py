"""The spider process's GC tuning and memory trim (unit)."""

import gc

import pytest

from crawler.extensions import GarbageCollectorTuning, MemoryTrim, _malloc_trim


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


def test_the_trim_gives_back_what_a_large_page_took():
    trim = _malloc_trim()
    assert trim is not None                    # glibc, as on every supported machine
    pages = [bytearray(4000) for _ in range(40_000)]      # 160 MB: large pages' texts
    pinned = bytearray(4000)                   # allocated last: the heap's top stays in use
    del pages
    before = rss_mb()
    MemoryTrim(30.0, trim).trim()
    assert before - rss_mb() > 50
    assert pinned


def test_zero_seconds_never_trims():
    calls = []
    extension = MemoryTrim(0.0, lambda: calls.append(1) or 1)
    extension.engine_started()
    extension.engine_stopped()
    assert extension.loop is None and calls == []
