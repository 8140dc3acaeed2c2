"""A rendering browser's HTTP cache (crawler/render/assetcache.py, its RFC 9111 rules in
cache_rules.py): freshness lifetime, current age, what a shared cache may store, Vary,
revalidation and 304 updates, one fetch for pages asking at once, eviction (also while
revalidating) and its bound; and against nginx, fetched as the browser fetches."""

import asyncio
import email.utils
import time

import pytest

from crawler.render import cache_rules as rules
from crawler.render.assetcache import AssetCache, lower_headers
from manager.local.ports import free_port
from manager.local.staticsite import StaticSite

NOW = 1_800_000_000.0


def http_date(seconds_from_now, now=None):
    return email.utils.formatdate((now or time.time()) + seconds_from_now, usegmt=True)


def lifetime(headers, status=200, shared=True):
    return rules.freshness_lifetime(headers, status, NOW, shared=shared)


# -- freshness lifetime (§4.2.1, §4.2.2) ------------------------------------------------

def test_assetcache_lifetime_s_maxage_first_in_a_shared_cache_then_max_age():
    assert lifetime({"cache-control": "public, max-age=600"}) == (600, "max-age")
    assert lifetime({"cache-control": "max-age=600, s-maxage=30"}) == (30, "s-maxage")
    assert lifetime({"cache-control": "max-age=600, s-maxage=30"}, shared=False) == (
        600, "max-age")
    assert lifetime({"cache-control": 'max-age="60"'}).seconds == 60      # quoted form


def test_assetcache_lifetime_expires_minus_date_or_the_time_received():
    assert lifetime({"date": http_date(-100, NOW), "expires": http_date(20, NOW)}) == (
        120, "expires")
    # no Date: the time it was received stands for it
    assert lifetime({"expires": http_date(50, NOW)}) == (50, "expires")
    assert lifetime({"date": http_date(0, NOW), "expires": http_date(-50, NOW)}).seconds == 0
    # max-age wins over Expires
    assert lifetime({"cache-control": "max-age=5", "expires": http_date(50, NOW)}).seconds == 5


def test_assetcache_lifetime_heuristic_only_without_an_explicit_one():
    modified = {"date": http_date(0, NOW), "last-modified": http_date(-1000, NOW)}
    assert lifetime(modified) == (pytest.approx(100), "heuristic")     # a tenth of its age
    assert lifetime({**modified, "last-modified": http_date(-10 ** 8, NOW)}).seconds == (
        rules.HEURISTIC_MAX)
    assert lifetime({**modified, "cache-control": "max-age=0"}) == (0, "max-age")
    assert lifetime({**modified, "expires": http_date(0, NOW)}) == (0, "expires")
    # a status not heuristically cacheable gets none, unless the answer is public
    assert lifetime(modified, status=302) == (0, "none")
    assert lifetime({**modified, "cache-control": "public"}, status=302).source == "heuristic"
    assert lifetime({}) == (0, "none")


@pytest.mark.parametrize("value", ["inf", "-1", "1.5", "", "1e9", "０"])
def test_assetcache_lifetime_an_invalid_number_is_stale(value):
    assert lifetime({"cache-control": f"max-age={value}"}) == (0, "invalid")
    assert lifetime({"cache-control": f"s-maxage={value}, max-age=60"}) == (0, "invalid")


def test_assetcache_lifetime_a_directive_given_twice_differently_is_stale():
    assert lifetime({"cache-control": "max-age=60, max-age=61"}) == (0, "invalid")
    assert lifetime({"cache-control": "max-age=60, public, max-age=60"}).seconds == 60


def test_assetcache_lifetime_a_huge_number_or_an_invalid_expires_is_bounded_or_stale():
    # §1.2.2: past what a cache represents, 2^31 (no overflow, no int of 5000 digits)
    assert lifetime({"cache-control": "max-age=" + "9" * 5000}).seconds == rules.MAX_DELTA
    assert lifetime({"cache-control": "max-age=99999999999"}).seconds == rules.MAX_DELTA
    assert lifetime({"cache-control": "max-age=0060"}).seconds == 60
    assert lifetime({"expires": "0"}) == (0, "invalid")                # §5.3: in the past
    assert lifetime({"expires": "Thu, 01 Dec 99999 16:00:00 GMT"}) == (0, "invalid")


