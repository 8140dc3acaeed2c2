"""The seen-URL filter in generations (master/bloomgen.py), on a real Redis."""

from dataclasses import replace

import pytest

from master.bloom import BloomFilter
from master.bloomgen import AgingBloomFilter, KnownLinks, generation_shape
from master.bloomparams import DOUBLE, BloomParams
from master.keys import Keys
from tests.master.conftest import Clock

ERROR = 0.01


def test_generations_share_the_memory_of_one_filter_and_its_error_rate():
    for capacity, generations in ((10_000_000, 4), (5_000, 2), (200_000, 8)):
        per_generation, params, budget = generation_shape(capacity, 0.001, generations,
                                                          groups=2)
        assert params.bytes * generations <= budget.bytes
        assert per_generation >= 0.6 * capacity / generations     # what memory buys
        # every generation full: the error summed over them is the configured rate
        assert generations * params.false_positive_rate(per_generation) <= 0.001 * 1.05


def aging(redis, test_settings, capacity=2_000, generations=4, **kwargs):
    clock = Clock()
    per_generation, params, budget = generation_shape(capacity, ERROR, generations, groups=2,
                                                      counting=kwargs.pop("counting", False))
    bloom = AgingBloomFilter(redis, Keys.from_settings(test_settings), "seen", params,
                             per_generation, generations, ERROR, budget=budget, refresh=0.0,
                             clock=clock, **kwargs)
    return bloom, clock


def fill(bloom, clock, urls, batch=100):
    """Add ``urls`` in batches, the master's upkeep between batches."""
    for start in range(0, len(urls), batch):
        bloom.add_many(urls[start:start + batch], scope="c")
        clock.now += 10
        bloom.upkeep()


def stored_bytes(redis, keys):
    """Bytes of the filter's bitmaps in Redis (blocks; not the small meta keys)."""
    return sum(redis.strlen(key) for key in redis.scan_iter(match=f"{keys.prefix}:bloom:*",
                                                             count=1000)
               if not key.endswith((":meta", ":generations")))


def test_ten_times_capacity_keeps_error_and_memory_within_the_configured(redis, test_settings):
    bloom, clock = aging(redis, test_settings)
    fill(bloom, clock, [f"http://a.com/{n}" for n in range(20_000)])
    figures = bloom.figures()
    assert figures["generations"] == 4
    fresh = [f"http://b.com/{n}" for n in range(20_000)]
    false_positives = sum(bloom.contains_many(fresh, scope="c")) / len(fresh)
    assert false_positives <= 2 * ERROR, false_positives
    assert figures["error_now"] <= 2 * ERROR
    assert figures["bytes"] <= bloom.budget.bytes
    assert stored_bytes(redis, bloom.keys) <= bloom.budget.bytes + 8 * 4   # whole bytes
    # the first URLs are long forgotten (but for false positives), the last remembered
    assert sum(bloom.contains_many([f"http://a.com/{n}" for n in range(1_000)], "c")) <= 20
    assert all(bloom.contains_many([f"http://a.com/{n}" for n in range(19_800, 20_000)], "c"))


def test_a_url_found_again_is_remembered_through_any_number_of_turnovers(redis, test_settings):
    """A link looked up at least once a generation (a hub listing it) stays."""
    bloom, clock = aging(redis, test_settings)
    assert bloom.add_many(["http://hub.com/a1"], scope="c") == [True]
    for round_ in range(30):
        fill(bloom, clock, [f"http://a.com/{round_}/{n}" for n in range(200)])
        assert bloom.contains_many(["http://hub.com/a1"], scope="c") == [True]
    assert bloom.add_many(["http://hub.com/a1"], scope="c") == [False]
    assert bloom.figures()["generations"] == 4


def test_turnover_drops_the_oldest_generation_s_keys(redis, test_settings):
    bloom, clock = aging(redis, test_settings)
    first = bloom.live()[0].name
    fill(bloom, clock, [f"http://a.com/{n}" for n in range(8_000)])
    live = {b.name for b in bloom.live()}
    assert first not in live and len(live) == 4
    names = {key.split(":")[-2] for key in redis.scan_iter(match=f"{bloom.keys.prefix}:bloom:*")
             if not key.endswith(":generations")}
    assert names == live


