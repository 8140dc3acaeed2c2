"""Throttled domain queues (thesis 4.2.2): one take, both windows, atomically.

Each job has a priority queue per domain. A job takes a task from a domain
only while two sliding windows allow it: (spider type, domain), shared by
every host running that type, and (host ip, domain), shared by every spider
on one host. The limits come from the live site config (ZooKeeper);
blacklisted domains are never handed out. ``take`` tries all of a job's
domains in one round trip and leases what it gets.
"""

import time
import uuid
from dataclasses import dataclass, field

from master.keys import Keys
from master.lua import LuaScripts


@dataclass
class TakeResult:
    """What one ``take`` got: ``[(domain, task JSON)]`` and when to try again."""

    tasks: list = field(default_factory=list)
    wait: float | None = None          # seconds until a full window frees up
    blacklisted: list = field(default_factory=list)
    domains: list | None = None        # the job's domains, read in the same round trip


class ThrottledQueues:
    """The take side of the job queues."""

    def __init__(self, client, keys, site_config, lease_seconds=300.0, clock=time.time,
                 scripts=None):
        self.client = client
        self.keys = keys
        self.site_config = site_config
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)

    @classmethod
    def from_settings(cls, client, settings, site_config, **kwargs):
        return cls(client, Keys.from_settings(settings), site_config,
                   lease_seconds=settings.getfloat("CRAWLCLUSTER_LEASE_SECONDS"), **kwargs)

    def job_domains(self, job):
        return sorted(self.client.smembers(self.keys.job_domains(job)))

    def take(self, job, spider_type, ip, domains=None, min_interval=None, per_domain=1):
        """Try each domain of the job once; lease up to ``per_domain`` tasks of each, as
        many as the windows allow. ``per_domain`` is a number, or a callable of
        ``(domain, hits, window)`` giving the number.

        ``min_interval`` maps a domain to seconds between requests it asks for
        (robots.txt Crawl-delay); it can only tighten the configured limit.
        The job's domains are read again in the same round trip (``result.domains``),
        for a caller that takes every round to pass to the next one.
        """
        domains = self.job_domains(job) if domains is None else domains
        result = TakeResult()
        open_domains = []
        for domain in domains:
            (result.blacklisted if self.site_config.is_blacklisted(domain)
             else open_domains).append(domain)
        if not open_domains:
            return result
        pipe = self.client.pipeline(transaction=False)
        now = self.clock()
        hit_prefix = uuid.uuid4().hex
        for n, domain in enumerate(open_domains):
            hits, window = self.limit(domain, (min_interval or {}).get(domain))
            keys = [self.keys.queue(job, domain), self.keys.throttle("type", spider_type, domain),
                    self.keys.throttle("ip", ip, domain), self.keys.leases()]
            wanted = per_domain(domain, hits, window) if callable(per_domain) else per_domain
            args = [repr(now), repr(now - window), hits, hits, int(window * 1000),
                    repr(now + self.lease_seconds), f"{hit_prefix}.{n}", wanted]
            self.scripts.run("throttle_take", keys, args, pipe=pipe)
        pipe.smembers(self.keys.job_domains(job))
        *replies, domains_now = pipe.execute()
        result.domains = sorted(domains_now)
        for domain, reply in zip(open_domains, replies, strict=True):
            if reply is None:
                continue
            if isinstance(reply, str):
                wait = float(reply.removeprefix("wait:"))
                result.wait = wait if result.wait is None else min(result.wait, wait)
            else:
                result.tasks.extend((domain, member) for member in reply)
        return result

    def steal(self, job, others, count, sample=64):
        """Move up to ``count`` tasks (at most half of one queue) from the longest domain
        queue of the jobs ``others`` into ``job``'s queue for that domain; return how
        many. For an idle job, while others still hold a backlog (a crawl's tail)."""
        if not others or count <= 0:
            return 0
        args = [self.keys.queue_template(), self.keys.job_domains_template(), job, count,
                sample, *others]
        return int(self.scripts.run("queue_steal", (), args))

    def limit(self, domain, min_interval=None):
        """``(hits, window)`` for a domain: the site config, tightened by a Crawl-delay."""
        hits, window = self.site_config.limit(domain)
        if min_interval and hits and window / hits < min_interval:
            # Crawl-delay asks for more room between requests: fewer hits per
            # window, or one hit per Crawl-delay when that is longer than the window.
            hits = int(window / min_interval)
            if hits < 1:
                hits, window = 1, float(min_interval)
        return hits, window

    def drop_blacklisted(self, job, domains):
        """Remove a job's queues for blacklisted domains; return tasks dropped."""
        pipe = self.client.pipeline(transaction=False)
        templates = [self.keys.crawl_template("pending"), self.keys.crawl_template("counts")]
        for domain in domains:
            self.scripts.run("queue_drop", [self.keys.queue(job, domain)],
                             [*templates, domain], pipe=pipe)
        return sum(pipe.execute())
