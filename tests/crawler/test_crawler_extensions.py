"""The spider process's GC tuning (unit)."""

import gc

import pytest

from crawler.extensions import GarbageCollectorTuning


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