# -- current age (§4.2.3) -----------------------------------------------------------------

def test_assetcache_current_age_from_age_date_delay_and_time_stored():
    sent, received = NOW - 2, NOW
    # Age from an upstream cache, plus the time the request took
    assert rules.current_age({"age": "100"}, sent, received, received) == 102
    # apparent age: Date 50 s before it was received, larger than Age + delay
    assert rules.current_age({"age": "10", "date": http_date(-50, NOW)}, sent, received,
                             received) == 50
    # plus the time it has been stored since
    assert rules.current_age({"age": "100"}, sent, received, received + 30) == 132
    # a Date in the future gives no negative age; an invalid Age is ignored; of a list, the
    # first member counts
    assert rules.current_age({"date": http_date(500, NOW)}, NOW, NOW, NOW) == 0
    assert rules.current_age({"age": "-5"}, NOW, NOW, NOW) == 0
    assert rules.current_age({"age": "7, 9"}, NOW, NOW, NOW) == 7


# -- what a shared cache stores (§3, §3.5) -----------------------------------------------

@pytest.mark.parametrize("status, asked, headers, reason", [
    (200, {}, {"cache-control": "max-age=60"}, None),
    (206, {}, {"cache-control": "max-age=60"}, "status"),
    (404, {}, {"cache-control": "max-age=60"}, "status"),
    (200, {}, {"cache-control": "no-store, max-age=60"}, "no-store"),
    (200, {}, {"cache-control": "private, max-age=60"}, "private"),
    (200, {}, {"cache-control": 'private="x-user", max-age=60'}, "private"),
    (200, {}, {"cache-control": "max-age=60", "vary": "Accept, *"}, "vary-star"),
    (200, {}, {"cache-control": "max-age=60", "set-cookie": "id=1"}, "set-cookie"),
    (200, {"authorization": "Basic x"}, {"cache-control": "max-age=60"}, "authorization"),
    (200, {"authorization": "Basic x"}, {"cache-control": "public, max-age=60"}, None),
    (200, {"authorization": "Basic x"}, {"cache-control": "s-maxage=60"}, None),
    (200, {"authorization": "Basic x"}, {"cache-control": "must-revalidate"}, None),
    (200, {"cookie": "id=1"}, {"cache-control": "max-age=60"}, "cookie"),
    (200, {"cookie": "id=1"}, {"cache-control": "public, max-age=60"}, None),
])
def test_assetcache_a_shared_cache_stores_only_what_anyone_may_have(status, asked, headers,
                                                                     reason):
    assert rules.unstorable_reason(status, asked, headers) == reason


def test_assetcache_no_cache_qualified_or_not_means_revalidate_each_use():
    assert rules.revalidated_each_use({"cache-control": "no-cache"})
    assert rules.revalidated_each_use({"cache-control": 'max-age=60, no-cache="set-cookie"'})
    assert not rules.revalidated_each_use({"cache-control": "max-age=60, must-revalidate"})


# -- Vary (§4.1), 304s (§3.2, §4.3.4) ------------------------------------------------------

def test_assetcache_vary_names_the_request_fields_compared_normalised():
    assert rules.vary_fields({"vary": "Accept-Language,  Accept-Encoding"}) == (
        "accept-encoding", "accept-language")
    fields = ("accept-language",)
    assert rules.request_variant(fields, {"accept-language": "en, fr"}) == (
        rules.request_variant(fields, {"accept-language": " en,fr "}))
    assert rules.request_variant(fields, {"accept-language": "en"}) != (
        rules.request_variant(fields, {"accept-language": "fr"}))
    assert rules.request_variant(fields, {}) == (None,)
    assert rules.request_variant(fields, {}) != rules.request_variant(
        fields, {"accept-language": ""})


def test_assetcache_a_304_is_about_the_stored_answer_with_its_validator():
    stored = {"etag": '"v1"', "last-modified": "Mon, 01 Jan 2024 00:00:00 GMT"}
    assert rules.revalidates(stored, {"etag": '"v1"'})
    assert rules.revalidates(stored, {"etag": 'W/"v1"'})
    assert not rules.revalidates(stored, {"etag": '"v2"'})
    assert rules.revalidates(stored, {"last-modified": stored["last-modified"]})
    assert not rules.revalidates(stored, {"last-modified": "Tue, 02 Jan 2024 00:00:00 GMT"})
    assert rules.revalidates(stored, {"date": "x"})


