"""What one spider process shares with the cluster.

``JobContext.of(crawler)`` builds, once per crawler, the clients (through the
one factory) and the master's parts this job uses: its job id, spider type,
host and ip, the live site config, the frontier, the throttled queues, the
job registry, the Bloom filter and the crawl store, plus the ``TaskTracker``
that knows when a taken task is finished. The scheduler, the middlewares and
the pipelines all reach it through the crawler.
"""

import hashlib
import logging
import os
import socket
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any, Self

from scrapy import Request, signals
from scrapy.crawler import Crawler
from scrapy.http import Headers
from scrapy.settings import BaseSettings
from twisted.internet.defer import Deferred

from crawler.metrics import count_recorded
from crawler.paused import PausedDomains
from crawler.versions import GonePage
from master.bloomgen import AgingBloomFilter
from master.counters import WindowCounts
from master.crawls import HUB_SPAN, CrawlStore
from master.figures import TOTAL
from master.frontier import Frontier, Outcome, Revisit
from master.keys import Keys
from master.lua import LuaScripts
from master.registry import JobRegistry
from master.series import SeriesPages
from master.siteconfig import SiteConfig, domain_of
from master.sitehealth import Measure, SiteCounts, queue_site_counts
from master.tasks import Task, decode_task
from master.throttle import ThrottledQueues
from settings.clients import mongo_client, redis_client, stop_zookeeper, zookeeper_client
from settings.loader import Settings, default_settings
from settings.node import node_ip

logger = logging.getLogger(__name__)

ROLE = "crawler"
COUNTED_STATUSES = (200, 301, 302, 303, 403, 404, 500)     # thesis table 4-8, and 302
# Seconds between two sends of a job's counts (statuses, throttle refusals, pages done):
# sent every round, a round's few pages would cost Redis three counter scripts more.
COUNTS_EVERY = 1.0
VALIDATORS = ("ETag", "Last-Modified")    # what a server says of a page for next time
REMEMBERED_OUTCOMES = 10_000    # reported outcomes a job keeps, to tell again after a failover


def cluster_settings(scrapy_settings: BaseSettings) -> Settings:
    """Our settings as the crawler's Scrapy settings hold them (with ``-s`` overrides)."""
    return Settings({name: scrapy_settings.get(name, default)
                     for name, default in default_settings().items()})


