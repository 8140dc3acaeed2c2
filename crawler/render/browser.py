"""A spider process's browser: Debian's headless Chromium driven by Playwright, within a
budget, given pages as the spider fetched them.

Chromium is ``CRAWLCLUSTER_BROWSER``, else the first of ``BROWSERS`` installed; never a
browser downloaded at run time. ``CRAWLCLUSTER_RENDER_PAGES`` pages render at once; the
browser is started when first needed, and started again after
``CRAWLCLUSTER_BROWSER_RESTART_PAGES`` pages or once its processes hold more than
``CRAWLCLUSTER_BROWSER_MAX_MB`` (measured every ``MEMORY_EVERY`` pages): new pages wait
for the old browser's to finish, so two are never up at once. A browser that crashes,
or hangs past ``CRAWLCLUSTER_RENDER_TIMEOUT``, is discarded and the next page gets a new
one.

A page is given to the browser as fetched, and is done once its load event has fired
and none of its requests has been open for ``QUIET`` s. Its scripts and XHR load, each
through the cluster throttle; its stylesheets, images, fonts and media do not unless the
rule's ``render_load`` names them. What a browser would cache comes from the process's
``AssetCache`` while fresh.
"""

import asyncio
import logging
import os
import time
from collections import Counter
from functools import partial
from typing import Any

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse

from crawler.render.assetcache import AssetCache, lower_headers
from crawler.render.throttle import RenderThrottle, spent
from settings import procfs
from settings.errors import CrawlClusterError

logger = logging.getLogger(__name__)

# what a page loads that the DOM does not need, unless a rule's render_load asks for it
BLOCKED_RESOURCES = ("image", "font", "media", "stylesheet")
# what a browser would keep in its cache (AssetCache), and the cache's size
CACHED_RESOURCES = ("script", "stylesheet", "font", "image", "media")
ASSET_CACHE_BYTES = 64 << 20
MEMORY_EVERY = 10       # pages rendered between two measures of the browser's memory
QUIET = 0.25            # seconds with none of its requests open after which a page is done
CLOSE_WAIT = 5.0        # seconds a replaced browser's processes are given to exit
# Debian's Chromium builds, the lighter first (the headless shell has no window code)
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
# Chromium's own calls home, which a crawler has no use for
BROWSER_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run")


