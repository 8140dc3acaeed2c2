"""One page fetched for a preview as a crawl would fetch it: through the URL guard
(crawler/urlguard.py: only http and https, only addresses it allows, connected to the
address it checked), robots.txt obeyed, the cluster's throttle of its domain counted, the
crawl's User-Agent and cookie sent. A redirect is not followed: it is shown as its page."""

import threading
import time
from typing import Any
from urllib.parse import urlsplit

from cachetools import TTLCache
from protego import Protego
from scrapy.http import Headers, HtmlResponse

from crawler.urlguard import FetchFailed, RefusedUrl, UrlGuard
from master.siteconfig import domain_of
from settings.errors import CrawlClusterError

MAX_BYTES = 10 * 1024 * 1024     # a page larger than this is refused, as a crawl would cut it
THROTTLE_WAIT = 30.0             # seconds a preview waits for its turn under the throttle
TIMEOUT = 20.0
MAX_ROBOTS = 1000               # sites whose robots.txt a process keeps for its previews


class FetchError(CrawlClusterError):
    """A page a preview could not fetch, and why."""


class RobotsRules:
    """The robots.txt rules a process's previews read, by ``scheme://host:port``: at most
    ``MAX_ROBOTS`` sites, each kept ``max_age`` seconds (previews run in threads)."""

    def __init__(self, max_age: float = 3600.0, max_sites: int | None = None) -> None:
        self.cache: TTLCache[str, Protego] = TTLCache(max_sites or MAX_ROBOTS, max_age)
        self.lock = threading.Lock()

    def get(self, site: str) -> Protego | None:
        with self.lock:
            return self.cache.get(site)

    def put(self, site: str, rules: Protego) -> None:
        with self.lock:
            self.cache[site] = rules

    def __len__(self) -> int:
        with self.lock:
            return len(self.cache)

    def __contains__(self, site: str) -> bool:
        return self.get(site) is not None


class PageFetcher:
    def __init__(self, queues: Any, job: str, spider_type: str, ip: str, obey_robots: bool,
                 user_agent: str, guard: UrlGuard, robots: RobotsRules | None = None) -> None:
        self.queues = queues            # master.throttle.ThrottledQueues, or None: unthrottled
        self.job, self.spider_type, self.ip = job, spider_type, ip
        self.obey_robots = obey_robots
        self.user_agent = user_agent
        self.guard = guard
        self.robots = RobotsRules() if robots is None else robots     # shared by a process
        self.fetched: list[str] = []              # every URL asked for, robots.txt included

    def page(self, url: str, cookie: str | None = None) -> HtmlResponse:
        """The page, or FetchError naming why not (the URL guard's refusal, robots.txt, a
        blacklisted domain, the server's error, a timeout)."""
        self._check(url)
        if not self.allowed(url):
            raise FetchError(f"robots.txt of {urlsplit(url).netloc} forbids {url}")
        status, headers, body = self._get(url, {"Cookie": cookie} if cookie else {})
        return HtmlResponse(url, status=status, headers=headers, body=body)

    def asset(self, url: str) -> tuple[int, Headers, bytes]:
        """What a page's script or XHR asks for, fetched as the page was."""
        self._check(url)
        if not self.allowed(url):
            raise FetchError(f"robots.txt of {urlsplit(url).netloc} forbids {url}")
        return self._get(url, {})

    def allowed(self, url: str) -> bool:
        """Whether robots.txt lets the crawl's User-Agent fetch ``url`` (always, if the
        crawl does not obey robots.txt)."""
        if not self.obey_robots:
            return True
        parts = urlsplit(url)
        site = f"{parts.scheme}://{parts.netloc}"
        if self.known_robots(url) is None:
            try:
                status, _, body = self._get(site + "/robots.txt", {})
            except FetchError:
                status, body = 404, b""
            text = body.decode("utf-8", "replace") if 200 <= status < 300 else ""
            self.robots.put(site, Protego.parse(text))
        rules = self.known_robots(url)
        return rules is None or bool(rules.can_fetch(url, self.user_agent))

    def known_robots(self, url: str) -> Protego | None:
        """The robots.txt rules of ``url``'s site, if read within their max age."""
        parts = urlsplit(url)
        return self.robots.get(f"{parts.scheme}://{parts.netloc}")

    def _check(self, url: str) -> None:
        try:
            self.guard.check_url(url)
        except RefusedUrl as refused:
            raise FetchError(str(refused)) from None

    def _get(self, url: str, headers: dict[str, str]) -> tuple[int, Headers, bytes]:
        self._wait_for_throttle(url)
        self.fetched.append(url)
        try:
            reply = self.guard.fetch(url, {"User-Agent": self.user_agent, **headers},
                                     max_bytes=MAX_BYTES, timeout=TIMEOUT)
        except (RefusedUrl, FetchFailed) as exc:
            raise FetchError(str(exc)) from None
        kept = Headers()
        for name, value in reply.headers:
            kept.appendlist(name, value)
        return reply.status, kept, reply.body

    def _wait_for_throttle(self, url: str) -> None:
        """Take a turn under the throttle of the URL's domain, counted as the crawl's
        spider type's and this node's IP, as a browser's request is."""
        if self.queues is None:
            return
        domain, deadline = domain_of(url), time.monotonic() + THROTTLE_WAIT
        while (wait := self.queues.hit(self.job, self.spider_type, self.ip, domain)) > 0:
            if time.monotonic() + wait > deadline:
                raise FetchError(f"{domain}'s throttle has no room for {THROTTLE_WAIT:.0f} s; "
                                 "try again once the crawls on it slow down")
            time.sleep(wait)
        if wait < 0:
            raise FetchError(f"{domain} is blacklisted")

