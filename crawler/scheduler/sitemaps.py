"""Sitemap changes: a revisited hub, sitemap or feed is recorded as visited, and the
pages its sitemap says changed since the last visit (``lastmod``) are taken out of the
crawl's Bloom filter, so they are crawled again.

Both need Redis, so a page's callback only notes the page (``note``); the round does
the rest (``settle``) under its Redis error handling, and a step done before an error is
not done again. Only the links the crawl admitted can have been crawled, so only those
are taken out of the filter (an entry refused as invalid never reaches it). Any other
error with one page is logged with its URL and counted, and the page's links are pushed
without its changes: one page never stops the round."""

import logging
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from scrapy.crawler import Crawler
from scrapy.http import Headers

from crawler.context import JobContext
from crawler.scheduler.admission import NewLink
from crawler.spiders import Follow
from master.bloomgen import KnownLinks
from master.frontier import Revisit
from master.tasks import Task

logger = logging.getLogger(__name__)


@dataclass
class RevisitedPage:
    info: dict[str, Any]          # the page's task, member and config
    revisit: Revisit
    headers: Headers              # its response's (the validators)
    links: list[Follow]           # every link it listed
    admitted: list[NewLink]       # those the crawl admits
    changed: set[str] | None = None    # URLs taken out of the filter, once done
    recorded: bool = False             # its visit recorded


class SitemapChanges:
    def __init__(self, crawler: Crawler, context: JobContext, known: KnownLinks) -> None:
        self.stats: Any = crawler.stats
        self.context = context
        self.known = known
        self.pending: deque[RevisitedPage] = deque()
        self.plain_bloom_warned: set[str] = set()   # crawls told their filter cannot forget

    def note(self, page: RevisitedPage) -> None:
        self.pending.append(page)

    def settle(self, into: list[NewLink]) -> None:
        """Record the noted pages' visits and take their changed pages out of the
        filter, and out of what this process knows it holds; their admitted links go
        ``into`` the list given, a changed page's marked to be crawled again."""
        while self.pending:
            page = self.pending[0]
            try:
                self._settle_page(page)
            except redis.RedisError:
                raise                     # the round retries the page next time
            except Exception:
                logger.exception("revisited page %s: its changes could not be read; its "
                                 "links are pushed as they are", page.info["task"]["url"])
                self.stats.inc_value("crawlcluster/scheduler/page_errors")
                page.changed = page.changed or set()
            self.pending.popleft()
            changed = {url.partition("#")[0] for url in page.changed or ()}
            into += [link._replace(recrawl=link.url in changed) for link in page.admitted]

    def _settle_page(self, page: RevisitedPage) -> None:
        """Take the page's changed links out of the filter, then record its visit."""
        if page.changed is None:
            page.changed = self._forget_changed(page.info["task"], page.admitted)
        if not page.recorded:
            self.context.hub_visited(page.headers, page.info["member"], page.info["config"],
                                     page.revisit, [link.url for link in page.links])
            page.recorded = True

    def _forget_changed(self, task: Task, links: list[NewLink]) -> set[str]:
        """Take the pages listed as changed since the page's last visit out of the
        crawl's filter (in counting mode; a plain one cannot forget, and the log says so
        once). ``links``: those the crawl admitted (valid, within its bounds). Returns
        the URLs taken out."""
        last_visit = self.context.frontier.hub_state(task).get("visited_at")
        if last_visit is None:
            return set()
        changed = [link for link in links
                   if modified_after((link.extra or {}).get("entry", {}).get("lastmod"),
                                     last_visit)]
        bloom = self.context.bloom
        if not changed:
            return set()
        if not bloom.params.counting:
            if task["crawlid"] not in self.plain_bloom_warned:
                self.plain_bloom_warned.add(task["crawlid"])
                logger.warning("crawl %s: %d pages changed since the last visit of %s are not "
                               "crawled again: the Bloom filter is plain "
                               "(CRAWLCLUSTER_BLOOM_COUNTING)", task["crawlid"], len(changed),
                               task["url"])
            return set()
        # Present in the crawl's scope: listed, so added, by an earlier visit.
        removed = bloom.remove_many([link.key for link in changed], scope=task["crawlid"])
        self.known.forget([link.key for link in changed], [task["crawlid"]] * len(changed))
        self.stats.inc_value("crawlcluster/links/changed", sum(removed))
        return {link.url for link, gone in zip(changed, removed, strict=True) if gone}


def modified_after(lastmod: str | None, moment: float) -> bool:
    """Whether a sitemap's ``lastmod`` (a W3C date or time; a date is midnight UTC) is
    after ``moment``; False if it is missing, unreadable or in the future (a server
    that says so would have its page crawled again at every visit)."""
    if not lastmod:
        return False
    try:
        when = datetime.fromisoformat(lastmod)
    except ValueError:
        return False
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return moment < when.timestamp() <= time.time() + 60
