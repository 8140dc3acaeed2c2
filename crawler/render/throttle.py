"""A rendering browser's own requests under the cluster throttle, and where a rendered
page's wall time goes.

The page itself was fetched as its task, through the throttle. What its scripts fetch
(scripts, XHR; what ``render_load`` lets load) goes through the throttle of its domain
too, counted as this spider type's and IP's, and takes its turn among this process's
fetches of a slow domain, so nginx's log never shows the site more than its rate.
"""

import asyncio
import time
from typing import Any

from scrapy.crawler import Crawler

from crawler.context import JobContext
from crawler.scheduler.slots import throttled_slot
from master.siteconfig import domain_of


def spent(crawler: Crawler, what: str, since: float) -> None:
    """Where rendered pages' wall time goes, summed over the crawl's pages:
    ``verdict`` (waiting for their template's), ``slot`` (for one of the process's
    render slots), ``start`` (for a browser started or replaced), ``browser`` (loading
    them, ``quiet`` of which waiting for their requests to settle, ``throttle`` for the
    cluster throttle to let those go)."""
    stats: Any = crawler.stats
    stats.inc_value(f"crawlcluster/render/seconds/{what}", time.monotonic() - since)


class RenderThrottle:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.stats: Any = crawler.stats

    async def let_go(self, url: str) -> bool:
        """Wait until the throttle of ``url``'s domain counts one more request from this
        spider type and IP, and for its turn among this process's fetches of a slow
        domain; False for a blacklisted domain. The page's render timeout bounds the
        wait."""
        context, domain, asked = JobContext.of(self.crawler), domain_of(url), time.monotonic()
        while (wait := context.queues.hit(context.job, context.spider_type, context.ip,
                                          domain, context.crawl_delays.get(domain))) > 0:
            self.stats.inc_value("crawlcluster/render/requests_throttled")
            await asyncio.sleep(wait)
        if wait < 0:
            return False
        await self._turn(domain)
        spent(self.crawler, "throttle", asked)
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
