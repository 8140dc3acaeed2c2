"""Pages built by JavaScript, rendered in the system's Chromium (a crawl rule's ``render``).

A rule's ``render`` is ``never`` (the default: the HTML the server sends), ``always``, or
``auto``. With ``always`` each page of the crawl is loaded in a headless Chromium
(Debian's, ``CRAWLCLUSTER_BROWSER``; never a browser downloaded at run time) driven by
Playwright, and the spider reads the document as the page's scripts left it.
``BrowserRender`` is a downloader middleware that renders the page as fetched, once it
is decompressed and its redirects followed: the page's request leaves when the cluster
throttle lets its task go, like any page's, and the browser is given the page rather
than fetching it again. The browser loads the page's scripts and XHR (each through the
cluster throttle of its domain), not its stylesheets, images, fonts or media unless a
rule's ``render_load`` names them. What a browser would cache (scripts, and what
``render_load`` lets load) comes from the process's ``AssetCache`` while fresh, so a
site's shared scripts are fetched once, not once a page. A node
renders ``CRAWLCLUSTER_RENDER_PAGES`` pages at once per spider process; its browser is
started when first needed and started again after ``CRAWLCLUSTER_BROWSER_RESTART_PAGES``
pages, or once its processes hold more than ``CRAWLCLUSTER_BROWSER_MAX_MB`` (a
long-lived browser grows). A browser that crashes or does not answer within
``CRAWLCLUSTER_RENDER_TIMEOUT`` fails the page's task, which the cluster retries like a
failed download, and the next page gets a new browser.

``auto`` renders only where a page needs it, learnt per page kind: the page's URL
template (crawler/pagegroups.py: numbers, ids and slugs abstracted, and the words that
vary among a host's sibling links, such as authors and tags), shared by every node
through Redis (``Keys.crawl_render``, retired with the crawl). The first ``SAMPLE``
pages of a template (up to ``SAMPLE_MAX`` if they disagree), and after that a share of
its pages that shrinks as its comparisons keep agreeing (one in ``RECHECK`` at first),
are rendered as well, and the two compared on what the crawl wants of them
(``needs_rendering``: the page's links, and the fields its rule extracts); the rendered
one is kept if it gave more. Other pages of a template being sampled wait for the
verdict. Once a template has its sample, its pages go the way most of its compared pages
needed.
A crawl learns at most ``MAX_PATTERNS`` templates; a page of another is rendered.
"""

import asyncio
import logging
import os
import random
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, Response, TextResponse
from scrapy.utils.defer import deferred_from_coro

from crawler.assetcache import AssetCache, lower_headers
from crawler.context import JobContext
from crawler.pagegroups import UrlTemplates
from crawler.rules import compile_universal, every_url
from crawler.scheduler import throttled_slot
from crawler.spiders import SOURCE_CALLBACKS, css_value, first_value
from master.crawls import (
    LOOKS_SCRIPTED,
    RENDER_SAMPLE,
    RENDER_SAMPLE_MAX,
    RENDERED,
    TEMPLATE_VARIABLE,
    render_patterns,
    render_sample_left,
    render_variables,
)
from master.keys import Keys
from master.rules import field_selector
from master.siteconfig import domain_of
from settings.errors import CrawlClusterError

logger = logging.getLogger(__name__)

SAMPLE = RENDER_SAMPLE   # pages of a pattern compared before its pages go one way, if
SAMPLE_MAX = RENDER_SAMPLE_MAX   # they agree; else up to this many
RECHECK = 50            # then one page in this many is compared again, times the
                        # comparisons that agreed / SAMPLE
MAX_PATTERNS = 1000     # patterns a crawl learns (Keys.crawl_render's fields / 2)
PLAN_FRESH = 2.0        # seconds a process reuses what it read of a crawl's patterns
PLAN_WAIT = 0.2         # seconds between looks at a pattern whose sample is being compared
# what a page loads that the DOM does not need, unless a rule's render_load asks for it
BLOCKED_RESOURCES = ("image", "font", "media", "stylesheet")
# what a browser would keep in its cache (AssetCache), and the cache's size
CACHED_RESOURCES = ("script", "stylesheet", "font", "image", "media")
ASSET_CACHE_BYTES = 64 << 20
MEMORY_EVERY = 10       # pages rendered between two measures of the browser's memory
QUIET = 0.25            # seconds with none of its requests open after which a page is done
# Debian's Chromium builds, the lighter first (the headless shell has no window code)
BROWSERS = ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium")
# Chromium's own calls home, which a crawler has no use for
BROWSER_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run")


