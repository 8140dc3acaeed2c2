"""A user spider's links: its Requests admitted as the cluster's links, and a
scrapy-redis spider's start-URL key read by the rounds, with an acknowledgement
(crawler/startkeys.py)."""

import logging
from typing import Any

from scrapy import Request, signals
from scrapy.crawler import Crawler

from crawler.context import JobContext
from crawler.scheduler.admission import LinkAdmission, NewLink
from crawler.startkeys import StartUrlKey
from crawler.taskrequests import RequestNotJSON
from crawler.userspider import UserCrawl

logger = logging.getLogger(__name__)


class UserLinks:
    def __init__(self, crawler: Crawler, context: JobContext, spider: Any,
                 admission: LinkAdmission) -> None:
        self.crawler = crawler
        self.stats: Any = crawler.stats
        self.spider = spider
        self.admission = admission
        self.crawl = UserCrawl(context, spider)
        self.start_key = StartUrlKey.of(spider, context.redis)

    def admit(self, request: Request, parent: dict[str, Any] | None) -> NewLink | None:
        """A user spider's Request (from a page, or a start request of its crawl when
        ``parent`` is None) as a ``NewLink``, or None if refused."""
        parent = parent or self.crawl.root
        crawlid = parent["task"]["crawlid"]
        self.admission.count(crawlid, "found")
        try:
            fields = self.crawl.link(request, start=parent is self.crawl.root)
        except (RequestNotJSON, ValueError) as exc:    # or a callback not the spider's
            logger.error("refusing %s: %s", request.url, exc)
            self.admission.refuse(crawlid, "not_json" if isinstance(exc, RequestNotJSON)
                                  else "callback")
            return None
        link = self.admission.admit(request.url, parent, fields.callback, fields.extra,
                                    fields.key)
        return None if link is None else link._replace(unfiltered=fields.unfiltered)

    def read_start_key_instead(self) -> float | None:
        """A scrapy-redis spider's start-URL key is read by the rounds: its own idle
        handler, which would keep it open for good, is disconnected. Returns its
        ``MAX_IDLE_TIME_BEFORE_CLOSE``, the idle timeout, if it sets one."""
        if self.start_key is None:
            return None
        self.crawler.signals.disconnect(self.spider.spider_idle, signal=signals.spider_idle)
        logger.info("reading start URLs from Redis key %r (a %s) with an acknowledgement",
                    self.start_key.key, self.start_key.kind)
        return float(self.spider.max_idle_time) if getattr(self.spider, "max_idle_time", 0) \
            else None

    def take_start_urls(self) -> tuple[list[Any], list[NewLink]]:
        """A batch of the start-URL key's entries (to acknowledge once pushed), and the
        links of the Requests the spider's ``make_request_from_data`` made of them."""
        if self.start_key is None:
            return [], []
        entries = self.start_key.peek()
        links = []
        for entry in entries:
            try:
                made = self.spider.make_request_from_data(entry)
            except Exception as exc:  # noqa: BLE001 - the user's code; the next entry goes on
                logger.error("start URL entry %r of %s made no request (removed): %s: %s",
                             entry, self.start_key.key, type(exc).__name__, exc)
                self.stats.inc_value("crawlcluster/start_urls/refused")
                continue
            for request in [made] if isinstance(made, Request) else list(made or ()):
                if (link := self.admit(request, None)) is not None:
                    links.append(link)
        self.stats.inc_value("crawlcluster/start_urls/taken", len(entries))
        return entries, links

    def acknowledge(self, entries: list[Any]) -> None:
        if entries and self.start_key is not None:
            self.start_key.acknowledge(entries)