def test_a_filter_from_before_generations_is_kept_as_the_oldest(redis, test_settings):
    """Made with double hashing, too: it keeps it, the new generation has its own."""
    keys = Keys.from_settings(test_settings)
    legacy = BloomFilter(redis, keys, "seen",
                         replace(BloomParams.for_capacity(5_000, ERROR), hashing=DOUBLE))
    legacy.add_many(["http://old.com/1", "http://old.com/2"], scope="c")
    bloom, _ = aging(redis, test_settings)
    assert [b.name for b in bloom.live()] == ["seen", "seen.1"]
    assert [b.params.hashing for b in bloom.live()] == [DOUBLE, "independent"]
    assert bloom.add_many(["http://old.com/1", "http://new.com/1"], scope="c") == [False, True]
    assert bloom.contains_many(["http://old.com/2", "http://new.com/1", "http://new.com/2"],
                               scope="c") == [True, True, False]


def test_a_url_no_longer_looked_up_is_forgotten(redis, test_settings):
    bloom, clock = aging(redis, test_settings)
    bloom.add_many(["http://hub.com/gone"], scope="c")
    fill(bloom, clock, [f"http://a.com/{n}" for n in range(6_000)])
    assert bloom.contains_many(["http://hub.com/gone"], scope="c") == [False]


def test_counting_generations_remove_a_url_wherever_it_is(redis, test_settings):
    bloom, clock = aging(redis, test_settings, counting=True)
    bloom.add_many(["http://a.com/page"], scope="c")
    fill(bloom, clock, [f"http://a.com/{n}" for n in range(700)])     # a new generation
    assert len(bloom.live()) >= 2
    assert bloom.contains_many(["http://a.com/page"], scope="c") == [True]  # now in two
    assert bloom.remove_many(["http://a.com/page"], scope="c") == [True]
    assert bloom.contains_many(["http://a.com/page"], scope="c") == [False]


def test_known_links_are_kept_per_crawl_until_the_generations_turn_over(redis, test_settings):
    bloom, clock = aging(redis, test_settings)
    known = KnownLinks(bloom, 1_000)
    urls = ["http://a.com/1", "http://a.com/2"]
    bloom.add_many(urls[:1], scope="c")
    known.remember(urls[:1], ["c"])
    assert known.known(urls, ["c", "c"]) == [True, False]
    assert known.known(urls[:1], ["other crawl"]) == [False]
    known.forget(urls[:1], ["c"])                    # taken out of the filter
    assert known.known(urls[:1], ["c"]) == [False]
    known.remember(urls, ["c", "c"])
    fill(bloom, clock, [f"http://b.com/{n}" for n in range(1_000)])   # a turnover
    assert len(bloom.live()) >= 2
    assert known.known(urls, ["c", "c"]) == [False, False]   # looked up again: refreshed


def test_known_links_start_over_past_their_size(redis, test_settings):
    bloom, _ = aging(redis, test_settings)
    known = KnownLinks(bloom, 3)
    known.remember(["http://a.com/1", "http://a.com/2"], ["c", "c"])
    known.remember(["http://a.com/3", "http://a.com/4"], ["c", "c"])
    assert known.known([f"http://a.com/{n}" for n in range(1, 5)], ["c"] * 4) == [
        False, False, True, True]
    none = KnownLinks(bloom, 0)
    none.remember(["http://a.com/1"], ["c"])
    assert none.known(["http://a.com/1"], ["c"]) == [False]


@pytest.mark.parametrize("frontier_settings", ["redis", "redis-cluster"], indirect=True)
def test_generations_turn_over_on_a_redis_cluster_too(frontier_redis, frontier_settings):
    bloom, clock = aging(frontier_redis, frontier_settings, capacity=1_000)
    fill(bloom, clock, [f"http://a.com/{n}" for n in range(5_000)], batch=20)
    assert bloom.figures()["generations"] == 4
    fresh = [f"http://b.com/{n}" for n in range(5_000)]
    assert sum(bloom.contains_many(fresh, scope="c")) / len(fresh) <= 2 * ERROR
