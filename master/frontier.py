"""URL states (seed 000's URL pool) over the master's Redis data model.

A task waits in ``seeds``, is moved to a job's domain queue by the
dispatcher, taken under the throttles with a lease (master/throttle.py), and
finished by the job: done; retried (up to ``CRAWLCLUSTER_MAX_RETRIES``, then
failed for good); or failed for good at once (404, 410). A lease that expires
unacknowledged is re-issued (the pending timeout). Hub pages are re-issued
every refresh span. Each step is one Lua script.
"""

import json
import time

from master.keys import Keys
from master.lua import LuaScripts
from master.tasks import decode_task, encode_task, seed_score

PERMANENT_STATUSES = {404, 410}


def outcome_for_status(status):
    """``(outcome, reason)`` for an HTTP status: 404/410 and a redirect that reached the
    spider unfollowed (no Location, a scheme other than http(s)) failed, other errors
    retried."""
    if status in PERMANENT_STATUSES:
        return "failed", f"HTTP {status}"
    if 300 <= status < 400:
        return "failed", f"HTTP {status}: redirect not followed"
    if status >= 400:
        return "retry", f"HTTP {status}"
    return "done", ""


class Frontier:
    """Seeds, leases, failures and hubs of one cluster."""

    def __init__(self, client, keys, lease_seconds=300.0, max_retries=3,
                 clock=time.time, scripts=None):
        self.client = client
        self.keys = keys
        self.lease_seconds = lease_seconds
        self.max_retries = max_retries
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)

    @classmethod
    def from_settings(cls, client, settings, **kwargs):
        return cls(client, Keys.from_settings(settings),
                   lease_seconds=settings.getfloat("CRAWLCLUSTER_LEASE_SECONDS"),
                   max_retries=settings.getint("CRAWLCLUSTER_MAX_RETRIES"), **kwargs)

    # --- seeds ---------------------------------------------------------------------

    def push_seeds(self, tasks, pipe=None):
        """Queue new tasks for dispatch (highest priority first), counted as pending
        for their crawl; a stopped crawl's tasks are refused.

        Returns ``[queued, refused]`` (or the pipeline, with ``pipe``).
        """
        if not tasks:
            return pipe if pipe is not None else [0, 0]
        args = [*self._crawl_templates(), self.keys.crawl_template("parked"),
                self.keys.seeds_template()]
        for task in tasks:
            args += [seed_score(task), encode_task(task)]
        return self.scripts.run("seeds_push", [self.keys.seed_types()], args, pipe=pipe)

    def seed_types(self):
        return sorted(self.client.smembers(self.keys.seed_types()))

    def seeds_count(self, spider_type=None):
        """Tasks waiting in seeds, of one spider type or of all."""
        types = [spider_type] if spider_type else self.seed_types()
        pipe = self.client.pipeline(transaction=False)
        for name in types:
            pipe.zcard(self.keys.seeds(name))
        return sum(pipe.execute())

    # --- finishing a leased task ------------------------------------------------------

    def finish(self, member, outcome, reason=""):
        """Report a taken task (its JSON exactly as taken): done, retry, failed or release.

        Returns 0 if the lease was no longer held, 1 done, 2 queued again,
        3 failed for good, 4 purged (its crawl was stopped). A paused crawl's task
        that goes back is parked instead.
        """
        return self.finish_many([(member, outcome, reason)])[0]

    def finish_many(self, outcomes, pipe=None):
        """``finish`` for ``[(member, outcome, reason)]`` in one script call; returns
        the codes in order (or the pipeline, with ``pipe``)."""
        args = [self.max_retries + 1, self.keys.failed("%s"), *self._crawl_templates(),
                self.keys.crawl_template("parked"), self.keys.seeds_template()]
        for member, outcome, reason in outcomes:
            if outcome not in ("done", "retry", "failed", "release"):
                raise ValueError(
                    f"outcome must be done, retry, failed or release, not {outcome!r}")
            decode_task(member)          # a task JSON, or ValueError before anything runs
            args += [member, outcome, reason]
        return self.scripts.run("lease_finish", [self.keys.leases()], args, pipe=pipe)

    def finish_response(self, member, status):
        """Finish by HTTP status: 2xx/3xx done, 404/410 failed, others retried."""
        outcome, reason = outcome_for_status(status)
        return self.finish(member, outcome, reason)

    def reap_leases(self, limit=1000):
        """Re-issue expired leases; return (re-issued, failed for good or purged)."""
        args = [repr(self.clock()), limit, self.max_retries + 1, self.keys.failed("%s"),
                *self._crawl_templates(), self.keys.crawl_template("parked"),
                self.keys.seeds_template()]
        requeued, failed = self.scripts.run("lease_reap", [self.keys.leases()], args)
        return requeued, failed

    def leased_count(self):
        return self.client.zcard(self.keys.leases())

    def failed(self, crawlid):
        """``{url: {"reason", "attempts"}}`` of a crawl's URLs that failed for good."""
        raw = self.client.hgetall(self.keys.failed(crawlid))
        return {url: json.loads(reason) for url, reason in raw.items()}

    # --- stopping a crawl ------------------------------------------------------------------

    def purge_crawl(self, crawlid, jobs, slice_size=1000):
        """Stop a crawl: flag it, then remove its tasks from seeds, every job's queue
        for its domains and the hubs. Leased tasks are purged as they come back
        (lease_finish, lease_reap) and new links of the crawl are refused
        (seeds_push). Returns the pending tasks removed."""
        self.client.set(self.keys.crawl_stopped(crawlid), repr(self.clock()))
        purged = sum(self._take_out(queue, crawlid, "purge", slice_size)
                     for queue in [self.keys.crawl_parked(crawlid), *self._queues(crawlid, jobs)])
        self._take_out(self.keys.hubs(), crawlid, "purge-schedule", slice_size)
        return purged

    def pause_crawl(self, crawlid, jobs, slice_size=1000):
        """Pause a crawl: flag it and park its waiting tasks (seeds, job queues); tasks
        in flight finish, and whatever of it would be queued again is parked too.
        Returns the tasks parked now."""
        self.client.set(self.keys.crawl_paused(crawlid), repr(self.clock()))
        return sum(self._take_out(queue, crawlid, "park", slice_size)
                   for queue in self._queues(crawlid, jobs))

    def resume_crawl(self, crawlid, slice_size=1000):
        """Resume a paused crawl: its parked tasks go back to seeds. Returns how many."""
        self.client.delete(self.keys.crawl_paused(crawlid))
        keys = [self.keys.crawl_parked(crawlid)]
        moved, total = None, 0
        while moved != 0:
            moved = self.scripts.run("parked_release", keys,
                                     [slice_size, self.keys.seeds_template()])
            total += moved
        return total

    def _queues(self, crawlid, jobs):
        """Where a crawl's waiting tasks can be: seeds and the jobs' queues for its domains."""
        domains = list(self.client.hkeys(self.keys.crawl_pending(crawlid)))
        seeds = [self.keys.seeds(spider_type) for spider_type in self.seed_types()]
        return seeds + [self.keys.queue(job, domain) for job in jobs for domain in domains]

    def _take_out(self, key, crawlid, mode, slice_size):
        keys = [key, self.keys.crawl_pending(crawlid), self.keys.crawl_counts(crawlid),
                self.keys.crawl_parked(crawlid)]
        cursor, total = "0", 0
        while True:
            cursor, taken = self.scripts.run("queue_purge", keys,
                                             [crawlid, cursor, slice_size, mode])
            total += taken
            if str(cursor) == "0":
                return total

    # --- hubs ---------------------------------------------------------------------------

    def add_hub(self, task, span, pipe=None):
        """Re-issue this task every ``span`` seconds, bypassing the filter."""
        hub = dict(task, hub_span=float(span))
        target = pipe if pipe is not None else self.client
        target.sadd(self.keys.seed_types(), task["spider_type"])    # where it will be issued
        return target.zadd(self.keys.hubs(), {encode_task(hub): self.clock() + span})

    def issue_due_hubs(self, limit=1000):
        args = [repr(self.clock()), limit, *self._crawl_templates(), self.keys.seeds_template()]
        return self.scripts.run("hubs_due", [self.keys.hubs()], args)

    def _crawl_templates(self):
        return [self.keys.crawl_template(kind)
                for kind in ("pending", "counts", "stopped", "paused")]