def test_assetcache_a_304_updates_the_stored_headers_but_what_describes_the_body():
    stored = {"cache-control": "max-age=1", "etag": '"v1"', "x-kept": "1",
              "content-type": "application/javascript"}
    updated = rules.updated_headers(stored, {
        "cache-control": "max-age=60", "date": "now", "content-length": "0",
        "content-encoding": "gzip", "set-cookie": "id=2", "transfer-encoding": "chunked"})
    assert updated == {"cache-control": "max-age=60", "etag": '"v1"', "x-kept": "1",
                       "content-type": "application/javascript", "date": "now"}


# -- the cache ---------------------------------------------------------------------------

class Origin:
    """What the cache fetches from: counts fetches, answers 304 to a matching ETag."""

    def __init__(self, headers, delay=0.0, not_modified=None, body=b"console.log(1)"):
        self.headers, self.delay, self.asked = headers, delay, []
        self.not_modified = not_modified      # the 304's headers (else its Cache-Control)
        self.body = body

    async def fetch(self, conditional):
        self.asked.append(conditional)
        await asyncio.sleep(self.delay)
        if "etag" in self.headers and conditional.get("if-none-match") == self.headers["etag"]:
            return 304, self.not_modified or {
                "cache-control": self.headers.get("cache-control", ""),
                "etag": self.headers["etag"]}, b""
        return 200, {**self.headers, "content-encoding": "gzip"}, self.body


def get(cache, origin, url="http://a/s.js", headers=None):
    return asyncio.run(cache.get(url, origin.fetch, headers))


def test_assetcache_a_fresh_asset_is_fetched_once_by_pages_asking_at_once():
    cache, origin = AssetCache(1 << 20), Origin({"cache-control": "max-age=60"}, delay=0.05)

    async def pages():
        return await asyncio.gather(*(cache.get("http://a/s.js", origin.fetch)
                                      for _ in range(4)))

    assets = asyncio.run(pages())
    assert len(origin.asked) == 1 and {a.body for a in assets} == {b"console.log(1)"}
    again = get(cache, origin)
    assert len(origin.asked) == 1 and cache.hits == 4
    # the body is stored decompressed: its encoding is not given to the browser; from the
    # cache it carries its Age (§5.1)
    assert "content-encoding" not in assets[0].headers and again.headers["age"] == "0"


def test_assetcache_a_stale_asset_is_revalidated_and_no_store_is_not_kept():
    cache, origin = AssetCache(1 << 20), Origin({"etag": '"v1"', "cache-control": "no-cache"})
    get(cache, origin)
    asset = get(cache, origin)
    assert origin.asked == [{}, {"if-none-match": '"v1"'}] and asset.body == b"console.log(1)"
    assert cache.revalidated == 1
    private = Origin({"cache-control": "no-store"})
    for _ in range(2):
        get(cache, private, "http://a/private.js")
    assert len(private.asked) == 2 and cache.counts["not_stored/no-store"] == 2


def test_assetcache_a_304_updates_the_stored_answer_and_its_freshness():
    origin = Origin({"etag": '"v1"', "cache-control": "max-age=0"},
                    not_modified={"etag": '"v1"', "cache-control": "max-age=60",
                                  "x-version": "2"})
    cache = AssetCache(1 << 20)
    get(cache, origin)
    revalidated = get(cache, origin)
    assert revalidated.headers["x-version"] == "2" and revalidated.body == b"console.log(1)"
    assert get(cache, origin).headers["cache-control"] == "max-age=60"
    assert len(origin.asked) == 2                                     # fresh after the 304


def test_assetcache_a_304_about_another_answer_fetches_it_anew():
    origin = Origin({"etag": '"v1"', "cache-control": "no-cache"},
                    not_modified={"etag": '"v2"'})
    cache = AssetCache(1 << 20)
    get(cache, origin)
    assert get(cache, origin).body == b"console.log(1)"
    assert origin.asked == [{}, {"if-none-match": '"v1"'}, {}] and cache.revalidated == 0


