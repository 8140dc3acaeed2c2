"""The dispatcher (``crawlcluster master``): pools to job queues, by speed.

Several may run; each holds the leases of a share of the frontier's shards
(master/shards.py: rendezvous hashing over the live dispatchers, leases that
expire) and dispatches only those, so the role scales out and a dispatcher
that dies has its shards taken over once its leases run out. Each tick it
  1. once a second: keeps its shard leases, moves the queues of jobs whose
     heartbeat expired back to the pools, and for a tenth of its shards
     re-issues expired leases and due hub pages and looks at every pool (the
     sweep that finds work whose index mark was lost);
  2. weighs the live jobs: tasks each finished per minute over the last
     ``k`` minutes (thesis formula 4-2), a job younger than that measured over
     its age, a job with nothing measured yet given the mean weight;
  3. moves tasks from the pools of its shards that hold work of a spider type
     to the live jobs of that type by weighted round robin (thesis 4.2.1.1),
     one atomic script call per shard, pipelined, paced so that a window gets
     at most ``headroom`` times what the live jobs finish in it (thesis
     4.2.1.2): queues never run far ahead of the jobs, so the weights stay
     current.
A tick that moves tasks makes three round trips to Redis (``_read``, the pools'
sizes, the moves with their counts).
Killing it at any instant loses and duplicates nothing: every move is one Lua
call in one shard. SIGTERM and SIGINT stop it after the current tick, and its
shards are handed at once to the live dispatchers that rank first for them.
"""

import logging
import math
import os
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from master.bloomgen import AgingBloomFilter
from master.counters import Clock
from master.crawls import CrawlConfig, CrawlStore
from master.frontier import Frontier
from master.keys import Keys
from master.lua import LuaScripts
from master.registry import Heartbeats, JobInfo, JobRegistry
from master.retention import Retention
from master.schedules import Schedules
from master.shards import ShardLeases, index_marks, prune
from master.wrr import WeightedRoundRobin
from settings.clients import RedisClient
from settings.loader import Settings
from settings.process import Watchdog, stop_on_signals

logger = logging.getLogger(__name__)

# Seconds between upkeep passes (leases, dead jobs, a slice of the shards): each is
# measured in seconds or minutes, while dispatch ticks run many times a second.
UPKEEP_EVERY = 1.0
# Upkeep passes to go once over every shard held (expired leases, hubs, the sweep).
UPKEEP_SLICES = 10
# Seconds between the slow chores of the upkeep: turning the Bloom filter's generations
# over, retiring ended crawls.
CHORES_EVERY = 10.0
# Once ticks have found no work for IDLE_AFTER seconds (a crawl's pools run dry for
# moments; an idle cluster for minutes), the pause between ticks doubles from the idle
# sleep after each tick that finds none, up to IDLE_PAUSE_MAX: an idle cluster costs
# Redis two ticks a second instead of twenty, and new work waits at most that long.
IDLE_AFTER = 1.0
IDLE_PAUSE_MAX = 0.5
# Seconds a tick reuses the jobs' weights while the live jobs stay the same: a weight is
# pages done over minutes, and reading it twenty times a second cost Redis a script call
# per job and tick for nothing.
WEIGHTS_EVERY = 1.0


@dataclass(frozen=True)
class TickReads:
    """What a tick reads before it moves anything, in one round trip: the live jobs,
    the pacing window's start and what went out in it so far, and the shards each
    spider type's pools are marked in, and when (for the types of the jobs last read)."""

    jobs: dict[str, JobInfo]
    window_started: float
    dispatched: int
    indexes: dict[str, dict[int, float]]


