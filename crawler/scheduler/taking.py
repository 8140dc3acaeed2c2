"""Taking, stealing and idling: once half or fewer of the job's ready requests are left,
its domain queues are walked once through the throttled take (one round trip, a script
call per shard it has queues in) and what it gets goes to the engine. A job whose queues
are all empty takes over half of another job's longest queue, and now and then looks
for queues of its own in every shard."""

import logging
import math
import time
from collections import deque
from typing import Any

from scrapy import Request
from scrapy.crawler import Crawler

from crawler.context import JobContext
from crawler.scheduler.slots import space_fetches, throttled_slot
from crawler.scheduler.taskrequest import TaskRequests
from master.throttle import JobView

logger = logging.getLogger(__name__)

STEAL_EVERY = 0.2         # seconds between an idle job's looks at other jobs' backlogs
RESCAN_EVERY = 5.0        # seconds between an idle job's looks for its queues in every shard
# A job that has had nothing to do for IDLE_AFTER seconds looks for work every IDLE_LOOK
# seconds instead of every round: an idle spider costs Redis a few round trips a second,
# not dozens, and new work waits at most IDLE_LOOK for it.
IDLE_AFTER = 1.0
IDLE_LOOK = 0.5


class Taker:
    def __init__(self, crawler: Crawler, context: JobContext, ready: deque[Request],
                 requests: TaskRequests, tick: float, ready_size: int) -> None:
        self.crawler = crawler
        self.stats: Any = crawler.stats
        self.context = context
        self.ready = ready
        self.requests = requests
        self.tick = tick
        self.ready_size = ready_size
        self.view: JobView | None = None    # the job's shards and domains as the last take read
        self.slow_takes: dict[str, float] = {}    # slow domain -> when this job last took one
        self.last_work = time.monotonic()
        self.last_look = 0.0
        self.last_steal = 0.0
        self.last_rescan = time.monotonic()

    def worked(self) -> None:
        self.last_work = time.monotonic()

    def tasks_held(self) -> int:
        """Tasks taken and not yet downloaded: waiting here or in the downloader."""
        engine = self.crawler.engine
        downloading = len(engine.downloader.active) if engine is not None else 0
        return len(self.ready) + downloading

    def resting(self) -> bool:
        """Idle for ``IDLE_AFTER`` s (nothing taken, nothing held): True except once
        every ``IDLE_LOOK`` s, when the round looks for work."""
        now = time.monotonic()
        if now - self.last_work < IDLE_AFTER or self.tasks_held():
            return False
        if now - self.last_look < IDLE_LOOK:
            return True
        self.last_look = now
        return False

    def take(self) -> None:
        if self.resting():
            return
        context = self.context
        # The last take read the shards and domains in its round trip (a tick ago at most).
        view = self.view or context.queues.job_view(context.job)
        self.view = None
        if not view.domains:
            self.when_idle()
            return
        slow: dict[str, float] = {}     # domain -> seconds its takes and fetches are spaced by
        now = time.monotonic()
        result = context.queues.take(context.job, context.spider_type, context.ip, view,
                                     min_interval=context.crawl_delays,
                                     per_domain=self._wanted(len(view.all_domains()), slow, now))
        self.view = result.view
        self._note_slow_takes(result.tasks, slow, now)
        for domain, member in result.tasks:
            try:
                self._start(domain, member, slow, now)
            except Exception as exc:  # noqa: BLE001 - logged and counted there
                self._refuse_task(member, exc)
        context.tracker.throttled.update(result.throttled)
        for domain, seconds in result.paused.items():    # requests held here wait too
            context.paused.pause(domain, seconds)
        if result.wait is not None:      # waiting on a full window is not idle
            self.worked()
        if result.blacklisted:
            dropped = context.queues.drop_blacklisted(context.job, result.blacklisted)
            if dropped:
                self.stats.inc_value("crawlcluster/tasks/blacklisted", dropped)
        if not result.tasks and result.wait is None:
            self.when_idle()

    def _wanted(self, domains: int, slow: dict[str, float], now: float) -> Any:
        """How many tasks to take of a domain, given its throttle's ``hits`` a
        ``window``; a slow domain's spacing is noted in ``slow``."""
        share = max(1, -(-(self.ready_size - len(self.ready)) // max(1, domains)))

        def wanted(domain: str, hits: int, window: float) -> int:
            # A slow domain gets one task at a time, window / hits after this process's
            # last, fetched next and as far from its other fetches: the window's hits are
            # spread over it instead of taken in a burst at its start, so a fetch a busy
            # machine delays does not land among the next window's.
            if hits < window / self.tick:
                slow[domain] = window / max(hits, 1)
                return int(now - self.slow_takes.get(domain, -math.inf) >= slow[domain]
                           and not self._downloading(domain))
            return share

        return wanted

    def _downloading(self, domain: str) -> bool:
        """A slow domain's last request still in its download slot: the next task (and
        its token) waits for it, or it would wait there past its ``send_by``, take a
        second token and hold up the one after it in turn."""
        slot = throttled_slot(self.crawler, domain)
        return slot is not None and bool(slot.active)

    def _start(self, domain: str, member: str, slow: dict[str, float], taken_at: float) -> None:
        """Hand a taken task's Request to the engine; a slow domain's goes first, through
        its own spaced download slot, and must be sent within half a tick of its take or take
        a hit again (crawler/token_deadlines.py)."""
        request = self.requests.request_for(member)
        if request is None:
            return
        request.meta["crawlcluster"]["urgent"] = domain in slow
        if domain in slow:
            space_fetches(self.crawler, request, domain, slow[domain])
            # Half the tick by which the windows are lengthened (ThrottledQueues.window_ms):
            # the other half is for the way from the downloader to the site.
            request.meta["crawlcluster"]["send_by"] = taken_at + self.tick / 2
        self.worked()
        self.crawler.engine.crawl(request)

    def _refuse_task(self, member: str, exc: Exception) -> None:
        """A taken task whose Request could not be made or started fails for good,
        logged and counted; the take's other tasks go on."""
        logger.error("task %s could not be started: %s: %s", member[:300],
                     type(exc).__name__, exc)
        self.stats.inc_value("crawlcluster/scheduler/task_errors")
        self.context.tracker.fail(member, "failed", f"{type(exc).__name__}: {exc}"[:200])

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

    def when_idle(self) -> None:
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
