"""The link push: a round's new links are looked up in the Bloom filter in one batch,
those it has not seen are pushed to their shards' pools, and only then added to it.

A job killed at any point of that loses no link: one it pushed and did not add is
refused by the pools' dedupe window when a page crawled again yields it, and no page's
links ever bypass the filter: a link two jobs find new at once is queued once
(``Frontier.push_links``)."""

import logging
from collections import Counter
from typing import Any

import redis
from scrapy.crawler import Crawler

from crawler.context import JobContext
from crawler.scheduler.admission import LinkAdmission, NewLink, link_depth
from crawler.scheduler.replay import PushReplay
from crawler.scheduler.series import SeriesLinks
from master.bloomgen import KnownLinks
from master.tasks import Task, make_task

logger = logging.getLogger(__name__)


class LinkPush:
    def __init__(self, crawler: Crawler, context: JobContext, admission: LinkAdmission,
                 replay: PushReplay, known: KnownLinks) -> None:
        self.stats: Any = crawler.stats
        self.context = context
        self.admission = admission
        self.series = SeriesLinks(crawler, context, admission)
        self.replay = replay
        self.waiting: list[NewLink] = []     # admitted since the last push
        # links pushed whose Bloom filter add failed: (URL, crawl id), added next push
        self.unadded: list[tuple[str, str]] = []
        self.known = known           # links the filter holds, as far as this process knows

    def push(self, wake: bool = False) -> None:
        """Push the links waiting (``wake``: the job is short of work, so a dispatcher
        waiting between ticks is woken); on a Redis error they wait for the next round."""
        if self.unadded:
            unadded, self.unadded = self.unadded, []
            self.add_to_filter(unadded)
        if not self.waiting:
            return
        links, self.waiting = self.waiting, []
        try:
            self.filter_push_add(links, wake)
        except Exception:
            # Redis failed before the push was done (a failover, say): none of these
            # links is in the filter yet, so the next round looks them up again; what
            # the pools got already is refused there as pushed within the dedupe window.
            self.waiting = links + self.waiting
            raise

    def filter_push_add(self, links: list[NewLink], wake: bool = False) -> None:
        """Queue each page the crawl has neither seen nor queued, once: one link per
        canonical URL of its crawl, whatever fragment or spelling each came with; those
        the filter has not seen are pushed, then added to it (a series' page only if it
        may have changed: one kept is not added, scheduler/series.py). A user spider's request with
        ``dont_filter`` is queued as it is, and not added. Every link is counted new,
        kept, refused or duplicate."""
        filtered, kept_here = self.series.drop_kept([link for link in links
                                                     if not link.unfiltered])
        distinct = list(distinct_links(filtered).values())
        unseen = [link for link, seen in zip(distinct, self.seen(distinct), strict=True)
                  if not seen] + [link for link in links if link.unfiltered]
        wanted, kept = self.series.select(unseen)
        queued, stopped, refused = self.queue(wanted, wake)
        self._count(links, queued, stopped, refused + kept + kept_here)
        self.add_to_filter([(link.key, link.crawlid) for link in wanted if not link.unfiltered])

    def seen(self, links: list[NewLink]) -> list[bool]:
        """Whether the filter holds each link: those this process knows it holds are not
        looked up again (a changed page always is: it was just taken out)."""
        urls = [link.key for link in links]
        crawlids = [link.crawlid for link in links]
        seen = [known and not link.recrawl for known, link
                in zip(self.known.known(urls, crawlids), links, strict=True)]
        asked = [n for n, known in enumerate(seen) if not known]
        found = self.context.bloom.contains_many([urls[n] for n in asked],
                                                 scope=[crawlids[n] for n in asked])
        for n, held in zip(asked, found, strict=True):
            seen[n] = held
        held_urls = [n for n, held in zip(asked, found, strict=True) if held]
        self.known.remember([urls[n] for n in held_urls], [crawlids[n] for n in held_urls])
        self.stats.inc_value("crawlcluster/links/known", len(urls) - len(asked))
        return seen

    def queue(self, unseen: list[NewLink],
              wake: bool = False) -> tuple[list[Task], list[Task], list[NewLink]]:
        """Push the tasks of links the filter has not seen (within their crawls'
        ``domain_max_pages``). Returns the tasks queued, those refused as their crawl
        stopped, and the links refused here (``invalid``, ``domain_max_pages``)."""
        made = [(link, task) for link in unseen if (task := self._task_for(link))]
        kept = {id(task) for task in self._within_domain_limits([task for _, task in made])}
        pushed = [(link, task) for link, task in made if id(task) in kept]
        codes = self.context.frontier.push_links(
            [task for _, task in pushed], [link.recrawl or link.unfiltered for link, _ in pushed],
            wake=wake)
        outcomes = list(zip(pushed, codes, strict=True))
        self.replay.remember([(task, link.recrawl) for (link, task), code in outcomes
                              if code == "q"])
        queued = [task for (_, task), code in outcomes if code == "q"]
        stopped = [task for (_, task), code in outcomes if code == "s"]
        pushed_links = {id(link) for link, _ in pushed}
        return queued, stopped, [link for link in unseen if id(link) not in pushed_links]

    def add_to_filter(self, added: list[tuple[str, str]]) -> None:
        """Add pushed links (canonical URL, crawl id) to the filter and to what this
        process knows it holds; on a Redis error, next round."""
        try:
            self.context.bloom.add_many([key for key, _ in added],
                                        scope=[crawlid for _, crawlid in added])
            self.known.remember([key for key, _ in added], [crawlid for _, crawlid in added])
        except redis.RedisError as exc:
            # Pushed already: only the filter is behind, and catches up next round.
            logger.error("Redis error adding %d pushed links to the Bloom filter (added "
                         "next round): %s", len(added), exc)
            self.unadded += added

    def _count(self, links: list[NewLink], queued: list[Task], stopped: list[Task],
               refused: list[NewLink]) -> None:
        """Count each link of the push new, refused (its crawl stopped) or duplicate;
        those refused in ``queue``, or kept (a series' page), were counted there."""
        duplicates = Counter(link.crawlid for link in links)
        duplicates.subtract(task["crawlid"] for task in queued + stopped)
        duplicates.subtract(link.crawlid for link in refused)
        for task in queued:
            self.admission.count(task["crawlid"], "new")
        for task in stopped:
            self.admission.refuse(task["crawlid"], "stopped")
        for crawlid, count in duplicates.items():
            if count:
                self.admission.count(crawlid, "duplicate", count)
        self.stats.inc_value("crawlcluster/links/new", len(queued))
        self.stats.inc_value("crawlcluster/links/duplicate", sum(duplicates.values()))

    def _task_for(self, link: NewLink) -> Task | None:
        """The task for a new link (its parent's crawl, priority and user, unless the
        link has a priority of its own; one level deeper), or None (refused as
        ``invalid``) if it cannot be made."""
        parent = link.parent["task"]
        extra = dict(link.extra or {})
        priority = extra.pop("priority", parent.get("priority", 0))
        try:
            depth = link.depth if link.depth is not None else link_depth(parent)
            return make_task(link.url, parent["crawlid"], parent["spider_type"],
                             priority=priority, depth=depth,
                             userid=parent.get("userid"), callback=link.callback,
                             domain=link.domain, **extra)
        except ValueError as exc:
            logger.warning("refusing link %s: %s", link.url, exc)
            self.admission.refuse(parent["crawlid"], "invalid")
            return None

    def _within_domain_limits(self, tasks: list[Task]) -> list[Task]:
        """Drop tasks past their crawl's ``domain_max_pages`` (counted per domain)."""
        limited = [t for t in tasks if self._config(t).get("domain_max_pages")]
        if not limited:
            return tasks
        pipe = self.context.redis.pipeline(transaction=False)
        for task in limited:
            pipe.hincrby(self.context.keys.crawl_domain_pages(task["crawlid"], task["domain"]),
                         task["domain"])
        over = {id(task) for task, count in zip(limited, pipe.execute(), strict=True)
                if count > self._config(task)["domain_max_pages"]}
        for task in tasks:
            if id(task) in over:
                self.admission.refuse(task["crawlid"], "domain_max_pages")
        return [task for task in tasks if id(task) not in over]

    def _config(self, task: Task) -> dict[str, Any]:
        return self.context.crawls.load(task["crawlid"]) or {}


def distinct_links(links: list[NewLink]) -> dict[tuple[str, str], NewLink]:
    """One link per crawl and canonical URL, by ``(crawl id, canonical URL)``: the first
    found, or the first a changed sitemap entry asks to crawl again, with what every
    source of the round said of the page (a sitemap's ``lastmod`` is not lost to a hub's
    or a feed's link found first)."""
    first: dict[tuple[str, str], NewLink] = {}
    for link in links:
        name = (link.crawlid, link.key)
        kept = first.get(name)
        if kept is None:
            first[name] = link
        elif link.recrawl and not kept.recrawl:
            first[name] = with_entry_of(link, kept)
        else:
            first[name] = with_entry_of(kept, link)
    return first


def with_entry_of(link: NewLink, other: NewLink) -> NewLink:
    """``link`` with what ``other``'s source said of the page (its ``entry``: lastmod,
    published) where ``link``'s own says nothing."""
    theirs = (other.extra or {}).get("entry")
    if not theirs:
        return link
    mine = (link.extra or {}).get("entry") or {}
    merged = {**theirs, **mine}
    if merged == mine:
        return link
    return link._replace(extra={**(link.extra or {}), "entry": merged})