def instance_id() -> str:
    """This process among the dispatchers (and the roles' heartbeats): host:pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Dispatcher:
    def __init__(self, client: RedisClient, keys: Keys, registry: JobRegistry,
                 frontier: Frontier, leases: ShardLeases | None = None, window: float = 600.0,
                 headroom: float = 1.25, default_weight: int = 600, batch: int = 500,
                 idle_sleep: float = 0.5, clock: Clock = time.time,
                 scripts: LuaScripts | None = None, min_age: float = 60.0) -> None:
        self.client = client
        self.keys = keys
        self.registry = registry
        self.frontier = frontier
        self.scripts = scripts or LuaScripts(client)
        self.leases = leases or ShardLeases(client, keys, instance_id(), clock=clock,
                                            scripts=self.scripts)
        self._held_logged = -1
        self.window = window
        self.headroom = headroom
        self.default_weight = default_weight
        self.min_age = min_age
        self.batch = batch
        self.idle_sleep = idle_sleep
        self.pause = idle_sleep          # before the next tick: grows while ticks find no work
        # The last tick saw tasks waiting. One the pacing allowed nothing counts as finding
        # none: jobs finishing over 30 tasks a minute get one out within a second, so
        # only slower ones can wait up to IDLE_PAUSE_MAX more.
        self.found_work = False
        self._idle_since: float | None = None  # when ticks stopped finding work
        self.clock = clock
        # spider type -> its jobs' weighted round robin
        self.robins: dict[str, WeightedRoundRobin] = {}
        self.stopping = threading.Event()
        self._window_started: float | None = None
        self._window_totals: dict[str, int] = {}
        # recurring crawls, fired in the upkeep, and how a run is submitted (from_settings)
        self.schedules: Schedules | None = None
        self.submit_crawl: Callable[[CrawlConfig], None] | None = None
        self._weights_published: dict[str, int] = {}
        self._weights: dict[str, int] = {}              # the last read, and when
        self._weights_read_at = -math.inf
        self._infos: dict[str, JobInfo] = {}            # the live jobs' records, and when
        self._infos_ids: set[str] = set()               # the ids they were read for
        self._infos_read_at = -math.inf
        # beats the role's heartbeat, and the loop's watchdog (main sets them)
        self.heartbeat: Callable[[], None] | None = None
        self.watchdog: Watchdog | None = None
        self.heartbeat_every = 5.0
        self._last_upkeep = -math.inf
        self._upkeep_slice = 0
        # slow chores (from_settings sets them): the seen-URL filter's turnover, retention
        self.bloom: AgingBloomFilter | None = None
        self.retention: Retention | None = None
        self._last_chores = -math.inf

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings, clock: Clock = time.time,
                      instance: str | None = None) -> "Dispatcher":
        scripts = LuaScripts(client)
        common: dict[str, Any] = {"clock": clock, "scripts": scripts}
        keys = Keys.from_settings(settings)
        dispatcher = cls(client, keys,
                   JobRegistry.from_settings(client, settings, **common),
                   Frontier.from_settings(client, settings, **common),
                   ShardLeases(client, keys, instance or instance_id(),
                               ttl=settings.getfloat("CRAWLCLUSTER_DISPATCH_LEASE_SECONDS"),
                               **common),
                   window=settings.getfloat("CRAWLCLUSTER_DISPATCH_WINDOW"),
                   headroom=settings.getfloat("CRAWLCLUSTER_DISPATCH_HEADROOM"),
                   default_weight=settings.getint("CRAWLCLUSTER_DISPATCH_DEFAULT_WEIGHT"),
                   batch=settings.getint("CRAWLCLUSTER_DISPATCH_BATCH"),
                   idle_sleep=settings.getfloat("CRAWLCLUSTER_DISPATCH_IDLE_SLEEP"),
                   min_age=settings.getfloat("CRAWLCLUSTER_WEIGHT_MIN_AGE"),
                   **common)
        dispatcher.schedules = Schedules(client, keys, **common)
        bloom = AgingBloomFilter.from_settings(client, settings, clock=clock)
        store = CrawlStore(client, keys)
        dispatcher.submit_crawl = lambda config: store.submit(config, bloom,
                                                              dispatcher.frontier)
        dispatcher.bloom = bloom
        dispatcher.retention = Retention.from_settings(client, settings, **common)
        return dispatcher

    # --- weights ---------------------------------------------------------------------

    def weights(self, jobs: dict[str, JobInfo]) -> dict[str, int]:
        """``{job: tasks per minute}`` for the live jobs ``{job: info}``."""
        if not jobs:
            return {}
        now = self.clock()
        minutes = self.registry.weight_minutes
        measured: dict[str, float] = {}
        for job, done in self.registry.done_counts(list(jobs)).items():
            age = now - jobs[job].get("registered", now)
            if done and age >= self.min_age:
                measured[job] = done / min(minutes, age / 60)
        mean = (sum(measured.values()) / len(measured)) if measured else self.default_weight
        return {job: max(1, round(measured.get(job, mean))) for job in jobs}

    # --- one tick ----------------------------------------------------------------------

    def tick(self) -> int:
        """One round of dispatch (upkeep first, when due); return the tasks moved."""
        if self.clock() - self._last_upkeep >= UPKEEP_EVERY:
            self._upkeep()
        self.found_work = False
        reads = self._read()
        jobs = reads.jobs
        if not jobs or not self.leases.held:
            return 0
        weights = self._current_weights(jobs)
        allowance = self._allowance(weights, reads)
        by_type: dict[str, dict[str, int]] = {}
        for job, info in jobs.items():
            by_type.setdefault(info["spider_type"], {})[job] = weights[job]
        moved, types = 0, sorted(by_type)
        # A spider type's pools go to that type's jobs only; each type gets an even
        # share of the allowance, and what one leaves goes to the types after it.
        for n, spider_type in enumerate(types):
            if moved >= allowance or self.stopping.is_set():
                break
            share = -(-(allowance - moved) // (len(types) - n))
            moved += self._dispatch(spider_type, by_type[spider_type], share,
                                    reads.indexes.get(spider_type))
        self._publish(weights)
        return moved

    def _read(self) -> TickReads:
        """One round trip, and one more when the live jobs changed or their records are
        ``WEIGHTS_EVERY`` s old (a job's record says its type, host and ip)."""
        started = self._window_start()
        types = sorted({info["spider_type"] for info in self._infos.values()})
        pipe = self.client.pipeline(transaction=False)
        self.registry.read_live_ids(pipe)
        pipe.get(self.keys.dispatched(started))
        for spider_type in types:
            pipe.zrange(self.keys.pool_shards(spider_type), 0, -1, withscores=True)
        ids, dispatched, *indexes = pipe.execute()
        now = self.clock()
        if set(ids) != self._infos_ids or now - self._infos_read_at >= WEIGHTS_EVERY:
            self._infos = self.registry.infos(ids)
            self._infos_ids, self._infos_read_at = set(ids), now
        return TickReads(jobs={job: self._infos[job] for job in ids if job in self._infos},
                         window_started=started, dispatched=int(dispatched or 0),
                         indexes={spider_type: index_marks(index)
                                  for spider_type, index in zip(types, indexes, strict=True)})

    def _current_weights(self, jobs: dict[str, JobInfo]) -> dict[str, int]:
        """``weights(jobs)``, read again once ``WEIGHTS_EVERY`` s old or when the live
        jobs changed."""
        now = self.clock()
        if set(jobs) != set(self._weights) or now - self._weights_read_at >= WEIGHTS_EVERY:
            self._weights, self._weights_read_at = self.weights(jobs), now
        return self._weights

    def _publish(self, weights: dict[str, int]) -> None:
        """Publish the weights (for the exporter and the UI) when they changed."""
        if weights != self._weights_published:
            pipe = self.client.pipeline(transaction=False)
            pipe.delete(self.keys.dispatch_weights())
            pipe.hset(self.keys.dispatch_weights(), mapping=weights)
            pipe.execute()
            self._weights_published = weights

    def _count(self, target: Any, moves: dict[str, int]) -> None:
        """Add ``moves`` (job -> tasks, negative to take back) to the pacing window's
        count and to each job's (for the exporter), on ``target``."""
        total = sum(moves.values())
        if total and self._window_started is not None:      # set by _allowance
            key = self.keys.dispatched(self._window_started)
            target.incrby(key, total)
            target.expire(key, int(self.window * 2))
        for job, count in moves.items():
            if count:
                target.hincrby(self.keys.dispatched_by_job(), job, count)

    def _upkeep(self) -> None:
        held = sorted(self.leases.refresh())
        if len(held) != self._held_logged:
            logger.info("%s holds %d of %d frontier shards", self.leases.instance, len(held),
                        self.keys.shards)
            self._held_logged = len(held)
        for job, work in self.registry.expire_dead().items():
            reissued, failed = self.frontier.reap_leases(work.lease_shards)
            logger.info("job %s stopped beating: %d queued tasks back to the pools, %d of "
                        "its leased tasks re-issued, %d failed for good", job, work.queued,
                        reissued, failed)
        for job, work in self.registry.requeue_orphans().items():
            logger.info("job %s had left when tasks were queued for it: %d back to the "
                        "pools", job, work.queued)
        self._upkeep_slice = (self._upkeep_slice + 1) % UPKEEP_SLICES
        shards = held[self._upkeep_slice::UPKEEP_SLICES]
        requeued, failed = self.frontier.reap_leases(shards)
        if requeued or failed:
            logger.info("expired leases: %d re-issued, %d failed for good", requeued, failed)
        self.frontier.issue_due_hubs(shards)
        self._sweep(shards)
        if self.schedules is not None and self.submit_crawl is not None:
            self.schedules.fire_due(self.submit_crawl)
        if self.clock() - self._last_chores >= CHORES_EVERY:
            self._chores()
        self._last_upkeep = self.clock()

    def _chores(self) -> None:
        if self.bloom is not None:
            self.bloom.upkeep()
        if self.retention is not None:
            self.retention.run()
        self._last_chores = self.clock()

    def _sweep(self, shards: list[int]) -> None:
        """Mark the pools of ``shards`` that hold tasks: work whose mark was lost (a
        writer that died between its push and its mark) is found within a sweep."""
        types = self.frontier.pool_types()
        pipe = self.client.pipeline(transaction=False)
        for spider_type in types:
            for shard in shards:
                pipe.zcard(self.keys.pool(shard, spider_type))
        sizes = iter(pipe.execute())
        pipe = self.client.pipeline(transaction=False)
        for spider_type in types:
            waiting = [shard for shard in shards if next(sizes)]
            self.frontier.mark_pools(pipe, spider_type, waiting)
        pipe.execute()

    def _window_start(self) -> float:
        return math.floor(self.clock() / self.window) * self.window

    def _allowance(self, weights: dict[str, int], reads: TickReads) -> int:
        """Tasks the pacing lets out now: the window's cap so far, less what went."""
        start = reads.window_started
        if start != self._window_started:
            self._log_window()
            self._window_started, self._window_totals = start, {}
        cap = sum(weights.values()) * self.window / 60 * self.headroom
        paced = cap * min(1.0, (self.clock() - start) / self.window + 1 / 60)
        return max(0, int(paced) - reads.dispatched)

    def _dispatch(self, spider_type: str, weights: dict[str, int], budget: int,
                  marked: dict[int, float] | None = None) -> int:
        """Move up to ``budget`` tasks of ``spider_type`` out of the pools of the shards
        this dispatcher holds (of those ``marked`` in the type's index, shard -> when,
        read here if not given): sizes read first, so the weighted round robin's
        sequence is cut into exactly the pieces each shard's call uses; then one script
        call per shard, pipelined. Shards found empty leave the index, unless marked
        too lately."""
        index = self.keys.pool_shards(spider_type)
        looked_at = self.clock()
        if marked is None:
            marked = index_marks(self.client.zrange(index, 0, -1, withscores=True))
        held = [shard for shard in sorted(marked) if shard in self.leases.held]
        if not held:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for shard in held:
            pipe.zcard(self.keys.pool(shard, spider_type))
        sizes = dict(zip(held, pipe.execute(), strict=True))
        self.found_work = self.found_work or any(sizes.values())
        pipe = self.client.pipeline(transaction=False)
        prune(self.scripts, pipe, index, [shard for shard, size in sizes.items() if not size],
              looked_at, marked)
        takes = self._shares({shard: size for shard, size in sizes.items() if size}, budget)
        if takes:
            self._dispatch_pass(spider_type, weights, takes, pipe)
        else:
            pipe.execute()
        return sum(takes.values())

    def _shares(self, sizes: dict[int, int], budget: int) -> dict[int, int]:
        """``{shard: tasks to take}``: the budget spread evenly over the shards with
        tasks, at most ``batch`` and at most what each holds."""
        takes: dict[int, int] = {}
        left = budget
        by_size = sorted(sizes.items(), key=lambda item: (item[1], random.random()))
        for n, (shard, size) in enumerate(by_size):
            take = min(size, self.batch, left // (len(by_size) - n))
            if take:
                takes[shard] = take
                left -= take
        return takes

    def _dispatch_pass(self, spider_type: str, weights: dict[str, int], takes: dict[int, int],
                       pipe: Any) -> None:
        """One call per shard, each given its piece of the weighted round robin's next
        jobs; the jobs are marked in the shards first (on ``pipe``, which may hold other
        writes already), and the moves counted as planned after them. A piece not moved
        as planned (a job closed meanwhile, a lease lost, a pool that held less) is taken
        back from the counts in a round trip of its own."""
        robin = self.robins.setdefault(spider_type, WeightedRoundRobin())
        order = robin.sequence(weights, sum(takes.values()))
        for job in weights:
            self.frontier.marks.mark(pipe, self.keys.job_shards(job), list(takes))
        start, offset = len(pipe), 0
        pieces: list[list[str]] = []
        for shard, take in takes.items():
            piece = order[offset:offset + take]
            pieces.append(piece)
            offset += take
            self.scripts.run("dispatch", [self.keys.pool(shard, spider_type),
                                          self.keys.shard_owner(shard),
                                          self.keys.closed_jobs(shard)],
                             [self.leases.instance, self.keys.queue_template(shard),
                              self.keys.job_domains_template(shard), take, *piece], pipe=pipe)
        planned = Counter(order)
        self._count(pipe, planned)
        replies = pipe.execute()[start:start + len(takes)]
        robin.advance(weights, len(order))
        moved: Counter[str] = Counter()
        for shard, piece, reply in zip(takes, pieces, replies, strict=True):
            if reply == -1:             # the lease was lost since the upkeep
                self.leases.held.discard(shard)
                takes[shard] = 0
                continue
            taken, closed = int(reply[0]), set(reply[1:])
            moved_to = [job for job in piece[:taken] if job not in closed]
            takes[shard] = len(moved_to)
            moved.update(moved_to)
        for job, count in moved.items():
            self._window_totals[job] = self._window_totals.get(job, 0) + count
        if moved != planned:
            pipe = self.client.pipeline(transaction=False)
            self._count(pipe, {job: moved[job] - count for job, count in planned.items()})
            pipe.execute()
        logger.debug("dispatched %d tasks, weights %s", sum(takes.values()), weights)

    def _log_window(self) -> None:
        if self._window_started is not None and self._window_totals:
            total = sum(self._window_totals.values())
            shares = ", ".join(f"{job} {n} ({n / total:.0%})"
                               for job, n in sorted(self._window_totals.items()))
            logger.info("window %d: dispatched %d tasks: %s", self._window_started, total, shares)

    def window_totals(self) -> dict[str, int]:
        """``{job: tasks}`` dispatched by this process in the current window."""
        return dict(self._window_totals)

    # --- the role ------------------------------------------------------------------------

    def run(self) -> None:
        """Tick until stopped, ``idle_sleep`` apart (longer while ticks find no work,
        ``pause_after``): a tick moves everything the pools hold and the pacing allows,
        so ticking again at once would find little and cost the master and Redis a
        busy loop."""
        logger.info("dispatcher %s running: window %.0f s, headroom %.2f, batch %d, "
                    "%d frontier shards", self.leases.instance, self.window, self.headroom,
                    self.batch, self.keys.shards)
        last_beat = 0.0
        while not self.stopping.is_set():
            if self.watchdog is not None:
                self.watchdog.beat()
            try:
                if self.heartbeat and time.monotonic() - last_beat >= self.heartbeat_every:
                    self.heartbeat()
                    last_beat = time.monotonic()
                moved = self.tick()
            except redis.RedisError as exc:
                logger.error("Redis error, retrying in %.1f s: %s", self.idle_sleep * 4, exc)
                self.stopping.wait(self.idle_sleep * 4)
                continue
            self.wait(self.pause_after(moved))
        self._log_window()
        try:
            self.leases.release_all()
        except redis.RedisError as exc:
            logger.warning("could not give the shard leases back (they expire): %s", exc)
        logger.info("dispatcher stopped")

    def pause_after(self, moved: int) -> float:
        """Seconds until the next tick: the idle sleep while ticks find work or have
        not found any for less than ``IDLE_AFTER`` s, then doubled after each tick that
        finds none, up to ``IDLE_PAUSE_MAX``."""
        now = self.clock()
        if moved or self.found_work:
            self._idle_since, self.pause = None, self.idle_sleep
        elif self._idle_since is None:
            self._idle_since = now
        elif now - self._idle_since >= IDLE_AFTER:
            self.pause = min(max(self.idle_sleep, IDLE_PAUSE_MAX), self.pause * 2)
        return self.pause

    def wait(self, seconds: float) -> None:
        """Wait ``seconds``, or until a job short of work pushes links (``Keys.dispatch_wake``):
        a crawl's first pages, or work after a pause, go out in ms, not a pause later."""
        if seconds <= 0 or self.stopping.is_set():
            return
        try:
            self.client.blpop([self.keys.dispatch_wake()], timeout=seconds)
        except redis.RedisError:
            self.stopping.wait(seconds)

    def stop(self, *_: object) -> None:
        self.stopping.set()


def main(settings: Settings) -> int:
    """``crawlcluster master``: run the dispatcher until SIGTERM/SIGINT."""
    from settings.clients import redis_client

    client = redis_client(settings, "master")
    instance = instance_id()
    dispatcher = Dispatcher.from_settings(client, settings, instance=instance)
    beats = Heartbeats.from_settings(client, settings)
    dispatcher.heartbeat = lambda: beats.beat("master", instance)
    dispatcher.heartbeat_every = beats.interval
    dispatcher.watchdog = beats.watchdog(settings, "master", instance)
    stop_on_signals(dispatcher.stop, settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT"),
                    f"the dispatcher {instance}")
    dispatcher.run()
    return 0
