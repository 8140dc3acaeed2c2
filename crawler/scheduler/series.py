"""A series' known pages at the link push: fetched again only when they may have changed,
and the pages due again swept in by each run's seed page.

A crawl with a ``lineage`` (a run of a schedule run as a series) looks up the detail
pages among its new links in what its series knows (``master.series.SeriesPages``, one
round trip a push). A page the series never fetched is queued as any link. One it has is
queued again only if it may have changed (``may_have_changed``): a sitemap's ``lastmod``
or a feed's date after its last fetch (read as ``sitemaps.modified_after`` reads a
revisited sitemap's), or its last fetch ``refetch_after`` seconds old (the crawl's, else
``CRAWLCLUSTER_SERIES_REFETCH_AFTER``); its task then carries the validators its last
fetch got, so the request is conditional. The rest are kept, not fetched (counted
``kept`` in the crawl's links), and not added to the run's Bloom filter: a later link to
the page, a sitemap's dated after its last fetch, still has it fetched. Hubs, lists and
the seed are never held back: each run reads them again.

A page due again that no page of the run links (taken off the lists, gone) would
never be asked: ``SeriesSweep`` lists the series' pages due, from the spider that fetched
the run's seed page, a part each round, as links of the seed page (each at its own depth).
The seed's task stays open until the sweep has listed them all, so a job that dies
half-way leaves the seed to another, which sweeps again (the Bloom filter keeps what was
queued already from being queued twice).
"""

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache
from scrapy.crawler import Crawler

from crawler.context import JobContext
from crawler.scheduler.admission import LinkAdmission, NewLink
from crawler.scheduler.sitemaps import modified_after
from crawler.userspider import is_user_crawl
from master.series import PageState
from master.siteconfig import domain_of

logger = logging.getLogger(__name__)

SWEEP_PART = 1000        # pages a sweep lists per round
KEPT_PAGES = 100_000     # pages kept (not fetched again) a process remembers


def is_detail(config: dict[str, Any], callback: str, extra: dict[str, Any] | None) -> bool:
    """Is a link's page a detail page of its crawl's rule (an item's page), rather than
    a hub or list the crawl reads each run? The precise spider's ``parse_detail``; a
    universal rule with ``fields``."""
    if callback == "parse_detail":
        return True
    if callback != "parse" or not extra or extra.get("rule_index") is None:
        return False
    rules = (config.get("rule") or {}).get("rules") or []
    index = extra["rule_index"]
    return isinstance(index, int) and 0 <= index < len(rules) and bool(rules[index].get("fields"))


def may_have_changed(state: PageState, extra: dict[str, Any] | None, now: float,
                     refetch_after: float) -> bool:
    """Should a page the series has be fetched again? When a sitemap or feed dates it
    after its last fetch, or that fetch is ``refetch_after`` seconds old."""
    entry = (extra or {}).get("entry") or {}
    dated = entry.get("lastmod") or entry.get("published")
    return now - state.at >= refetch_after or modified_after(dated, state.at)


def refetch_after(config: dict[str, Any], default: float) -> float:
    value = config.get("refetch_after")
    return float(value) if value is not None else default


def series_of(config: dict[str, Any]) -> str | None:
    """The lineage a crawl's pages are kept in, when it is a run of a series (a user
    spider's crawl never is: its items go through its project's pipelines)."""
    lineage = config.get("lineage")
    return str(lineage) if lineage and not is_user_crawl(config) else None


class SeriesLinks:
    """The push's look at what the series knows of its new links.

    A page kept (not fetched again) is not added to the run's Bloom filter: another
    link to it, a sitemap's dated after its last fetch, must still have it fetched. So
    that its next links cost no Redis call, the pages this process kept are remembered
    (``KEPT_PAGES`` of them, the least recently met forgotten first)."""

    def __init__(self, crawler: Crawler, context: JobContext,
                 admission: LinkAdmission) -> None:
        self.stats: Any = crawler.stats
        self.context = context
        self.admission = admission
        self.default_refetch = context.settings.getfloat("CRAWLCLUSTER_SERIES_REFETCH_AFTER")
        # (crawl id, canonical URL) -> the state of a page kept in that crawl
        self.kept: LRUCache[tuple[str, str], PageState] = LRUCache(KEPT_PAGES)

    def drop_kept(self, links: list[NewLink]) -> tuple[list[NewLink], list[NewLink]]:
        """``(the rest, kept)``: links to pages this process kept in their crawl, that
        still give no sign of a change, set apart before any Redis call."""
        if not self.kept:
            return links, []
        now = time.time()
        rest: list[NewLink] = []
        kept: list[NewLink] = []
        for link in links:
            state = self.kept.get((link.crawlid, link.key))
            if state is not None and not self._refetch(link, state, now):
                kept.append(link)
            else:
                rest.append(link)
        self._count_kept(kept)
        return rest, kept

    def select(self, links: list[NewLink]) -> tuple[list[NewLink], list[NewLink]]:
        """``(to queue, kept)``: the links to queue (a known page's with its validators),
        and the known pages not fetched again (counted ``kept``); one round trip."""
        tracked = [n for n, link in enumerate(links) if self._tracked(link)]
        if not tracked:
            return links, []
        states = self._states([links[n] for n in tracked])
        now = time.time()
        queued, kept = list(links), []
        for n in tracked:
            link = links[n]
            state = states.get((link.crawlid, link.key))
            if state is None:
                continue                                   # new to the series
            if self._refetch(link, state, now):
                queued[n] = link._replace(extra={**(link.extra or {}),
                                                 "validators": state.validators(now),
                                                 "full_at": state.full_at})
                self.kept.pop((link.crawlid, link.key), None)    # queued: a duplicate now
            else:
                kept.append(link)
                self.kept[link.crawlid, link.key] = state
        kept_ids = {id(link) for link in kept}
        self._count_kept(kept)
        return [link for link in queued if id(link) not in kept_ids], kept

    def _states(self, links: list[NewLink]) -> dict[tuple[str, str], PageState]:
        """The series' state of each link's page, by (crawl id, canonical URL)."""
        wanted: dict[str, list[str]] = {}
        for link in links:
            wanted.setdefault(str(link.parent["config"]["lineage"]), []).append(link.key)
        found = self.context.series.lookup(wanted)
        return {(link.crawlid, link.key): state for link in links
                if (state := found.get((str(link.parent["config"]["lineage"]), link.key)))}

    def _refetch(self, link: NewLink, state: PageState, now: float) -> bool:
        return may_have_changed(state, link.extra, now,
                                refetch_after(link.parent["config"], self.default_refetch))

    def _count_kept(self, kept: list[NewLink]) -> None:
        for link in kept:
            self.admission.count(link.crawlid, "kept")
        self.stats.inc_value("crawlcluster/series/kept", len(kept))

    @staticmethod
    def _tracked(link: NewLink) -> bool:
        config = link.parent["config"]
        return bool(series_of(config)) and not link.unfiltered \
            and is_detail(config, link.callback, link.extra)