def test_assetcache_an_answer_already_old_when_received_is_stale():
    for old in ({"age": "100"}, {"date": http_date(-100)}):
        cache, origin = AssetCache(1 << 20), Origin({"cache-control": "max-age=60", **old})
        get(cache, origin)
        get(cache, origin)
        assert len(origin.asked) == 2, old
        assert not cache.entries            # stale with no validator: no use keeping it
    cache, origin = AssetCache(1 << 20), Origin({"cache-control": "max-age=60", "age": "30"})
    get(cache, origin)
    assert get(cache, origin).headers["age"] == "30" and len(origin.asked) == 1


def test_assetcache_an_invalid_lifetime_is_refetched_and_counted():
    cache, origin = AssetCache(1 << 20), Origin({"cache-control": "max-age=inf",
                                                 "etag": '"v1"'})
    get(cache, origin)
    get(cache, origin)
    assert origin.asked == [{}, {"if-none-match": '"v1"'}]
    assert cache.counts["invalid_lifetime"] == 2


def test_assetcache_vary_keeps_an_answer_per_request_variant():
    cache = AssetCache(1 << 20)

    async def by_language(_conditional):
        fetched.append(_conditional)
        return 200, {"cache-control": "max-age=60", "vary": "Accept-Language"}, b"?"

    fetched = []
    english, french = {"Accept-Language": "en"}, {"Accept-Language": "fr"}
    for asked in (english, french, english, french, {}):
        asyncio.run(cache.get("http://a/s.js", by_language, asked))
    assert len(fetched) == 3 and cache.hits == 2
    assert len(cache.entries["http://a/s.js"]) == 3


def test_assetcache_vary_star_is_never_stored():
    cache, origin = AssetCache(1 << 20), Origin({"cache-control": "max-age=60", "vary": "*"})
    get(cache, origin)
    get(cache, origin)
    assert len(origin.asked) == 2 and "http://a/s.js" not in cache.entries


@pytest.mark.parametrize("headers, asked", [
    ({"cache-control": "private, max-age=60"}, {}),
    ({"cache-control": "max-age=60", "set-cookie": "session=crawl-a"}, {}),
    ({"cache-control": "max-age=60"}, {"Authorization": "Bearer crawl-a"}),
])
def test_assetcache_what_is_one_crawls_goes_to_no_other_page(headers, asked):
    """Not stored, and pages waiting for the same fetch fetch for themselves."""
    cache, origin = AssetCache(1 << 20), Origin(headers, delay=0.05)

    async def pages():
        return await asyncio.gather(*(cache.get("http://a/s.js", origin.fetch, asked)
                                      for _ in range(3)))

    asyncio.run(pages())
    get(cache, origin, headers=asked)
    assert len(origin.asked) == 4 and cache.hits == 0 and not cache.entries


def test_assetcache_a_stale_asset_is_never_served_when_revalidation_fails():
    cache = AssetCache(1 << 20)
    origin = Origin({"etag": '"v1"', "cache-control": "max-age=0, must-revalidate"})
    get(cache, origin)

    async def broken(_conditional):
        raise ConnectionError("reset")

    with pytest.raises(ConnectionError):
        asyncio.run(cache.get("http://a/s.js", broken))


def test_assetcache_evicted_while_revalidating_every_page_gets_the_answer():
    cache = AssetCache(1 << 20)
    origin = Origin({"etag": '"v1"', "cache-control": "no-cache"}, delay=0.05)
    get(cache, origin)

    async def evicting(conditional):
        cache.entries.clear()                 # the entry goes while its 304 is on the way
        return await origin.fetch(conditional)

    async def pages():
        return await asyncio.gather(*(cache.get("http://a/s.js", evicting)
                                      for _ in range(4)))

    assets = asyncio.run(pages())
    assert [a.body for a in assets] == [b"console.log(1)"] * 4
    assert origin.asked[1:] == [{"if-none-match": '"v1"'}] and cache.revalidated == 1
    assert cache.entries["http://a/s.js"][0].body == b"console.log(1)"     # stored again


