"""Pages built by JavaScript, rendered in the system's Chromium (a crawl rule's ``render``).

A rule's ``render`` is ``never`` (the default: the HTML the server sends), ``always``, or
``auto``. With ``always`` each page of the crawl is loaded in a headless Chromium
(Debian's ``chromium``, ``CRAWLCLUSTER_BROWSER``; never a browser downloaded at run
time) driven by Playwright,
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

``auto`` renders only where a page needs it, learnt per URL pattern (``url_pattern``:
the host and path, numbers and ids abstracted) and shared by every node through Redis
(``Keys.crawl_render``, retired with the crawl). The first ``SAMPLE`` pages of a
pattern, and one in ``RECHECK`` after, are fetched as usual and then rendered as well,
and the two compared on what the crawl wants of them (``needs_rendering``: the page's
links, and the fields its rule extracts); the rendered one is kept if it gave more.
Once a pattern has its sample, its pages go the way most of its compared pages needed.
A crawl learns at most ``MAX_PATTERNS`` patterns; a page of another is rendered.
"""

import asyncio
import logging
import os
import random
import re
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.http import HtmlResponse, Response, TextResponse
from scrapy.utils.defer import deferred_from_coro

from crawler.context import JobContext
from crawler.rules import compile_universal, every_url, field_selector
from crawler.spiders import css_value, first_value
from master.keys import Keys
from settings.errors import CrawlClusterError

logger = logging.getLogger(__name__)

RENDER_MODES = ("never", "always", "auto")
SAMPLE = 3              # pages of a pattern compared before its pages go one way
RECHECK = 50            # then one page in this many is compared again
MAX_PATTERNS = 1000     # patterns a crawl learns (Keys.crawl_render's fields / 2)
PLAN_FRESH = 2.0        # seconds a process reuses what it read of a crawl's patterns
_NUMBER = re.compile(r"\d+")
_ID = re.compile(r"^(?=.*\d)[A-Za-z0-9_-]{12,}$|^[0-9a-fA-F-]{8,}$")
BLOCKED_RESOURCES = ("image", "font", "media")


def render_mode(config: dict[str, Any]) -> str:
    """A crawl's ``render`` (its rule's; ``never`` if it says none)."""
    return str((config.get("rule") or {}).get("render", "never"))


def url_pattern(url: str) -> str:
    """The host and path of a URL with its variable parts abstracted: a path segment
    that looks like an id is ``{id}``, numbers elsewhere ``{n}`` (the query is left out)."""
    parts = urlsplit(url)
    segments = ["{id}" if _ID.match(segment) else _NUMBER.sub("{n}", segment)
                for segment in parts.path.split("/")]
    return f"{parts.hostname}{'/'.join(segments) or '/'}"


def choose_way(counts: tuple[int, int] | None, known_patterns: int, comparing: int = 0) -> str:
    """``render``, ``plain`` or ``compare`` for a page whose pattern was compared
    ``counts`` (compared, needed) times, ``comparing`` more being compared here now;
    ``known_patterns`` the crawl has learnt. A pattern still short of its sample, with
    enough of it being compared, is rendered meanwhile: the way that loses nothing."""
    if counts is None and known_patterns >= MAX_PATTERNS:
        return "render"                     # too many patterns to learn: the safe way
    compared, needed = counts or (0, 0)
    if compared < SAMPLE:
        return "compare" if compared + comparing < SAMPLE else "render"
    if random.randrange(RECHECK) == 0:
        return "compare"
    return "render" if 2 * needed > compared else "plain"


def needs_rendering(plain: TextResponse, rendered: TextResponse,
                    fields: dict[str, Any] | None) -> bool:
    """Did rendering give the crawl more: links, or the rule's fields filled?"""
    if len(every_url(rendered)) > len(every_url(plain)):
        return True
    for spec in (fields or {}).values():
        kind, expression = field_selector(spec)
        read = css_value if kind == "css" else first_value
        if read(rendered, expression) and not read(plain, expression):
            return True
    return False


