"""The downloader middleware that tells the cluster when a site pushes back.

A 429 or 503, a burst of 403s (``CRAWLCLUSTER_PUSHBACK_403_COUNT`` within
``CRAWLCLUSTER_PUSHBACK_403_WINDOW`` seconds) or a page matching a block-page marker
(``CRAWLCLUSTER_PUSHBACK_BLOCK_MARKERS``) is pushback: it is reported at once to the
domain's state in Redis (master/pushback.py), which lowers the domain's rate for every
spider on every node and pauses it (``Retry-After``, or the default pause). A 429's or
503's task is released, not failed: it goes back to its pool without counting an
attempt and is taken again once the pause is over, so a page is never given up for
that. A 403 burst's or block page's task is retried with an attempt counted (a site
that blocks for good must not keep its pages going round for ever). The response goes
no further (the spider never parses a refusal); the domain's rate rises back slowly
in the throttle while no more pushback comes. ``pushback_received`` is
sent for each pushback (the proxy middleware switches proxy on it).
"""

import logging
import re
import time
from collections import deque
from typing import Any

from cachetools import TTLCache
from redis import RedisError
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response, TextResponse

from crawler.context import ClusterComponent
from master.pushback import retry_after_seconds
from master.siteconfig import domain_of
from settings.errors import ConfigError

logger = logging.getLogger(__name__)

PUSHBACK_STATUSES = (429, 503)
MARKER_BYTES = 16 * 1024       # of a body searched for a block-page marker (they are small)
# A block page is small; a larger page quoting a marker (a forum post about blocks) is content.
BLOCK_PAGE_MAX_BYTES = 64 * 1024
DOMAINS_WATCHED = 10_000       # domains whose recent 403s are kept (least recent go)

# Scrapy signal: a response was pushback. Handlers get ``request``, ``response``,
# ``domain`` and ``reason``.
pushback_received = object()


def block_markers(patterns: list[str]) -> list[re.Pattern[bytes]]:
    """``patterns`` compiled to search bytes; one that does not compile is a ConfigError
    naming it."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern.encode()))
        except re.error as exc:
            raise ConfigError(f"CRAWLCLUSTER_PUSHBACK_BLOCK_MARKERS: {pattern!r}: {exc}") from exc
    return compiled


def is_block_page(response: Response, markers: list[re.Pattern[bytes]]) -> bool:
    """Whether a successful page is a block page: small, and a marker in its head."""
    if not markers or response.status >= 300 or not isinstance(response, TextResponse):
        return False
    if len(response.body) > BLOCK_PAGE_MAX_BYTES:
        return False
    return any(marker.search(response.body[:MARKER_BYTES]) for marker in markers)


class ForbiddenBursts:
    """Recent 403s per domain: ``add`` says when ``count`` came within ``window`` s."""

    def __init__(self, count: int, window: float) -> None:
        self.count = count
        self.window = window
        self.seen: TTLCache[str, deque[float]] = TTLCache(DOMAINS_WATCHED, window)

    def add(self, domain: str, now: float) -> bool:
        if self.count <= 0:
            return False
        times = self.seen.get(domain) or deque(maxlen=self.count)
        times.append(now)
        self.seen[domain] = times
        if len(times) == self.count and now - times[0] <= self.window:
            del self.seen[domain]
            return True
        return False


class PushbackMiddleware(ClusterComponent):
    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        settings = crawler.settings
        self.bursts = ForbiddenBursts(settings.getint("CRAWLCLUSTER_PUSHBACK_403_COUNT"),
                                      settings.getfloat("CRAWLCLUSTER_PUSHBACK_403_WINDOW"))
        self.markers = block_markers(settings.getlist("CRAWLCLUSTER_PUSHBACK_BLOCK_MARKERS"))
        self.stats: Any = crawler.stats

    def process_response(self, request: Request, response: Response) -> Response:
        info = request.meta.get("crawlcluster")
        # The domain of the URL fetched: a redirect's, not its task's.
        domain = domain_of(request.url)
        reason = self.reason(domain, response)
        if reason is None:
            return response
        self.report(domain, reason, response)
        self.stats.inc_value("crawlcluster/pushback/count")
        self.stats.inc_value(f"crawlcluster/pushback/reason/{reason}")
        self.crawler.signals.send_catch_log(pushback_received, request=request,
                                            response=response, domain=domain, reason=reason)
        if info is None:
            return response
        self.context.tracker.sites.pushback(info["task"]["crawlid"], domain, reason)
        outcome = "release" if response.status in PUSHBACK_STATUSES else "retry"
        self.context.tracker.fail(info["member"], outcome, f"pushback: {reason}")
        raise IgnoreRequest(f"pushback from {domain} ({reason}): the task goes back to "
                            f"its queue until the site lets it be fetched")

    def report(self, domain: str, reason: str, response: Response) -> None:
        """Tell the cluster, and pause the domain in this process at once: requests it
        already holds wait too (``JobContext.paused``, checked as each is sent). A Redis
        that fails leaves the task to go back all the same: the cluster's pause is lost,
        not the page, and this process still keeps the pause asked for."""
        queues = self.context.queues
        retry_after = retry_after_seconds(response.headers.get("Retry-After"), time.time())
        self.context.paused.pause(domain, queues.pushback.policy.pause_for(retry_after))
        window = queues.limit(domain, self.context.crawl_delays.get(domain))[1]
        try:
            state = queues.pushback.report(domain, reason, retry_after, window)
        except RedisError as exc:
            logger.warning("pushback from %s (%s) not recorded: %s", domain, reason, exc)
            self.stats.inc_value("crawlcluster/pushback/not_recorded")
            return
        # The cluster's pause may be longer (another node's Retry-After).
        self.context.paused.pause(domain, state.paused_until - time.time())
        logger.info("pushback from %s (%s, Retry-After %s): rate factor %.3f, paused %.1f s",
                    domain, reason, retry_after, state.factor,
                    max(state.paused_until - time.time(), 0.0))

    def reason(self, domain: str, response: Response) -> str | None:
        """Why the response is pushback ("429", "503", "403 burst", "block page"), or
        None if it is not."""
        if response.status in PUSHBACK_STATUSES:
            return str(response.status)
        if response.status == 403:
            return "403 burst" if self.bursts.add(domain, time.monotonic()) else None
        return "block page" if is_block_page(response, self.markers) else None
