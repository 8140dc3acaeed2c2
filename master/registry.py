"""The job registry: which spider jobs are alive, and what happens when one dies.

A job (one spider process) registers with its spider type, host and ip, and
beats a heartbeat; the registry is a sorted set of job -> last beat. A job
silent for longer than the TTL is dead: in every shard one Lua call moves the
tasks queued for it back to the shard's pool, then it leaves the registry
(thesis 4.2.1.3); a crash in between leaves it dead in the registry, to be
done again. The leases it held are made to expire in the same call, so the
caller re-issues them at once (`Frontier.reap_leases`) instead of after
``CRAWLCLUSTER_LEASE_SECONDS``.
"""

import json
import time
from dataclasses import dataclass
from typing import Any

from master.counters import Clock, RollingTimeCounter, events_since
from master.keys import Keys
from master.lua import LuaScripts
from master.shards import mark_index, wake_dispatchers
from master.tasks import check_name
from settings.clients import RedisClient
from settings.loader import Settings
from settings.process import Watchdog

JobInfo = dict[str, Any]     # what a job registered: spider_type, host, ip, node, ...
STALLED = "stalled:"         # a heartbeat's value once its role's watchdog fired
# How long a closed job is remembered in each shard, so dispatchers queue nothing for it:
# far longer than a dispatch tick, from its read of the live jobs to its moves, can last.
CLOSED_JOB_SECONDS = 600


@dataclass(frozen=True)
class Requeued:
    """What became of a dead or closed job's work: tasks moved from its queues back to the
    pools, and the shards where its leases were made to expire (re-issue them there)."""

    queued: int
    lease_shards: list[int]