def test_assetcache_evicts_the_least_recently_used_past_its_bound():
    origin = Origin({"cache-control": "max-age=60"})
    entry = len(b"console.log(1)") + len("cache-control") + len("max-age=60")    # 37
    cache = AssetCache(2 * entry + 10)
    for name in ("a", "b", "a", "c"):
        get(cache, origin, f"http://a/{name}.js")
    assert list(cache.entries) == ["http://a/a.js", "http://a/c.js"]
    assert cache.entries.currsize == 2 * entry
    big = Origin({"cache-control": "max-age=60"}, body=b"x" * 200)
    assert get(cache, big, "http://a/big.js").body == b"x" * 200       # passed through
    assert "http://a/big.js" not in cache.entries


def test_assetcache_a_failed_fetch_fails_every_page_waiting_for_it_and_is_not_kept():
    cache = AssetCache(1 << 20)

    async def broken(_conditional):
        await asyncio.sleep(0.01)
        raise ConnectionError("reset")

    async def pages():
        return await asyncio.gather(*(cache.get("http://a/s.js", broken) for _ in range(3)),
                                    return_exceptions=True)

    assert all(isinstance(r, ConnectionError) for r in asyncio.run(pages()))
    assert not cache.entries and cache.fetching == {}


# -- against nginx, fetched as the browser fetches (Playwright) --------------------------

# nginx serves each with an ETag and Last-Modified, and these headers
ASSETS = ("app.js", "aged.js", "private.js", "cookie.js")
LOCATIONS = [       # app.js fresh a second; aged.js stale at once (Age: 100)
    'location = /aged.js { add_header Cache-Control "max-age=60"; add_header Age 100; }',
    'location = /app.js { add_header Cache-Control "max-age=1"; }',
    'location = /private.js { add_header Cache-Control "private, max-age=60"; }',
    ('location = /cookie.js { add_header Cache-Control "max-age=60"; '
     'add_header Set-Cookie "session=1"; }'),
    ('location = /vary.js { add_header Cache-Control "max-age=60"; '          # no ETag
     'add_header Vary "Accept-Language"; default_type application/javascript; '
     'return 200 "lang=$http_accept_language"; }'),
]


@pytest.fixture
def asset_site(tmp_path):
    www = tmp_path / "www" / "127.0.0.1"
    www.mkdir(parents=True)
    for name in ASSETS:
        (www / name).write_text(f"console.log('{name}')")
    port = free_port(["127.0.0.1"])
    with StaticSite(tmp_path / "www", ["127.0.0.1"], port, tmp_path / "run",
                    locations={"127.0.0.1": LOCATIONS}, compress=True) as site:
        yield f"http://127.0.0.1:{port}", site


def test_assetcache_against_a_real_server_fetched_as_the_browser_fetches(asset_site):
    base, site = asset_site
    from playwright.async_api import async_playwright

    async def scenario():
        cache = AssetCache(1 << 20)
        async with async_playwright() as playwright:
            http = await playwright.request.new_context()

            async def get_(name, headers=None):
                async def fetch(conditional):
                    answer = await http.get(f"{base}/{name}", headers={
                        "accept-encoding": "gzip", **(headers or {}), **conditional})
                    return answer.status, lower_headers(answer.headers), await answer.body()
                return await cache.get(f"{base}/{name}", fetch, headers)

            bodies = [(await get_("app.js")).body for _ in range(2)]
            await asyncio.sleep(1.2)
            bodies.append((await get_("app.js")).body)          # stale: a 304 from nginx
            for name in ("aged.js", "private.js", "cookie.js") * 2:
                await get_(name)
            for language in ("en", "fr", "en"):
                asset = await get_("vary.js", {"Accept-Language": language})
                assert asset.body == f"lang={language}".encode()
            await http.dispose()
        return cache, bodies

    cache, bodies = asyncio.run(scenario())
    assert bodies == [b"console.log('app.js')"] * 3
    served = [(e["path"].lstrip("/"), e["status"]) for e in site.access_log()]
    assert served.count(("app.js", 200)) == 1 and served.count(("app.js", 304)) == 1
    assert served.count(("aged.js", 200)) == 1 and served.count(("aged.js", 304)) == 1
    assert served.count(("private.js", 200)) == 2 and served.count(("cookie.js", 200)) == 2
    assert served.count(("vary.js", 200)) == 2
    assert cache.revalidated == 2 and cache.counts["not_stored/private"] == 2
    assert cache.counts["not_stored/set-cookie"] == 2
