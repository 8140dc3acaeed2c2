"""Throttled domain queues (thesis 4.2.2): one take, both windows, atomically.

Each job has a priority queue per domain, in the domain's shard. A job takes a
task from a domain only while two sliding windows allow it: (spider type,
domain), shared by every host running that type, and (host ip, domain),
shared by every spider on one host. The limits come from the live site config
(ZooKeeper); blacklisted domains are never handed out. ``take`` tries all of a
job's domains in one round trip, one script call per shard, and leases what it
gets. A domain paused by pushback (master/pushback.py) is not taken from until its
pause ends (the take says so: ``TakeResult.paused``), its rate factor scales its limits
and its hits are spaced over the window.
"""

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from master.counters import Clock
from master.keys import Keys
from master.lua import LuaScripts
from master.pushback import PushbackPolicy, PushbackStore
from master.shards import index_marks, mark_index, prune, read_index
from master.siteconfig import SiteConfig
from settings.clients import RedisClient
from settings.loader import Settings

MIN_WAIT = 0.001     # seconds: the least wait a full window answers (its reply has ms)

# How many tasks to take of a domain: a number, or one computed from (domain, hits, window).
PerDomain = int | Callable[[str, int, float], int]


@dataclass
class JobView:
    """Where a job's queues are, as its last take read them: shard -> its domains there
    (shards from the job's index; a shard just marked has no domains known yet)."""

    domains: dict[int, Sequence[str]] = field(default_factory=dict)
    empty: list[int] = field(default_factory=list)   # shards the last take found no domain in
    seen_at: float = 0.0
    marks: dict[int, float] = field(default_factory=dict)   # shard -> marked at, as read

    def all_domains(self) -> list[str]:
        return sorted(domain for names in self.domains.values() for domain in names)


@dataclass
class TakeResult:
    """What one ``take`` got: ``[(domain, task JSON)]`` and when to try again."""

    tasks: list[tuple[str, str]] = field(default_factory=list)
    wait: float | None = None          # seconds until a full window frees up
    blacklisted: list[str] = field(default_factory=list)
    throttled: list[str] = field(default_factory=list)   # domains a full window refused
    paused: dict[str, float] = field(default_factory=dict)   # domain -> seconds paused yet
    view: JobView | None = None        # the job's shards and domains, read in the same round trip


def wait_of(reply: str) -> float:
    """Seconds of a take's "wait:<s>" (a full window) or "pause:<s>" (pushback)."""
    return float(reply.partition(":")[2])


def job_view(client: RedisClient, keys: Keys, job: str) -> JobView:
    """The job's shards (its index) and its domains in each: two round trips."""
    shards = read_index(client, keys.job_shards(job))
    if not shards:
        return JobView()
    pipe = client.pipeline(transaction=False)
    for shard in shards:
        pipe.smembers(keys.job_domains(job, shard))
    return JobView({shard: sorted(names) for shard, names in zip(shards, pipe.execute(),
                                                                 strict=True)})


