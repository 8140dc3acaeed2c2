"""``CrawlEvents``: a monitor's look at the crawls, turning what it sees into events.

Each look takes the newest crawls of the index and the next stretch of the older ones (a
cursor going round them, so a crawl past the newest is looked at too, however many the
index holds) and, for each not ended yet (its
``finished`` or ``failed`` event not claimed), reads its progress (master/crawls.py) and
its health per site (master/sitehealth.py), and keeps in ``Keys.event_watch`` what its
progress was when it last changed and its sites' counts at the last coverage check:

- ``started``: the crawl is in the index;
- ``stalled``: work pending and paused not, and no progress for ``stall_seconds``;
- ``site_broken``: a site's field coverage since the last check fell under the threshold
  (``sitechecks``), or at the end over the whole crawl, or its items fell;
- ``finished`` or ``failed``: it was stopped, or nothing of it is pending and it made
  progress, and its counts stayed as they are for ``settle`` seconds (a revisit crawl runs
  until stopped). ``failed`` when every request failed or it gave no items.

Every monitor may look; the claims make each event one.
"""

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from master.counters import Clock
from master.crawls import CrawlConfig, CrawlStore
from master.keys import Keys
from master.rules import SPIDER_TYPES, field_names
from master.schedules import schedule_of
from message_processing.events import claim_ttl, make_event
from message_processing.events.outbox import EventOutbox
from message_processing.events.sitechecks import (
    Broken,
    SiteFigures,
    Thresholds,
    covered_fields,
    final_checks,
    judged,
    recent_coverage,
)
from settings.clients import RedisClient
from settings.loader import Settings

logger = logging.getLogger(__name__)
SiteReader = Callable[[str], dict[str, SiteFigures]]     # crawl id -> its sites' figures
State = dict[str, Any]       # a crawl's entry in Keys.event_watch


@dataclass(frozen=True)
class WatchOptions:
    crawls: int = 200
    settle: float = 5.0
    stall_seconds: float = 600.0
    claim_ttl: float = 8 * 86400.0
    limits: Thresholds = field(default_factory=Thresholds)
    site_broken_max: int = 20

    @classmethod
    def from_settings(cls, settings: Settings) -> "WatchOptions":
        return cls(settings.getint("CRAWLCLUSTER_EVENTS_CRAWLS"),
                   settings.getfloat("CRAWLCLUSTER_EVENTS_SETTLE"),
                   settings.getfloat("CRAWLCLUSTER_EVENTS_STALL_SECONDS"),
                   claim_ttl(settings),
                   Thresholds(settings.getfloat("CRAWLCLUSTER_EVENTS_COVERAGE_MIN"),
                              settings.getint("CRAWLCLUSTER_EVENTS_SITE_MIN_ITEMS"),
                              settings.getfloat("CRAWLCLUSTER_EVENTS_PREVIOUS_RUN_SHARE")),
                   settings.getint("CRAWLCLUSTER_EVENTS_SITE_BROKEN_MAX"))