class JobContext:
    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.settings = settings = cluster_settings(crawler.settings)
        spider = crawler.spider
        assert spider is not None, "the job's context is made once its spider exists"
        self.spider_type = spider.name
        self.host = socket.gethostname()
        self.ip = node_ip(settings)
        self.node = settings["CRAWLCLUSTER_NODE_NAME"] or self.host
        self.job = (settings["CRAWLCLUSTER_JOB_ID"] or getattr(spider, "_job", None)
                    or f"{spider.name}-{self.host}-{os.getpid()}")
        self.redis = redis_client(settings, ROLE)
        self.zookeeper = zookeeper_client(settings, ROLE)
        self.mongo = mongo_client(settings, ROLE)
        self.keys = Keys.from_settings(settings)
        self.scripts = scripts = LuaScripts(self.redis)
        self.site_config = SiteConfig.from_settings(settings, self.zookeeper).start()
        self.frontier = Frontier.from_settings(self.redis, settings, scripts=scripts)
        self.queues = ThrottledQueues.from_settings(
            self.redis, settings, self.site_config, scripts=scripts,
            send_grace=settings.getfloat("CRAWLCLUSTER_SCHEDULER_TICK"))
        self.registry = JobRegistry.from_settings(self.redis, settings, scripts=scripts)
        self.bloom = AgingBloomFilter.from_settings(self.redis, settings)
        self.crawls = CrawlStore.from_settings(self.redis, settings)
        self.series = SeriesPages.from_settings(self.redis, settings, scripts)
        self.tracker = TaskTracker(self)
        # what the scheduler's round runs too (pipeline flushes; a Deferred while writing)
        self.periodic: list[Callable[[], Deferred[Any] | None]] = []
        self.crawl_delays: dict[str, float] = {}   # domain -> robots.txt Crawl-delay (s)
        self.paused = PausedDomains()     # pauses from pushback seen here (crawler/paused.py)
        # pages answered 404/410 (crawler/versions.py): marked gone when stored
        self.gone: list[GonePage] = []
        crawler.signals.connect(self._robots_parsed, signal=signals.robots_parsed)

    def _robots_parsed(self, robotparser: Any, request: Request) -> None:
        agent = request.headers.get(b"User-Agent") or b"*"
        delay = robotparser.crawl_delay(agent)
        domain = domain_of(request.url)
        self.crawl_delays.pop(domain, None)       # read again: it may have none now
        if delay:
            self.crawl_delays[domain] = float(delay)
            if len(self.crawl_delays) > self.settings.getint("CRAWLCLUSTER_ROBOTS_HOSTS"):
                del self.crawl_delays[next(iter(self.crawl_delays))]   # the oldest

    def revisit(self, config: dict[str, Any], task: Task) -> Revisit | None:
        """How the task's page is revisited, if it is a hub, sitemap or feed of a crawl
        with ``revisit`` (else None)."""
        bounds = config.get("revisit")
        if bounds is None or task["url"] not in revisited_urls(config):
            return None
        settings = self.settings
        return Revisit(minimum=bounds.get("min", settings.getfloat("CRAWLCLUSTER_REVISIT_MIN")),
                       maximum=bounds.get("max", settings.getfloat("CRAWLCLUSTER_REVISIT_MAX")))

    def conditional_headers(self, task: Task) -> dict[str, str]:
        """If-None-Match / If-Modified-Since from what the last visit of a hub stored."""
        state = self.frontier.hub_state(task)
        return {header: state[name] for name, header in
                (("etag", "If-None-Match"), ("last_modified", "If-Modified-Since"))
                if state.get(name)}

    def hub_visited(self, headers: Headers, member: str, config: dict[str, Any],
                    revisit: Revisit, urls: list[str]) -> None:
        """Record a revisited page's visit: the fingerprint of the URLs it lists now and
        its validators from its response's ``headers`` (the next visit asks with them)."""
        fingerprint = hashlib.sha1("\n".join(sorted(urls)).encode()).hexdigest()
        validators = {header: value.decode("latin-1") for header in VALIDATORS
                      if (value := headers.get(header))}
        self.frontier.hub_visited(member, fingerprint, validators, revisit,
                                  config.get("hub_span", HUB_SPAN))

    @classmethod
    def of(cls, crawler: Crawler) -> "JobContext":
        context: JobContext | None = getattr(crawler, "crawlcluster", None)
        if context is None:
            context = cls(crawler)
            crawler.crawlcluster = context  # type: ignore[attr-defined]
        return context

    def close(self) -> None:
        """Close every client, each whatever the others did: a ZooKeeper client left
        running retries its server for good and keeps the process alive."""
        for close in (lambda: stop_zookeeper(self.zookeeper), self.mongo.close,
                      self.redis.close):
            try:
                close()
            except Exception as exc:  # noqa: BLE001 - the next client still closes
                logger.warning("closing the job's clients: %s", exc)


def revisited_urls(config: dict[str, Any]) -> set[str]:
    """The pages a crawl revisits: its hubs, sitemaps and feeds."""
    return {url for name in ("hubs", "sitemaps", "feeds") for url in config.get(name) or ()}