@dataclass
class Sweep:
    """A run's sweep of its series' pages due again: where it has got to."""

    member: str                     # the seed page's task (held open until done)
    parent: dict[str, Any]          # the seed page's task and the crawl's config
    lineage: str
    cutoff: float                   # pages last fetched at or before this are due
    after: float = float("-inf")    # fetch time of the last page listed
    listed_at_after: set[str] = field(default_factory=set)
    listed: int = 0


class SeriesSweep:
    """The sweeps this job runs: each lists its series' due pages, a part a round."""

    def __init__(self, crawler: Crawler, context: JobContext) -> None:
        self.stats: Any = crawler.stats
        self.context = context
        self.sweeps: list[Sweep] = []
        self.default_refetch = context.settings.getfloat("CRAWLCLUSTER_SERIES_REFETCH_AFTER")

    def note(self, info: dict[str, Any]) -> None:
        """Start a sweep if ``info`` (a page's task, member and config) is a series
        run's seed page."""
        task, config = info["task"], info["config"]
        lineage = series_of(config)
        if lineage is None or task.get("depth", 0) != 0 or task["url"] != config.get("url") \
                or task.get("callback", "parse") != "parse":
            return
        cutoff = time.time() - refetch_after(config, self.default_refetch)
        self.context.tracker.item_out(info["member"])       # open until swept
        self.sweeps.append(Sweep(info["member"], {"task": task, "config": config}, lineage,
                                 cutoff))

    def links(self) -> list[NewLink]:
        """The next part of each sweep, as links of their seed pages; a sweep done lets
        its seed's task finish."""
        found: list[NewLink] = []
        for sweep in list(self.sweeps):
            due = self.context.series.due(sweep.lineage, sweep.cutoff, sweep.after,
                                          sweep.listed_at_after, SWEEP_PART)
            try:
                found += [link for key, _, state in due if state is not None
                          and (link := self._link(sweep, key, state)) is not None]
            except Exception:   # a state that makes no link: the sweep ends, the crawl goes on
                logger.exception("crawl %s: the sweep of series %s stopped",
                                 sweep.parent["task"]["crawlid"], sweep.lineage)
                self.stats.inc_value("crawlcluster/scheduler/page_errors")
                self._done(sweep)
                continue
            if due:
                last = due[-1][1]
                at_last = {key for key, score, _ in due if score == last}
                sweep.listed_at_after = (sweep.listed_at_after | at_last
                                         if last == sweep.after else at_last)
                sweep.after = last
                sweep.listed += len(due)
            if len(due) < SWEEP_PART:
                self._done(sweep)
        return found

    def _link(self, sweep: Sweep, key: str, state: PageState) -> NewLink | None:
        """A due page as a link of the seed page, at its own depth (None: blacklisted)."""
        task = dict(state.task)
        callback = str(task.pop("callback", "parse"))
        depth = int(task.pop("depth", 1))
        domain = domain_of(state.url)
        if self.context.site_config.is_blacklisted(domain):
            return None
        return NewLink(state.url, key, sweep.parent, domain, callback, task, depth=depth)

    def _done(self, sweep: Sweep) -> None:
        self.sweeps.remove(sweep)
        self.context.tracker.item_finished(sweep.member)
        self.context.tracker.count_links(sweep.parent["task"]["crawlid"], "swept",
                                         sweep.listed)
        self.stats.inc_value("crawlcluster/series/swept", sweep.listed)
        logger.info("crawl %s: %d pages of series %s due again listed", sweep.parent["task"]
                    ["crawlid"], sweep.listed, sweep.lineage)
