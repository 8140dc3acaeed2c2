"""Downloader and spider middlewares that tie Scrapy to the cluster.

``StatusCounterMiddleware`` counts every response's status per spider type
(thesis table 4-8). ``TaskStatusMiddleware`` reports tasks that could not be fetched:
404/410 fail for good, other errors and exhausted retries are retried by the
cluster. ``RandomUserAgentMiddleware`` gives each request a real browser's
User-Agent unless the crawl set one. ``TaskOutputMiddleware`` (spider) marks
a page's links with their parent task and its items with their task, and
tells the tracker when the page's output is all out. ``ParsedPageRelease`` (spider)
frees a page's parsed tree as soon as its output is out. ``CharsetRepairMiddleware``
reads a page whose declared charset garbles it with the charset that reads it.
``DecompressionMiddleware`` is Scrapy's, without its charset guess on compressed bytes.
``RedirectLoopMiddleware`` ends a redirect chain that comes back to a URL twice;
``RedirectTargetMiddleware`` refuses a redirect to no valid URL. Hostile pages refused
are counted by reason (``crawlcluster/pages/refused/<reason>``).
``NotModifiedMiddleware`` makes a revisit's 304 the task's outcome.
``BoundedRobotsTxtMiddleware`` is Scrapy's robots.txt middleware with a bounded,
expiring cache. Rendering pages in a browser is crawler/render/'s.
"""

import logging
import random
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from importlib import resources
from typing import Any
from urllib.parse import urljoin, urlsplit

from charset_normalizer import from_bytes
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.downloadermiddlewares.robotstxt import RobotsTxtMiddleware
from scrapy.exceptions import DownloadCancelledError, IgnoreRequest
from scrapy.http import Response, TextResponse
from scrapy.robotstxt import RobotParser
from scrapy.statscollectors import StatsCollector
from scrapy.utils.httpobj import urlparse_cached
from scrapy.utils.misc import build_from_crawler
from twisted.internet.defer import Deferred
from w3lib.encoding import html_body_declared_encoding, resolve_encoding
from w3lib.url import safe_url_string

from crawler.context import ClusterComponent, JobContext, TaskTracker, cluster_settings
from crawler.downloadguard import REFUSAL_META
from crawler.urlshape import url_problem
from crawler.userspider import is_user_crawl
from crawler.versions import GONE_STATUSES, GonePage
from master.crawls import HUB_SPAN
from master.frontier import outcome_for_status
from master.siteconfig import domain_of

logger = logging.getLogger(__name__)

# What Scrapy's RobotsTxtMiddleware says when robots.txt forbids a URL.
ROBOTS_REFUSAL = "Forbidden by robots.txt"
# What BoundedRobotsTxtMiddleware says while a host's robots.txt answered 429 or 5xx.
ROBOTS_UNAVAILABLE = "robots.txt unavailable"
ROBOTS_DISALLOW_ALL = b"User-agent: *\nDisallow: /\n"
ROBOTS_UNAVAILABLE_MIN_WAIT = 5.0   # s at least before an unavailable robots.txt is read again


def _member(request: Request) -> str | None:
    info = request.meta.get("crawlcluster")
    return str(info["member"]) if info else None


class StatusCounterMiddleware(ClusterComponent):
    """Counts every response's status (next to the downloader, so redirects count too),
    and a task's page in its crawl's health of the site fetched (master/sitehealth.py)."""

    def process_response(self, request: Request, response: Response) -> Response:
        tracker = self.context.tracker
        tracker.count_status(response.status)
        info = request.meta.get("crawlcluster")
        if info:
            tracker.sites.page(info["task"]["crawlid"], domain_of(request.url),
                               response.status)
        return response


def refuse_page(crawler: Crawler, request: Request, reason: str, detail: str) -> None:
    """A hostile page refused (``too_big``, ``decompressed_too_big``, ``redirect_loop``,
    ``invalid_redirect``): counted (``crawlcluster/pages/refused/<reason>``), logged, and
    its task failed for good with ``detail`` unless ``TaskStatusMiddleware`` does that
    (an exception from ``process_request`` or the download reaches it; one from a
    ``process_response`` does not)."""
    crawler.stats.inc_value(f"crawlcluster/pages/refused/{reason}")
    logging.getLogger(__name__).warning("refused %s (%s): %s", request.url[:300], reason,
                                        detail[:300])


