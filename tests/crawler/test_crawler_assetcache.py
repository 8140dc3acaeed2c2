"""A rendering browser's HTTP cache (crawler/render/assetcache.py): freshness as RFC 9111 gives
a private cache, revalidation, one fetch for pages asking at once, and its bound."""

import asyncio
import email.utils
import time

import pytest

from crawler.render.assetcache import HEURISTIC_MAX, AssetCache, freshness


def http_date(seconds_from_now):
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


def test_assetcache_freshness_from_cache_control_expires_or_last_modified():
    now = time.time()
    assert freshness({"cache-control": "public, max-age=600"}, now) == 600
    assert freshness({"cache-control": "no-store", "expires": http_date(60)}, now) is None
    assert freshness({"cache-control": "no-cache", "etag": '"x"'}, now) == 0
    assert freshness({"date": http_date(0), "expires": http_date(120)}, now) == (
        pytest.approx(120, abs=2))
    assert freshness({"expires": "0"}, now) == 0                        # already expired
    # no explicit lifetime: a tenth of its age, as browsers guess
    assert freshness({"date": http_date(0), "last-modified": http_date(-1000)}, now) == (
        pytest.approx(100, abs=2))
    assert freshness({"last-modified": http_date(-10 ** 8)}, now) == HEURISTIC_MAX
    assert freshness({}, now) == 0


class Origin:
    """What the cache fetches from: counts fetches, answers 304 to a matching ETag."""

    def __init__(self, headers, delay=0.0):
        self.headers, self.delay, self.asked = headers, delay, []

    async def fetch(self, conditional):
        self.asked.append(conditional)
        await asyncio.sleep(self.delay)
        if "etag" in self.headers and conditional.get("if-none-match") == self.headers["etag"]:
            return 304, {"cache-control": self.headers.get("cache-control", "")}, b""
        return 200, {**self.headers, "content-encoding": "gzip"}, b"console.log(1)"


def test_assetcache_a_fresh_asset_is_fetched_once_by_pages_asking_at_once():
    cache, origin = AssetCache(1 << 20), Origin({"cache-control": "max-age=60"}, delay=0.05)

    async def pages():
        return await asyncio.gather(*(cache.get("http://a/s.js", origin.fetch)
                                      for _ in range(4)))

    assets = asyncio.run(pages())
    assert len(origin.asked) == 1 and {a.body for a in assets} == {b"console.log(1)"}
    asyncio.run(cache.get("http://a/s.js", origin.fetch))
    assert len(origin.asked) == 1
    # the body is stored decompressed: its encoding is not given to the browser
    assert "content-encoding" not in assets[0].headers


def test_assetcache_a_stale_asset_is_revalidated_and_no_store_is_not_kept():
    cache, origin = AssetCache(1 << 20), Origin({"etag": '"v1"', "cache-control": "no-cache"})
    asyncio.run(cache.get("http://a/s.js", origin.fetch))
    asset = asyncio.run(cache.get("http://a/s.js", origin.fetch))
    assert origin.asked == [{}, {"if-none-match": '"v1"'}] and asset.body == b"console.log(1)"
    assert cache.revalidated == 1
    private = Origin({"cache-control": "no-store"})
    for _ in range(2):
        asyncio.run(cache.get("http://a/private.js", private.fetch))
    assert len(private.asked) == 2


def test_assetcache_evicts_the_least_recently_used_past_its_bound():
    cache, origin = AssetCache(40), Origin({"cache-control": "max-age=60"})
    for name in ("a", "b", "c"):           # 14 bytes each
        asyncio.run(cache.get(f"http://a/{name}.js", origin.fetch))
    assert list(cache.entries) == ["http://a/b.js", "http://a/c.js"] and cache.size == 28


def test_assetcache_a_failed_fetch_fails_every_page_waiting_for_it_and_is_not_kept():
    cache = AssetCache(1 << 20)

    async def broken(_conditional):
        await asyncio.sleep(0.01)
        raise ConnectionError("reset")

    async def pages():
        return await asyncio.gather(*(cache.get("http://a/s.js", broken) for _ in range(3)),
                                    return_exceptions=True)

    assert all(isinstance(r, ConnectionError) for r in asyncio.run(pages()))
    assert cache.entries == {} and cache.fetching == {}
