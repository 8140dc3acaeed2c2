"""Throttle tokens with a send-by deadline: a slow domain's request reaches the site while
its token is good, or takes a new one as it leaves the downloader.

The scheduler takes a slow domain's task, and its hit in both throttle windows, in a
round; the request may then wait for the domain's robots.txt, a full downloader or its
spaced download slot before it is sent. Under load those waits reached 277 ms, and a
request sent that late lands among the next window's, so the site saw 6 requests in a
second at a limit of 5 (docs/performance.md, "Requests as the site sees them"). So a slow
domain's token is good until its ``send_by``, half a scheduler tick after the take:
``ThrottledQueues`` lengthens those windows by a tick, half for the wait before the send
and half for the way from the downloader to the site, so tokens spent in time never crowd
a window of the site's. As the request leaves its download slot,
this downloader sends it if ``send_by`` has not passed; otherwise it counts one hit now
(``ThrottledQueues.hit``: one Redis round trip, for a late request only), waiting as the
windows say, and sends at once. A redirect or a retry of the task carries a spent
``send_by``, so it takes a hit of its own.
"""

import logging
import time
from typing import Any

from scrapy import Request
from scrapy.core.downloader import Downloader, Slot
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.utils.asyncio import call_later
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred

from crawler.context import JobContext

logger = logging.getLogger(__name__)


class DeadlineDownloader(Downloader):
    """Scrapy's downloader, checking a throttled request's ``send_by`` as it is sent."""

    async def _download(self, slot: Slot, request: Request) -> Response:
        info: dict[str, Any] = request.meta.get("crawlcluster") or {}
        send_by = info.get("send_by")
        if send_by is not None:
            if time.monotonic() > send_by:
                slot.transferring.add(request)      # the slot stays busy while it waits
                try:
                    await self._fresh_hit(info)
                finally:
                    slot.transferring.discard(request)
            info["send_by"] = 0.0      # spent: a redirect of the task takes a hit of its own
        return await super()._download(slot, request)

    async def _fresh_hit(self, info: dict[str, Any]) -> None:
        """Count one hit for the task's domain now, waiting while its windows are full."""
        context = JobContext.of(self.crawler)
        domain = info["task"]["domain"]
        stats: Any = self.crawler.stats
        stats.inc_value("crawlcluster/throttle/late_sends")
        # A hit counts as made when its call began: one whose answer came later than
        # a token may wait is as late as the request was, and is taken again.
        good_for = context.settings.getfloat("CRAWLCLUSTER_SCHEDULER_TICK") / 2
        while True:
            asked = time.monotonic()
            wait = context.queues.hit(context.job, context.spider_type, context.ip, domain,
                                      context.crawl_delays.get(domain))
            if wait == 0.0 and time.monotonic() - asked <= good_for:
                return
            if wait == 0.0:
                continue
            if wait < 0:
                raise IgnoreRequest(f"{domain} was blacklisted while its request waited")
            await _sleep(wait)


def _sleep(seconds: float) -> Any:
    done: Deferred[None] = Deferred()
    call_later(seconds, done.callback, None)
    return maybe_deferred_to_future(done)
