"""Scrapy's scheduler interface over the master's Redis frontier, and the round.

Every ``CRAWLCLUSTER_SCHEDULER_TICK`` seconds one round, Redis never called once per
request (steps 1 and 2 every ``BUSY_WRITES_EVERY`` rounds while over half the ready
requests are left: Redis pays per call, and the job then waits for none of what they
write):
  1. the links pages yielded since the last push are pushed (linkpush.py);
  2. finished tasks are acknowledged, failed ones reported, in one round trip;
  3. once half or fewer of ``CRAWLCLUSTER_SCHEDULER_READY`` requests are ready, the
     job takes tasks from its queues, or another job's backlog (taking.py);
  4. the job's heartbeat is refreshed.
Every Redis call of the scheduler is made in a round (or at close), under its error
handling: a page's callback only notes its links. Once Redis answers again after an
error, what a failover lost is pushed again (replay.py). No exception leaves a round (its
``LoopingCall`` would stop for good): one page's or task's error is logged with its URL,
counted (``crawlcluster/scheduler/*_errors``), and the round goes on.
"""

import logging
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import redis
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response
from scrapy.utils.reactor import CallLaterOnce
from twisted.internet import task as twisted_task
from twisted.internet.defer import Deferred, DeferredList

from crawler.context import JobContext
from crawler.metrics import set_job_tasks
from crawler.scheduler.admission import LinkAdmission
from crawler.scheduler.linkpush import LinkPush
from crawler.scheduler.replay import PushReplay
from crawler.scheduler.series import SeriesSweep
from crawler.scheduler.sitemaps import RevisitedPage, SitemapChanges
from crawler.scheduler.taking import Taker
from crawler.scheduler.taskrequest import TaskRequests
from crawler.scheduler.userlinks import UserLinks
from crawler.spiders import ClusterSpider, Follow
from master.bloomgen import KnownLinks
from master.urls import canonical_url

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = 1.0     # seconds
BUSY_WRITES_EVERY = 3     # ticks between a busy job's pushes and reports (``_writes_due``)
# A job short of work (``short_of_work``) pushes a page's links at once, waking a
# dispatcher, and looks for the tasks that brings every QUICK_LOOK seconds for QUICK_FOR
# seconds: each level of a crawl's start (home, lists, articles) then takes milliseconds
# instead of a tick, a dispatcher's pause and another tick.
QUICK_LOOK = 0.01
QUICK_FOR = 0.1