def render_mode(config: dict[str, Any], task: dict[str, Any]) -> str:
    """How a task's page is read: its crawl rule's ``render`` (``never`` if it says
    none), or a precise rule's for the task's step (``{"list": ..., "detail": ...}``).
    A sitemap, feed or robots.txt is never rendered."""
    render = (config.get("rule") or {}).get("render", "never")
    if task.get("callback") in SOURCE_CALLBACKS:
        return "never"
    if isinstance(render, dict):
        render = render.get("detail" if task.get("callback") == "parse_detail" else "list",
                            "never")
    return str(render)


def choose_way(counts: tuple[int, int] | None, known_patterns: int, comparing: int = 0) -> str:
    """``render``, ``plain`` or ``compare`` for a page whose pattern was compared
    ``counts`` (compared, needed) times, ``comparing`` more being compared here now;
    ``known_patterns`` the crawl has learnt. ``wait`` while a pattern is short of its
    sample and enough of it is being compared: its verdict is a moment away."""
    if counts is None and known_patterns >= MAX_PATTERNS:
        return "render"                     # too many patterns to learn: the safe way
    compared, needed = counts or (0, 0)
    left = render_sample_left(compared, needed)
    if left:
        return "compare" if comparing < left else "wait"
    agreed = max(needed, compared - needed)
    if random.randrange(RECHECK * agreed) < SAMPLE:
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
    """What this process knows of a crawl's page kinds (``Keys.crawl_render``: each URL
    template's comparisons, and the template places learnt to be variables), read again
    every ``PLAN_FRESH`` s, and the comparisons it adds."""

    def __init__(self, redis: Any, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self.read_at: dict[str, tuple[float, dict[str, tuple[int, int]]]] = {}
        self.templates: dict[str, UrlTemplates] = {}
        self.comparing: Counter[tuple[str, str]] = Counter()   # (crawl, template) -> now

    def learn(self, crawlid: str, urls: list[str]) -> None:
        """The URLs of a fetched page and its links, for the crawl's URL templates; the
        places they show to be variables shared with the cluster."""
        templates = self._templates(crawlid)
        templates.learn(urls)
        if new := templates.take_new_variables():
            self.redis.hset(self.keys.crawl_render(crawlid),
                            mapping={TEMPLATE_VARIABLE + place: 1 for place in new})

    def template(self, crawlid: str, url: str) -> str:
        self._patterns(crawlid)
        return self._templates(crawlid).template(url)

    def way(self, crawlid: str, template: str) -> str:
        patterns = self._patterns(crawlid)
        way = choose_way(patterns.get(template), len(patterns),
                         self.comparing[(crawlid, template)])
        if way == "compare":
            self.comparing[(crawlid, template)] += 1
        return way

    def compared(self, crawlid: str, template: str) -> None:
        """A comparison ``way`` asked for is over (recorded, or given up)."""
        key = (crawlid, template)
        self.comparing[key] -= 1
        if self.comparing[key] <= 0:
            del self.comparing[key]

    def record(self, crawlid: str, template: str, needed: bool) -> None:
        key = self.keys.crawl_render(crawlid)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hincrby(key, f"{template} compared", 1)
        pipe.hincrby(key, f"{template} needed", int(needed))
        pipe.execute()
        self.read_at.pop(crawlid, None)

    def count(self, crawlid: str, what: str) -> None:
        """One more page of the crawl ``RENDERED`` or ``LOOKS_SCRIPTED``."""
        self.redis.hincrby(self.keys.crawl_render(crawlid), what, 1)

    def _templates(self, crawlid: str) -> UrlTemplates:
        if crawlid not in self.templates:
            if len(self.templates) > 100:
                self.templates.clear()
            self.templates[crawlid] = UrlTemplates()
        return self.templates[crawlid]

    def _patterns(self, crawlid: str) -> dict[str, tuple[int, int]]:
        read_at, patterns = self.read_at.get(crawlid, (0.0, {}))
        if time.monotonic() - read_at >= PLAN_FRESH:
            fields = self.redis.hgetall(self.keys.crawl_render(crawlid))
            patterns = render_patterns(fields)
            self._templates(crawlid).add_variables(render_variables(fields))
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
        self.memory_bound = settings.getfloat("CRAWLCLUSTER_BROWSER_MAX_MB")
        self.over_bound = False                # the browser's memory, as last measured
        self.slots = asyncio.Semaphore(settings.getint("CRAWLCLUSTER_RENDER_PAGES"))
        self.playwright: Any = None
        self.browser: Any = None
        self.pages_in_browser = 0
        self.rendering: Counter[Any] = Counter()   # browser -> pages rendering in it now
        self.starting = asyncio.Lock()             # one browser started at a time
        self.plan: RenderPlan | None = None
        self.assets = AssetCache(ASSET_CACHE_BYTES)   # outlives browsers: a browser's cache
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "BrowserRender":
        return cls(crawler)

    async def process_response(self, request: Request, response: Response) -> Response:
        """The page as fetched (decompressed, its redirects followed), rendered if its
        crawl's ``render`` says so: the browser is given the fetched page, so the page's
        request leaves when the throttle let its task go, and once. ``auto`` compares a
        page's two versions and keeps the one that gave more. A crawl that renders
        nothing counts the pages that look built by scripts."""
        info = request.meta.get("crawlcluster")
        if not info:
            return response
        mode = render_mode(info["config"], info["task"])
        if mode == "never":
            if looks_scripted(response):
                self._plan().count(info["task"]["crawlid"], LOOKS_SCRIPTED)
                self.crawler.stats.inc_value("crawlcluster/render/looks_scripted")
            return response
        if not isinstance(response, HtmlResponse) or response.status != 200:
            return response                     # nothing a browser would make more of
        crawlid, template = info["task"]["crawlid"], ""
        if mode == "always":
            way = "render"
        else:
            template = self._template(crawlid, response)
            way = await self._auto_way(crawlid, template)
        if way == "compare":
            return await self._compare(request, response, info, template)
        if way == "plain":
            return response
        try:
            return await self._rendered(request, response)
        except Exception as exc:
            reason = f"rendering failed: {type(exc).__name__}: {exc}"[:200]
            JobContext.of(self.crawler).tracker.fail(info["member"], "retry", reason)
            raise IgnoreRequest(reason) from exc

    def _template(self, crawlid: str, response: HtmlResponse) -> str:
        """The page's URL template, once its URL and its links are learnt from."""
        plan = self._plan()
        plan.learn(crawlid, [response.url, *every_url(response)])
        return plan.template(crawlid, response.url)

    async def _auto_way(self, crawlid: str, template: str) -> str:
        """The way ``RenderPlan.way`` gives; while it says wait (the page's template being
        compared here), asked again every ``PLAN_WAIT`` s. Past the render timeout the
        page is rendered, the way that loses nothing."""
        started = time.monotonic()
        deadline = started + self.timeout
        while (way := self._plan().way(crawlid, template)) == "wait":
            if time.monotonic() >= deadline:
                way = "render"
                break
            await asyncio.sleep(PLAN_WAIT)
        self._spent("verdict", started)
        return way

    async def _compare(self, request: Request, response: HtmlResponse,
                       info: dict[str, Any], template: str) -> Response:
        """The page rendered too, the two compared, and the one that gave more kept."""
        crawlid, plan = info["task"]["crawlid"], self._plan()
        try:
            rendered = await self._rendered(request, response)
        except Exception as exc:  # noqa: BLE001 - the plain page is there: keep it
            logger.warning("rendering %s to compare failed (the page as fetched is kept): "
                           "%s: %s", request.url, type(exc).__name__, exc)
            return response
        finally:
            plan.compared(crawlid, template)
        needed = needs_rendering(response, rendered, _rule_fields(info))
        plan.record(crawlid, template, needed)
        outcome = "needed" if needed else "not_needed"
        self.crawler.stats.inc_value(f"crawlcluster/render/compared/{outcome}")
        return rendered if needed else response

    def _plan(self) -> RenderPlan:
        if self.plan is None:
            context = JobContext.of(self.crawler)
            self.plan = RenderPlan(context.redis, context.keys)
        return self.plan

    async def _rendered(self, request: Request, document: HtmlResponse) -> HtmlResponse:
        asked = time.monotonic()
        async with self.slots:
            self._spent("slot", asked)
            started = time.monotonic()
            try:
                return await asyncio.wait_for(self._render(request, document), self.timeout)
            finally:
                self._spent("browser", started)

    def _spent(self, what: str, since: float) -> None:
        """Where a rendered page's wall time goes, summed over the crawl's pages:
        ``verdict`` (waiting for its template's), ``slot`` (for one of the process's
        render slots), ``browser`` (loading it, ``quiet`` of which waiting for its
        requests to settle, ``throttle`` for the cluster throttle to let them go)."""
        self.crawler.stats.inc_value(f"crawlcluster/render/seconds/{what}",
                                     time.monotonic() - since)

    async def _render(self, request: Request, document: HtmlResponse) -> HtmlResponse:
        """``document`` (the page as fetched) loaded in the browser, done once none of its
        requests has been open for ``QUIET`` s after its load event."""
        browser = await self._browser()
        url = document.url
        traffic = _Traffic()
        self.rendering[browser] += 1
        try:
            page = await browser.new_page(user_agent=_text(request.headers.get("User-Agent")))
            try:
                traffic.watch(page)
                rule = (request.meta.get("crawlcluster") or {}).get("config", {}).get("rule")
                blocked = set(BLOCKED_RESOURCES) - set((rule or {}).get("render_load", ()))
                await page.route("**/*", partial(self._route, url, document, blocked))
                reply = await page.goto(url, wait_until="load")
                loaded = time.monotonic()
                await traffic.settled(QUIET)
                self._spent("quiet", loaded)
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
        self.crawler.stats.inc_value("crawlcluster/render/pages")
        info = request.meta.get("crawlcluster")
        if info:
            self._plan().count(info["task"]["crawlid"], RENDERED)
        return HtmlResponse(url, status=reply.status if reply else 200,
                            body=body.encode("utf-8"), encoding="utf-8", request=request,
                            flags=["rendered"])

    async def _route(self, url: str, document: HtmlResponse, blocked: set[str],
                     route: Any) -> None:
        """Each request the page makes: of a ``blocked`` type (images, fonts, media unless
        the rule's ``render_load`` names them) refused; the page itself from ``document``;
        the rest once the cluster throttle of its domain lets it go (the page's own
        request went through it as the page's task)."""
        asked = route.request
        if asked.resource_type in blocked:
            await route.abort()
        elif asked.url == url and asked.is_navigation_request():
            await route.fulfill(status=document.status, body=document.body, headers={
                "content-type": _text(document.headers.get("Content-Type")) or "text/html"})
        elif asked.method == "GET" and asked.resource_type in CACHED_RESOURCES:
            await self._from_cache(route)
        elif await self._throttled(asked.url):
            self.crawler.stats.inc_value("crawlcluster/render/requests")
            await route.continue_()
        else:
            self._refused()
            await route.abort("blockedbyclient")

    async def _from_cache(self, route: Any) -> None:
        """A script (or what ``render_load`` asks for) from the process's asset cache,
        fetched through the throttle when it is not there or no longer fresh."""
        try:
            asset = await self.assets.get(route.request.url, partial(self._fetch_asset, route))
        except _Refused:
            await route.abort("blockedbyclient")
            return
        except Exception as exc:  # noqa: BLE001 - the browser sees a failed load, as it would
            logger.info("loading %s for a render failed: %s", route.request.url, exc)
            await route.abort("failed")
            return
        self.crawler.stats.set_value("crawlcluster/render/asset_cache_hits", self.assets.hits)
        await route.fulfill(status=asset.status, headers=asset.headers, body=asset.body)

    async def _fetch_asset(self, route: Any,
                           conditional: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        if not await self._throttled(route.request.url):
            self._refused()
            raise _Refused
        self.crawler.stats.inc_value("crawlcluster/render/requests")
        answer = await route.fetch(headers={**route.request.headers, **conditional})
        return answer.status, lower_headers(answer.headers), await answer.body()

    def _refused(self) -> None:
        self.crawler.stats.inc_value("crawlcluster/render/requests_refused")

    async def _throttled(self, url: str) -> bool:
        """Wait until the throttle of ``url``'s domain counts one more request from this
        spider type and IP, and for its turn among this process's fetches of a slow
        domain; False for a blacklisted domain. The page's render timeout bounds the
        wait."""
        context, domain, asked = JobContext.of(self.crawler), domain_of(url), time.monotonic()
        while (wait := context.queues.hit(context.job, context.spider_type, context.ip,
                                          domain, context.crawl_delays.get(domain))) > 0:
            self.crawler.stats.inc_value("crawlcluster/render/requests_throttled")
            await asyncio.sleep(wait)
        if wait < 0:
            return False
        await self._turn(domain)
        self._spent("throttle", asked)
        return True

    async def _turn(self, domain: str) -> None:
        """A slow domain's fetches leave this process one at a time, spaced as
        ``space_fetches`` spaces its pages: the browser's requests take turns with them,
        so those the throttle let go together do not reach the site in a burst."""
        slot = throttled_slot(self.crawler, domain)
        if slot is None:
            return
        while (left := slot.lastseen + slot.delay - time.monotonic()) > 0:
            await asyncio.sleep(left)
        slot.lastseen = time.monotonic()

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
            self.crawler.stats.inc_value("crawlcluster/render/browsers")
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

    def _closed(self) -> Any:
        async def close() -> None:
            if self.browser is not None:
                await self._discard(self.browser)
            if self.playwright is not None:
                await self.playwright.stop()
                self.playwright = None

        return deferred_from_coro(close())


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
    """The Chromium processes below process ``pid`` (its browsers'), from /proc."""
    below, frontier = [], [pid]
    while frontier:
        frontier = [child for parent in frontier for child in _children(parent)]
        below += frontier
    return [child for child in below if b"chrom" in _read_bytes(f"/proc/{child}/cmdline")]


def _children(pid: int) -> list[int]:
    """The child processes of ``pid``: its threads' ``children`` lists, or where the
    kernel keeps none, every process's parent read from /proc."""
    tasks = list(Path(f"/proc/{pid}/task").glob("*/children"))
    if tasks:
        return [int(child) for task in tasks for child in _read_bytes(str(task)).split()]
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _read_bytes(f"{entry}/stat").rsplit(b")", 1)[-1].split()
            if len(stat) > 1 and stat[1] == str(pid).encode():
                children.append(int(entry.name))
    return children


def browser_memory_mb(pid: int) -> float:
    """The memory (MB, proportional set size: shared pages split between their users)
    of the browsers below process ``pid``."""
    total_kb = 0
    for child in browser_processes(pid):
        for line in _read_bytes(f"/proc/{child}/smaps_rollup").decode().splitlines():
            if line.startswith("Pss:"):
                total_kb += int(line.split()[1])
    return total_kb / 1024


def _read_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:                  # the process is gone
        return b""


def looks_scripted(response: Response) -> bool:
    """An HTML page with scripts and next to nothing else: no more than two links and
    under 200 characters of text outside its scripts (a page its scripts fill in)."""
    if not isinstance(response, HtmlResponse) or response.status != 200:
        return False
    # cheapest first: most pages have links, and this runs on every page of such crawls
    if float(response.xpath("count(//a[@href])").get() or 0) > 2:
        return False
    if not response.xpath("//script"):
        return False
    text = response.xpath("//body//text()[not(ancestor::script or ancestor::style)]").getall()
    return len("".join(text).strip()) < 200


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


def _rule_fields(info: dict[str, Any]) -> dict[str, Any] | None:
    """The fields a universal rule's page extracts (its task's rule), if any."""
    rule = info["config"].get("rule") or {}
    index = info["task"].get("rule_index")
    if info["task"].get("spider_type") != "universal" or index is None:
        return None
    rules = compile_universal(rule)
    return rules[index].fields if index < len(rules) else None
