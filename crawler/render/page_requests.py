"""Every request of a page the browser renders, answered here: none reaches the network
from the browser itself.

- a kind the rule does not load (``BLOCKED_RESOURCES`` less its ``render_load``): refused;
- the page itself (its first navigation): the document as the spider fetched it
  (through the throttle, as its task);
- what a browser caches (a GET of one of ``CACHED_RESOURCES``): the process's
  ``AssetCache``, fetched as below when missing or stale;
- the rest (XHR, fetch, iframes, forms, navigations, beacons): fetched as below,
  ``PAGE_FETCHES`` of a page at once (a page that asks for thousands keeps the fetch
  threads from other pages no longer than its own render);
- a WebSocket, or a stream of server-sent events: refused (a rendered page is a
  snapshot; a stream would hold a fetch for as long as the server keeps it open).

Fetched means: through the cluster's URL guard (crawler/urlguard.py: http and https only,
the address connected to checked, so a rebinding name cannot pass) and the cluster
throttle of the URL's domain, one hop at a time: a redirect is followed here, its next
hop checked and throttled as the first was, and the last answer given to the browser.
"""

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urljoin

from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse

from crawler.context import cluster_settings
from crawler.render.assetcache import AssetCache
from crawler.render.throttle import RenderThrottle
from crawler.urlguard import RefusedUrl, UrlGuard

logger = logging.getLogger(__name__)

# what a page loads that the DOM does not need, unless a rule's render_load asks for it
BLOCKED_RESOURCES = ("image", "font", "media", "stylesheet")
# what a browser would keep in its cache (AssetCache), and the cache's size
CACHED_RESOURCES = ("script", "stylesheet", "font", "image", "media")
ASSET_CACHE_BYTES = 64 << 20
MAX_REDIRECTS = 10          # hops a request's redirects are followed (Chromium's: 20)
MAX_ANSWER_BYTES = 16 << 20   # an answer's body past this is refused
FETCH_TIMEOUT = 20.0        # seconds a hop's connection may wait for a byte
# a page's fetches at once (Chromium's connections to a host); the process's fetch threads
# (the guard's fetch blocks) are this times CRAWLCLUSTER_RENDER_PAGES
PAGE_FETCHES = 6
REDIRECTS = (301, 302, 303, 307, 308)
# headers the browser gives that describe its own connection, not the request
_CONNECTION_HEADERS = {"host", "connection", "content-length", "accept-encoding",
                       "transfer-encoding", "keep-alive", "upgrade", "proxy-connection"}
# a repeated header's values joined with this (Set-Cookie's values are lines)
_JOINED = {"set-cookie": "\n"}
# headers of an answer that describe the bytes on the wire, not the body given
_WIRE_HEADERS = {"content-encoding", "content-length", "transfer-encoding", "connection"}


@dataclass
class Answer:
    status: int
    headers: dict[str, str]        # names lower-cased
    body: bytes