class Browser:
    def __init__(self, crawler: Crawler, throttle: RenderThrottle) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats: Any = crawler.stats
        self.throttle = throttle
        self.executable = settings.get("CRAWLCLUSTER_BROWSER")
        self.timeout = settings.getfloat("CRAWLCLUSTER_RENDER_TIMEOUT")
        self.restart_after = settings.getint("CRAWLCLUSTER_BROWSER_RESTART_PAGES")
        self.memory_bound = settings.getfloat("CRAWLCLUSTER_BROWSER_MAX_MB")
        self.over_bound = False                # the browser's memory, as last measured
        self.slots = asyncio.Semaphore(settings.getint("CRAWLCLUSTER_RENDER_PAGES"))
        self.playwright: Any = None
        self.browser: Any = None
        self.pages_in_browser = 0
        self.rendering: Counter[Any] = Counter()   # browser -> pages rendering in it now
        self.starting = asyncio.Lock()             # one browser started at a time
        self.assets = AssetCache(ASSET_CACHE_BYTES)   # outlives browsers: a browser's cache

    async def render(self, request: Request, document: HtmlResponse,
                     load: tuple[str, ...] = ()) -> HtmlResponse:
        """``document`` (the page as fetched) as the browser leaves it, once a render
        slot is free; ``load``: what the rule's ``render_load`` lets load."""
        asked = time.monotonic()
        async with self.slots:
            spent(self.crawler, "slot", asked)
            started = time.monotonic()
            try:
                return await asyncio.wait_for(self._render(request, document, load),
                                              self.timeout)
            finally:
                spent(self.crawler, "browser", started)

    async def _render(self, request: Request, document: HtmlResponse,
                      load: tuple[str, ...]) -> HtmlResponse:
        """The page loaded in the browser, done once none of its requests has been open
        for ``QUIET`` s after its load event."""
        browser = await self._browser()
        url = document.url
        traffic = _Traffic()
        self.rendering[browser] += 1
        try:
            page = await browser.new_page(user_agent=_text(request.headers.get("User-Agent")))
            try:
                traffic.watch(page)
                blocked = set(BLOCKED_RESOURCES) - set(load)
                await page.route("**/*", partial(self._route, url, document, blocked))
                reply = await page.goto(url, wait_until="load")
                loaded = time.monotonic()
                await traffic.settled(QUIET)
                spent(self.crawler, "quiet", loaded)
                body = await page.content()
                url = page.url                  # where the browser's redirects led
            finally:
                await page.close()
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError) or not browser.is_connected():
                await self._discard(browser)    # hung past the render timeout, or crashed
            raise
        finally:
            self._page_done(browser)
        self.pages_in_browser += 1
        if self.memory_bound and self.pages_in_browser % MEMORY_EVERY == 0:
            self.over_bound = browser_memory_mb(os.getpid()) > self.memory_bound
        self.stats.inc_value("crawlcluster/render/pages")
        return HtmlResponse(url, status=reply.status if reply else 200,
                            body=body.encode("utf-8"), encoding="utf-8", request=request,
                            flags=["rendered"])

    async def _route(self, url: str, document: HtmlResponse, blocked: set[str],
                     route: Any) -> None:
        """Each request the page makes: of a ``blocked`` type refused; the page itself
        from ``document``; what a browser caches from the asset cache; the rest once the
        cluster throttle of its domain lets it go (the page's own request went through
        it as the page's task)."""
        asked = route.request
        if asked.resource_type in blocked:
            await route.abort()
        elif asked.url == url and asked.is_navigation_request():
            await route.fulfill(status=document.status, body=document.body, headers={
                "content-type": _text(document.headers.get("Content-Type")) or "text/html"})
        elif asked.method == "GET" and asked.resource_type in CACHED_RESOURCES:
            await self._from_cache(route)
        elif await self.throttle.let_go(asked.url):
            self.stats.inc_value("crawlcluster/render/requests")
            await route.continue_()
        else:
            self._refused()
            await route.abort("blockedbyclient")

    async def _from_cache(self, route: Any) -> None:
        """A script (or what ``render_load`` asks for) from the process's asset cache,
        fetched through the throttle when it is not there or no longer fresh."""
        try:
            asset = await self.assets.get(route.request.url, partial(self._fetch_asset, route),
                                          route.request.headers)
        except _Refused:
            await route.abort("blockedbyclient")
            return
        except Exception as exc:  # noqa: BLE001 - the browser sees a failed load, as it would
            logger.info("loading %s for a render failed: %s", route.request.url, exc)
            await route.abort("failed")
            return
        self.stats.set_value("crawlcluster/render/asset_cache_hits", self.assets.hits)
        await route.fulfill(status=asset.status, headers=asset.headers, body=asset.body)

    async def _fetch_asset(self, route: Any,
                           conditional: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if not await self.throttle.let_go(route.request.url):
            self._refused()
            raise _Refused
        self.stats.inc_value("crawlcluster/render/requests")
        answer = await route.fetch(headers={**route.request.headers, **conditional})
        return answer.status, lower_headers(answer.headers), await answer.body()

    def _refused(self) -> None:
        self.stats.inc_value("crawlcluster/render/requests_refused")

    async def _browser(self) -> Any:
        """The browser, started if there is none. Once it has rendered its share, or
        holds more memory than its bound, new pages wait for its pages to be done, then
        it is closed and a new one started (one browser at a time: the budget holds)."""
        async with self.starting:
            return await self._current_browser()

    async def _current_browser(self) -> Any:
        worn = self.pages_in_browser >= self.restart_after or self.over_bound
        if self.browser is not None and (worn or not self.browser.is_connected()):
            old, self.browser = self.browser, None
            while self.rendering[old] and old.is_connected():
                await asyncio.sleep(0.05)
            await _close(old)
            await _exited(CLOSE_WAIT)
        if self.browser is None:
            try:
                from playwright.async_api import async_playwright
            except ImportError:
                raise CrawlClusterError("a rule with render needs Playwright: pip install "
                                        "'crawlcluster[render]'") from None
            executable = browser_path(self.executable)
            if self.playwright is None:
                self.playwright = await async_playwright().start()
            self.browser = await self.playwright.chromium.launch(
                executable_path=executable, args=list(BROWSER_ARGS))
            self.pages_in_browser, self.over_bound = 0, False
            self.stats.inc_value("crawlcluster/render/browsers")
        return self.browser

    def _page_done(self, browser: Any) -> None:
        self.rendering[browser] -= 1
        if self.rendering[browser] <= 0:
            del self.rendering[browser]

    async def _discard(self, browser: Any) -> None:
        """Close ``browser``; the next page gets a new one if it was the current one."""
        if browser is self.browser:
            self.browser = None
        await _close(browser)

    async def close(self) -> None:
        if self.browser is not None:
            await self._discard(self.browser)
        if self.playwright is not None:
            await self.playwright.stop()
            self.playwright = None


async def _exited(timeout: float) -> None:
    """Until the closed browser's processes have exited (a closed browser's processes
    take a moment to go, longer on a loaded machine), ``timeout`` s at most: the next one
    starts once they are gone, so two browsers never hold memory at once."""
    deadline = time.monotonic() + timeout
    while browser_processes(os.getpid()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


async def _close(browser: Any) -> None:
    try:
        await browser.close()
    except Exception as exc:  # noqa: BLE001 - a dead browser's close fails too
        logger.warning("closing the browser failed: %s", exc)


def browser_path(setting: str) -> str:
    """The Chromium to run: ``CRAWLCLUSTER_BROWSER`` if set, else the first of
    ``BROWSERS`` installed."""
    for path in [setting] if setting else BROWSERS:
        if os.path.exists(path):
            return path
    raise CrawlClusterError(
        f"a rule with render needs Chromium at {setting or ' or '.join(BROWSERS)} "
        "(CRAWLCLUSTER_BROWSER): apt install chromium-headless-shell")


def browser_processes(pid: int) -> list[int]:
    """The Chromium processes below process ``pid`` (its browsers')."""
    return [child for child in procfs.descendants(pid)
            if b"chrom" in procfs.command_line(child)]


def browser_memory_mb(pid: int) -> float:
    """The memory (MB, proportional set size) of the browsers below process ``pid``."""
    return procfs.proportional_mb(browser_processes(pid))


class _Refused(Exception):
    """The throttle refused a browser's request (its domain is blacklisted)."""


class _Traffic:
    """A page's requests open now, and when that last changed."""

    def __init__(self) -> None:
        self.open = 0
        self.changed = time.monotonic()

    def watch(self, page: Any) -> None:
        page.on("request", self._started)
        page.on("requestfinished", self._ended)
        page.on("requestfailed", self._ended)

    async def settled(self, quiet: float) -> None:
        while self.open > 0 or time.monotonic() - self.changed < quiet:
            await asyncio.sleep(quiet / 5)

    def _started(self, _request: Any) -> None:
        self.open += 1
        self.changed = time.monotonic()

    def _ended(self, _request: Any) -> None:
        self.open = max(self.open - 1, 0)
        self.changed = time.monotonic()


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value else None
