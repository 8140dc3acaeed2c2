"""Pages built by JavaScript, rendered in the system's Chromium (a crawl rule's ``render``).

A rule's ``render`` is ``never`` (the default: the HTML the server sends) or ``always``:
then each page of the crawl is loaded in a headless Chromium (Debian's ``chromium``,
``CRAWLCLUSTER_BROWSER``; never a browser downloaded at run time) driven by Playwright,
and the spider reads the document as the page's scripts left it. ``BrowserRender`` is a
downloader middleware late in the chain: robots.txt, the proxy and the user agent have
had their say, and every middleware's ``process_response`` sees the rendered page as it
would a fetched one. The browser loads the page's scripts, styles and XHR, not its
images, fonts or media. A node renders ``CRAWLCLUSTER_RENDER_PAGES`` pages at once per
spider process; its browser is started when first needed and started again after
``CRAWLCLUSTER_BROWSER_RESTART_PAGES`` pages (a long-lived browser grows). A browser
that crashes or does not answer within ``CRAWLCLUSTER_RENDER_TIMEOUT`` fails the page's
download, which the cluster retries like any failed download, and the next page gets a
new browser.
"""

import asyncio
import logging
import os
from typing import Any

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse
from scrapy.utils.defer import deferred_from_coro

from settings.errors import CrawlClusterError

logger = logging.getLogger(__name__)

RENDER_MODES = ("never", "always")
BLOCKED_RESOURCES = ("image", "font", "media")


def render_mode(config: dict[str, Any]) -> str:
    """A crawl's ``render`` (its rule's; ``never`` if it says none)."""
    return str((config.get("rule") or {}).get("render", "never"))


class BrowserRender:
    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        self.executable = settings.get("CRAWLCLUSTER_BROWSER")
        self.timeout = settings.getfloat("CRAWLCLUSTER_RENDER_TIMEOUT")
        self.restart_after = settings.getint("CRAWLCLUSTER_BROWSER_RESTART_PAGES")
        self.slots = asyncio.Semaphore(settings.getint("CRAWLCLUSTER_RENDER_PAGES"))
        self.playwright: Any = None
        self.browser: Any = None
        self.pages_in_browser = 0
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "BrowserRender":
        return cls(crawler)

    async def process_request(self, request: Request) -> HtmlResponse | None:
        info = request.meta.get("crawlcluster")
        if not info or render_mode(info["config"]) != "always":
            return None
        async with self.slots:
            try:
                return await asyncio.wait_for(self._render(request), self.timeout)
            except Exception:
                await self._discard_browser()       # crashed or hung: a new one next page
                raise

    async def _render(self, request: Request) -> HtmlResponse:
        browser = await self._browser()
        page = await browser.new_page(user_agent=_text(request.headers.get("User-Agent")))
        try:
            await page.route("**/*", _load_unless_blocked)
            reply = await page.goto(request.url, wait_until="networkidle")
            body = await page.content()
        finally:
            await page.close()
        self.pages_in_browser += 1
        self.crawler.stats.inc_value("crawlcluster/render/pages")
        return HtmlResponse(request.url, status=reply.status if reply else 200,
                            body=body.encode("utf-8"), encoding="utf-8", request=request,
                            flags=["rendered"])

    async def _browser(self) -> Any:
        if self.browser is not None and (not self.browser.is_connected()
                                         or self.pages_in_browser >= self.restart_after):
            await self._discard_browser()
        if self.browser is None:
            try:
                from playwright.async_api import async_playwright
            except ImportError:
                raise CrawlClusterError("a rule with render needs Playwright: pip install "
                                        "'crawlcluster[render]'") from None
            if not os.path.exists(self.executable):
                raise CrawlClusterError(f"a rule with render needs Chromium at {self.executable} "
                                        "(CRAWLCLUSTER_BROWSER): apt install chromium")
            if self.playwright is None:
                self.playwright = await async_playwright().start()
            self.browser = await self.playwright.chromium.launch(
                executable_path=self.executable, args=["--no-sandbox", "--disable-gpu"])
            self.pages_in_browser = 0
            self.crawler.stats.inc_value("crawlcluster/render/browsers")
        return self.browser

    async def _discard_browser(self) -> None:
        browser, self.browser = self.browser, None
        if browser is not None:
            try:
                await browser.close()
            except Exception as exc:  # noqa: BLE001 - a dead browser's close fails too
                logger.warning("closing the browser failed: %s", exc)

    def _closed(self) -> Any:
        async def close() -> None:
            await self._discard_browser()
            if self.playwright is not None:
                await self.playwright.stop()
                self.playwright = None

        return deferred_from_coro(close())


async def _load_unless_blocked(route: Any) -> None:
    if route.request.resource_type in BLOCKED_RESOURCES:
        await route.abort()
    else:
        await route.continue_()


def _text(value: bytes | None) -> str | None:
    return value.decode("latin-1") if value else None