class ClusterComponent:
    """Base of the Scrapy components that reach the job's context through the crawler
    (built lazily: middlewares exist before the scheduler opens the job)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    @property
    def context(self) -> JobContext:
        return JobContext.of(self.crawler)


class TaskTracker:
    """When is a taken task finished? When its page's output is all out (links
    pushed to the frontier) and every item it produced is stored or dropped.
    Only then is it acknowledged, so a job dying at any moment leaves the task
    leased, and the lease brings it back: nothing is lost.
    """

    def __init__(self, context: JobContext) -> None:
        self.context = context
        self.open: dict[str, int] = {}          # task member -> items not yet stored or dropped
        self.output_done: dict[str, float] = {}  # task member -> when its page's output ended
        self.outcomes: list[Outcome] = []       # (member, outcome, reason) to report
        self.statuses: Counter[int | str] = Counter()  # HTTP status (or "other") -> uncounted
        # crawlid -> Counter(pages=, items=, failures=) not yet recorded
        self.progress: dict[str, Counter[str]] = {}
        self.links: dict[str, Counter[str]] = {}   # crawlid -> link counts not yet reported
        # crawlid -> items new, changed, unchanged, gone not yet reported (Keys.crawl_changes)
        self.changes: dict[str, Counter[str]] = {}
        self.throttled: Counter[str] = Counter()   # domain -> takes the throttle refused
        self.sites = SiteCounts()                  # per crawl and site (master/sitehealth.py)
        self.done_uncounted = 0                    # pages done not yet in the WRR counter
        self.counted_at = 0.0                      # when the counts were last sent
        self.done_count = 0
        # member -> (outcome, reason) of the last tasks reported: told again if a failover
        # lost the report (``reconcile``)
        self.reported: OrderedDict[str, tuple[str, str]] = OrderedDict()
        # what else is written with each report's outcomes, on its pipeline (a series'
        # pages once their tasks are done: crawler/series.py)
        self.outcome_writers: list[Callable[[list[Outcome], Any], None]] = []

    def begin(self, member: str) -> None:
        self.open.setdefault(member, 0)

    def item_out(self, member: str) -> None:
        self.open[member] = self.open.get(member, 0) + 1

    def item_finished(self, member: str) -> None:
        if member in self.open:
            self.open[member] -= 1

    def page_finished(self, member: str) -> None:
        self.output_done.setdefault(member, time.monotonic())

    def fail(self, member: str, outcome: str, reason: str) -> None:
        """Report a task that could not be crawled ("retry" or "failed")."""
        self.open.pop(member, None)
        self.output_done.pop(member, None)
        self.outcomes.append((member, outcome, reason))

    def ready_to_ack(self, settled_before: float) -> list[str]:
        """Tasks whose output ended before ``settled_before`` and have no open items."""
        ready = [member for member, ended in self.output_done.items()
                 if ended < settled_before and self.open.get(member, 0) <= 0]
        for member in ready:
            del self.output_done[member]
            self.open.pop(member, None)
            self.outcomes.append((member, "done", ""))
        return ready

    def count_status(self, status: int) -> None:
        self.statuses[status if status in COUNTED_STATUSES else "other"] += 1

    def count_links(self, crawlid: str, field: str, count: int = 1) -> None:
        """Count links of a crawl as ``field`` (found, new, duplicate, refused:<reason>),
        reported with the next outcomes (``Keys.crawl_links``)."""
        if count:
            self.links.setdefault(crawlid, Counter())[field] += count

    def report(self, force: bool = False) -> int:
        """Send outcomes and link counts in one round trip, with the other counts
        (statuses, throttle refusals, pages done) once every ``COUNTS_EVERY`` seconds or
        when ``force``d; return how many outcomes were done."""
        counts_due = force or time.monotonic() - self.counted_at >= COUNTS_EVERY
        if not self.outcomes and not self.links and not self.changes \
                and not (counts_due and self._counts_pending()):
            return 0
        outcomes, self.outcomes = self.outcomes, []
        links, self.links = self.links, {}
        changes, self.changes = self.changes, {}
        done = sum(1 for _, outcome, _ in outcomes if outcome == "done")
        pipe = self.context.redis.pipeline(transaction=False)
        keys = self.context.keys
        for key, per_crawl in ((keys.crawl_links, links), (keys.crawl_changes, changes)):
            for crawlid, counts in per_crawl.items():
                for field, count in counts.items():
                    pipe.hincrby(key(crawlid), field, count)
        codes = self.context.frontier.finish_many(outcomes, pipe=pipe) if outcomes else None
        for write in self.outcome_writers:
            write(outcomes, pipe)
        counted = self._queue_counts(pipe, done) if counts_due else None
        try:
            results = pipe.execute()
        except Exception:
            # Reported again next round: a lease finished twice is counted once.
            self.outcomes = outcomes + self.outcomes
            for kept, per_crawl in ((self.links, links), (self.changes, changes)):
                for crawlid, counts in per_crawl.items():
                    kept.setdefault(crawlid, Counter()).update(counts)
            if counted is not None:
                self._restore_counts(*counted)
            raise
        if counted is None:
            self.done_uncounted += done
        if outcomes:
            self._count_progress(outcomes, codes(results))  # type: ignore[misc]  # set if outcomes
            self._remember(outcomes)
        self.done_count += done
        return done

    def _counts_pending(self) -> bool:
        return bool(self.statuses or self.throttled or self.done_uncounted or self.sites)

    def _queue_counts(self, pipe: Any, done_now: int) -> tuple[
            Counter[int | str], Counter[str], int, dict[str, Counter[Measure]]]:
        """Queue the counts not yet sent, with ``done_now`` pages done by this report, on
        ``pipe`` and clear them; return them without ``done_now`` (put back if the
        pipeline fails: the outcomes are reported again)."""
        statuses, self.statuses = self.statuses, Counter()
        throttled, self.throttled = self.throttled, Counter()
        earlier, self.done_uncounted = self.done_uncounted, 0
        sites = self.sites.take()
        done = earlier + done_now
        self.counted_at = time.monotonic()
        context = self.context
        if throttled:
            key = context.keys.throttle_refusals()
            for domain, count in throttled.items():
                pipe.zincrby(key, count, domain)
            pipe.zincrby(key, sum(throttled.values()), TOTAL)
        for status, count in statuses.items():
            for name in (f"spider:{context.spider_type}:{status}",
                         f"machine:{context.host}:{status}"):
                WindowCounts(context.redis, context.keys.window_counts(name),
                             scripts=context.scripts).increment(count, pipe=pipe)
        if done:
            context.registry.count_done(context.job, done, pipe=pipe)
        queue_site_counts(pipe, context.scripts, context.keys, sites,
                          retention=context.settings.getfloat("CRAWLCLUSTER_CRAWL_RETENTION"))
        return statuses, throttled, earlier, sites

    def _restore_counts(self, statuses: Counter[int | str], throttled: Counter[str],
                        done: int, sites: dict[str, Counter[Measure]]) -> None:
        self.statuses.update(statuses)
        self.throttled.update(throttled)
        self.done_uncounted += done
        self.sites.restore(sites)

    def _remember(self, outcomes: list[Outcome]) -> None:
        for member, outcome, reason in outcomes:
            self.reported[member] = (outcome, reason)
            self.reported.move_to_end(member)
        while len(self.reported) > REMEMBERED_OUTCOMES:
            self.reported.popitem(last=False)

    def reconcile(self, held: set[str]) -> tuple[int, int]:
        """After Redis failed under the job (a failover's promoted replica lacks the last
        writes it acknowledged), find the leases Redis says this job holds that it does
        not (``held``: taken and not yet reported): one it reported is reported again
        (its finish was lost), any other goes back to the pool. Without this they would
        wait out ``CRAWLCLUSTER_LEASE_SECONDS``. Returns (reported again, released)."""
        stray = [member for member in self.context.frontier.leases_of(self.context.job)
                 if member not in held and member not in self.open]
        again = [(member, *self.reported[member]) for member in stray if member in self.reported]
        released = [(member, "release", "lease lost track of in a Redis failover")
                    for member in stray if member not in self.reported]
        self.outcomes += again + released
        return len(again), len(released)

    def _count_progress(self, outcomes: list[Outcome], results: list[int]) -> None:
        """Per crawl, pages done and URLs failed for good (for the crawl record), and
        the same in the job's stats."""
        stats = self.context.crawler.stats
        assert stats is not None
        counted: Counter[str] = Counter()
        for (member, _, _), result in zip(outcomes, results, strict=True):
            field = {1: "pages", 3: "failures"}.get(result)
            if field:
                crawlid = decode_task(member)["crawlid"]
                self.progress.setdefault(crawlid, Counter())[field] += 1
                counted[field] += 1
        for field, stat in (("pages", "done"), ("failures", "failed")):
            if counted[field]:
                stats.inc_value(f"crawlcluster/pages/{stat}", counted[field])
        count_recorded(self.context.spider_type, counted)
