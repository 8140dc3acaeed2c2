"""The multi-group Bloom filter: sizing (unit) and behaviour on a real Redis."""

import math
import threading
from dataclasses import replace

import numpy as np
import pytest

from master.bloom import BloomFilter
from master.bloomparams import DOUBLE, BloomParams, cell_arrays, positions
from master.keys import Keys
from master.urls import url_key
from settings.errors import ConfigError


def test_default_sizing_meets_memory_and_rate():
    params = BloomParams.for_capacity(10_000_000, 0.001, groups=2)
    assert params.bytes / 10_000_000 <= 2.2
    assert params.false_positive_rate(10_000_000) <= 0.001 * 1.0001
    assert params.groups == 2 and params.positions_per_url == 6
    assert "h=2 groups" in params.describe()


def test_blocks_keep_strings_under_the_limit():
    params = BloomParams.for_capacity(100_000_000, 0.0001, groups=2, block_bits=1 << 28)
    assert params.blocks > 1
    assert params.groups * params.group_cells <= 1 << 28


@pytest.mark.parametrize("hashing", ["independent", DOUBLE])
def test_positions_stay_inside_their_group_and_block(hashing):
    params = BloomParams(groups=3, hashes=4, group_cells=1000, blocks=7, hashing=hashing)
    for n in range(200):
        block, cells = positions(params.digests([url_key(f"http://a.com/{n}")]), params)
        assert 0 <= block < 7
        for i, cell in enumerate(cells):
            group = i // 4
            assert group * 1000 <= cell < (group + 1) * 1000


@pytest.mark.parametrize("params", [
    BloomParams.for_capacity(10_000_000, 0.001, groups=2),
    BloomParams(groups=3, hashes=4, group_cells=1_000_003, blocks=7),
    BloomParams.for_capacity(10 ** 9, 0.0001, groups=4, block_bits=1 << 32)])
@pytest.mark.parametrize("hashing", ["independent", DOUBLE])
def test_batched_positions_equal_one_by_one(params, hashing):
    params = replace(params, hashing=hashing)
    digests = [params.digests([url_key(f"http://a.com/{n}", scope="c1")]) for n in range(500)]
    blocks, cells = cell_arrays(b"".join(digests), params)
    for n, digest in enumerate(digests):
        assert positions(digest, params) == (blocks[n], cells[n].tolist())


def false_positives(params, stored, fresh):
    """Of ``fresh`` URLs, those a filter holding ``stored`` URLs takes as seen."""
    _, cells = cell_arrays(params.digests([url_key(url) for url in stored]), params)
    bits = np.zeros(params.cells, dtype=bool)
    bits[cells.ravel().astype(np.int64)] = True
    _, cells = cell_arrays(params.digests([url_key(url) for url in fresh]), params)
    return [url for url, seen in zip(fresh, bits[cells.astype(np.int64)].all(axis=1),
                                     strict=True) if seen]


def test_a_small_filter_at_a_low_rate_keeps_its_rate():
    """300 URLs in a filter sized for them at 2.5e-9: no false positive in 200,000.
    Double hashing over the same h1, h2 for both groups lets two URLs agreeing in
    them modulo a group's cells agree everywhere, a floor of about 1e-5 here."""
    params = BloomParams.for_capacity(300, 2.5e-9, groups=2)
    stored = [f"http://junk.test/{n}" for n in range(300)]
    fresh = [f"http://fresh.test/{n}" for n in range(200_000)]
    assert params.false_positive_rate(300) < 1e-8
    assert false_positives(params, stored, fresh) == []
    assert len(false_positives(replace(params, hashing=DOUBLE), stored, fresh)) >= 2


@pytest.mark.parametrize("bad", [{"capacity": 0, "error_rate": 0.01},
                                 {"capacity": 10, "error_rate": 1.5},
                                 {"capacity": 10, "error_rate": 0.01, "groups": 7}])
def test_bad_sizing_is_refused(bad):
    with pytest.raises(ConfigError):
        BloomParams.for_capacity(**bad)


@pytest.fixture
def keys(test_settings):
    return Keys.from_settings(test_settings)


@pytest.mark.parametrize("hash_in", ["client", "lua"])
@pytest.mark.parametrize("counting", [False, True])
def test_check_and_add(redis, keys, hash_in, counting):
    params = BloomParams.for_capacity(10_000, 0.001, groups=2, counting=counting,
                                      block_bits=1 << 14)
    assert params.blocks > 1
    bloom = BloomFilter(redis, keys, "seen", params, hash_in=hash_in)
    urls = [f"http://h{n % 5}.com/news/{n}.html" for n in range(2000)]
    assert bloom.add_many(urls) == [True] * 2000
    assert bloom.add_many(urls[:10]) == [False] * 10
    # within one batch only the first occurrence is new; argument order is one URL
    assert bloom.add_many(["http://x.com/?b=1&a=2", "http://x.com/?a=2&b=1#top"]) == [True, False]
    assert all(bloom.contains_many(urls))                  # no false negatives
    unseen = [f"http://other.com/{n}" for n in range(2000)]
    assert sum(bloom.contains_many(unseen)) < 20           # ~0.1% expected