class RenderPlan:
    """What this process knows of a crawl's patterns (``Keys.crawl_render``), read again
    every ``PLAN_FRESH`` s, and the comparisons it adds."""

    def __init__(self, redis: Any, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self.read_at: dict[str, tuple[float, dict[str, tuple[int, int]]]] = {}
        self.comparing: Counter[tuple[str, str]] = Counter()   # (crawl, pattern) -> now

    def way(self, crawlid: str, url: str) -> str:
        patterns, pattern = self._patterns(crawlid), url_pattern(url)
        way = choose_way(patterns.get(pattern), len(patterns),
                         self.comparing[(crawlid, pattern)])
        if way == "compare":
            self.comparing[(crawlid, pattern)] += 1
        return way

    def compared(self, crawlid: str, url: str) -> None:
        """A comparison ``way`` asked for is over (recorded, or given up)."""
        key = (crawlid, url_pattern(url))
        self.comparing[key] -= 1
        if self.comparing[key] <= 0:
            del self.comparing[key]

    def record(self, crawlid: str, url: str, needed: bool) -> None:
        key, pattern = self.keys.crawl_render(crawlid), url_pattern(url)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hincrby(key, f"{pattern} compared", 1)
        pipe.hincrby(key, f"{pattern} needed", int(needed))
        pipe.execute()
        self.read_at.pop(crawlid, None)

    def _patterns(self, crawlid: str) -> dict[str, tuple[int, int]]:
        read_at, patterns = self.read_at.get(crawlid, (0.0, {}))
        if time.monotonic() - read_at >= PLAN_FRESH:
            counts = {field: int(value) for field, value
                      in self.redis.hgetall(self.keys.crawl_render(crawlid)).items()}
            patterns = {name[:-len(" compared")]: (count, counts.get(
                name[:-len(" compared")] + " needed", 0))
                for name, count in counts.items() if name.endswith(" compared")}
            if len(self.read_at) > 1000:
                self.read_at.clear()
            self.read_at[crawlid] = (time.monotonic(), patterns)
        return patterns


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
        self.rendering = 0                     # pages in the browser now
        self.plan: RenderPlan | None = None
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "BrowserRender":
        return cls(crawler)

    async def process_request(self, request: Request) -> HtmlResponse | None:
        info = request.meta.get("crawlcluster")
        if not info or render_mode(info["config"]) == "never":
            return None
        way = "render"
        if render_mode(info["config"]) == "auto":
            way = self._plan().way(info["task"]["crawlid"], request.url)
            request.meta["crawlcluster_render"] = way
        return await self._rendered(request) if way == "render" else None

    async def process_response(self, request: Request, response: Response) -> Response:
        """A page fetched to be compared: rendered too, and the one that gave more kept."""
        if request.meta.get("crawlcluster_render") != "compare":
            return response
        info = request.meta["crawlcluster"]
        crawlid, plan = info["task"]["crawlid"], self._plan()
        if not isinstance(response, TextResponse) or response.status != 200:
            plan.compared(crawlid, request.url)          # nothing to compare
            return response
        try:
            rendered = await self._rendered(request)
        except Exception as exc:  # noqa: BLE001 - the plain page is there: keep it
            logger.warning("rendering %s to compare failed (the page as fetched is kept): "
                           "%s: %s", request.url, type(exc).__name__, exc)
            return response
        finally:
            plan.compared(crawlid, request.url)
        needed = needs_rendering(response, rendered, _rule_fields(info))
        plan.record(crawlid, request.url, needed)
        outcome = "needed" if needed else "not_needed"
        self.crawler.stats.inc_value(f"crawlcluster/render/compared/{outcome}")
        return rendered if needed else response

    def process_exception(self, request: Request, exception: Exception) -> None:
        if request.meta.get("crawlcluster_render") == "compare":      # the fetch failed
            self._plan().compared(request.meta["crawlcluster"]["task"]["crawlid"], request.url)

    def _plan(self) -> RenderPlan:
        if self.plan is None:
            context = JobContext.of(self.crawler)
            self.plan = RenderPlan(context.redis, context.keys)
        return self.plan

    async def _rendered(self, request: Request) -> HtmlResponse:
        async with self.slots:
            try:
                return await asyncio.wait_for(self._render(request), self.timeout)
            except Exception:
                await self._discard_browser()       # crashed or hung: a new one next page
                raise

    async def _render(self, request: Request) -> HtmlResponse:
        browser = await self._browser()
        self.rendering += 1
        try:
            page = await browser.new_page(user_agent=_text(request.headers.get("User-Agent")))
            try:
                await page.route("**/*", _load_unless_blocked)
                reply = await page.goto(request.url, wait_until="networkidle")
                body = await page.content()
                url = page.url                  # where the browser's redirects led
            finally:
                await page.close()
        finally:
            self.rendering -= 1
        self.pages_in_browser += 1
        self.crawler.stats.inc_value("crawlcluster/render/pages")
        return HtmlResponse(url, status=reply.status if reply else 200,
                            body=body.encode("utf-8"), encoding="utf-8", request=request,
                            flags=["rendered"])

    async def _browser(self) -> Any:
        """The browser, started if there is none; started again once it has rendered its
        share and no other page is rendering in it (or if it is gone)."""
        worn = self.pages_in_browser >= self.restart_after and not self.rendering
        if self.browser is not None and (worn or not self.browser.is_connected()):
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


def _rule_fields(info: dict[str, Any]) -> dict[str, Any] | None:
    """The fields a universal rule's page extracts (its task's rule), if any."""
    rule = info["config"].get("rule") or {}
    index = info["task"].get("rule_index")
    if info["task"].get("spider_type") != "universal" or index is None:
        return None
    rules = compile_universal(rule)
    return rules[index].fields if index < len(rules) else None
