"""``BrowserRender``: the downloader middleware that renders a page as fetched, when its
crawl rule's ``render`` says so.

It sits after decompression and redirects (585): the page's request leaves when the
cluster throttle lets its task go, like any page's, and the browser (browser.py) is given
the page rather than fetching it again. ``always`` renders every page; ``auto`` asks the
policy (policy.py) which way a page of its kind goes, and compares a sampled page's two
versions, keeping the one that gave more. A failed render fails the page's task with
"retry", as a failed download does.
"""

import asyncio
import logging
import time
from typing import Any

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, Response
from scrapy.utils.defer import deferred_from_coro

from crawler.context import JobContext
from crawler.render.browser import Browser
from crawler.render.policy import (
    PLAN_WAIT,
    RenderPlan,
    looks_scripted,
    needs_rendering,
    render_mode,
    rule_fields,
)
from crawler.render.throttle import RenderThrottle, spent
from crawler.rules import every_url
from master.crawls import LOOKS_SCRIPTED, RENDERED

logger = logging.getLogger(__name__)


class BrowserRender:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats: Any = crawler.stats
        self.timeout = crawler.settings.getfloat("CRAWLCLUSTER_RENDER_TIMEOUT")
        self.browser = Browser(crawler, RenderThrottle(crawler))
        self.plan: RenderPlan | None = None
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "BrowserRender":
        return cls(crawler)

    async def process_response(self, request: Request, response: Response) -> Response:
        """The page as fetched (decompressed, its redirects followed), rendered if its
        crawl's ``render`` says so. A crawl that renders nothing counts the pages that
        look built by scripts."""
        info = request.meta.get("crawlcluster")
        if not info:
            return response
        mode = render_mode(info["config"], info["task"])
        if mode == "never":
            if looks_scripted(response):
                self._plan().count(info["task"]["crawlid"], LOOKS_SCRIPTED)
                self.stats.inc_value("crawlcluster/render/looks_scripted")
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
            return await self._rendered(request, response, info)
        except Exception as exc:
            reason = f"rendering failed: {type(exc).__name__}: {exc}"[:200]
            logger.warning("%s: %s (its task is tried again)", request.url, reason)
            self.stats.inc_value("crawlcluster/render/failed")
            JobContext.of(self.crawler).tracker.fail(info["member"], "retry", reason)
            raise IgnoreRequest(reason) from exc

    async def _rendered(self, request: Request, response: HtmlResponse,
                        info: dict[str, Any]) -> HtmlResponse:
        load = tuple((info["config"].get("rule") or {}).get("render_load", ()))
        rendered = await self.browser.render(request, response, load)
        self._plan().count(info["task"]["crawlid"], RENDERED)
        return rendered

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
        spent(self.crawler, "verdict", started)
        return way

    async def _compare(self, request: Request, response: HtmlResponse,
                       info: dict[str, Any], template: str) -> Response:
        """The page rendered too, the two compared, and the one that gave more kept."""
        crawlid, plan = info["task"]["crawlid"], self._plan()
        try:
            rendered = await self._rendered(request, response, info)
        except Exception as exc:  # noqa: BLE001 - the plain page is there: keep it
            logger.warning("rendering %s to compare failed (the page as fetched is kept): "
                           "%s: %s", request.url, type(exc).__name__, exc)
            return response
        finally:
            plan.compared(crawlid, template)
        needed = needs_rendering(response, rendered, rule_fields(info))
        plan.record(crawlid, template, needed)
        outcome = "needed" if needed else "not_needed"
        self.stats.inc_value(f"crawlcluster/render/compared/{outcome}")
        return rendered if needed else response

    def _plan(self) -> RenderPlan:
        if self.plan is None:
            context = JobContext.of(self.crawler)
            self.plan = RenderPlan(context.redis, context.keys, self.crawler.settings.getint(
                "CRAWLCLUSTER_RENDER_SITE_GROUPS"))
        return self.plan

    def _closed(self) -> Any:
        return deferred_from_coro(self.browser.close())