def test_counting_mode_removes(redis, keys):
    params = BloomParams.for_capacity(1000, 0.001, groups=2, counting=True)
    bloom = BloomFilter(redis, keys, "recrawl", params)
    urls = [f"http://a.com/{n}" for n in range(300)]
    bloom.add_many(urls)
    assert bloom.remove_many([*urls[:100], "http://never.added/"]) == [True] * 100 + [False]
    assert not any(bloom.contains_many(urls[:100]))
    assert all(bloom.contains_many(urls[100:]))            # the others keep their counts
    assert bloom.add_many(urls[:100]) == [True] * 100      # and can be crawled again


def test_plain_mode_cannot_remove(redis, keys):
    bloom = BloomFilter(redis, keys, "plain", BloomParams.for_capacity(100, 0.01))
    with pytest.raises(ConfigError, match="counting mode"):
        bloom.remove_many(["http://a.com/"])


def test_a_filter_refuses_other_settings(redis, keys):
    BloomFilter(redis, keys, "shared", BloomParams.for_capacity(1000, 0.01))
    with pytest.raises(ConfigError, match="exists with"):
        BloomFilter(redis, keys, "shared", BloomParams.for_capacity(2000, 0.01))


@pytest.mark.parametrize("hashing", ["independent", DOUBLE])
def test_lua_derives_the_positions_the_client_does(redis, keys, hashing):
    params = replace(BloomParams.for_capacity(10_000, 0.001, groups=3, block_bits=1 << 14),
                     hashing=hashing)
    urls = [f"http://h{n % 5}.com/news/{n}.html" for n in range(500)]
    BloomFilter(redis, keys, "both", params, hash_in="client").add_many(urls)
    in_lua = BloomFilter(redis, keys, "both", params, hash_in="lua")
    assert in_lua.add_many(urls) == [False] * 500
    assert in_lua.add_many(["http://new.com/"]) == [True]


def test_a_filter_made_with_double_hashing_keeps_it(redis, keys):
    """A filter from before independent hashing (its stored shape has no ``hashing``)
    opens with double hashing and still holds its URLs; a new one gets the new hashing."""
    old = replace(BloomParams.for_capacity(1000, 0.01), hashing=DOUBLE)
    urls = [f"http://a.com/{n}" for n in range(300)]
    BloomFilter(redis, keys, "old", old).add_many(urls)
    assert "hashing" not in redis.get(keys.bloom_meta("old"))
    reopened = BloomFilter(redis, keys, "old", BloomParams.for_capacity(1000, 0.01))
    assert reopened.params.hashing == DOUBLE and all(reopened.contains_many(urls))
    assert BloomFilter(redis, keys, "new", BloomParams.for_capacity(1000, 0.01)
                       ).params.hashing == "independent"


def test_concurrent_adders_see_each_url_new_once(redis, keys, test_settings):
    params = BloomParams.for_capacity(100_000, 0.001, groups=2)
    urls = [f"http://race.com/{n}" for n in range(20_000)]
    new_counts = []

    def adder():
        bloom = BloomFilter(redis, keys, "race", params, chunk=50)
        new_counts.append(sum(sum(bloom.add_many(urls[i:i + 500]))
                              for i in range(0, len(urls), 500)))

    threads = [threading.Thread(target=adder) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # false positives can only lower the total, never raise it
    assert 19_900 <= sum(new_counts) <= 20_000


def test_settings_build_the_filter(redis, test_settings):
    settings = test_settings.copy_with(CRAWLCLUSTER_BLOOM_CAPACITY=5000,
                                       CRAWLCLUSTER_BLOOM_GROUPS=3)
    bloom = BloomFilter.from_settings(redis, settings)
    assert bloom.params.groups == 3
    assert bloom.add("http://a.com/") is True
    assert bloom.contains("http://a.com/") is True


@pytest.mark.parametrize("counting", [False, True])
def test_fill_is_estimated_from_a_sample(redis, keys, counting):
    """What the exporter reports: an empty filter reads 0; one holding half its capacity
    about half (within the sample's error, ±1% of the cells)."""
    params = BloomParams.for_capacity(20_000, 0.01, counting=counting, block_bits=1 << 16)
    bloom = BloomFilter(redis, keys, "fill", params)
    assert params.blocks > 1
    assert bloom.fill() == (0.0, 0.0)
    bloom.add_many([f"http://fill.example/{n}" for n in range(10_000)])
    ratio, urls = bloom.fill()
    hashes_per_cell = params.hashes * 10_000 / (params.group_cells * params.blocks)
    assert abs(ratio - (1 - math.exp(-hashes_per_cell))) < 0.03
    assert 9_000 < urls < 11_000