class JobRegistry:
    def __init__(self, client: RedisClient, keys: Keys, ttl: float = 30.0,
                 weight_minutes: int = 10, clock: Clock = time.time,
                 scripts: LuaScripts | None = None) -> None:
        self.client = client
        self.keys = keys
        self.ttl = ttl
        self.weight_minutes = weight_minutes
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings,
                      **kwargs: Any) -> "JobRegistry":
        return cls(client, Keys.from_settings(settings),
                   ttl=settings.getfloat("CRAWLCLUSTER_JOB_HEARTBEAT_TTL"),
                   weight_minutes=settings.getint("CRAWLCLUSTER_WEIGHT_MINUTES"), **kwargs)

    def register(self, job: str, spider_type: str, host: str, ip: str, **info: Any) -> None:
        check_name("job id", job)
        record = dict(info, job=job, spider_type=spider_type, host=host, ip=ip,
                      registered=self.clock())
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.keys.job_info(job), json.dumps(record))
        pipe.zadd(self.keys.jobs(), {job: self.clock()})
        # A job id closed before: declared dead and beating again, or reused by a manager
        # started again.
        for shard in self.keys.all_shards():
            pipe.zrem(self.keys.closed_jobs(shard), job)
        wake_dispatchers(pipe, self.keys)           # its first tasks now, not a pause later
        pipe.execute()

    def heartbeat(self, job: str) -> bool:
        """Keep a job alive; False if it was already declared dead (register again)."""
        pipe = self.client.pipeline()
        pipe.zadd(self.keys.jobs(), {job: self.clock()}, xx=True)
        pipe.zscore(self.keys.jobs(), job)
        return pipe.execute()[1] is not None

    def deregister(self, job: str) -> Requeued | None:
        """A job ending cleanly: its queued tasks go back to the pools now."""
        return self.requeue(job, cutoff=float("inf"))

    def info(self, job: str) -> JobInfo | None:
        raw = self.client.get(self.keys.job_info(job))
        info: JobInfo | None = json.loads(raw) if raw else None
        return info

    def live_jobs(self) -> dict[str, JobInfo]:
        """``{job: info}`` of jobs that beat within the TTL."""
        return self.infos(self.read_live_ids(self.client))

    def read_live_ids(self, target: Any) -> Any:
        """The ids of jobs that beat within the TTL, read on ``target`` (the client, or
        a pipeline that returns them with its other replies)."""
        return target.zrangebyscore(self.keys.jobs(), f"({self.clock() - self.ttl!r}", "+inf")

    def infos(self, jobs: list[str]) -> dict[str, JobInfo]:
        """``{job: info}`` of ``jobs`` (those whose record is gone left out)."""
        if not jobs:
            return {}
        infos = self.client.mget([self.keys.job_info(job) for job in jobs])
        return {job: json.loads(raw) for job, raw in zip(jobs, infos, strict=True) if raw}

    def expire_dead(self) -> dict[str, Requeued]:
        """Requeue every job silent past the TTL; return what became of each one's work."""
        cutoff = self.clock() - self.ttl
        dead = self.client.zrangebyscore(self.keys.jobs(), "-inf", repr(cutoff))
        done = {job: self.requeue(job, cutoff) for job in dead}
        return {job: requeued for job, requeued in done.items() if requeued is not None}

    def requeue_orphans(self) -> dict[str, Requeued]:
        """Clear up after jobs dispatched to as they left the registry.

        A dispatcher reads the live jobs, then moves tasks into their queues; a job
        that closes in between (a spider recycled or stopped) has its queues emptied
        shard by shard. ``dispatch.lua`` queues nothing in a shard the job was closed in
        already, so no task waits in a closed job's queue; but the dispatcher counts each
        job's tasks after moving them (``dispatched_by_job``), and a count written after
        the job left has no job. Requeueing such a job again (it finds nothing, unless a
        marker expired early) removes the count."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hkeys(self.keys.dispatched_by_job())
        pipe.zrange(self.keys.jobs(), 0, -1)
        counted, registered = pipe.execute()
        orphans = sorted(set(counted) - set(registered))
        done = {job: self.requeue(job, cutoff=float("inf")) for job in orphans}
        return {job: requeued for job, requeued in done.items() if requeued is not None}

    def requeue(self, job: str, cutoff: float) -> Requeued | None:
        """Move a job's queued tasks back to the pools and make its leases expire, in
        every shard, and remove it from the registry; None (nothing done) if it beat
        after ``cutoff``."""
        beat = self.client.zscore(self.keys.jobs(), job)
        if beat is not None and beat > cutoff:
            return None
        info = self.info(job)
        shards = self._close_in_shards(job)
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            self.scripts.run("requeue_job", [self.keys.job_domains(job, shard),
                                             self.keys.leases(shard),
                                             self.keys.lease_owners(shard)],
                             [self.keys.queue_template(shard), job,
                              self.keys.pool_template(shard)], pipe=pipe)
        replies = dict(zip(shards, pipe.execute(), strict=True))
        moved = {shard: int(reply[0]) for shard, reply in replies.items()}
        pipe = self.client.pipeline(transaction=False)
        refilled = [shard for shard, count in moved.items() if count]
        types = [info["spider_type"]] if info else self.client.smembers(self.keys.pool_types())
        for spider_type in types if refilled else ():
            mark_index(pipe, self.keys.pool_shards(spider_type), refilled, self.clock())
        pipe.delete(self.keys.job_info(job))
        pipe.delete(self.keys.job_shards(job))
        pipe.hdel(self.keys.dispatched_by_job(), job)
        # A job that beats from now on is told it was declared dead, and registers again.
        self.scripts.run("index_prune", [self.keys.jobs()], [repr(min(cutoff, 1e18)), job],
                         pipe=pipe)
        pipe.execute()
        return Requeued(sum(moved.values()),
                        [shard for shard, reply in replies.items() if int(reply[1])])

    def _close_in_shards(self, job: str) -> list[int]:
        """Mark ``job`` closed in every shard (dispatchers queue nothing more for it
        there; markers older than ``CLOSED_JOB_SECONDS`` go), then return the shards
        where it has queues or where leases are held: only those need ``requeue_job``.
        A dispatch before a shard's marker has added its queue's domain by the time
        the shard is looked at (the same connection, in order, for a shard)."""
        now = self.clock()
        pipe = self.client.pipeline(transaction=False)
        for shard in self.keys.all_shards():
            closed = self.keys.closed_jobs(shard)
            pipe.zremrangebyscore(closed, "-inf", repr(now - CLOSED_JOB_SECONDS))
            pipe.zadd(closed, {job: now})
            pipe.scard(self.keys.job_domains(job, shard))
            pipe.hlen(self.keys.lease_owners(shard))
        replies = pipe.execute()
        return [shard for n, shard in enumerate(self.keys.all_shards())
                if replies[4 * n + 2] or replies[4 * n + 3]]

    # --- finished tasks: the dispatcher's feedback ---------------------------------

    def done_counter(self, job: str) -> RollingTimeCounter:
        return RollingTimeCounter(self.client, self.keys.rolling_counter(self.keys.job_done(job)),
                                  self.weight_minutes * 60, clock=self.clock,
                                  scripts=self.scripts)

    def count_done(self, job: str, count: int = 1, pipe: Any = None) -> Any:
        return self.done_counter(job).increment(count, pipe=pipe)

    def done_counts(self, jobs: list[str]) -> dict[str, int]:
        """Tasks each job finished within the last ``weight_minutes``."""
        pipe = self.client.pipeline(transaction=False)
        for job in jobs:
            self.done_counter(job).increment(0, pipe=pipe)
        return dict(zip(jobs, pipe.execute(), strict=True))


class Heartbeats:
    """Liveness of the cluster's roles (master, preprocess, monitor, manager): a key
    with a TTL per role instance, and a sorted set of every instance's last beat so
    ``stats`` can list the ones that went silent too."""

    def __init__(self, client: RedisClient, keys: Keys, ttl: float = 30.0,
                 clock: Clock = time.time) -> None:
        self.client = client
        self.keys = keys
        self.ttl = ttl
        self.clock = clock

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings,
                      **kwargs: Any) -> "Heartbeats":
        return cls(client, Keys.from_settings(settings),
                   ttl=settings.getfloat("CRAWLCLUSTER_HEARTBEAT_TTL"), **kwargs)

    @property
    def interval(self) -> float:
        """Seconds between beats: a third of the TTL (at most 5 s), so one late beat
        does not mark a live role down."""
        return max(0.2, min(5.0, self.ttl / 3))

    def beat(self, role: str, instance: str) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.keys.heartbeat(role, instance), repr(self.clock()),
                 px=int(self.ttl * 1000))
        pipe.zadd(self.keys.heartbeats(), {f"{role}:{instance}": self.clock()})
        pipe.execute()

    def watchdog(self, settings: Settings, role: str, instance: str,
                 start: bool = True) -> Watchdog:
        """The role's watchdog (``CRAWLCLUSTER_WATCHDOG_SECONDS``), started unless
        ``start`` is false: when it fires, this heartbeat says "stalled"."""
        bound = float(settings["CRAWLCLUSTER_WATCHDOG_SECONDS"].get(role, 0))
        watchdog = Watchdog(bound, f"{role} {instance}",
                            on_stall=lambda: self.stalled(role, instance))
        return watchdog.start() if start else watchdog

    def stalled(self, role: str, instance: str) -> None:
        """A role's watchdog found its loop stuck: it says "stalled" until its heartbeat
        runs out, then "down" (settings/process.py's ``Watchdog``)."""
        self.client.set(self.keys.heartbeat(role, instance), f"{STALLED}{self.clock()!r}",
                        px=int(self.ttl * 1000))

    def stop(self, role: str, instance: str) -> None:
        self.client.delete(self.keys.heartbeat(role, instance))

    def status(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{role: {instance: {"up": bool, "stalled": bool, "last_beat": seconds ago}}}``
        (a stalled role is not up)."""
        beats = self.client.zrange(self.keys.heartbeats(), 0, -1, withscores=True)
        pipe = self.client.pipeline(transaction=False)
        for member, _ in beats:
            pipe.get(self.keys.heartbeat(*member.split(":", 1)))
        status: dict[str, dict[str, dict[str, Any]]] = {}
        for (member, at), value in zip(beats, pipe.execute(), strict=True):
            role, instance = member.split(":", 1)
            stalled = bool(value) and value.startswith(STALLED)
            status.setdefault(role, {})[instance] = {
                "up": bool(value) and not stalled, "stalled": stalled,
                "last_beat": round(self.clock() - at, 1)}
        return status


def finished_last_minute(client: RedisClient, keys: Keys, jobs: list[str],
                         clock: Clock = time.time) -> dict[str, int]:
    """``{job: tasks finished in the last 60 s}`` from the jobs' done counters."""
    pipe = client.pipeline(transaction=False)
    for job in jobs:
        pipe.hgetall(keys.rolling_counter(keys.job_done(job)))
    since = clock() - 60
    return {job: events_since(buckets, since)
            for job, buckets in zip(jobs, pipe.execute(), strict=True)}