class ClusterScheduler:
    def __init__(self, crawler: Crawler, context: JobContext, tick: float, ready_size: int,
                 idle_timeout: float, url_length_limit: int = 0, known_links: int = 0) -> None:
        self.crawler = crawler
        self.context = context
        self.stats: Any = crawler.stats
        self.tick = tick
        self.ready_size = ready_size
        self.idle_timeout = idle_timeout
        self.concurrency = crawler.settings.getint("CONCURRENT_REQUESTS")
        self.ready: deque[Request] = deque()
        self.admission = LinkAdmission(crawler, context, url_length_limit)
        known = KnownLinks(context.bloom, known_links)
        self.push = LinkPush(crawler, context, self.admission, PushReplay(context), known)
        self.sitemaps = SitemapChanges(crawler, context, known)
        self.sweep = SeriesSweep(crawler, context)
        self.user: UserLinks | None = None     # a user spider's (crawler/userspider.py)
        self.taker: Taker | None = None
        self.loop: twisted_task.LoopingCall | None = None
        self.idle_since: float | None = None     # when the engine last went idle
        self.last_beat = 0.0
        self.last_writes = 0.0
        self.quick = CallLaterOnce(self.round)   # a round sooner than the tick
        self.quick_until = 0.0             # quick rounds go on until then while short
        # when a round first failed on Redis (None: the last round worked)
        self.redis_failed_at: float | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "ClusterScheduler":
        context = JobContext.of(crawler)
        settings = context.settings
        scheduler = cls(crawler, context, settings.getfloat("CRAWLCLUSTER_SCHEDULER_TICK"),
                        settings.getint("CRAWLCLUSTER_SCHEDULER_READY"),
                        settings.getfloat("CRAWLCLUSTER_IDLE_TIMEOUT"),
                        crawler.settings.getint("URLLENGTH_LIMIT"),
                        settings.getint("CRAWLCLUSTER_KNOWN_LINKS"))
        crawler.signals.connect(scheduler.spider_idle, signal=signals.spider_idle)
        return scheduler

    # --- Scrapy's scheduler interface ---------------------------------------------------

    def open(self, spider: Spider) -> None:
        if hasattr(spider, "link_sink"):
            spider.link_sink = self.add_links
        if hasattr(spider, "seen_sink"):
            spider.seen_sink = self.mark_seen
        context = self.context
        if not isinstance(spider, ClusterSpider):
            self.user = UserLinks(self.crawler, context, spider, self.admission)
            self.idle_timeout = self.user.read_start_key_instead() or self.idle_timeout
        self.taker = Taker(self.crawler, context, self.ready,
                           TaskRequests(context, spider, self.user.crawl if self.user else None),
                           self.tick, self.ready_size)
        context.registry.register(context.job, context.spider_type, context.host, context.ip,
                                  node=context.node)
        logger.info("job %s (%s on %s, ip %s) registered", context.job, context.spider_type,
                    context.host, context.ip)
        self.loop = twisted_task.LoopingCall(self.round)
        self.loop.start(self.tick, now=True)

    def close(self, reason: str) -> Deferred[Any] | None:
        if self.loop and self.loop.running:
            self.loop.stop()
        self.quick.cancel()
        set_job_tasks(self.context.spider_type, self.context.job, 0)
        try:
            self._give_back(reason)
            # The last progress still goes to the crawl record before the clients close.
            writes = [d for d in (flush() for flush in self.context.periodic) if d is not None]
        except Exception as exc:  # noqa: BLE001 - the clients close whatever failed
            # Redis or MongoDB down at shutdown: what the job held comes back once its
            # heartbeat is gone, as after a crash.
            logger.error("job %s could not give its work back while closing (it comes back "
                         "once its heartbeat is gone): %s", self.context.job, exc)
            writes = []
        if not writes:
            self.context.close()
            return None
        return DeferredList(writes).addBoth(lambda _: self.context.close())

    def _give_back(self, reason: str) -> None:
        """Push the last links, report what is finished, release what is not, and leave
        the registry (queued tasks back to the pools)."""
        tracker = self.context.tracker
        self.push_links(start_urls=False)
        tracker.ready_to_ack(float("inf"))
        for request in self.ready:
            tracker.fail(request.meta["crawlcluster"]["member"], "release", "job closing")
        for member in list(tracker.open):
            tracker.fail(member, "release", "job closing")
        tracker.report(force=True)
        requeued = self.context.registry.deregister(self.context.job)
        logger.info("job %s closed (%s): %d tasks done, %d queued tasks back to the pools",
                    self.context.job, reason, tracker.done_count,
                    requeued.queued if requeued else 0)

    def has_pending_requests(self) -> bool:
        return bool(self.ready)

    def enqueue_request(self, request: Request) -> bool:
        """A taken task's Request (or its redirect) is made ready; any other is a link,
        False if the crawl refuses it."""
        info = request.meta.get("crawlcluster")
        if info:
            if info.get("urgent"):
                self.ready.appendleft(request)
            else:
                self.ready.append(request)
            return True
        parent = request.meta.get("crawlcluster_parent")
        if self.user is not None:
            link = self.user.admit(request, parent)
        elif parent is None:
            # Work enters the cluster as a crawl request, not as a spider's own request.
            logger.warning("refusing %s: not produced by a page of a crawl", request.url)
            self.stats.inc_value("crawlcluster/links/refused/no_crawl")
            return False
        else:
            self.admission.count(parent["task"]["crawlid"], "found")
            link = self.admission.admit(request.url, parent,
                                        getattr(request.callback, "__name__", "parse"),
                                        request.meta.get("crawlcluster_extra"))
        if link is not None:
            self.push.waiting.append(link)
            self._round_soon()
        return link is not None

    def add_links(self, response: Response, links: list[Follow],
                  refused: Mapping[str, int] | None = None) -> None:
        """The links (``crawler.spiders.Follow``) a page of a task yielded, and how many
        more it had that the crawl's rules refused (``{"rule": n, "scope": n}``)."""
        info = response.meta.get("crawlcluster")
        if info is None:
            logger.warning("refusing %d links of %s: not a page of a crawl", len(links),
                           response.url)
            self.stats.inc_value("crawlcluster/links/refused/no_crawl", len(links))
            return
        parent = {"task": info["task"], "config": info["config"]}
        admitted = self.admission.page_links(parent, links, refused or {})
        self.sweep.note(info)            # a series run's seed page: its due pages too
        revisit = self.context.revisit(info["config"], info["task"])
        if revisit is None:
            self.push.waiting += admitted
        else:     # a hub, sitemap or feed: its changes are read in the round
            self.sitemaps.note(RevisitedPage(info, revisit, response.headers, links, admitted))
        if admitted:
            self._round_soon()

    def mark_seen(self, url: str, crawlid: str) -> None:
        """Mark a page's canonical URL seen by its crawl (it was stored under it), so a
        link to it is not fetched; added to the filter with the next push."""
        try:
            self.push.unadded.append((canonical_url(url), crawlid))
        except ValueError:
            logger.info("canonical URL %r is invalid: not marked seen", url[:300])

    def next_request(self) -> Request | None:
        while self.ready:
            request = self.ready.popleft()
            task = request.meta["crawlcluster"]["task"]
            if self.context.site_config.is_blacklisted(task["domain"]):
                # Blacklisted since it was taken: never fetched.
                self.context.tracker.fail(request.meta["crawlcluster"]["member"], "failed",
                                          "domain blacklisted")
                self.stats.inc_value("crawlcluster/tasks/blacklisted")
                continue
            if self.taker is not None:
                self.taker.worked()
            return request
        return None

    def __len__(self) -> int:
        return len(self.ready)

    def spider_idle(self, spider: Spider) -> None:
        """Close once the engine has had nothing to do for ``idle_timeout`` s, counted
        from when it went idle: the last page may have taken long (a rendered one)."""
        now = time.monotonic()
        last_work = self.taker.last_work if self.taker is not None else now
        if self.idle_since is None or last_work > self.idle_since:
            self.idle_since = now
        idle_for = now - self.idle_since
        if self.idle_timeout and idle_for >= self.idle_timeout:
            logger.info("no work for %.0f s: closing", idle_for)
            return
        raise DontCloseSpider

    # --- one round -----------------------------------------------------------------------

    def short_of_work(self) -> bool:
        """Nothing ready, and room in the downloader."""
        return not self.ready and self.taker is not None \
            and self.taker.tasks_held() < self.concurrency

    def _round_soon(self) -> None:
        """A round at once for new links, if the job is short of work."""
        if self.short_of_work():
            self.quick.schedule(0)

    def round(self) -> None:
        assert self.taker is not None
        try:
            stocked = len(self.ready) > self.ready_size // 2
            writes = self._writes_due(stocked)
            if writes:
                short = self.short_of_work()
                if short and self.push.waiting:
                    self.quick_until = time.monotonic() + QUICK_FOR
                self.push_links(wake=short)
            for flush in self.context.periodic:
                flush()
            if writes:
                tracker = self.context.tracker
                tracker.ready_to_ack(time.monotonic() - self.tick)
                tracker.report()
            if not stocked:
                self.taker.take()
            self._heartbeat()
            set_job_tasks(self.context.spider_type, self.context.job, self.taker.tasks_held())
            if self.redis_failed_at is not None:
                self.push.replay.after_failure(self.redis_failed_at)
                self.redis_failed_at = None
        except redis.RedisError as exc:
            logger.error("Redis error in the scheduler round (retrying next round): %s", exc)
            if self.redis_failed_at is None:
                self.redis_failed_at = time.monotonic()
        except Exception:     # one out of a round would stop its LoopingCall for good
            # Each page and link is isolated where it is handled; this is the last guard,
            # so that whatever slipped through costs one round, not the job's scheduler.
            logger.exception("error in the scheduler round (going on next round)")
            self.stats.inc_value("crawlcluster/scheduler/round_errors")
        self._quick_look()

    def _quick_look(self) -> None:
        """Another round in QUICK_LOOK s while the job is short of work and pushed
        links while short less than QUICK_FOR s ago."""
        if time.monotonic() < self.quick_until and self.short_of_work():
            self.quick.schedule(QUICK_LOOK)

    def push_links(self, start_urls: bool = True, wake: bool = False) -> None:
        """Push what pages yielded since the last push, with the revisited pages'
        links once their changes are read, the next part of a series' pages due again
        (series.py), and a batch of a user spider's start-URL entries (acknowledged once
        pushed); ``wake``: wake a dispatcher."""
        entries, start_links = (self.user.take_start_urls() if self.user and start_urls
                                else ([], []))
        self.push.waiting += start_links
        if self.sweep.sweeps:
            self.push.waiting += self.sweep.links()
        self.sitemaps.settle(into=self.push.waiting)
        self.push.push(wake)
        if self.user is not None:
            self.user.acknowledge(entries)

    def _writes_due(self, stocked: bool) -> bool:
        """Push new links and report outcomes this round? Every round while the job is
        short of work; every ``BUSY_WRITES_EVERY`` ticks while over half its ready
        requests are left, when its links and outcomes waiting a tick more delay nothing
        it waits for, and each write carries more of them (Redis pays per call)."""
        now = time.monotonic()
        if stocked and now - self.last_writes < (BUSY_WRITES_EVERY - 0.5) * self.tick:
            return False
        self.last_writes = now
        return True

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self.last_beat >= HEARTBEAT_EVERY:
            context = self.context
            if not context.registry.heartbeat(context.job):
                logger.warning("job %s was declared dead; registering again", context.job)
                context.registry.register(context.job, context.spider_type, context.host,
                                          context.ip, node=context.node)
            if self.user is not None:
                self.user.crawl.keep_registered(now)
            self.last_beat = now