class Refused(Exception):
    """A request of the page refused: ``reason`` is the counted cause."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PageRequests:
    def __init__(self, crawler: Crawler, throttle: RenderThrottle) -> None:
        self.stats: Any = crawler.stats
        self.throttle = throttle
        self.timeout = crawler.settings.getfloat("CRAWLCLUSTER_RENDER_TIMEOUT")
        self.assets = AssetCache(ASSET_CACHE_BYTES)   # outlives browsers: a browser's cache
        pages = crawler.settings.getint("CRAWLCLUSTER_RENDER_PAGES")
        self.threads = ThreadPoolExecutor(PAGE_FETCHES * pages, thread_name_prefix="render-fetch")
        self.guard = UrlGuard.from_settings(cluster_settings(crawler.settings))

    async def route(self, page: Any, document: HtmlResponse, load: tuple[str, ...]) -> None:
        """Answer every request ``page`` makes from here (before it loads anything)."""
        blocked = set(BLOCKED_RESOURCES) - set(load)
        fetches = _PageFetches(asyncio.Semaphore(PAGE_FETCHES))
        page.on("close", fetches.page_closed)
        await page.route("**/*", partial(self._answer, document, blocked, fetches))
        await page.route_web_socket("**/*", self._refuse_web_socket)

    async def _answer(self, document: HtmlResponse, blocked: set[str],
                      fetches: "_PageFetches", route: Any) -> None:
        asked = route.request
        try:
            if asked.resource_type in blocked:
                await route.abort()
            elif asked.is_navigation_request() and not fetches.document_given:
                fetches.document_given = True   # the page's first: goto(document.url)
                await route.fulfill(status=document.status, body=document.body, headers={
                    "content-type": _text(document.headers.get("Content-Type"))
                    or "text/html"})
            elif asked.resource_type == "eventsource":
                raise Refused("eventsource", f"{asked.url}: a stream of server-sent events")
            else:
                async with fetches.slots:
                    if fetches.closed:          # its page was done while it waited
                        await _quietly(route.abort())
                        return
                    await self._fulfill(route, await self._fetched_or_cached(asked))
        except Refused as refused:
            self.stats.inc_value("crawlcluster/render/requests_refused")
            self.stats.inc_value(f"crawlcluster/render/requests_refused/{refused.reason}")
            logger.debug("a rendered page's request refused: %s", refused)
            await _quietly(route.abort("blockedbyclient"))
        except Exception as exc:  # noqa: BLE001 - the browser sees a failed load, as it would
            logger.info("loading %s for a render failed: %s: %s", asked.url,
                        type(exc).__name__, exc)
            await _quietly(route.abort("failed"))

    async def _refuse_web_socket(self, socket: Any) -> None:
        self.stats.inc_value("crawlcluster/render/requests_refused")
        self.stats.inc_value("crawlcluster/render/requests_refused/websocket")
        await _quietly(socket.close(code=1008, reason="refused by the crawler"))

    async def _fetched_or_cached(self, asked: Any) -> Answer:
        if asked.method == "GET" and asked.resource_type in CACHED_RESOURCES:
            return await self._cached(asked)
        return await self._fetched(asked)

    async def _cached(self, asked: Any) -> Answer:
        headers = await asked.all_headers()

        async def fetch(conditional: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
            answer = await self.fetch("GET", asked.url, {**headers, **conditional}, None)
            return answer.status, answer.headers, answer.body

        asset = await self.assets.get(asked.url, fetch, headers)
        self.stats.set_value("crawlcluster/render/asset_cache_hits", self.assets.hits)
        return Answer(asset.status, asset.headers, asset.body)

    async def _fetched(self, asked: Any) -> Answer:
        return await self.fetch(asked.method, asked.url, await asked.all_headers(),
                                asked.post_data_buffer)

    async def fetch(self, method: str, url: str, headers: dict[str, str],
                    body: bytes | None) -> Answer:
        """``url`` fetched through the guard and the throttle, its redirects followed one
        hop at a time, each hop checked and throttled; ``Refused`` if one is refused."""
        headers = {name: value for name, value in headers.items()
                   if name.lower() not in _CONNECTION_HEADERS}
        for _ in range(MAX_REDIRECTS + 1):
            answer = await self._hop(method, url, headers, body)
            location = answer.headers.get("location")
            if answer.status not in REDIRECTS or not location:
                return answer
            url = urljoin(url, location)
            if answer.status == 303 or (answer.status in (301, 302) and method == "POST"):
                method, body = ("HEAD" if method == "HEAD" else "GET"), None
        raise Refused("redirects", f"{url}: more than {MAX_REDIRECTS} redirects")

    async def _hop(self, method: str, url: str, headers: dict[str, str],
                   body: bytes | None) -> Answer:
        """One request, no redirect followed: guard-checked, then throttled, then sent."""
        try:
            self.guard.check_url(url)           # at once; the address when connecting
        except RefusedUrl as refused:
            raise Refused("guard", str(refused)) from None
        if not await self.throttle.admitted(url):
            raise Refused("blacklist", f"{url}: its domain is blacklisted")
        self.stats.inc_value("crawlcluster/render/requests")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.threads, partial(self._send, method, url, headers, body))

    def _send(self, method: str, url: str, headers: dict[str, str],
              body: bytes | None) -> Answer:
        """(In a thread) one hop through the guard's fetch, which connects only to an
        address it checked (and asks for the body unencoded)."""
        try:
            reply = self.guard.fetch(url, headers, method=method, body=body,
                                     max_bytes=MAX_ANSWER_BYTES,
                                     timeout=min(self.timeout, FETCH_TIMEOUT))
        except RefusedUrl as refused:
            raise Refused("guard", str(refused)) from None
        return Answer(reply.status, joined_headers(reply.headers), reply.body)

    async def _fulfill(self, route: Any, answer: Answer) -> None:
        await route.fulfill(status=answer.status, body=answer.body, headers={
            name: value for name, value in answer.headers.items()
            if name not in _WIRE_HEADERS})

    def close(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)


def joined_headers(headers: list[tuple[str, str]]) -> dict[str, str]:
    """Headers as a browser is given them: names lower-cased, a repeated one's values
    joined (Set-Cookie's a line each)."""
    joined: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        joined[key] = f"{joined[key]}{_JOINED.get(key, ', ')}{value}" if key in joined else value
    return joined


@dataclass
class _PageFetches:
    """A page's fetches: ``PAGE_FETCHES`` at once (as Chromium's connections to a host);
    those still waiting when the page is closed are dropped."""

    slots: asyncio.Semaphore
    closed: bool = False
    document_given: bool = False        # its first navigation answered with the document

    def page_closed(self, _page: Any) -> None:
        self.closed = True


async def _quietly(action: Any) -> None:
    """A route's answer to a page that may have closed meanwhile."""
    try:
        await action
    except Exception as exc:  # noqa: BLE001 - the page is gone: nothing to answer
        logger.debug("answering a closed page's request: %s", exc)


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value else None


