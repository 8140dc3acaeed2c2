"""The dispatcher (``crawlcluster master``): seeds to job queues, by speed.

Each tick it
  1. once a second: moves the queues of jobs whose heartbeat expired back to
     ``seeds``, re-issues expired leases and due hub pages;
  2. weighs the live jobs: tasks each finished per minute over the last
     ``k`` minutes (thesis formula 4-2), a job younger than that measured over
     its age, a job with nothing measured yet given the mean weight;
  3. moves tasks from each spider type's ``seeds`` to the live jobs of that
     type by weighted round robin (thesis 4.2.1.1), in atomic batches, paced
     so that a window gets at most ``headroom`` times what the live jobs
     finish in it (thesis 4.2.1.2): queues never run far
     ahead of the jobs, so the weights stay current.
Killing it at any instant loses and duplicates nothing: every move is one Lua
call. SIGTERM and SIGINT stop it after the current tick.
"""

import logging
import math
import os
import signal
import socket
import threading
import time

from master.frontier import Frontier
from master.keys import Keys
from master.lua import LuaScripts
from master.registry import Heartbeats, JobRegistry
from master.wrr import WeightedRoundRobin

logger = logging.getLogger(__name__)

# Seconds between upkeep passes (dead jobs, expired leases, due hubs): each is
# measured in seconds or minutes, while dispatch ticks run many times a second.
UPKEEP_EVERY = 1.0