class ThrottledQueues:
    """The take side of the job queues."""

    def __init__(self, client: RedisClient, keys: Keys, site_config: SiteConfig,
                 lease_seconds: float = 300.0, clock: Clock = time.time,
                 scripts: LuaScripts | None = None, send_grace: float = 0.0,
                 pushback: PushbackStore | None = None) -> None:
        self.client = client
        self.keys = keys
        self.site_config = site_config
        self.lease_seconds = lease_seconds
        # Seconds a slow domain's token stays good after its take (window_ms).
        self.send_grace = send_grace
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)
        # pushback states are read and spaced by every take; this store reports pushback
        self.pushback = pushback or PushbackStore(client, keys, PushbackPolicy(), clock,
                                                  self.scripts)

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings, site_config: SiteConfig,
                      **kwargs: Any) -> "ThrottledQueues":
        keys = Keys.from_settings(settings)
        if "pushback" not in kwargs:
            kwargs["pushback"] = PushbackStore(
                client, keys, PushbackPolicy.from_settings(settings),
                **{name: kwargs[name] for name in ("clock", "scripts") if name in kwargs})
        return cls(client, keys, site_config,
                   lease_seconds=settings.getfloat("CRAWLCLUSTER_LEASE_SECONDS"), **kwargs)

    def job_view(self, job: str) -> JobView:
        return job_view(self.client, self.keys, job)

    def job_domains(self, job: str) -> list[str]:
        return self.job_view(job).all_domains()

    def rescan(self, job: str) -> list[int]:
        """Look for the job's domains in every shard and mark the shards that have some
        in its index: finds queues whose index entry was lost (slow; for an idle job)."""
        pipe = self.client.pipeline(transaction=False)
        for shard in self.keys.all_shards():
            pipe.scard(self.keys.job_domains(job, shard))
        found = [shard for shard, size in zip(self.keys.all_shards(), pipe.execute(),
                                              strict=True) if size]
        if found:
            mark_index(self.client, self.keys.job_shards(job), found, self.clock())
        return found

    def take(self, job: str, spider_type: str, ip: str, view: JobView | None = None,
             min_interval: Mapping[str, float] | None = None,
             per_domain: PerDomain = 1) -> TakeResult:
        """Try each domain of the job once; lease up to ``per_domain`` tasks of each, as
        many as the windows allow. ``per_domain`` is a number, or a callable of
        ``(domain, hits, window)`` giving the number, ``hits`` being what this job's IP
        may make in a window (the domain's limit, or its per-IP limit if tighter, scaled
        by its pushback factor as the last take read it).

        ``view`` is where the job's queues are (``result.view`` of the last take; read
        first if None). ``min_interval`` maps a domain to seconds between requests it
        asks for (robots.txt Crawl-delay); it can only tighten the configured limit.
        """
        view = self.job_view(job) if view is None else view
        result = TakeResult()
        pipe = self.client.pipeline(transaction=False)
        prune(self.scripts, pipe, self.keys.job_shards(job), view.empty, view.seen_at,
              view.marks)
        now = self.clock()
        start, called = len(pipe), []        # called: (shard, its open domains)
        for shard, domains in sorted(view.domains.items()):
            args: list[Any] = [repr(now), repr(now + self.lease_seconds),
                               self.keys.queue_template(shard), job, spider_type, ip,
                               *self.pushback.take_args()]
            open_domains: list[str] = []
            for domain in domains:
                if self.site_config.is_blacklisted(domain):
                    result.blacklisted.append(domain)
                    continue
                hits, ip_hits, window = self.limits(domain, (min_interval or {}).get(domain))
                wanted = (per_domain(domain, *self.pushback.scaled(domain, ip_hits, window))
                          if callable(per_domain) else per_domain)
                args += [domain, hits, ip_hits, self.window_ms(ip_hits, window), wanted]
                open_domains.append(domain)
            if open_domains:
                self.scripts.run("throttle_take", self._take_keys(job, shard), args, pipe=pipe)
            else:         # nothing to take there (yet): only whether domains came
                pipe.smembers(self.keys.job_domains(job, shard))
            called.append((shard, open_domains))
        pipe.zrange(self.keys.job_shards(job), 0, -1, withscores=True)
        *replies, shards_now = pipe.execute()
        marks = index_marks(shards_now)
        result.view = JobView(dict.fromkeys(sorted(marks), ()), seen_at=now, marks=marks)
        for (shard, open_domains), reply in zip(called, replies[start:], strict=True):
            domains_now, *per = reply if open_domains else [reply]
            if open_domains:
                *per, factors = per
                self.pushback.factors_read(open_domains, factors)
            self._collect(result, open_domains, per)
            if shard in result.view.domains:
                result.view.domains[shard] = sorted(domains_now)
                if not domains_now:
                    result.view.empty.append(shard)
        return result

    def _take_keys(self, job: str, shard: int) -> list[str]:
        return [self.keys.leases(shard), self.keys.job_domains(job, shard),
                self.keys.lease_owners(shard), self.keys.throttle(shard),
                self.keys.pushback(shard)]

    @staticmethod
    def _collect(result: TakeResult, domains: list[str], replies: list[Any]) -> None:
        for domain, reply in zip(domains, replies, strict=True):
            if isinstance(reply, str):
                result.throttled.append(domain)
                wait = wait_of(reply)
                if reply.startswith("pause:"):
                    result.paused[domain] = wait
                result.wait = wait if result.wait is None else min(result.wait, wait)
            elif reply:
                result.tasks.extend((domain, member) for member in reply)

    def steal(self, job: str, others: list[str], count: int, sample: int = 64,
              shards: int = 4) -> int:
        """Move up to ``count`` tasks (at most half of one queue per shard) from the
        longest domain queues of the jobs ``others`` into ``job``'s queues for those
        domains, in up to ``shards`` shards where the others have queues; return how
        many. For an idle job, while others still hold a backlog (a crawl's tail)."""
        if not others or count <= 0:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for other in others:
            pipe.zrange(self.keys.job_shards(other), 0, -1)
        candidates = sorted({int(shard) for found in pipe.execute() for shard in found})
        chosen = random.sample(candidates, min(shards, len(candidates)))
        if not chosen:
            return 0
        pipe = self.client.pipeline(transaction=False)
        mark_index(pipe, self.keys.job_shards(job), chosen, self.clock())
        share = -(-count // len(chosen))
        for shard in chosen:
            args = [self.keys.queue_template(shard), self.keys.job_domains_template(shard), job,
                    share, sample, *others]
            self.scripts.run("queue_steal", [self.keys.job_domains(job, shard)], args, pipe=pipe)
        return int(sum(pipe.execute()[1:]))

    def hit(self, job: str, spider_type: str, ip: str, domain: str,
            min_interval: float | None = None) -> float:
        """Count one request to ``domain`` made outside the queues (a rendering browser's
        own: a page's scripts, styles, XHR) in both windows, if they have room: 0.0.
        Else nothing is counted and the reply is the seconds to wait before asking again
        (a domain paused by pushback: until its pause ends); a blacklisted domain's is
        -1.0, never."""
        if self.site_config.is_blacklisted(domain):
            return -1.0
        shard, now = self.keys.shard_of(domain), self.clock()
        hits, ip_hits, window = self.limits(domain, min_interval)
        reply = self.scripts.run(
            "throttle_take", self._take_keys(job, shard),
            [repr(now), repr(now), self.keys.queue_template(shard), job, spider_type, ip,
             *self.pushback.take_args(), domain, hits, ip_hits,
             self.window_ms(ip_hits, window), -1])
        self.pushback.factors_read([domain], reply[2])
        reply = reply[1]
        if not isinstance(reply, str):
            return 0.0
        # A window full for less than a millisecond more says "wait:0.000": still a wait,
        # or the caller would send a request no window counted.
        return max(wait_of(reply), MIN_WAIT)

    def window_ms(self, hits: int, window: float) -> int:
        """The window the windows count ``hits`` in, in ms: for a slow domain (fewer hits
        than graces in a window) lengthened by ``send_grace``. Its request may go out up
        to that long after the take (crawler/token_deadlines.py), so the site sees no
        more than ``hits`` in any ``window`` of its own."""
        if self.send_grace and hits * self.send_grace < window:
            window += self.send_grace
        return int(window * 1000)

    def limits(self, domain: str, min_interval: float | None) -> tuple[int, int, float]:
        """``(hits, hits from one IP, window)`` for a domain (``limit``, and its per-IP
        limit if tighter)."""
        hits, window = self.limit(domain, min_interval)
        return hits, min(hits, self.site_config.ip_hits(domain)), window

    def limit(self, domain: str, min_interval: float | None = None) -> tuple[int, float]:
        """``(hits, window)`` for a domain: the site config, tightened by a Crawl-delay."""
        hits, window = self.site_config.limit(domain)
        if min_interval and hits and window / hits < min_interval:
            # Crawl-delay asks for more room between requests: fewer hits per
            # window, or one hit per Crawl-delay when that is longer than the window.
            hits = int(window / min_interval)
            if hits < 1:
                hits, window = 1, float(min_interval)
        return hits, window

    def drop_blacklisted(self, job: str, domains: list[str]) -> int:
        """Remove a job's queues for blacklisted domains; return tasks dropped."""
        pipe = self.client.pipeline(transaction=False)
        for domain in domains:
            shard = self.keys.shard_of(domain)
            self.scripts.run("queue_drop", [self.keys.queue(job, domain)],
                             [self.keys.crawl_template("pending", shard),
                              self.keys.crawl_template("counts", shard), domain], pipe=pipe)
        return int(sum(pipe.execute()))
