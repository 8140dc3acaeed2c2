"""A spider process's browser: Debian's headless Chromium driven by Playwright, within a
budget, given pages as the spider fetched them, never reaching the network itself.

Chromium is ``CRAWLCLUSTER_BROWSER``, else the first of ``BROWSERS`` installed; never a
browser downloaded at run time. ``CRAWLCLUSTER_RENDER_PAGES`` pages render at once; the
browser is started when first needed, and started again after
``CRAWLCLUSTER_BROWSER_RESTART_PAGES`` pages or once its processes hold more than
``CRAWLCLUSTER_BROWSER_MAX_MB`` (measured every ``MEMORY_EVERY`` pages): new pages wait
for the old browser's to finish, so two are never up at once.

A hostile page costs one page: its quiet wait ends at ``CRAWLCLUSTER_RENDER_QUIET_MAX``
(the page is taken as it is then, counted), and a page still rendering at
``CRAWLCLUSTER_RENDER_TIMEOUT`` is closed, that page alone. The browser is replaced only
once ``CRAWLCLUSTER_BROWSER_MAX_FAILURES`` renders in a row have failed, or when it died.

A page is given to the browser as fetched, and is done once its load event has fired
and none of its requests has been open for ``QUIET`` s. Every request it makes is
answered by ``PageRequests`` (page_requests.py): from the document, the asset cache, or
fetched through the cluster's URL guard and throttle; Chromium's own resolver knows no
name (``--host-resolver-rules``), so nothing that escapes routing can connect. Chromium's
sandbox is on unless the process runs as root (``launch_args``).
"""

import asyncio
import logging
import os
import time
from collections import Counter
from functools import cache
from typing import Any

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse
from scrapy.utils.httpobj import urlparse_cached

from crawler.render.page_requests import PageRequests
from crawler.render.siteslots import SiteSlots
from crawler.render.throttle import RenderThrottle, spent
from settings import procfs
from settings.errors import CrawlClusterError

logger = logging.getLogger(__name__)

MEMORY_EVERY = 10       # pages rendered between two measures of the browser's memory
QUIET = 0.25            # seconds with none of its requests open after which a page is done
CLOSE_WAIT = 5.0        # seconds a replaced browser's processes (or a page) get to close
# Debian's Chromium builds, the lighter first (the headless shell has no window code)
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
# Chromium's own calls home, which a crawler has no use for; and no name resolves in
# Chromium (its requests are answered by PageRequests; one that escaped routing, a
# WebSocket, a prefetch or a service worker's, fails to resolve instead of connecting,
# an address literal too: the rules map every host)
BROWSER_ARGS = ("--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                "--host-resolver-rules=MAP * ~NOTFOUND",
                "--force-webrtc-ip-handling-policy=disable_non_proxied_udp")