def page_refusal(exception: Exception) -> str | None:
    """The reason a download's exception refuses its page, if it is one of ours."""
    text = str(exception)
    if "larger than download max size" in text:
        return "too_big"
    if text.startswith("redirect loop"):
        return "redirect_loop"
    if text.startswith("invalid redirect"):
        return "invalid_redirect"
    return None


class TaskStatusMiddleware(ClusterComponent):
    @property
    def tracker(self) -> TaskTracker:
        return self.context.tracker

    def process_response(self, request: Request, response: Response) -> Response:
        member = _member(request)
        if member and "rendered" in response.flags:      # the browser's (crawler/render/)
            self.tracker.sites.rendered(request.meta["crawlcluster"]["task"]["crawlid"],
                                        domain_of(request.url))
        outcome, reason = outcome_for_status(response.status)
        if member and outcome != "done":
            location = response.headers.get("Location")
            if location:
                reason += f" (to {location.decode('latin-1')[:100]})"
            self.tracker.fail(member, outcome, reason)
        if member and response.status in GONE_STATUSES:     # marked gone if stored before
            info = request.meta["crawlcluster"]
            self.context.gone.append(GonePage(self.context.spider_type, info["task"]["crawlid"],
                                              response.url, info["config"].get("lineage")))
        return response

    def process_exception(self, request: Request, exception: Exception) -> None:
        """Report the task; a page refused (``page_refusal``) is counted, and ends as
        ignored."""
        member = _member(request)
        reason = page_refusal(exception)
        if reason:
            refuse_page(self.crawler, request, reason, str(exception))
        if member:
            # Refused, or over DOWNLOAD_MAXSIZE: trying again would end the same way.
            refusal = request.meta.get(REFUSAL_META)    # the URL guard refused its address
            permanent = refusal or isinstance(exception, (IgnoreRequest,
                                                          DownloadCancelledError))
            outcome = "failed" if permanent else "retry"
            if isinstance(exception, IgnoreRequest) and \
                    str(exception).startswith(ROBOTS_UNAVAILABLE):
                outcome = "release"       # not the page's fault: taken again later
            self.tracker.fail(member, outcome,
                              (refusal or f"{type(exception).__name__}: {exception}")[:200])
            if isinstance(exception, IgnoreRequest) and str(exception) == ROBOTS_REFUSAL:
                crawlid = request.meta["crawlcluster"]["task"]["crawlid"]
                self.tracker.count_links(crawlid, "refused:robots")
        if reason and not isinstance(exception, IgnoreRequest):
            # refused, logged and counted: not a download error's traceback in the log
            raise IgnoreRequest(str(exception)) from exception


class NotModifiedMiddleware(ClusterComponent):
    """A revisited hub, sitemap or feed answered 304 Not Modified to the validators its
    last visit stored (the scheduler sent them): the visit counts as unchanged, its
    task is done, and there is nothing to parse."""

    def process_response(self, request: Request, response: Response) -> Response:
        info = request.meta.get("crawlcluster")
        if response.status != 304 or info is None:
            return response
        revisit = self.context.revisit(info["config"], info["task"])
        if revisit is None:
            return response
        self.context.frontier.hub_visited(info["member"], None, {}, revisit,
                                          info["config"].get("hub_span", HUB_SPAN))
        self.context.tracker.page_finished(info["member"])
        raise IgnoreRequest("not modified since the last visit")


class RandomUserAgentMiddleware:
    """A random real browser User-Agent (bundled list) unless the request has one."""

    def __init__(self, agents: list[str]) -> None:
        self.agents = agents

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "RandomUserAgentMiddleware":
        text = resources.files("crawler").joinpath("data/user_agents.txt").read_text("utf-8")
        agents = [line.strip() for line in text.splitlines()
                  if line.strip() and not line.startswith("#")]
        return cls(agents)

    def process_request(self, request: Request) -> None:
        if b"User-Agent" not in request.headers:
            request.headers[b"User-Agent"] = random.choice(self.agents)


