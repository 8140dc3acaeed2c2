"""Scrapy scheduler over the master's Redis frontier (``SCHEDULER`` setting).

Every ``CRAWLCLUSTER_SCHEDULER_TICK`` seconds one round (steps 1 and 2 every third
round while over half the ready requests are left: Redis pays per call, and the job
then waits for none of what they write):
  1. new links the spider produced are pushed to their shards' pools: those the crawl's
     rules refuse were already turned away by ``enqueue_request``; the rest are
     looked up in the Bloom filter in one batch, those it has not seen are pushed,
     and only then added to it. A job killed at any point of that loses no link
     (one it pushed and did not add is refused by the pools' dedupe window when a
     page crawled again yields it), and no page's links ever bypass the filter:
     a link two jobs find new at once is queued once (``Frontier.push_links``);
  2. finished tasks are acknowledged, failed ones reported, in one round trip,
     and counted for the dispatcher's weights;
  3. once half or fewer of ``CRAWLCLUSTER_SCHEDULER_READY`` requests are ready, the
     job's domain queues are walked once through the throttled take (one
     round trip, a script call per shard it has queues in) and what it gets is
     injected into the engine, up to that many ready (a take every round would cost
     Redis a script call per shard each round for a few tasks each); a job whose
     queues are all empty takes over half of another job's longest queue, and now
     and then looks for queues of its own in every shard;
  4. the job's heartbeat is refreshed.
Redis is never called once per request. Links reach the round two ways: from
the cluster's spiders straight through ``add_links`` (see crawler/spiders),
and as Requests through ``enqueue_request``, which returns False for a link
the crawl's rules refuse (scheme, URL length, blacklist, depth) and True
for one accepted. Duplicates found by the cluster's filter are dropped at the
push and counted (``crawlcluster/links/duplicate``). Per crawl, every link is
counted as found and then new, duplicate or refused with its reason; the tracker
adds the counts to the crawl's ``crawl_links`` hash with the round's outcomes, for
``info`` and ``watch``.
"""

import logging
import math
import time
from collections import Counter, deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

import redis
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import DontCloseSpider
from scrapy.http import Response
from twisted.internet import task as twisted_task
from twisted.internet.defer import Deferred, DeferredList

from crawler.context import JobContext
from crawler.metrics import set_job_tasks
from crawler.spiders import SOURCE_CALLBACKS, ClusterSpider, Follow
from crawler.startkeys import StartUrlKey
from crawler.taskrequests import RequestNotJSON
from crawler.userspider import UserCrawl, is_user_crawl
from master.bloomgen import KnownLinks
from master.siteconfig import domain_of
from master.tasks import Task, decode_task, make_task
from master.throttle import JobView
from master.urls import canonical_url

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = 1.0     # seconds
# Seconds before a Redis failure whose pushed links are pushed again once it answers: a
# failover's promoted replica lacks the writes its master had not yet sent it.
REPLAY_SECONDS = 10.0
STEAL_EVERY = 0.2         # seconds between an idle job's looks at other jobs' backlogs
RESCAN_EVERY = 5.0        # seconds between an idle job's looks for its queues in every shard
# A job that has had nothing to do for IDLE_AFTER seconds looks for work every IDLE_LOOK
# seconds instead of every round: an idle spider costs Redis a few round trips a second,
# not dozens, and new work waits at most IDLE_LOOK for it.
IDLE_AFTER = 1.0
IDLE_LOOK = 0.5
# Ticks between a busy job's pushes and reports (``_writes_due``).
BUSY_WRITES_EVERY = 3


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

    @property
    def crawlid(self) -> str:
        return str(self.parent["task"]["crawlid"])