class Browser:
    def __init__(self, crawler: Crawler, throttle: RenderThrottle) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.stats: Any = crawler.stats
        self.executable = settings.get("CRAWLCLUSTER_BROWSER")
        self.timeout = settings.getfloat("CRAWLCLUSTER_RENDER_TIMEOUT")
        self.quiet_max = settings.getfloat("CRAWLCLUSTER_RENDER_QUIET_MAX")
        self.restart_after = settings.getint("CRAWLCLUSTER_BROWSER_RESTART_PAGES")
        self.memory_bound = settings.getfloat("CRAWLCLUSTER_BROWSER_MAX_MB")
        self.max_failures = settings.getint("CRAWLCLUSTER_BROWSER_MAX_FAILURES")
        self.over_bound = False                # the browser's memory, as last measured
        self.failures = 0                      # renders failed in a row in this browser
        self.slots = SiteSlots(settings.getint("CRAWLCLUSTER_RENDER_PAGES"))
        self.playwright: Any = None
        self.browser: Any = None
        self.pages_in_browser = 0
        self.rendering: Counter[Any] = Counter()   # browser -> pages rendering in it now
        self.starting = asyncio.Lock()             # one browser started at a time
        self.requests = PageRequests(crawler, throttle)

    async def render(self, request: Request, document: HtmlResponse,
                     load: tuple[str, ...] = ()) -> HtmlResponse:
        """``document`` (the page as fetched) as the browser leaves it, once a render
        slot is free; ``load``: what the rule's ``render_load`` lets load. Raises
        ``RenderTimeout`` past ``CRAWLCLUSTER_RENDER_TIMEOUT`` (the page is closed)."""
        asked = time.monotonic()
        async with self.slots.held(urlparse_cached(request).hostname or ""):
            spent(self.crawler, "slot", asked)
            started = time.monotonic()
            browser = await self._browser()
            spent(self.crawler, "start", started)
            started = time.monotonic()
            self.rendering[browser] += 1
            try:
                async with asyncio.timeout(self.timeout):
                    rendered = await self._render(browser, request, document, load)
            except TimeoutError:
                self.stats.inc_value("crawlcluster/render/timeouts")
                self._failed(browser)
                raise RenderTimeout(f"still rendering after {self.timeout:g} s "
                                    "(CRAWLCLUSTER_RENDER_TIMEOUT); the page was closed") from None
            except Exception:
                self._failed(browser)
                raise
            finally:
                self._page_done(browser)
                spent(self.crawler, "browser", started)
        self._rendered(browser)
        return rendered

    async def _render(self, browser: Any, request: Request, document: HtmlResponse,
                      load: tuple[str, ...]) -> HtmlResponse:
        """The page loaded in a page of its own, done once none of its requests has been
        open for ``QUIET`` s after its load event (``quiet_max`` s at most)."""
        page = await browser.new_page(user_agent=_text(request.headers.get("User-Agent")),
                                      service_workers="block")
        try:
            traffic = _Traffic()
            traffic.watch(page)
            await self.requests.route(page, document, load)
            reply = await page.goto(document.url, wait_until="load")
            loaded = time.monotonic()
            if not await traffic.settled(QUIET, self.quiet_max):
                self.stats.inc_value("crawlcluster/render/quiet_capped")
            spent(self.crawler, "quiet", loaded)
            body = await page.content()
            url = page.url                      # where the browser's redirects led
        finally:
            await _close_page(page)
        return HtmlResponse(url, status=reply.status if reply else 200,
                            body=body.encode("utf-8"), encoding="utf-8", request=request,
                            flags=["rendered"])

    def _rendered(self, browser: Any) -> None:
        self.failures = 0
        self.pages_in_browser += 1
        if self.memory_bound and self.pages_in_browser % MEMORY_EVERY == 0:
            self.over_bound = browser_memory_mb(os.getpid()) > self.memory_bound
        self.stats.inc_value("crawlcluster/render/pages")

    def _failed(self, browser: Any) -> None:
        """A render failed in ``browser``: one more in a row (one that died is replaced
        by the next page's ``_browser`` at once)."""
        if browser is self.browser and browser.is_connected():
            self.failures += 1

    async def _browser(self) -> Any:
        """The browser, started if there is none. Once it has rendered its share, holds
        more memory than its bound, or failed ``max_failures`` renders in a row, new
        pages wait for its pages to be done, then it is closed and a new one started
        (one browser at a time: the budget holds). One that died is replaced at once."""
        async with self.starting:
            if self.browser is not None and (reason := self._replace_because()):
                self.stats.inc_value(f"crawlcluster/render/browsers_replaced/{reason}")
                logger.info("replacing the browser: %s", reason)
                old, self.browser = self.browser, None
                while self.rendering[old] and old.is_connected():
                    await asyncio.sleep(0.05)
                await _close(old)
                await _exited(CLOSE_WAIT)
            if self.browser is None:
                self.browser = await self._launch()
            return self.browser

    def _replace_because(self) -> str:
        """Why the current browser is to be replaced ("" if it is not)."""
        if not self.browser.is_connected():
            return "died"
        if self.failures >= self.max_failures:
            return "failures"
        if self.over_bound:
            return "memory"
        return "worn" if self.pages_in_browser >= self.restart_after else ""

    async def _launch(self) -> Any:
        try:
            from playwright.async_api import async_playwright
        except ImportError:
            raise CrawlClusterError("a rule with render needs Playwright: pip install "
                                    "'crawlcluster[render]'") from None
        executable = browser_path(self.executable)
        if self.playwright is None:
            self.playwright = await async_playwright().start()
        args, sandbox = launch_args(os.geteuid())
        browser = await self.playwright.chromium.launch(
            executable_path=executable, args=list(args), chromium_sandbox=sandbox)
        self.pages_in_browser, self.over_bound, self.failures = 0, False, 0
        self.stats.inc_value("crawlcluster/render/browsers")
        return browser

    def _page_done(self, browser: Any) -> None:
        self.rendering[browser] -= 1
        if self.rendering[browser] <= 0:
            del self.rendering[browser]

    async def close(self) -> None:
        if self.browser is not None:
            browser, self.browser = self.browser, None
            await _close(browser)
        if self.playwright is not None:
            await self.playwright.stop()
            self.playwright = None
        self.requests.close()


class RenderTimeout(CrawlClusterError):
    """A page still rendering at ``CRAWLCLUSTER_RENDER_TIMEOUT``: it was closed."""


def launch_args(euid: int) -> tuple[tuple[str, ...], bool]:
    """Chromium's arguments and whether its sandbox is on: on, unless the process runs as
    root (Chromium's sandbox refuses to start as root), where ``--no-sandbox`` is added
    and a warning logged once."""
    if euid != 0:
        return BROWSER_ARGS, True
    _warn_no_sandbox()
    return (*BROWSER_ARGS, "--no-sandbox"), False


@cache
def _warn_no_sandbox() -> None:
    logger.warning("running as root: Chromium renders pages without its sandbox "
                   "(--no-sandbox); run the crawler as a user other than root to keep "
                   "it on (docs/security.md)")


async def _close_page(page: Any) -> None:
    """Close a page, ``CLOSE_WAIT`` s at most (a page stuck in a script closes as well: its
    renderer is ended; a browser that cannot is counted as failing)."""
    try:
        async with asyncio.timeout(CLOSE_WAIT):
            await page.close(run_before_unload=False)
    except Exception as exc:  # noqa: BLE001 - a closed browser's pages fail to close too
        logger.info("closing a rendered page failed: %s: %s", type(exc).__name__, exc)


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


class _Traffic:
    """A page's requests open now, and when that last changed."""

    def __init__(self) -> None:
        self.open = 0
        self.changed = time.monotonic()

    def watch(self, page: Any) -> None:
        page.on("request", self._started)
        page.on("requestfinished", self._ended)
        page.on("requestfailed", self._ended)

    async def settled(self, quiet: float, most: float) -> bool:
        """Until none has been open for ``quiet`` s: True; False once ``most`` s have
        passed first (server-sent events, long polling, a poller never go quiet)."""
        deadline = time.monotonic() + most
        while self.open > 0 or time.monotonic() - self.changed < quiet:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(quiet / 5)
        return True

    def _started(self, _request: Any) -> None:
        self.open += 1
        self.changed = time.monotonic()

    def _ended(self, _request: Any) -> None:
        self.open = max(self.open - 1, 0)
        self.changed = time.monotonic()


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value else None