class TaskOutputMiddleware(ClusterComponent):
    async def process_spider_output_async(self, response: Response,
                                          result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        info = response.meta.get("crawlcluster")
        tracker = self.context.tracker
        async for element in result:
            yield self._mark(element, info, tracker)
        if info:
            tracker.page_finished(info["member"])

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        info = response.meta.get("crawlcluster")
        tracker = self.context.tracker
        for element in result:
            yield self._mark(element, info, tracker)
        if info:
            tracker.page_finished(info["member"])

    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        info = response.meta.get("crawlcluster")
        if info:
            self.context.tracker.fail(
                info["member"], "retry", f"spider error: {type(exception).__name__}: {exception}")

    @staticmethod
    def _mark(element: Any, info: dict[str, Any] | None, tracker: TaskTracker) -> Any:
        if info is None:
            return element
        if isinstance(element, Request):
            element.meta["crawlcluster_parent"] = {"task": info["task"], "config": info["config"]}
        elif is_user_crawl(info["config"]):
            # a user spider's item, left as it is: its task waits for Scrapy's signal
            # that the project's pipelines are done with it (crawler/userspider.py)
            tracker.item_out(info["member"])
        elif isinstance(element, dict):
            element["_task"] = info["member"]
            tracker.item_out(info["member"])
        return element


class ParsedPageRelease:
    """Free a page's parsed tree when its callback's output is all out, not at the next
    full garbage collection.

    ``response.selector`` (used by ``response.xpath``/``css`` and our link extraction)
    is cached on the response and refers back to it: a cycle, which reference counting
    never frees. Both then wait for the cyclic collector; a spider process collects
    rarely (``GarbageCollectorTuning``), and a large page's lxml tree is several MB
    outside Python's heap, so on documentation-like pages of a few hundred KB a spider
    held a hundred and more finished pages at once (RSS past 500 MB). Dropping the
    cached selector once the page is done breaks the cycle; an item that kept the tree
    (the main-text pipeline's ``_body``) still holds it until it is stored. Outermost of
    the spider middlewares, so every other one has seen the output first.
    """

    async def process_spider_output_async(self, response: Response,
                                          result: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for element in result:
            yield element
        self._release(response)

    def process_spider_output(self, response: Response, result: Iterable[Any]) -> Iterator[Any]:
        yield from result
        self._release(response)

    def process_spider_exception(self, response: Response, exception: Exception) -> None:
        self._release(response)

    @staticmethod
    def _release(response: Response) -> None:
        if isinstance(response, TextResponse):
            response._cached_selector = None


class CharsetRepairMiddleware:
    """A page whose HTTP header or ``<meta>`` names the wrong charset (a server that
    says utf-8 for every page, a template copied from another site) is read with the
    charset that decodes it: its ``<meta>`` one, else the detected one."""

    def __init__(self, stats: StatsCollector | None = None) -> None:
        self.stats = stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "CharsetRepairMiddleware":
        return cls(crawler.stats)

    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Response:
        if not isinstance(response, TextResponse) or not response.body:
            return response
        better = better_encoding(response.body, response.encoding)
        if better is None:
            return response
        if self.stats is not None:
            self.stats.inc_value("crawlcluster/charset/repaired")
        return response.replace(encoding=better)


class DecompressionMiddleware(HttpCompressionMiddleware):
    """Scrapy's decompression, without guessing the charset of compressed bytes.

    Scrapy's copies a compressed page with ``replace``, which reads the page's
    ``encoding``: for a page whose Content-Type names no charset (nginx's default) that
    runs charset detection over the gzip bytes, 0.5-2 ms a page thrown away (the
    decompressed page reads its charset again). Here the compressed page is handed to it
    as a plain ``Response``, which has no encoding to read.

    A body that unpacks past ``DOWNLOAD_MAXSIZE`` (a decompression bomb) is refused,
    counted (``decompressed_too_big``) and its task failed for good: Scrapy's refusal
    comes from ``process_response``, which ``TaskStatusMiddleware`` never sees."""

    crawler: Crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "DecompressionMiddleware":
        middleware = super().from_crawler(crawler)
        middleware.crawler = crawler
        return middleware

    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Request | Response:
        if (isinstance(response, TextResponse) and request.method != "HEAD"
                and response.headers.get("Content-Encoding")):
            response = Response(**{name: getattr(response, name)
                                   for name in Response.attributes})
        try:
            return super().process_response(request, response)
        except IgnoreRequest as exc:
            fail_refused(self.crawler, request, "decompressed_too_big", str(exc))
            raise


class RedirectLoopMiddleware:
    """A redirect chain that reaches a URL for the third time is a loop: refused (the
    task fails for good, naming the chain) instead of bouncing until
    ``REDIRECT_MAX_TIMES``. One return is allowed: a page that sets a cookie and
    redirects to itself is common."""

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        chain = request.meta.get("redirect_urls") or []
        if chain.count(request.url) >= 2:
            raise IgnoreRequest(f"redirect loop: {' -> '.join([*chain, request.url])}")


class RedirectTargetMiddleware(ClusterComponent):
    """A redirect whose ``Location`` names no URL that can be fetched (a port out of
    range, a bad IPv6 literal, control characters, over ``URLLENGTH_LIMIT``) is refused,
    counted (``invalid_redirect``) and its task failed for good, before Scrapy's
    redirect middleware (after it in ``process_response``) raises on it or sends a
    request that cannot be downloaded."""

    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Response:
        location = response.headers.get("Location")
        if location is None or not 300 <= response.status < 400:
            return response
        target = redirect_target(request.url, location)
        problem = ("not a URL" if target is None else
                   url_problem(target, self.crawler.settings.getint("URLLENGTH_LIMIT"))
                   if target.startswith(("http://", "https://")) else None)
        if problem:
            detail = f"invalid redirect to {location[:200]!r}: {problem}"
            fail_refused(self.crawler, request, "invalid_redirect", detail)
            raise IgnoreRequest(detail)
        return response


def redirect_target(url: str, location: bytes) -> str | None:
    """Where Scrapy's redirect middleware would go from ``url``, or None where it would
    raise."""
    try:
        target = safe_url_string(location)
        if location.startswith(b"//"):
            target = urlsplit(url).scheme + "://" + target.lstrip("/")
        return urljoin(url, target)
    except ValueError:
        return None


def fail_refused(crawler: Crawler, request: Request, reason: str, detail: str) -> None:
    """``refuse_page``, and the task failed for good with ``detail``."""
    refuse_page(crawler, request, reason, detail)
    member = _member(request)
    if member:
        JobContext.of(crawler).tracker.fail(member, "failed", detail[:200])


GARBLED_SHARE = 0.01      # a page with more replacement characters than this is misread


def better_encoding(body: bytes, declared: str) -> str | None:
    """An encoding that reads ``body`` without errors, when ``declared`` garbles more than
    1% of it; None when ``declared`` reads it well enough or nothing reads it better."""
    text = body.decode(declared, errors="replace")
    if text.count("\ufffd") <= len(text) * GARBLED_SHARE:
        return None
    detected = from_bytes(body).best()
    for candidate in (html_body_declared_encoding(body), detected and detected.encoding):
        encoding = resolve_encoding(candidate) if candidate else None
        if encoding and encoding != resolve_encoding(declared) and _reads(body, encoding):
            return encoding
    return None


def _reads(body: bytes, encoding: str) -> bool:
    try:
        body.decode(encoding)
        return True
    except (UnicodeDecodeError, LookupError):
        return False


class BoundedRobotsTxtMiddleware(RobotsTxtMiddleware):
    """Scrapy's robots.txt middleware, keeping the rules of at most
    ``CRAWLCLUSTER_ROBOTS_HOSTS`` hosts, each read again after
    ``CRAWLCLUSTER_ROBOTS_MAX_AGE`` seconds.

    Scrapy keeps the parsed robots.txt of every host it met for the life of the process
    and never reads one again: a spider that runs for months would hold the rules of
    every host of the web it crawled, and obey rules a site changed long ago. Here the
    host read longest ago is forgotten first (its robots.txt is fetched again when its
    next URL comes).

    A robots.txt answered 429 or 5xx means "disallow everything, for now" (RFC 9309,
    2.3.1.3-4): the host's rules are disallow-all and its robots.txt is read again soon,
    once its pause (crawler/paused.py) is over and at least
    ``ROBOTS_UNAVAILABLE_MIN_WAIT`` s later. The host's tasks meanwhile are released
    (``ROBOTS_UNAVAILABLE``), not failed: they are taken again later. The robots.txt
    request itself waits out a pause of its domain as every request does
    (crawler/token_deadlines.py).
    """

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = cluster_settings(crawler.settings)
        self.max_hosts = max(1, settings.getint("CRAWLCLUSTER_ROBOTS_HOSTS"))
        self.max_age = settings.getfloat("CRAWLCLUSTER_ROBOTS_MAX_AGE")
        self.read_at: dict[str, float] = {}       # netloc -> when its robots.txt was asked for
        self.unavailable: dict[str, int] = {}     # netloc -> its robots.txt's 429/5xx status
        self.pause_default = settings.getfloat("CRAWLCLUSTER_PUSHBACK_PAUSE")

    async def robot_parser(self, request: Request) -> RobotParser | None:
        netloc = urlparse_cached(request).netloc
        read_at = self.read_at.get(netloc)
        if read_at is not None and time.monotonic() - read_at > self.max_age:
            self._forget(netloc)
        if netloc not in self._parsers:
            self.read_at.pop(netloc, None)
            self.read_at[netloc] = time.monotonic()
            while len(self.read_at) > self.max_hosts and self._forget(next(iter(self.read_at))):
                pass
        return await super().robot_parser(request)

    def _forget(self, netloc: str) -> bool:
        """Drop a host's rules unless its robots.txt is being fetched (others wait on it)."""
        if isinstance(self._parsers.get(netloc), Deferred):
            return False
        self._parsers.pop(netloc, None)
        self.read_at.pop(netloc, None)
        self.unavailable.pop(netloc, None)
        return True

    async def _parse_robots(self, response: Response, netloc: str, request: Request) -> None:
        if response.status != 429 and response.status < 500:
            self.unavailable.pop(netloc, None)
            await super()._parse_robots(response, netloc, request)
            return
        self._stats.inc_value("robotstxt/response_count")
        self._stats.inc_value(f"robotstxt/response_status_count/{response.status}")
        self._stats.inc_value("robotstxt/unavailable")
        context: JobContext | None = getattr(self.crawler, "crawlcluster", None)
        paused = context.paused.remaining(domain_of(request.url)) if context else 0.0
        again_in = max(paused, self.pause_default, ROBOTS_UNAVAILABLE_MIN_WAIT)
        logger.info("robots.txt of %s answered %d: everything disallowed for %.1f s",
                    netloc, response.status, again_in)
        self.unavailable[netloc] = response.status
        # read_at as if read max_age - again_in ago: read again in again_in s
        self.read_at[netloc] = time.monotonic() - self.max_age + again_in
        parser = build_from_crawler(self._parserimpl, self.crawler, ROBOTS_DISALLOW_ALL)
        waiting = self._parsers[netloc]
        assert isinstance(waiting, Deferred)
        self._parsers[netloc] = parser
        waiting.callback(parser)

    def process_request_2(self, rp: RobotParser | None, request: Request) -> None:
        status = self.unavailable.get(urlparse_cached(request).netloc)
        if rp is not None and status is not None:
            self._stats.inc_value("robotstxt/forbidden_unavailable")
            raise IgnoreRequest(f"{ROBOTS_UNAVAILABLE} ({status}): everything disallowed "
                                f"until it is read again")
        super().process_request_2(rp, request)