class CrawlEvents:
    def __init__(self, client: RedisClient, keys: Keys, outbox: EventOutbox,
                 read_sites: SiteReader, options: WatchOptions,
                 clock: Clock = time.time) -> None:
        self.client = client
        self.keys = keys
        self.outbox = outbox
        self.read_sites = read_sites
        self.options = options
        self.clock = clock
        self.crawls = CrawlStore(client, keys)
        self.older_cursor = 0      # rank, past the newest, of the older crawls looked at next

    def run_once(self) -> int:
        """Look at the crawls not ended; returns how many were looked at."""
        self.forget_retired()
        index = self.crawls_to_look_at()
        ended = self.outbox.claimed([f"{crawlid}:ended" for crawlid, _ in index])
        self.outbox.keep([f"{crawlid}:ended" for (crawlid, _), done
                          in zip(index, ended, strict=True) if done])
        open_crawls = [(crawlid, submitted) for (crawlid, submitted), done
                       in zip(index, ended, strict=True) if not done]
        if not open_crawls:
            return 0
        raw = self.client.hmget(self.keys.event_watch(), [c for c, _ in open_crawls])
        for (crawlid, submitted), state in zip(open_crawls, raw, strict=True):
            config = self.crawls.load(crawlid)
            if config is not None:
                self.look(config, submitted, json.loads(state) if state else None)
        return len(open_crawls)

    def crawls_to_look_at(self) -> list[tuple[str, float]]:
        """``(crawl id, submitted)`` of the newest ``crawls`` of the index and of the next
        ``crawls`` older ones: at most twice ``crawls`` a look, and every crawl looked at
        within a round of the older ones (their number over ``crawls`` looks)."""
        size = self.options.crawls
        start = size + self.older_cursor
        pipe = self.client.pipeline(transaction=True)
        pipe.zrevrange(self.keys.crawls(), 0, size - 1, withscores=True)
        pipe.zrevrange(self.keys.crawls(), start, start + size - 1, withscores=True)
        newest, older = pipe.execute()
        self.older_cursor = self.older_cursor + size if len(older) == size else 0
        return list(dict(newest + older).items())

    def forget_retired(self) -> None:
        """Drop the watch entries of crawls no longer in the index (retired unended)."""
        names = self.client.hkeys(self.keys.event_watch())
        if names:
            submitted = self.client.zmscore(self.keys.crawls(), names)
            gone = [name for name, score in zip(names, submitted, strict=True) if score is None]
            if gone:
                self.client.hdel(self.keys.event_watch(), *gone)

    def look(self, config: CrawlConfig, submitted: float, state: State | None) -> None:
        crawlid = config["crawlid"]
        now = self.clock()
        if state is None:
            self.emit("started", config, {"url": config.get("url"), "submitted_at": submitted})
            state = {"sig": None, "since": now, "sites": {}}
        progress = self.crawls.progress(crawlid)
        summary = summarise(progress)
        signature = [summary[name] for name in ("pages", "failures", "items", "dropped",
                                                "pending")]
        if signature != state["sig"]:
            state.update(sig=signature, since=now)
        sites = self.read_sites(crawlid)
        self.check_recent(config, sites, state)
        quiet = now - state["since"]
        if self.has_ended(config, progress) and (progress["stopped"]
                                                 or quiet >= self.options.settle):
            self.end(config, summary, sites, submitted, state)
            self.client.hdel(self.keys.event_watch(), crawlid)
            return
        if (progress["total_pending"] and not progress["paused"]
                and quiet >= self.options.stall_seconds):
            self.emit("stalled", config, {**summary, "idle_seconds": round(quiet, 1)})
        self.client.hset(self.keys.event_watch(), crawlid, json.dumps(state, sort_keys=True))

    def check_recent(self, config: CrawlConfig, sites: dict[str, SiteFigures],
                     state: State) -> None:
        """``site_broken`` for fields whose coverage fell since the last check."""
        for site, figures in sites.items():
            found, kept = recent_coverage(site, figures, state["sites"].get(site),
                                          self.options.limits)
            self.emit_broken(config, found, state)
            if kept is not None:
                state["sites"][site] = kept

    @staticmethod
    def has_ended(config: CrawlConfig, progress: dict[str, Any]) -> bool:
        counts = progress["counts"]
        worked = sum(counts.get(name, 0) for name in ("done", "failed", "dropped", "purged"))
        revisits = bool(config.get("hubs") or config.get("revisit"))
        return bool(progress["stopped"]) or (
            progress["total_pending"] <= 0 and worked > 0 and not revisits)

    def end(self, config: CrawlConfig, summary: dict[str, Any],
            sites: dict[str, SiteFigures], submitted: float, state: State) -> None:
        """The crawl's last events: site_broken found over its whole run, then finished
        or failed with its summary."""
        schedule = schedule_of(config["crawlid"])
        previous, previous_had = self.previous_run(schedule)
        had = {site: sorted({*previous_had.get(site, ()), *state["sites"].get(site, {}).get(
            "had", ())}) for site in {*state["sites"], *previous_had}}
        self.emit_broken(config, final_checks(sites, self.options.limits, previous, had),
                         state)
        ended_at = state["since"]
        data = {**summary, "started_at": submitted, "ended_at": ended_at,
                "duration": round(max(ended_at - submitted, 0.0), 3),
                "sites": {site: {"pages": f.pages, "items": f.items,
                                 "coverage": {name: round(n / judged(f, name), 4)
                                              if judged(f, name) else 0.0
                                              for name, n in f.matched.items()}}
                          for site, f in sorted(sites.items())}}
        reason = failure_of(summary, expects_items(config))
        if reason:
            data["reason"] = reason
        kind = "failed" if reason else "finished"
        self.emit(kind, config, data, claim=f"{config['crawlid']}:ended")
        if schedule and not reason:
            self.client.set(self.keys.schedule_last_sites(schedule), json.dumps(
                {"items": {site: f.items for site, f in sites.items()},
                 "had": covered_fields(sites, self.options.limits)}),
                ex=int(self.options.claim_ttl))

    def previous_run(self, schedule: str | None
                     ) -> tuple[dict[str, int] | None, dict[str, list[str]]]:
        """The schedule's previous run: its items per site, and the fields each site had
        over it (a layout changed between two runs is judged against them)."""
        raw = self.client.get(self.keys.schedule_last_sites(schedule)) if schedule else None
        if not raw:
            return None, {}
        stored = json.loads(raw)
        if isinstance(stored.get("items"), dict):
            return stored["items"], stored.get("had", {})
        return stored, {}                     # written before the fields were kept

    def emit_broken(self, config: CrawlConfig, found: list[Broken], state: State) -> None:
        """``site_broken`` for each finding, at most ``site_broken_max`` a crawl (counted
        in its watch state; the findings past it are logged once)."""
        for broken in found:
            if state.get("broken", 0) >= self.options.site_broken_max:
                if not state.get("capped"):
                    state["capped"] = True
                    logger.warning("crawl %s: %d site_broken events sent, no more "
                                   "(CRAWLCLUSTER_EVENTS_SITE_BROKEN_MAX); `crawlcluster "
                                   "sites` shows every site", config["crawlid"],
                                   state["broken"])
                return
            if self.emit("site_broken", config, {"reason": broken.reason, **broken.details},
                         site=broken.site, field=broken.field, reason=broken.reason):
                state["broken"] = state.get("broken", 0) + 1

    def emit(self, kind: str, config: CrawlConfig, data: dict[str, Any],
             site: str | None = None, field: str | None = None,
             claim: str | None = None, reason: str | None = None) -> bool:
        event = make_event(kind, config, data, site, field, now=self.clock(), reason=reason)
        return self.outbox.claim(claim or event["id"], event)


