"""A rendering browser's HTTP cache: the scripts (and what a rule's ``render_load`` asks
for) a site's pages share, fetched once and reused as a browser reuses them.

Playwright turns Chromium's own cache off once requests are routed, and each page
renders in a fresh context, so without this every render fetches a site's shared
scripts again. ``AssetCache`` follows RFC 9111 (its rules in cache_rules.py).

It is a *shared* cache, one per spider process, used by every crawl the process runs:
that is where the savings are (the crawls of one site, and every site's CDN scripts,
share them), and it needs nothing of the crawl from its caller. So it keeps only what a
shared cache may give anyone: never an answer marked ``private`` or ``no-store``, one
that sets a cookie, or one to a request carrying ``Authorization`` or ``Cookie`` unless
the answer says it is for everyone (``public``, ``s-maxage``, ``must-revalidate``).
Such answers go to the page that asked, and to no other: pages waiting for the same
URL fetch it for themselves.

A stored answer is fresh while its current age (``Age``, ``Date``, the time the fetch
took, the time stored) is below its freshness lifetime (``s-maxage``, ``max-age``,
``Expires`` - ``Date``, else a tenth of its age since ``Last-Modified``); an invalid
lifetime (``max-age=inf``, ``-1``, two different ``max-age``) makes it stale. A stale
one with an ``ETag`` or ``Last-Modified``, or one marked ``no-cache``, is revalidated
with a conditional request, and a 304 updates its headers; a stale one is never served.
A URL keeps up to ``MAX_VARIANTS`` answers told apart by the request fields their
``Vary`` names; ``Vary: *`` is never stored. Pages rendering at once that ask for the
same asset wait for one fetch. Entries are evicted least recently used past
``max_bytes`` (cachetools), also while being revalidated: the revalidated answer is
stored again and given to every page waiting for it.

Why not a library: hishel's sans-IO rules (the best kept on PyPI) take a response's age
as now - ``Date`` only (no ``Age``, no time stored), and cachecontrol is built on
requests; the rules here are each tested (tests/crawler/test_crawler_assetcache.py).
"""

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from cachetools import LRUCache

from crawler.render import cache_rules as rules

logger = logging.getLogger(__name__)

MAX_ENTRY_BYTES = 4 << 20      # bigger answers are passed through, not kept
MAX_VARIANTS = 4               # answers a URL keeps for requests its Vary tells apart
# headers of a stored answer that do not describe the body given to the browser (its
# body is stored decompressed)
_DROPPED = {"content-encoding", "content-length", "transfer-encoding", "connection"}

# fetch(conditional headers) -> (status, lower-cased headers, body), from the network
Fetch = Callable[[dict[str, str]], Awaitable[tuple[int, dict[str, str], bytes]]]


class _Answer(NamedTuple):
    """An answer from the network, and when it was asked for and received."""

    status: int
    headers: dict[str, str]
    body: bytes
    request_time: float
    response_time: float


@dataclass(frozen=True)
class Asset:
    """An answer: what the browser is given, and, once stored, how long it is fresh
    and which requests it answers."""

    status: int
    headers: dict[str, str]
    body: bytes
    received: float = 0.0               # time.time() its headers last came from the origin
    initial_age: float = 0.0            # its age then (§4.2.3)
    lifetime: float = 0.0               # its freshness lifetime (§4.2.1)
    revalidate_each_use: bool = True    # no-cache; and an answer not stored
    variant: tuple[str | None, ...] = ()   # the request's values of the fields Vary names

    def age(self, now: float) -> float:
        """Its current age (§4.2.3): its age when received plus the time since."""
        return self.initial_age + now - self.received

    def fresh(self, now: float) -> bool:
        return not self.revalidate_each_use and self.lifetime > self.age(now)

    def answers(self, request_headers: Mapping[str, str]) -> bool:
        """Whether a request with these headers may be given this answer (§4.1)."""
        return self.variant == rules.request_variant(
            rules.vary_fields(self.headers), request_headers)

    def served(self, now: float) -> "Asset":
        """The stored answer as sent from the cache: with its ``Age`` (§5.1)."""
        return dataclasses.replace(self, headers={**self.headers,
                                                  "age": str(int(self.age(now)))})


def _size(variants: tuple[Asset, ...]) -> int:
    return sum(len(asset.body) + sum(map(len, asset.headers)) +
               sum(map(len, asset.headers.values())) for asset in variants)


async def _timed(fetch: Fetch, conditional: dict[str, str]) -> _Answer:
    request_time = time.time()
    status, headers, body = await fetch(conditional)
    return _Answer(status, headers, body, request_time, time.time())


class AssetCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        # url -> its stored answers, newest first
        self.entries: LRUCache[str, tuple[Asset, ...]] = LRUCache(max_bytes, getsizeof=_size)
        # url -> the fetch pages wait for: its answer if it may be shared, else None
        self.fetching: dict[str, asyncio.Future[Asset | None]] = {}
        self.hits = self.fetches = self.revalidated = 0
        self.counts: Counter[str] = Counter()   # not_stored/<reason>, invalid_lifetime

    async def get(self, url: str, fetch: Fetch,
                  request_headers: Mapping[str, str] | None = None) -> Asset:
        """The answer for ``url`` to a GET with ``request_headers``: stored and fresh,
        or fetched (one fetch for every page asking for it meanwhile), revalidated if a
        stale one is stored."""
        asked = {name.lower(): value for name, value in (request_headers or {}).items()}
        stored = self._stored(url, asked)
        if stored is not None and stored.fresh(time.time()):
            self.hits += 1
            return stored.served(time.time())
        if url in self.fetching:
            shared = await asyncio.shield(self.fetching[url])
            if shared is not None and shared.answers(asked):
                self.hits += 1
                return shared
            asset, _ = await self._fetch(url, fetch, asked, self._stored(url, asked))
            return asset
        return await self._fetch_for_all(url, fetch, asked, stored)

    def _stored(self, url: str, asked: Mapping[str, str]) -> Asset | None:
        """The newest stored answer to ``url`` that answers this request."""
        return next((asset for asset in self.entries.get(url, ()) if asset.answers(asked)),
                    None)

    async def _fetch_for_all(self, url: str, fetch: Fetch, asked: Mapping[str, str],
                             stored: Asset | None) -> Asset:
        """Fetch ``url``, the pages asking for it meanwhile waiting for this fetch."""
        future: asyncio.Future[Asset | None] = asyncio.get_running_loop().create_future()
        self.fetching[url] = future
        try:
            asset, shareable = await self._fetch(url, fetch, asked, stored)
            future.set_result(asset if shareable else None)
            return asset
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()                 # retrieved: no "never retrieved" warning
            raise
        finally:
            del self.fetching[url]

    async def _fetch(self, url: str, fetch: Fetch, asked: Mapping[str, str],
                     stored: Asset | None) -> tuple[Asset, bool]:
        """The answer from the network (a stored one revalidated by a 304, §4.3.4),
        stored if it may be, and whether other requests may be given it."""
        conditional = rules.validators(stored.headers) if stored else {}
        answer = await _timed(fetch, conditional)
        if stored is not None and conditional and answer.status == 304:
            if rules.revalidates(stored.headers, answer.headers):
                self.revalidated += 1
                return self._keep(url, answer._replace(
                    status=stored.status, body=stored.body,
                    headers=rules.updated_headers(stored.headers, answer.headers)),
                    asked, stored)
            answer = await _timed(fetch, {})    # a 304 about another answer: fetch anew
        self.fetches += 1
        return self._keep(url, answer._replace(headers={
            name: value for name, value in answer.headers.items() if name not in _DROPPED}),
            asked, stored)

    def _keep(self, url: str, answer: _Answer, asked: Mapping[str, str],
              replacing: Asset | None) -> tuple[Asset, bool]:
        """``answer`` as an asset, stored in place of ``replacing`` if a shared cache may
        keep it; whether other requests may be given it."""
        asset = Asset(answer.status, answer.headers, answer.body)
        reason = rules.unstorable_reason(answer.status, asked, answer.headers)
        if reason is not None or len(answer.body) > MAX_ENTRY_BYTES:
            self.counts[f"not_stored/{reason or 'size'}"] += 1
            self._store(url, None, replacing)
            return asset, False
        lifetime = rules.freshness_lifetime(answer.headers, answer.status,
                                            answer.response_time)
        if lifetime.source == "invalid":
            self.counts["invalid_lifetime"] += 1
            logger.debug("%s: invalid freshness lifetime in %s", url, answer.headers)
        asset = dataclasses.replace(
            asset, received=answer.response_time, lifetime=lifetime.seconds,
            initial_age=rules.initial_age(answer.headers, answer.request_time,
                                          answer.response_time),
            revalidate_each_use=rules.revalidated_each_use(answer.headers),
            variant=rules.request_variant(rules.vary_fields(answer.headers), asked))
        if asset.fresh(answer.response_time) or rules.validators(answer.headers):
            self._store(url, asset, replacing)
        else:
            self._store(url, None, replacing)
        return asset, True

    def _store(self, url: str, asset: Asset | None, replacing: Asset | None) -> None:
        """Store ``asset`` (if any) as ``url``'s newest answer, in place of ``replacing``
        and of any answer to the same requests; kept even if evicted meanwhile."""
        kept = tuple(old for old in self.entries.get(url, ()) if old is not replacing
                     and (asset is None or old.variant != asset.variant))
        kept = ((asset,) if asset else ()) + kept[:MAX_VARIANTS - 1]
        try:
            if kept:
                self.entries[url] = kept
            else:
                self.entries.pop(url, None)
        except ValueError:                      # larger than the whole cache
            self.entries.pop(url, None)


def lower_headers(headers: Any) -> dict[str, str]:
    """A Playwright answer's headers, names lower-cased."""
    return {name.lower(): value for name, value in dict(headers).items()}
