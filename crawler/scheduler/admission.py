"""Link admission: what the crawl refuses before any Redis check (scheme, URL length,
malformed, depth, blacklist), and the counts ``info`` shows per crawl (found, then new, duplicate or
refused with its reason)."""

import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from scrapy.crawler import Crawler

from crawler.context import JobContext
from crawler.spiders import SOURCE_CALLBACKS, Follow
from crawler.urlshape import url_problem
from master.siteconfig import domain_of
from master.tasks import Task
from master.urls import canonical_url

logger = logging.getLogger(__name__)


class NewLink(NamedTuple):
    """A link a page yielded, waiting for the next round's filter check."""

    url: str                 # as the page spelt it, without its fragment: what is fetched
    key: str                 # its canonical URL (Scrapy's): what the crawl knows it by
    parent: dict[str, Any]   # the page's task and its crawl's config
    domain: str
    callback: str
    extra: dict[str, Any] | None   # spider fields for the link's task (the rule that took it)
    recrawl: bool = False   # a page its sitemap says changed: out of the filter, pushed again
    unfiltered: bool = False   # a user spider's dont_filter: queued without the filter
    depth: int | None = None   # its own depth (a series' page swept in), else its parent's + 1

    @property
    def crawlid(self) -> str:
        return str(self.parent["task"]["crawlid"])


class LinkAdmission:
    def __init__(self, crawler: Crawler, context: JobContext, url_length_limit: int) -> None:
        self.stats: Any = crawler.stats
        self.context = context
        self.url_length_limit = url_length_limit     # Scrapy's URLLENGTH_LIMIT; 0: none
        self.invalid = 0                 # links refused as malformed, and the last one
        self.invalid_example = ""

    def page_links(self, parent: dict[str, Any], links: list[Follow],
                   refused: Mapping[str, int]) -> list[NewLink]:
        """The links a page of ``parent`` (its task and crawl config) yielded that the
        crawl admits, counting them all: ``refused`` is how many more the crawl's rules
        turned away, by reason."""
        crawlid = parent["task"]["crawlid"]
        self.count(crawlid, "found", len(links) + sum(refused.values()))
        for reason, count in refused.items():
            self.refuse(crawlid, reason, count)
        invalid_before = self.invalid
        admitted = [link for url, callback, extra in links
                    if (link := self.admit(url, parent, callback, extra)) is not None]
        if self.invalid > invalid_before:
            logger.info("%d links of %s refused as malformed, such as %r (%s)",
                        self.invalid - invalid_before, parent["task"]["url"],
                        self.invalid_example[:300], url_problem(self.invalid_example))
        return admitted

    def admit(self, url: str, parent: dict[str, Any], callback: str,
              extra: dict[str, Any] | None, key: str | None = None) -> NewLink | None:
        """A link a page of ``parent`` yielded, as a ``NewLink``, or None if the crawl
        refuses it. Its task is made only once the filter finds it new (most links a
        page yields were seen before). It is known by its canonical URL unless given
        another ``key`` (a request fingerprint)."""
        reason = self.refusal(url, parent)
        if not reason:
            try:
                known_by = key or canonical_url(url)
            except ValueError:                    # what url_problem lets by, if anything
                reason = "invalid"
        if reason:
            if reason == "invalid":
                self.invalid += 1
                self.invalid_example = url
            self.refuse(parent["task"]["crawlid"], reason)
            return None
        return NewLink(url.partition("#")[0], known_by, parent, domain_of(url), callback, extra)

    def refusal(self, url: str, parent: dict[str, Any]) -> str | None:
        """Why the crawl refuses a link before any Redis check, or None."""
        return refusal(url, parent, self.url_length_limit, self.context.site_config.is_blacklisted)

    def count(self, crawlid: str, field: str, count: int = 1) -> None:
        """Count links of a crawl for ``info`` (``Keys.crawl_links``)."""
        self.context.tracker.count_links(crawlid, field, count)

    def refuse(self, crawlid: str, reason: str, count: int = 1) -> None:
        self.stats.inc_value(f"crawlcluster/links/refused/{reason}", count)
        self.count(crawlid, f"refused:{reason}", count)


def refusal(url: str, parent: dict[str, Any], url_length_limit: int,
            is_blacklisted: Callable[[str], bool]) -> str | None:
    """Why a crawl refuses a link a page of ``parent`` (its task and crawl config)
    yielded, before any Redis check: ``scheme``, ``url_length`` (over Scrapy's
    ``URLLENGTH_LIMIT``; 0: none), ``invalid`` (malformed: ``crawler.urlshape``),
    ``depth`` or ``blacklist``; None if it does not."""
    if not url[:8].lower().startswith(("http://", "https://")):
        return "scheme"
    if url_length_limit and len(url) > url_length_limit:
        return "url_length"
    if url_problem(url):
        return "invalid"
    maxdepth = parent["config"].get("maxdepth")
    if maxdepth is not None and link_depth(parent["task"]) > maxdepth:
        return "depth"
    if is_blacklisted(domain_of(url)):
        return "blacklist"
    return None


def link_depth(parent: Task) -> int:
    """The depth of a link a task's page yielded: one deeper, but the same for what a
    sitemap, feed or robots.txt lists (sources do not count as a level)."""
    step = 0 if parent.get("callback") in SOURCE_CALLBACKS else 1
    return int(parent.get("depth", 0)) + step