class ClusterScheduler:
    def __init__(self, crawler: Crawler, context: JobContext, tick: float, ready_size: int,
                 idle_timeout: float, url_length_limit: int = 0, known_links: int = 0) -> None:
        self.crawler = crawler
        self.context = context
        self.stats = crawler.stats
        self.tick = tick
        self.ready_size = ready_size
        self.idle_timeout = idle_timeout
        self.url_length_limit = url_length_limit     # Scrapy's URLLENGTH_LIMIT; 0: none
        self.ready: deque[Request] = deque()
        self.new_links: list[NewLink] = []
        # links pushed whose Bloom filter add failed: (URL, crawl id), added next round
        self.unadded: list[tuple[str, str]] = []
        self.known = KnownLinks(context.bloom, known_links)   # links the filter holds
        self.spider: Spider | None = None
        self.user: UserCrawl | None = None     # a user spider's crawl (crawler/userspider.py)
        self.start_key: StartUrlKey | None = None     # its scrapy-redis start-URL key
        self.loop: twisted_task.LoopingCall | None = None
        self.last_work = time.monotonic()
        self.idle_since: float | None = None     # when the engine last went idle
        self.last_beat = 0.0
        self.last_writes = 0.0
        self.last_steal = 0.0
        self.last_look = 0.0
        self.last_rescan = time.monotonic()
        # the job's shards and domains as the last take read them
        self.view: JobView | None = None
        self.slow_takes: dict[str, float] = {}    # slow domain -> when this job last took one
        self.plain_bloom_warned: set[str] = set()   # crawls told their filter cannot forget
        # when a round first failed on Redis (None: the last round worked); once one works
        # again, what a failover may have lost is set right (``_reconcile``)
        self.redis_failed_at: float | None = None
        # (when, task, recrawl) of the links this job queued in the last REPLAY_SECONDS
        self.recent_pushes: deque[tuple[float, Task, bool]] = deque()

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
        self.spider = spider
        if hasattr(spider, "link_sink"):
            spider.link_sink = self.add_links
        context = self.context
        if not isinstance(spider, ClusterSpider):
            self.user = UserCrawl(context, spider)
            self._read_start_key_instead(spider)
        context.registry.register(context.job, context.spider_type, context.host, context.ip,
                                  node=context.node)
        logger.info("job %s (%s on %s, ip %s) registered", context.job, context.spider_type,
                    context.host, context.ip)
        self.loop = twisted_task.LoopingCall(self.round)
        self.loop.start(self.tick, now=True)

    def close(self, reason: str) -> Deferred[Any] | None:
        if self.loop and self.loop.running:
            self.loop.stop()
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

    def _read_start_key_instead(self, spider: Any) -> None:
        """A scrapy-redis spider's start-URL key is read by the rounds, with an
        acknowledgement (crawler/startkeys.py); its own idle handler, which would keep
        it open for good, is disconnected, and its ``MAX_IDLE_TIME_BEFORE_CLOSE`` is the
        idle timeout if it sets one."""
        self.start_key = StartUrlKey.of(spider, self.context.redis)
        if self.start_key is None:
            return
        self.crawler.signals.disconnect(spider.spider_idle, signal=signals.spider_idle)
        if getattr(spider, "max_idle_time", 0):
            self.idle_timeout = float(spider.max_idle_time)
        logger.info("reading start URLs from Redis key %r (a %s) with an acknowledgement",
                    self.start_key.key, self.start_key.kind)

    def _give_back(self, reason: str) -> None:
        """Push the last links, report what is finished, release what is not, and leave
        the registry (queued tasks back to the pools)."""
        tracker = self.context.tracker
        self._push_new_links()
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
        info = request.meta.get("crawlcluster")
        if info:                                     # a taken task, or its redirect
            if info.get("urgent"):
                self.ready.appendleft(request)
            else:
                self.ready.append(request)
            return True
        parent = request.meta.get("crawlcluster_parent")
        if self.user is not None:
            return self._enqueue_user_request(request, parent or self.user.root)
        if parent is None:
            # Work enters the cluster as a crawl request, not as a spider's own request.
            logger.warning("refusing %s: not produced by a page of a crawl", request.url)
            self.stats.inc_value("crawlcluster/links/refused/no_crawl")
            return False
        self._count_link(parent["task"]["crawlid"], "found")
        link = self._new_link(request.url, parent, getattr(request.callback, "__name__", "parse"),
                              request.meta.get("crawlcluster_extra"))
        if link is None:
            return False
        self.new_links.append(link)
        return True

    def _enqueue_user_request(self, request: Request, parent: dict[str, Any]) -> bool:
        """A user spider's Request (from a page, or a start request of its crawl)."""
        assert self.user is not None
        crawlid = parent["task"]["crawlid"]
        self._count_link(crawlid, "found")
        try:
            fields = self.user.link(request, start=parent is self.user.root)
        except (RequestNotJSON, ValueError) as exc:    # or a callback not the spider's
            logger.error("refusing %s: %s", request.url, exc)
            self._refuse(crawlid, "not_json" if isinstance(exc, RequestNotJSON) else "callback")
            return False
        link = self._new_link(request.url, parent, fields.callback, fields.extra, fields.key)
        if link is None:
            return False
        self.new_links.append(link._replace(unfiltered=fields.unfiltered))
        return True

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
        crawlid = info["task"]["crawlid"]
        revisit = self.context.revisit(info["config"], info["task"])
        changed: set[str] = set()
        if revisit is not None:
            changed = self._forget_changed(info["task"], links)
            self.context.hub_visited(response, info["member"], info["config"], revisit,
                                     [link.url for link in links])
        refused = refused or {}
        self._count_link(crawlid, "found", len(links) + sum(refused.values()))
        for reason, count in refused.items():
            self._refuse(crawlid, reason, count)
        for url, callback, extra in links:
            link = self._new_link(url, parent, callback, extra)
            if link is not None:
                self.new_links.append(link._replace(recrawl=url in changed))

    def _forget_changed(self, task: Task, links: list[Follow]) -> set[str]:
        """Pages a revisited sitemap says changed (``lastmod``) since its last visit are
        taken out of the crawl's Bloom filter, so they are crawled again (the filter in
        counting mode; a plain one cannot forget, and the log says so once). Returns the
        URLs taken out."""
        last_visit = self.context.frontier.hub_state(task).get("visited_at")
        if last_visit is None:
            return set()
        changed = [link.url for link in links
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
        removed = bloom.remove_many(changed, scope=task["crawlid"])
        self.known.forget([canonical_url(url) for url in changed],
                          [task["crawlid"]] * len(changed))
        self.stats.inc_value("crawlcluster/links/changed", sum(removed))
        return {url for url, gone in zip(changed, removed, strict=True) if gone}

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
            self.last_work = time.monotonic()
            return request
        return None

    def __len__(self) -> int:
        return len(self.ready)

    def spider_idle(self, spider: Spider) -> None:
        """Close once the engine has had nothing to do for ``idle_timeout`` s, counted
        from when it went idle: the last page may have taken long (a rendered one)."""
        now = time.monotonic()
        if self.idle_since is None or self.last_work > self.idle_since:
            self.idle_since = now
        idle_for = now - self.idle_since
        if self.idle_timeout and idle_for >= self.idle_timeout:
            logger.info("no work for %.0f s: closing", idle_for)
            return
        raise DontCloseSpider

    # --- one round -----------------------------------------------------------------------

    def round(self) -> None:
        try:
            stocked = len(self.ready) > self.ready_size // 2
            writes = self._writes_due(stocked)
            if writes:
                taken = self._take_start_urls()
                self._push_new_links()
                if taken:
                    self.start_key.acknowledge(taken)     # type: ignore[union-attr]
            for flush in self.context.periodic:
                flush()
            if writes:
                tracker = self.context.tracker
                tracker.ready_to_ack(time.monotonic() - self.tick)
                tracker.report()
            if not stocked:
                self._take()
            self._heartbeat()
            set_job_tasks(self.context.spider_type, self.context.job, self._tasks_held())
            if self.redis_failed_at is not None:
                self._reconcile(self.redis_failed_at)
        except redis.RedisError as exc:
            logger.error("Redis error in the scheduler round (retrying next round): %s", exc)
            if self.redis_failed_at is None:
                self.redis_failed_at = time.monotonic()

    def _take_start_urls(self) -> list[Any]:
        """Queue the Requests of a batch of the start-URL key's entries, made by the
        spider's ``make_request_from_data``; the entries, to remove once pushed."""
        if self.start_key is None or self.user is None:
            return []
        entries = self.start_key.peek()
        for entry in entries:
            try:
                made = self.spider.make_request_from_data(entry)  # type: ignore[union-attr]
            except Exception as exc:  # noqa: BLE001 - the user's code; the next entry goes on
                logger.error("start URL entry %r of %s made no request (removed): %s: %s",
                             entry, self.start_key.key, type(exc).__name__, exc)
                self.stats.inc_value("crawlcluster/start_urls/refused")
                continue
            for request in [made] if isinstance(made, Request) else list(made or ()):
                self._enqueue_user_request(request, self.user.root)
        self.stats.inc_value("crawlcluster/start_urls/taken", len(entries))
        return entries

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

    def _reconcile(self, failed_at: float) -> None:
        """Once Redis answers again after an error, set right what a failover lost (a
        promoted replica lacks the last writes its master acknowledged): the links this
        job queued just before are pushed again (those the pools have are refused there
        as pushed within the dedupe window), and leases Redis holds for this job that it
        had finished or never got are reported again or released."""
        replay = [(task, recrawl) for when, task, recrawl in self.recent_pushes
                  if when >= failed_at - REPLAY_SECONDS]
        codes = self.context.frontier.push_links([task for task, _ in replay],
                                                 [recrawl for _, recrawl in replay])
        # Taken and not yet reported: still open, or reported next round.
        held = {member for member, _, _ in self.context.tracker.outcomes}
        again, released = self.context.tracker.reconcile(held)
        self.redis_failed_at = None
        logger.warning("after a Redis failure: %d of the %d links queued in the %.0f s "
                       "before it were lost and queued again; %d leases held for this job "
                       "were reported again (their finish was lost), %d released to the "
                       "pools", codes.count("q"), len(replay), REPLAY_SECONDS, again, released)

    def _tasks_held(self) -> int:
        """Tasks taken and not yet downloaded: waiting here or in the downloader."""
        engine = self.crawler.engine
        downloading = len(engine.downloader.active) if engine is not None else 0
        return len(self.ready) + downloading

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self.last_beat >= HEARTBEAT_EVERY:
            context = self.context
            if not context.registry.heartbeat(context.job):
                logger.warning("job %s was declared dead; registering again", context.job)
                context.registry.register(context.job, context.spider_type, context.host,
                                          context.ip, node=context.node)
            if self.user is not None:
                self.user.keep_registered(now)
            self.last_beat = now

    def _resting(self) -> bool:
        """Idle for ``IDLE_AFTER`` s (nothing taken, nothing held): True except once
        every ``IDLE_LOOK`` s, when the round looks for work."""
        now = time.monotonic()
        if now - self.last_work < IDLE_AFTER or self._tasks_held():
            return False
        if now - self.last_look < IDLE_LOOK:
            return True
        self.last_look = now
        return False

    def _take(self) -> None:
        if self._resting():
            return
        context = self.context
        # The last take read the shards and domains in its round trip (a tick ago at most).
        view = self.view or context.queues.job_view(context.job)
        self.view = None
        if not view.domains:
            self._when_idle()
            return
        domains = view.all_domains()
        share = max(1, -(-(self.ready_size - len(self.ready)) // max(1, len(domains))))
        slow: dict[str, float] = {}     # domain -> seconds its takes and fetches are spaced by
        now = time.monotonic()

        def wanted(domain: str, hits: int, window: float) -> int:
            # A slow domain gets one task at a time, window / hits after this process's
            # last, fetched next and as far from its other fetches: the window's hits are
            # spread over it instead of taken in a burst at its start, so a fetch a busy
            # machine delays does not land among the next window's.
            if hits < window / self.tick:
                slow[domain] = window / max(hits, 1)
                return int(now - self.slow_takes.get(domain, -math.inf) >= slow[domain])
            return share

        result = context.queues.take(context.job, context.spider_type, context.ip, view,
                                     min_interval=context.crawl_delays, per_domain=wanted)
        self.view = result.view
        self._note_slow_takes(result.tasks, slow, now)
        for domain, member in result.tasks:
            request = self._request_for(member)
            if request is not None:
                request.meta["crawlcluster"]["urgent"] = domain in slow
                if domain in slow:
                    space_fetches(self.crawler, request, domain, slow[domain])
                self.last_work = time.monotonic()
                self.crawler.engine.crawl(request)
        context.tracker.throttled.update(result.throttled)
        if result.wait is not None:      # waiting on a full window is not idle
            self.last_work = time.monotonic()
        if result.blacklisted:
            dropped = context.queues.drop_blacklisted(context.job, result.blacklisted)
            if dropped:
                self.stats.inc_value("crawlcluster/tasks/blacklisted", dropped)
        if not result.tasks and result.wait is None:
            self._when_idle()

    def _note_slow_takes(self, tasks: list[tuple[str, str]], slow: dict[str, float],
                         now: float) -> None:
        """Remember when this process last took a task of each slow domain (those taken
        longer ago than their spacing are forgotten once there are many)."""
        if len(self.slow_takes) > 10_000:
            self.slow_takes = {domain: at for domain, at in self.slow_takes.items()
                               if now - at < slow.get(domain, 0.0)}
        for domain, _ in tasks:
            if domain in slow:
                self.slow_takes[domain] = now

    def _when_idle(self) -> None:
        """With its queues empty (not merely throttled) and nothing ready, the job takes
        a share of another job's backlog, at most every STEAL_EVERY seconds: the
        dispatcher hands tasks out as they come, so near a crawl's end one job may be
        idle while another still has a queue to work through. Every RESCAN_EVERY
        seconds it also looks for queues of its own in every shard (one whose index
        entry was lost)."""
        now = time.monotonic()
        if self.ready or now - self.last_steal < STEAL_EVERY:
            return
        self.last_steal = now
        context = self.context
        if now - self.last_rescan >= RESCAN_EVERY:
            self.last_rescan = now
            if context.queues.rescan(context.job):
                self.view = None
        others = [job for job, info in context.registry.live_jobs().items()
                  if job != context.job and info.get("spider_type") == context.spider_type]
        moved = context.queues.steal(context.job, others, self.ready_size)
        if moved:
            logger.debug("took %d queued tasks over from another job", moved)
            self.stats.inc_value("crawlcluster/tasks/taken_over", moved)
            self.view = None

    def _request_for(self, member: str) -> Request | None:
        """The Request for a taken task, or None (reported failed) if it cannot be."""
        task = decode_task(member)
        tracker = self.context.tracker
        config = self.context.crawls.load(task["crawlid"])
        if self.user is not None and config is not None and is_user_crawl(config):
            return self._user_request_for(member, task, config)
        callback = getattr(self.spider, task.get("callback") or "parse", None)
        if config is None or callback is None or task.get("callback", "parse") not in getattr(
                self.spider, "callbacks", ("parse",)):
            tracker.fail(member, "failed", "unknown crawl or callback")
            return None
        tracker.begin(member)
        headers = {"User-Agent": config["useragent"]} if config.get("useragent") else {}
        if self.context.revisit(config, task) is not None:
            headers.update(self.context.conditional_headers(task))
        return Request(task["url"], callback=callback, dont_filter=True, headers=headers,
                       cookies=parse_cookies(config.get("cookie")),
                       meta={"crawlcluster": {"member": member, "task": task, "config": config},
                             "depth": task.get("depth", 0)})

    def _user_request_for(self, member: str, task: Task, config: dict[str, Any]) -> Request | None:
        assert self.user is not None
        try:
            request = self.user.request_for(task, {
                "crawlcluster": {"member": member, "task": task, "config": config},
                "depth": task.get("depth", 0)})
        except ValueError as exc:                  # a callback the spider no longer has
            self.context.tracker.fail(member, "failed", str(exc))
            return None
        self.context.tracker.begin(member)
        return request

    # --- new links --------------------------------------------------------------------------

    def _new_link(self, url: str, parent: dict[str, Any], callback: str,
                  extra: dict[str, Any] | None, key: str | None = None) -> NewLink | None:
        """A link a page of ``parent`` (its task and crawl config) yielded, as a
        ``NewLink``, or None if the crawl refuses it. Its task is made only once the
        filter finds it new (most links a page yields were seen before). It is known by
        its canonical URL unless given another ``key`` (a request fingerprint)."""
        reason = self._refusal(url, parent)
        if not reason:
            try:
                known_by = key or canonical_url(url)
            except ValueError:                    # a port out of range, say
                reason = "invalid"
        if reason:
            self._refuse(parent["task"]["crawlid"], reason)
            return None
        return NewLink(url.partition("#")[0], known_by, parent, domain_of(url), callback, extra)

    def _refusal(self, url: str, parent: dict[str, Any]) -> str | None:
        """Why the crawl refuses a link before any Redis check, or None."""
        if not url[:8].lower().startswith(("http://", "https://")):
            return "scheme"
        if self.url_length_limit and len(url) > self.url_length_limit:
            return "url_length"
        maxdepth = parent["config"].get("maxdepth")
        if maxdepth is not None and link_depth(parent["task"]) > maxdepth:
            return "depth"
        if self.context.site_config.is_blacklisted(domain_of(url)):
            return "blacklist"
        return None

    def _count_link(self, crawlid: str, field: str, count: int = 1) -> None:
        """Count links of a crawl for ``info`` (``Keys.crawl_links``)."""
        self.context.tracker.count_links(crawlid, field, count)

    def _refuse(self, crawlid: str, reason: str, count: int = 1) -> None:
        self.stats.inc_value(f"crawlcluster/links/refused/{reason}", count)
        self._count_link(crawlid, f"refused:{reason}", count)

    def _push_new_links(self) -> None:
        if self.unadded:
            unadded, self.unadded = self.unadded, []
            self._add_to_filter(unadded)
        if not self.new_links:
            return
        links, self.new_links = self.new_links, []
        try:
            self._push_links(links)
        except Exception:
            # Redis failed before the push was done (a failover, say): none of these
            # links is in the filter yet, so the next round looks them up again; what
            # the pools got already is refused there as pushed within the dedupe window.
            self.new_links = links + self.new_links
            raise

    def _push_links(self, links: list[NewLink]) -> None:
        """Queue each page the crawl has neither seen nor queued, once. The round's
        links are taken one per canonical URL of their crawl, whatever fragment or
        spelling each came with; those the filter has not seen are pushed, then added
        to it. A job that dies between the push and the add leaves its pushed links
        findable as new by a page crawled again, and the pools' dedupe window (by
        canonical URL too) queues them once; so does it a link two jobs find new at
        once. A user spider's request with ``dont_filter`` is queued as it is, and not
        added. Every link is counted new, refused or duplicate."""
        filtered = [link for link in links if not link.unfiltered]
        distinct = list(distinct_links(filtered).values())
        unseen = [link for link, seen in zip(distinct, self._seen(distinct), strict=True)
                  if not seen] + [link for link in links if link.unfiltered]
        queued, stopped, refused = self._queue(unseen)
        duplicates = Counter(link.crawlid for link in links)
        duplicates.subtract(task["crawlid"] for task in queued + stopped)
        duplicates.subtract(link.crawlid for link in refused)
        for task in queued:
            self._count_link(task["crawlid"], "new")
        for task in stopped:
            self._refuse(task["crawlid"], "stopped")
        for crawlid, count in duplicates.items():
            if count:
                self._count_link(crawlid, "duplicate", count)
        self.stats.inc_value("crawlcluster/links/new", len(queued))
        self.stats.inc_value("crawlcluster/links/duplicate", sum(duplicates.values()))
        self._add_to_filter([(link.key, link.crawlid) for link in unseen if not link.unfiltered])

    def _queue(self, unseen: list[NewLink]) -> tuple[list[Task], list[Task], list[NewLink]]:
        """Push the tasks of links the filter has not seen (within their crawls'
        ``domain_max_pages``). Returns the tasks queued, those refused as their crawl
        stopped, and the links refused here (``invalid``, ``domain_max_pages``)."""
        made = [(link, task) for link in unseen if (task := self._task_for_link(link))]
        kept = {id(task) for task in self._within_domain_limits([task for _, task in made])}
        pushed = [(link, task) for link, task in made if id(task) in kept]
        codes = self.context.frontier.push_links(
            [task for _, task in pushed], [link.recrawl or link.unfiltered for link, _ in pushed])
        self._remember_pushes([(task, link.recrawl) for (link, task), code
                               in zip(pushed, codes, strict=True) if code == "q"])
        queued = [task for (_, task), code in zip(pushed, codes, strict=True) if code == "q"]
        stopped = [task for (_, task), code in zip(pushed, codes, strict=True) if code == "s"]
        pushed_links = {id(link) for link, _ in pushed}
        return queued, stopped, [link for link in unseen if id(link) not in pushed_links]

    def _add_to_filter(self, added: list[tuple[str, str]]) -> None:
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

    def _seen(self, links: list[NewLink]) -> list[bool]:
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

    def _remember_pushes(self, pushed: list[tuple[Task, bool]]) -> None:
        now = time.monotonic()
        self.recent_pushes.extend((now, task, recrawl) for task, recrawl in pushed)
        while self.recent_pushes and self.recent_pushes[0][0] < now - REPLAY_SECONDS:
            self.recent_pushes.popleft()

    def _task_for_link(self, link: NewLink) -> Task | None:
        """The task for a new link (its parent's crawl, priority and user, unless the
        link has a priority of its own; one level deeper), or None (refused as
        ``invalid``) if it cannot be made."""
        parent = link.parent["task"]
        extra = dict(link.extra or {})
        priority = extra.pop("priority", parent.get("priority", 0))
        try:
            return make_task(link.url, parent["crawlid"], parent["spider_type"],
                             priority=priority, depth=link_depth(parent),
                             userid=parent.get("userid"), callback=link.callback,
                             domain=link.domain, **extra)
        except ValueError as exc:
            logger.warning("refusing link %s: %s", link.url, exc)
            self._refuse(parent["crawlid"], "invalid")
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
                self._refuse(task["crawlid"], "domain_max_pages")
        return [task for task in tasks if id(task) not in over]

    def _config(self, task: Task) -> dict[str, Any]:
        return self.context.crawls.load(task["crawlid"]) or {}


Cookies = dict[str | bytes, str | bytes | bool | float | int]    # as a Request takes them


def space_fetches(crawler: Crawler, request: Request, domain: str, spacing: float) -> None:
    """Send ``request`` through a download slot of its throttled domain's own, that lets
    one request at a time out ``spacing`` seconds after the last (no jitter). The slot
    is made here as Scrapy's downloader would make it (and its idle-slot cleanup drops
    it), so no table of slot settings grows with the domains."""
    from scrapy.core.downloader import Slot

    downloader: Any = crawler.engine.downloader if crawler.engine else None
    if downloader is None:
        return
    key = _throttled_slot_key(domain)
    slot = downloader.slots.get(key)
    if slot is None:
        downloader.slots[key] = Slot(1, spacing, 0.0)
    else:
        slot.delay, slot.jitter = spacing, 0.0
    request.meta["download_slot"] = key


def throttled_slot(crawler: Crawler, domain: str) -> Any:
    """The download slot ``space_fetches`` made for a throttled domain, or None."""
    downloader: Any = crawler.engine.downloader if crawler.engine else None
    return downloader.slots.get(_throttled_slot_key(domain)) if downloader else None


def _throttled_slot_key(domain: str) -> str:
    return f"crawlcluster-throttled:{domain}"


def distinct_links(links: list[NewLink]) -> dict[tuple[str, str], NewLink]:
    """One link per crawl and canonical URL, by ``(crawl id, canonical URL)``: the first
    found, or the first a changed sitemap entry asks to crawl again."""
    first: dict[tuple[str, str], NewLink] = {}
    for link in links:
        name = (link.crawlid, link.key)
        if name not in first or (link.recrawl and not first[name].recrawl):
            first[name] = link
    return first


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


def link_depth(parent: Task) -> int:
    """The depth of a link a task's page yielded: one deeper, but the same for what a
    sitemap, feed or robots.txt lists (sources do not count as a level)."""
    step = 0 if parent.get("callback") in SOURCE_CALLBACKS else 1
    return int(parent.get("depth", 0)) + step


def parse_cookies(cookie: str | Cookies | None) -> Cookies:
    """A crawl's cookie as a dict: given as a dict, or as ``"a=1; b=2"``."""
    if not cookie:
        return {}
    if isinstance(cookie, dict):
        return cookie
    pairs = (part.split("=", 1) for part in str(cookie).split(";") if "=" in part)
    return {name.strip(): value.strip() for name, value in pairs}
