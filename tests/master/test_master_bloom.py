"""The multi-group Bloom filter: sizing (unit) and behaviour on a real Redis."""

import math
import threading

import pytest

from master.bloom import BloomFilter, BloomParams, cell_arrays, positions
from master.keys import Keys
from master.urls import url_digest
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


def test_positions_stay_inside_their_group_and_block():
    params = BloomParams(groups=3, hashes=4, group_cells=1000, blocks=7)
    for n in range(200):
        block, cells = positions(url_digest(f"http://a.com/{n}"), params)
        assert 0 <= block < 7
        for i, cell in enumerate(cells):
            group = i // 4
            assert group * 1000 <= cell < (group + 1) * 1000


@pytest.mark.parametrize("params", [
    BloomParams.for_capacity(10_000_000, 0.001, groups=2),
    BloomParams(groups=3, hashes=4, group_cells=1_000_003, blocks=7),
    BloomParams.for_capacity(10 ** 9, 0.0001, groups=4, block_bits=1 << 32)])
def test_batched_positions_equal_one_by_one(params):
    digests = [url_digest(f"http://a.com/{n}", scope="c1") for n in range(500)]
    blocks, cells = cell_arrays(b"".join(digests), params)
    for n, digest in enumerate(digests):
        assert positions(digest, params) == (blocks[n], cells[n].tolist())


@pytest.mark.parametrize("bad", [{"capacity": 0, "error_rate": 0.01},
                                 {"capacity": 10, "error_rate": 1.5}])
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