class Dispatcher:
    def __init__(self, client, keys, registry, frontier, window=600.0, headroom=1.25,
                 default_weight=600, batch=500, idle_sleep=0.5, clock=time.time,
                 scripts=None, min_age=60.0):
        self.client = client
        self.keys = keys
        self.registry = registry
        self.frontier = frontier
        self.window = window
        self.headroom = headroom
        self.default_weight = default_weight
        self.min_age = min_age
        self.batch = batch
        self.idle_sleep = idle_sleep
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)
        self.robins = {}          # spider type -> its jobs' weighted round robin
        self.stopping = threading.Event()
        self._window_started = None
        self._window_totals = {}
        self.heartbeat = None     # callable beating the role's heartbeat (main sets it)
        self.heartbeat_every = 5.0
        self._last_upkeep = -math.inf

    @classmethod
    def from_settings(cls, client, settings, clock=time.time):
        scripts = LuaScripts(client)
        common = {"clock": clock, "scripts": scripts}
        return cls(client, Keys.from_settings(settings),
                   JobRegistry.from_settings(client, settings, **common),
                   Frontier.from_settings(client, settings, **common),
                   window=settings.getfloat("CRAWLCLUSTER_DISPATCH_WINDOW"),
                   headroom=settings.getfloat("CRAWLCLUSTER_DISPATCH_HEADROOM"),
                   default_weight=settings.getint("CRAWLCLUSTER_DISPATCH_DEFAULT_WEIGHT"),
                   batch=settings.getint("CRAWLCLUSTER_DISPATCH_BATCH"),
                   idle_sleep=settings.getfloat("CRAWLCLUSTER_DISPATCH_IDLE_SLEEP"),
                   min_age=settings.getfloat("CRAWLCLUSTER_WEIGHT_MIN_AGE"),
                   **common)

    # --- weights ---------------------------------------------------------------------

    def weights(self, jobs):
        """``{job: tasks per minute}`` for the live jobs ``{job: info}``."""
        if not jobs:
            return {}
        now = self.clock()
        minutes = self.registry.weight_minutes
        measured = {}
        for job, done in self.registry.done_counts(list(jobs)).items():
            age = now - jobs[job].get("registered", now)
            if done and age >= self.min_age:
                measured[job] = done / min(minutes, age / 60)
        mean = (sum(measured.values()) / len(measured)) if measured else self.default_weight
        return {job: max(1, round(measured.get(job, mean))) for job in jobs}

    # --- one tick ----------------------------------------------------------------------

    def tick(self):
        """One round of dispatch (upkeep first, when due); return the tasks moved."""
        if self.clock() - self._last_upkeep >= UPKEEP_EVERY:
            self._upkeep()
        jobs = self.registry.live_jobs()
        if not jobs:
            return 0
        weights = self.weights(jobs)
        allowance = self._allowance(weights)
        by_type = {}
        for job, info in jobs.items():
            by_type.setdefault(info["spider_type"], {})[job] = weights[job]
        moved, busy = 0, set(by_type)
        while moved < allowance and busy and not self.stopping.is_set():
            # A spider type's seeds go to that type's jobs only; types take turns.
            for spider_type in sorted(busy):
                count = self._dispatch(spider_type, by_type[spider_type],
                                       min(self.batch, allowance - moved))
                moved += count
                if count == 0:
                    busy.discard(spider_type)
                if moved >= allowance:
                    break
        return moved

    def _upkeep(self):
        for job, moved in self.registry.expire_dead().items():
            logger.info("job %s stopped beating: %d queued tasks back to seeds", job, moved)
        requeued, failed = self.frontier.reap_leases()
        if requeued or failed:
            logger.info("expired leases: %d re-issued, %d failed for good", requeued, failed)
        self.frontier.issue_due_hubs()
        self._last_upkeep = self.clock()

    def _allowance(self, weights):
        """Tasks the pacing lets out now: the window's cap so far, less what went."""
        now = self.clock()
        start = math.floor(now / self.window) * self.window
        if start != self._window_started:
            self._log_window()
            self._window_started, self._window_totals = start, {}
        cap = sum(weights.values()) * self.window / 60 * self.headroom
        paced = cap * min(1.0, (now - start) / self.window + 1 / 60)
        dispatched = int(self.client.get(self.keys.dispatched(start)) or 0)
        return max(0, int(paced) - dispatched)

    def _dispatch(self, spider_type, weights, count):
        robin = self.robins.setdefault(spider_type, WeightedRoundRobin())
        order = robin.sequence(weights, count)
        keys = [self.keys.seeds(spider_type), self.keys.dispatched(self._window_started)]
        args = [self.keys.queue_template(), self.keys.job_domains_template(), count,
                int(self.window * 2), *order]
        moved, _ = self.scripts.run("dispatch", keys, args)
        robin.advance(weights, moved)
        for job in order[:moved]:
            self._window_totals[job] = self._window_totals.get(job, 0) + 1
        if moved:
            logger.debug("dispatched %d tasks, weights %s", moved, weights)
        return moved

    def _log_window(self):
        if self._window_started is not None and self._window_totals:
            total = sum(self._window_totals.values())
            shares = ", ".join(f"{job} {n} ({n / total:.0%})"
                               for job, n in sorted(self._window_totals.items()))
            logger.info("window %d: dispatched %d tasks: %s", self._window_started, total, shares)

    def window_totals(self):
        """``{job: tasks}`` dispatched by this process in the current window."""
        return dict(self._window_totals)

    # --- the role ------------------------------------------------------------------------

    def run(self):
        """Tick until stopped, ``idle_sleep`` apart: a tick moves everything the seeds
        hold and the pacing allows, so ticking again at once would find little and
        cost the master and Redis a busy loop."""
        logger.info("dispatcher running: window %.0f s, headroom %.2f, batch %d",
                    self.window, self.headroom, self.batch)
        import redis

        last_beat = 0.0
        while not self.stopping.is_set():
            try:
                if self.heartbeat and time.monotonic() - last_beat >= self.heartbeat_every:
                    self.heartbeat()
                    last_beat = time.monotonic()
                self.tick()
            except redis.RedisError as exc:
                logger.error("Redis error, retrying in %.1f s: %s", self.idle_sleep * 4, exc)
                self.stopping.wait(self.idle_sleep * 4)
                continue
            self.stopping.wait(self.idle_sleep)
        self._log_window()
        logger.info("dispatcher stopped")

    def stop(self, *_):
        self.stopping.set()


def main(settings):
    """``crawlcluster master``: run the dispatcher until SIGTERM/SIGINT."""
    from settings.clients import redis_client

    client = redis_client(settings, "master")
    dispatcher = Dispatcher.from_settings(client, settings)
    beats = Heartbeats.from_settings(client, settings)
    instance = f"{socket.gethostname()}:{os.getpid()}"
    dispatcher.heartbeat = lambda: beats.beat("master", instance)
    dispatcher.heartbeat_every = beats.interval
    signal.signal(signal.SIGTERM, dispatcher.stop)
    signal.signal(signal.SIGINT, dispatcher.stop)
    dispatcher.run()
    return 0
