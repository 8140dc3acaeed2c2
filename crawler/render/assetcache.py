"""A rendering browser's HTTP cache: the scripts (and what a rule's ``render_load`` asks
for) a site's pages share, fetched once and reused as a browser reuses them.

Playwright turns Chromium's own cache off once requests are routed, and each page
renders in a fresh context, so without this every render fetches a site's shared
scripts again. ``AssetCache`` keeps what RFC 9111 lets a private cache keep: a 200
answer to a GET not marked ``no-store``, fresh for its ``max-age``, else until its
``Expires``, else for a tenth of its age since ``Last-Modified`` (the heuristic
browsers use). A stale entry with an ``ETag`` or ``Last-Modified`` is revalidated with a
conditional request; a 304 makes it fresh again. Pages rendering at once that ask for
the same asset wait for one fetch. Entries are evicted least recently used past
``max_bytes``.
"""

import asyncio
import email.utils
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

HEURISTIC_SHARE = 0.1          # of the time since Last-Modified, as browsers do
HEURISTIC_MAX = 86400.0        # a day at most
MAX_ENTRY_BYTES = 4 << 20      # bigger answers are passed through, not kept
# headers of a stored answer that do not describe the body given to the browser (its
# body is stored decompressed)
_DROPPED = {"content-encoding", "content-length", "transfer-encoding", "connection"}


@dataclass
class Asset:
    """A stored answer: what the browser is given, and until when it is fresh."""

    status: int
    headers: dict[str, str]
    body: bytes
    fresh_until: float = 0.0                    # time.time()
    validators: dict[str, str] = field(default_factory=dict)   # conditional headers

    def fresh(self, now: float) -> bool:
        return now < self.fresh_until


def _directives(headers: dict[str, str]) -> dict[str, str]:
    directives = {}
    for part in headers.get("cache-control", "").split(","):
        name, _, value = part.strip().partition("=")
        if name:
            directives[name.lower()] = value.strip('"')
    return directives


def _date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def freshness(headers: dict[str, str], now: float) -> float | None:
    """Seconds an answer with these (lower-cased) headers stays fresh; None if it may not
    be stored. ``no-cache`` stores it stale: it is revalidated before each use."""
    directives = _directives(headers)
    if "no-store" in directives:
        return None
    if "no-cache" in directives:
        return 0.0
    if "max-age" in directives:
        try:
            return max(float(directives["max-age"]), 0.0)
        except ValueError:
            return 0.0
    date = _date(headers.get("date")) or now
    if "expires" in headers:
        expires = _date(headers["expires"])
        return max(expires - date, 0.0) if expires is not None else 0.0
    modified = _date(headers.get("last-modified"))
    if modified is not None:
        return min(max(date - modified, 0.0) * HEURISTIC_SHARE, HEURISTIC_MAX)
    return 0.0


def validators(headers: dict[str, str]) -> dict[str, str]:
    """The conditional request headers that revalidate an answer with these headers."""
    found = {}
    if "etag" in headers:
        found["if-none-match"] = headers["etag"]
    if "last-modified" in headers:
        found["if-modified-since"] = headers["last-modified"]
    return found


# fetch(conditional headers) -> (status, lower-cased headers, body), from the network
Fetch = Callable[[dict[str, str]], Awaitable[tuple[int, dict[str, str], bytes]]]


class AssetCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[str, Asset] = OrderedDict()
        self.size = 0
        self.fetching: dict[str, asyncio.Future[Asset]] = {}
        self.hits = self.fetches = self.revalidated = 0

    async def get(self, url: str, fetch: Fetch) -> Asset:
        """The answer for ``url``: stored and fresh, or fetched (one fetch for every page
        asking for it meanwhile), revalidated if a stale one is stored."""
        now = time.time()
        entry = self.entries.get(url)
        if entry is not None and entry.fresh(now):
            self.entries.move_to_end(url)
            self.hits += 1
            return entry
        if url in self.fetching:
            self.hits += 1
            return await asyncio.shield(self.fetching[url])
        future: asyncio.Future[Asset] = asyncio.get_running_loop().create_future()
        self.fetching[url] = future
        try:
            entry = await self._fetch(url, fetch, entry)
            future.set_result(entry)
            return entry
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()                 # retrieved: no "never retrieved" warning
            raise
        finally:
            del self.fetching[url]

    async def _fetch(self, url: str, fetch: Fetch, stale: Asset | None) -> Asset:
        status, headers, body = await fetch(stale.validators if stale else {})
        now = time.time()
        if status == 304 and stale is not None:
            self.revalidated += 1
            lifetime = freshness({**stale.headers, **headers}, now)
            stale.fresh_until = now + (lifetime or 0.0)
            self.entries.move_to_end(url)
            return stale
        self.fetches += 1
        asset = Asset(status, {name: value for name, value in headers.items()
                               if name not in _DROPPED}, body)
        lifetime = freshness(headers, now) if status == 200 else None
        keep = lifetime is not None and (lifetime > 0 or validators(headers))
        if keep and len(body) <= MAX_ENTRY_BYTES:
            asset.fresh_until, asset.validators = now + (lifetime or 0.0), validators(headers)
            self._store(url, asset)
        return asset

    def _store(self, url: str, asset: Asset) -> None:
        old = self.entries.pop(url, None)
        if old is not None:
            self.size -= len(old.body)
        self.entries[url] = asset
        self.size += len(asset.body)
        while self.size > self.max_bytes and self.entries:
            _, evicted = self.entries.popitem(last=False)
            self.size -= len(evicted.body)


def lower_headers(headers: Any) -> dict[str, str]:
    """A Playwright answer's headers, names lower-cased."""
    return {name.lower(): value for name, value in dict(headers).items()}
