"""One page fetched for a preview as a crawl would fetch it: robots.txt obeyed, the
cluster's throttle of its domain counted, the crawl's User-Agent and cookie sent."""

import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from protego import Protego
from scrapy.http import Headers, HtmlResponse

from master.siteconfig import domain_of
from settings.errors import CrawlClusterError

MAX_BYTES = 10 * 1024 * 1024     # a page larger than this is refused, as a crawl would cut it
THROTTLE_WAIT = 30.0             # seconds a preview waits for its turn under the throttle
TIMEOUT = 20.0
MAX_ROBOTS = 1000               # sites whose robots.txt a process keeps for its previews


class FetchError(CrawlClusterError):
    """A page a preview could not fetch, and why."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None           # a redirect is reported, as its own page


class PageFetcher:
    def __init__(self, queues: Any, job: str, spider_type: str, ip: str, obey_robots: bool,
                 user_agent: str, robots: dict[str, tuple[float, Protego]] | None = None,
                 robots_max_age: float = 3600.0) -> None:
        self.queues = queues            # master.throttle.ThrottledQueues, or None: unthrottled
        self.job, self.spider_type, self.ip = job, spider_type, ip
        self.obey_robots = obey_robots
        self.user_agent = user_agent
        # scheme://host:port -> (when read, its rules), shared by a process's previews
        self.robots = {} if robots is None else robots
        self.robots_max_age = robots_max_age
        self.fetched: list[str] = []              # every URL asked for, robots.txt included

    def page(self, url: str, cookie: str | None = None) -> HtmlResponse:
        """The page, or FetchError naming why not (robots.txt, a blacklisted domain, the
        server's error, a timeout)."""
        if not self.allowed(url):
            raise FetchError(f"robots.txt of {urlsplit(url).netloc} forbids {url}")
        status, headers, body = self._get(url, {"Cookie": cookie} if cookie else {})
        return HtmlResponse(url, status=status, headers=headers, body=body)

    def asset(self, url: str) -> tuple[int, Headers, bytes]:
        """What a page's script or XHR asks for, fetched as the page was."""
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
            if len(self.robots) >= MAX_ROBOTS:
                del self.robots[next(iter(self.robots))]         # the oldest read
            self.robots[site] = (time.monotonic(), Protego.parse(text))
        return bool(self.robots[site][1].can_fetch(url, self.user_agent))

    def known_robots(self, url: str) -> Protego | None:
        """The robots.txt rules of ``url``'s site, if read within their max age."""
        parts = urlsplit(url)
        read = self.robots.get(f"{parts.scheme}://{parts.netloc}")
        if read is None or time.monotonic() - read[0] > self.robots_max_age:
            return None
        return read[1]

    def _get(self, url: str, headers: dict[str, str]) -> tuple[int, Headers, bytes]:
        self._wait_for_throttle(url)
        self.fetched.append(url)
        request = urllib.request.Request(url, headers={"User-Agent": self.user_agent,
                                                       "Accept-Encoding": "identity",
                                                       **headers})
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=TIMEOUT) as reply:
                return reply.status, Headers(dict(reply.headers.items())), _read(reply, url)
        except urllib.error.HTTPError as exc:         # 3xx, 4xx, 5xx: a page all the same
            return exc.code, Headers(dict(exc.headers.items())), _read(exc, url)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise FetchError(f"could not fetch {url}: {reason}") from None

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


def _read(reply: Any, url: str) -> bytes:
    body = reply.read(MAX_BYTES + 1)
    if len(body) > MAX_BYTES:
        raise FetchError(f"{url} is over {MAX_BYTES // 1024 // 1024} MB")
    return bytes(body)