def summarise(progress: dict[str, Any]) -> dict[str, Any]:
    """A crawl's figures for its events: pages fetched, requests failed for good, items
    stored, tasks dropped, pending, stopped."""
    counts, changes = progress["counts"], progress["changes"]
    return {"pages": counts.get("done", 0), "failures": counts.get("failed", 0),
            "items": sum(changes.get(name, 0) for name in ("new", "changed", "unchanged")),
            "dropped": counts.get("dropped", 0), "pending": progress["total_pending"],
            "stopped": progress["stopped"]}


def failure_of(summary: dict[str, Any], expects_items: bool = True) -> str | None:
    """Why an ended crawl failed, or None: every request failed, or no items where its
    rule has fields to make them."""
    if summary["failures"] and not summary["pages"]:
        return "every request failed"
    if expects_items and not summary["items"] and not summary["stopped"]:
        return "no items"
    return None


def expects_items(config: CrawlConfig) -> bool:
    """Whether a crawl's pages make items the cluster stores: a rule of the cluster's
    spiders with fields (one that only follows links makes none; a user spider's items
    go through its own pipelines, uncounted here)."""
    spider_type, rule = config.get("spider_type"), config.get("rule")
    if spider_type not in SPIDER_TYPES or not isinstance(rule, dict):
        return False
    try:
        return bool(field_names(spider_type, rule))
    except (KeyError, TypeError, AttributeError):
        return False
