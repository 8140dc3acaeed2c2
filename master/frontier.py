"""URL states (seed 000's URL pool) over the master's sharded Redis data model.

A task waits in its shard's pool, is moved to a job's domain queue by the
dispatcher, taken under the throttles with a lease (master/throttle.py), and
finished by the job: done; retried (up to ``CRAWLCLUSTER_MAX_RETRIES``, then
failed for good); or failed for good at once (404, 410). A lease that expires
unacknowledged is re-issued (the pending timeout). Hub pages are re-issued
every refresh span. Each step is one Lua script in one shard; work spread over
shards is one script call per shard, pipelined.
"""

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from master.counters import Clock
from master.keys import Keys
from master.lua import LuaScripts
from master.shards import Marks, check_shape, crawl_shards, wake_dispatchers
from master.tasks import Task, decode_task, encode_task, seed_score
from master.urls import canonical_url
from settings.clients import RedisClient
from settings.loader import Settings

Outcome = tuple[str, str, str]     # (task member as taken, outcome, reason)

PERMANENT_STATUSES = {404, 410}
OUTCOMES = ("done", "retry", "failed", "release")
# Per-crawl keys every script that creates or finishes a task reads or keeps, in the
# order the scripts take their templates.
CRAWL_STATE = ("pending", "counts", "stopped", "paused")


def link_digest(task: Task) -> str:
    """What identifies a link pushed to the pools: its crawl and canonical URL (64 bits),
    so the same page spelt two ways is one link; or the request fingerprint a user
    spider's task has (``key``, a form's POST, say)."""
    key = task.get("key") or canonical_url(task["url"])
    return hashlib.blake2b(f"{task['crawlid']}\n{key}".encode(), digest_size=8).hexdigest()


def task_digest(task: Task) -> str:
    """What identifies one task pushed to the pools whatever its URL: its id (64 bits)."""
    return hashlib.blake2b(f"task\n{task['id']}".encode(), digest_size=8).hexdigest()


def outcome_for_status(status: int) -> tuple[str, str]:
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


@dataclass(frozen=True)
class Revisit:
    """How an adaptively revisited hub's span moves: shrinks by ``faster`` when what it
    lists changed (``fastest`` from the third change in a row), grows by ``slower``
    when it did not, within ``[minimum, maximum]`` seconds."""

    minimum: float
    maximum: float
    faster: float = 0.9
    fastest: float = 0.5
    slower: float = 1.5

    def arguments(self) -> list[str]:
        return [repr(value) for value in (self.minimum, self.maximum, self.faster,
                                          self.fastest, self.slower)]


class Frontier:
    """Pools, leases, failures and hubs of one cluster, over every shard."""

    def __init__(self, client: RedisClient, keys: Keys, lease_seconds: float = 300.0,
                 max_retries: int = 3, clock: Clock = time.time,
                 scripts: LuaScripts | None = None, dedupe_seconds: float = 120.0,
                 max_pushback_releases: int = 100) -> None:
        self.client = client
        self.max_pushback_releases = max_pushback_releases
        self.keys = keys
        self.lease_seconds = lease_seconds
        self.dedupe_seconds = dedupe_seconds
        self.max_retries = max_retries
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)
        self.marks = Marks(clock)
        self._crawl_shards_known: set[tuple[str, int]] = set()   # what this process indexed
        self._types_known: set[str] = set()   # spider types this process added to pool_types

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings,
                      **kwargs: Any) -> "Frontier":
        keys = Keys.from_settings(settings)
        check_shape(client, keys)
        return cls(client, keys,
                   lease_seconds=settings.getfloat("CRAWLCLUSTER_LEASE_SECONDS"),
                   max_retries=settings.getint("CRAWLCLUSTER_MAX_RETRIES"),
                   dedupe_seconds=settings.getfloat("CRAWLCLUSTER_PUSH_DEDUPE_SECONDS"),
                   max_pushback_releases=settings.getint("CRAWLCLUSTER_PUSHBACK_MAX_RELEASES"),
                   **kwargs)

    # --- the pool ----------------------------------------------------------------------

    def push(self, tasks: Iterable[Task], pipe: Any = None, once: bool = False) -> Any:
        """Put new tasks in their shards' pools for dispatch (highest priority first),
        counted as pending for their crawl; a stopped crawl's tasks are refused. With
        ``once``, a task pushed (by its id) within ``dedupe_seconds`` already is not
        queued again, even if it was dispatched meanwhile: what an intake that crashed
        after applying its staged writes applies again.

        Returns ``[queued, refused]`` (or the pipeline, with ``pipe``: a caller's
        pipeline may be discarded, so nothing is taken as written until it runs).
        """
        tasks = list(tasks)
        digests = [task_digest(task) for task in tasks] if once else []
        if pipe is not None:
            self._queue_pushes(pipe, tasks, again=True, digests=digests)
            return pipe
        codes = self._push(tasks, digests)
        return [codes.count("q"), codes.count("s")]

    def push_links(self, tasks: list[Task], recrawl: Sequence[bool] = (),
                   wake: bool = False) -> str:
        """``push`` for the new links a spider's pages yielded, once the Bloom filter found
        them unseen (before they are added to it): a link pushed to its shard within
        ``dedupe_seconds`` already (another job found it new at the same moment, or this
        job's round failed after the push) is not queued again, unless ``recrawl`` says
        it is to be crawled again (a changed page). Returns a letter per task, in order:
        ``q`` queued, ``s`` refused (its crawl stopped), ``r`` pushed already, ``d`` in
        the pool already. ``wake``: the pushing job is short of work, so a dispatcher
        waiting between ticks is woken (``Keys.dispatch_wake``), in the same round trip."""
        again = list(recrawl) or [False] * len(tasks)
        return self._push(tasks, [link_digest(task) if not flag else ""
                                  for task, flag in zip(tasks, again, strict=True)], wake)

    def _push(self, tasks: list[Task], digests: Sequence[str] = (), wake: bool = False) -> str:
        pipe = self.client.pipeline(transaction=False)
        indexed, start, calls = self._queue_pushes(pipe, tasks, again=False, digests=digests)
        if wake and calls:
            wake_dispatchers(pipe, self.keys)
        replies = pipe.execute()[start:start + len(calls)] if len(pipe) else []
        self._crawl_shards_known |= indexed
        codes = [""] * len(tasks)
        for numbers, reply in zip(calls, replies, strict=True):
            for number, code in zip(numbers, str(reply), strict=True):
                codes[number] = code
        return "".join(codes)

    def _queue_pushes(self, pipe: Any, tasks: list[Task], again: bool,
                      digests: Sequence[str] = ()) -> tuple[set[tuple[str, int]], int,
                                                            list[list[int]]]:
        """Queue one pool_push call per (shard, spider type) on ``pipe``, after the marks
        the dispatchers find work by; ``digests[n]``, if not "": task n is queued once
        within the window by that digest (``link_digest``, ``task_digest``). Returns the
        crawl shards indexed, where the calls' replies start in the pipeline, and the
        task numbers of each call."""
        groups: defaultdict[tuple[int, str], list[int]] = defaultdict(list)
        for number, task in enumerate(tasks):
            groups[(self.keys.shard_of(task["domain"]), task["spider_type"])].append(number)
        indexed = self.index_crawls(pipe, [(tasks[number]["crawlid"], shard)
                                           for (shard, _), numbers in groups.items()
                                           for number in numbers], again=again)
        for spider_type in {spider_type for _, spider_type in groups}:
            self.mark_pools(pipe, spider_type,
                            [shard for shard, kind in groups if kind == spider_type],
                            force=again)
        start, now = len(pipe), repr(self.clock())
        for (shard, spider_type), numbers in groups.items():
            args: list[Any] = [*self._templates(shard, *CRAWL_STATE, "parked"), now,
                               self.dedupe_seconds]
            for number in numbers:
                task = tasks[number]
                digest = digests[number] if digests else ""
                args += [seed_score(task), encode_task(task), digest, task["crawlid"],
                         task["domain"]]
            self.scripts.run("pool_push", [self.keys.pool(shard, spider_type),
                                           self.keys.pushed(shard)], args, pipe=pipe)
        return indexed, start, list(groups.values())

    def index_crawls(self, pipe: Any, crawl_shards: Iterable[tuple[str, int]],
                     again: bool = True) -> set[tuple[str, int]]:
        """Mark the shards crawls have tasks in (``[(crawlid, shard)]``): a crawl's counts
        are summed over its shards. Without ``again``, pairs this process already wrote
        are left out. Returns the pairs marked."""
        new = set(crawl_shards) - (set() if again else self._crawl_shards_known)
        by_crawl: defaultdict[str, list[int]] = defaultdict(list)
        for crawlid, shard in sorted(new):
            by_crawl[crawlid].append(shard)
        for crawlid, shards in by_crawl.items():
            pipe.sadd(self.keys.crawl_shards(crawlid), *shards)
        if len(self._crawl_shards_known) > 100_000:
            self._crawl_shards_known.clear()
        return new

    def mark_pools(self, pipe: Any, spider_type: str, shards: Iterable[int],
                   force: bool = False) -> None:
        """Tell the dispatchers these shards' pools of ``spider_type`` may hold tasks."""
        if not shards:
            return
        if force or spider_type not in self._types_known:
            pipe.sadd(self.keys.pool_types(), spider_type)
            self._types_known.add(spider_type)
        self.marks.mark(pipe, self.keys.pool_shards(spider_type), shards, force=force)

    def pool_types(self) -> list[str]:
        return sorted(self.client.smembers(self.keys.pool_types()))

    def pool_count(self, spider_type: str | None = None) -> int:
        """Tasks waiting in the pools, of one spider type or of all (every shard)."""
        types = [spider_type] if spider_type else self.pool_types()
        pipe = self.client.pipeline(transaction=False)
        for name in types:
            for shard in self.keys.all_shards():
                pipe.zcard(self.keys.pool(shard, name))
        return int(sum(pipe.execute()))

    # --- finishing a leased task ------------------------------------------------------

    def finish(self, member: str, outcome: str, reason: str = "") -> int:
        """Report a taken task (its JSON exactly as taken): done, retry, failed or release.

        Returns 0 if the lease was no longer held, 1 done, 2 queued again,
        3 failed for good, 4 purged (its crawl was stopped). A paused crawl's task
        that goes back is parked instead.
        """
        codes: list[int] = self.finish_many([(member, outcome, reason)])
        return codes[0]

    def finish_many(self, outcomes: list[Outcome], pipe: Any = None) -> Any:
        """``finish`` for ``[(member, outcome, reason)]``, one script call per shard.

        Returns the codes in order; with ``pipe``, a function that picks them out of
        the pipeline's results.
        """
        # shard -> (index into outcomes, task)
        by_shard: defaultdict[int, list[tuple[int, Task]]] = defaultdict(list)
        for n, (member, outcome, _) in enumerate(outcomes):
            if outcome not in OUTCOMES:
                raise ValueError(
                    f"outcome must be done, retry, failed or release, not {outcome!r}")
            task = decode_task(member)       # a task JSON, or ValueError before anything runs
            by_shard[self.keys.shard_of(task["domain"])].append((n, task))
        target = pipe if pipe is not None else self.client.pipeline(transaction=False)
        for shard, items in by_shard.items():
            back = {task["spider_type"] for n, task in items if outcomes[n][1] != "done"}
            for spider_type in back:        # retried or released tasks go back to the pool
                self.mark_pools(target, spider_type, [shard])
        start = len(target)
        for shard, items in by_shard.items():
            args = [self.max_retries + 1, *self._templates(shard, "failed", *CRAWL_STATE, "parked"),
                    self.keys.pool_template(shard), self.max_pushback_releases]
            for n, task in items:
                args += [*outcomes[n], task["crawlid"], task["domain"]]
            self.scripts.run("lease_finish", [self.keys.leases(shard),
                                              self.keys.lease_owners(shard)], args, pipe=target)

        def codes(results: list[Any]) -> list[int]:
            ordered = [0] * len(outcomes)
            for (_, items), reply in zip(by_shard.items(), results[start:], strict=False):
                for (n, _), code in zip(items, reply, strict=True):
                    ordered[n] = code
            return ordered

        return codes(target.execute()) if pipe is None else codes

    def finish_response(self, member: str, status: int) -> int:
        """Finish by HTTP status: 2xx/3xx done, 404/410 failed, others retried."""
        outcome, reason = outcome_for_status(status)
        return self.finish(member, outcome, reason)

    def reap_leases(self, shards: Iterable[int] | None = None,
                    limit: int = 1000) -> tuple[int, int]:
        """Re-issue expired leases of ``shards`` (all by default); return (re-issued,
        failed for good or purged)."""
        shards = self._due(self.keys.leases, self.keys.all_shards() if shards is None else shards)
        replies = self._per_shard("lease_reap", shards, lambda shard: (
            [self.keys.leases(shard), self.keys.lease_owners(shard)],
            [repr(self.clock()), limit, self.max_retries + 1,
             *self._templates(shard, "failed", *CRAWL_STATE, "parked"),
             self.keys.pool_template(shard)]))
        self._mark_refilled({shard: requeued for shard, (requeued, _) in replies.items()})
        return (sum(requeued for requeued, _ in replies.values()),
                sum(failed for _, failed in replies.values()))

    def leases_of(self, job: str) -> list[str]:
        """The task JSON of every lease ``job`` holds, in every shard (a scan of the
        shards' lease owners: for a job that lost writes in a failover, not per round)."""
        pipe = self.client.pipeline(transaction=False)
        for shard in self.keys.all_shards():
            pipe.hgetall(self.keys.lease_owners(shard))
        return [member for owners in pipe.execute() for member, owner in owners.items()
                if owner == job]

    def leased_count(self) -> int:
        return self._sum_over_shards(lambda pipe, shard: pipe.zcard(self.keys.leases(shard)))

    def hubs_count(self) -> int:
        return self._sum_over_shards(lambda pipe, shard: pipe.zcard(self.keys.hubs(shard)))

    def failed(self, crawlid: str) -> dict[str, dict[str, Any]]:
        """``{url: {"reason", "attempts"}}`` of a crawl's URLs that failed for good."""
        pipe = self.client.pipeline(transaction=False)
        for shard in self.crawl_shards(crawlid):
            pipe.hgetall(self.keys.crawl_failed(crawlid, shard))
        return {url: json.loads(reason)
                for raw in pipe.execute() for url, reason in raw.items()}

    def crawl_shards(self, crawlid: str) -> list[int]:
        return crawl_shards(self.client, self.keys, crawlid)

    # --- stopping, pausing, resuming a crawl ----------------------------------------------

    def purge_crawl(self, crawlid: str, jobs: list[str], slice_size: int = 1000) -> int:
        """Stop a crawl: flag it in every shard, then remove its tasks from the pools,
        every job's queue for its domains and the hubs. Leased tasks are purged as they
        come back (lease_finish, lease_reap) and new links of the crawl are refused
        (pool_push). Returns the pending tasks removed."""
        self._flag_everywhere(crawlid, "stopped")
        purged = 0
        for shard in self.crawl_shards(crawlid):
            places = [self.keys.crawl_parked(crawlid, shard), *self._queues(crawlid, shard, jobs)]
            purged += sum(self._take_out(key, crawlid, shard, "purge", slice_size)
                          for key in places)
            self._take_out(self.keys.hubs(shard), crawlid, shard, "purge-schedule", slice_size)
        return purged

    def pause_crawl(self, crawlid: str, jobs: list[str], slice_size: int = 1000) -> int:
        """Pause a crawl: flag it in every shard and park its waiting tasks (pools, job
        queues); tasks in flight finish, and whatever of it would be queued again is
        parked too. Returns the tasks parked now."""
        self._flag_everywhere(crawlid, "paused")
        return sum(self._take_out(key, crawlid, shard, "park", slice_size)
                   for shard in self.crawl_shards(crawlid)
                   for key in self._queues(crawlid, shard, jobs))

    def resume_crawl(self, crawlid: str, slice_size: int = 1000) -> int:
        """Resume a paused crawl: its parked tasks go back to the pools. Returns how many."""
        self._flag_everywhere(crawlid, "paused", on=False)
        shards = self.crawl_shards(crawlid)
        self._mark_refilled(dict.fromkeys(shards, True))      # before the tasks get there
        total = 0
        for shard in shards:
            moved: int | None = None
            while moved != 0:
                moved = self.scripts.run("parked_release", [self.keys.crawl_parked(crawlid, shard)],
                                         [slice_size, self.keys.pool_template(shard)])
                total += int(moved)
        return total

    def is_flagged(self, crawlid: str, flag: str) -> bool:
        """Is the crawl stopped / paused? (Flags are set in every shard, shard 0 first.)"""
        return bool(self.client.hexists(self._flags(flag)(0), crawlid))

    def _flag_everywhere(self, crawlid: str, flag: str, on: bool = True) -> None:
        """Set (or clear) a crawl's flag in every shard: a script reads it in its own."""
        key = self._flags(flag)
        pipe = self.client.pipeline(transaction=False)
        for shard in self.keys.all_shards():
            if on:
                pipe.hset(key(shard), crawlid, repr(self.clock()))
            else:
                pipe.hdel(key(shard), crawlid)
        pipe.execute()

    def _flags(self, flag: str) -> Callable[[int], str]:
        """The key of a shard's hash of stopped (or paused) crawls."""
        return {"stopped": self.keys.stopped_crawls, "paused": self.keys.paused_crawls}[flag]

    def _queues(self, crawlid: str, shard: int, jobs: list[str]) -> list[str]:
        """Where a crawl's waiting tasks in a shard can be: its pools and the jobs'
        queues for the crawl's domains there."""
        domains = list(self.client.hkeys(self.keys.crawl_pending(crawlid, shard)))
        pools = [self.keys.pool(shard, spider_type) for spider_type in self.pool_types()]
        return pools + [self.keys.queue(job, domain) for job in jobs for domain in domains]

    def _take_out(self, key: str, crawlid: str, shard: int, mode: str, slice_size: int) -> int:
        keys = [key, *(getattr(self.keys, f"crawl_{kind}")(crawlid, shard)
                       for kind in ("pending", "counts", "parked"))]
        cursor, total = "0", 0
        while True:
            cursor, taken = self.scripts.run("queue_purge", keys,
                                             [crawlid, cursor, slice_size, mode])
            total += int(taken)
            if str(cursor) == "0":
                return total

    # --- hubs ---------------------------------------------------------------------------

    def add_hub(self, task: Task, span: float, pipe: Any = None) -> Any:
        """Re-issue this task every ``span`` seconds, bypassing the filter."""
        hub = dict(task, hub_span=float(span))
        target = pipe if pipe is not None else self.client
        shard = self.keys.shard_of(task["domain"])
        self.index_crawls(target, [(task["crawlid"], shard)])     # counted there when issued
        target.sadd(self.keys.pool_types(), task["spider_type"])    # where it will be issued
        return target.zadd(self.keys.hubs(shard), {encode_task(hub): self.clock() + span})

    def hub_visited(self, member: str, fingerprint: str | None, validators: dict[str, str],
                    revisit: Revisit, first_span: float) -> tuple[bool, float]:
        """Record a visit of an adaptively revisited hub (its task JSON as taken; the
        crawl's first visit of it, as a seed, records the state only): what it lists now
        (``fingerprint``; None when the server answered 304 Not Modified) and its
        ``ETag``/``Last-Modified``; schedule its next visit, ``first_span`` after this one
        if it has no span yet. ``(changed, span)``."""
        task = decode_task(member)
        shard = self.keys.shard_of(task["domain"])
        changed, span = self.scripts.run(
            "hub_visit", [self.keys.hubs(shard), self.keys.hub_state(shard)],
            [member, task["url"], repr(self.clock()), fingerprint or "",
             validators.get("ETag", ""), validators.get("Last-Modified", ""),
             repr(first_span), *revisit.arguments()])
        return bool(changed), float(span)

    def hub_state(self, task: Task) -> dict[str, Any]:
        """What the last visits of a hub found (``hub_visit.lua``), or {}."""
        raw = self.client.hget(self.keys.hub_state(self.keys.shard_of(task["domain"])),
                               task["url"])
        state: dict[str, Any] = json.loads(raw) if raw else {}
        return state

    def issue_due_hubs(self, shards: Iterable[int] | None = None, limit: int = 1000) -> int:
        """Issue the due hubs of ``shards`` (all by default); return how many."""
        shards = self._due(self.keys.hubs, self.keys.all_shards() if shards is None else shards)
        replies = self._per_shard("hubs_due", shards, lambda shard: (
            [self.keys.hubs(shard), self.keys.hub_state(shard)],
            [repr(self.clock()), limit, *self._templates(shard, *CRAWL_STATE),
             self.keys.pool_template(shard)]))
        self._mark_refilled(replies)
        return int(sum(replies.values()))

    # --- helpers -------------------------------------------------------------------------

    def _due(self, key_of: Callable[[int], str], shards: Iterable[int]) -> list[int]:
        """The shards whose zset ``key_of(shard)`` (scored by when each entry is due)
        holds an entry due now: one plain look per shard, so the script runs only
        where there is work (most upkeep passes find none)."""
        shards = list(shards)
        now = repr(self.clock())
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            pipe.zrangebyscore(key_of(shard), "-inf", now, start=0, num=1)
        return [shard for shard, due in zip(shards, pipe.execute(), strict=True) if due]

    def _per_shard(self, script: str, shards: Iterable[int],
                   keys_and_args: Callable[[int], tuple[list[str], list[Any]]]) -> dict[int, Any]:
        """Run ``script`` once per shard, pipelined; ``{shard: reply}``."""
        shards = list(shards)
        pipe = self.client.pipeline(transaction=False)
        for shard in shards:
            keys, args = keys_and_args(shard)
            self.scripts.run(script, keys, args, pipe=pipe)
        return dict(zip(shards, pipe.execute(), strict=True))

    def _mark_refilled(self, moved_by_shard: Mapping[int, Any]) -> None:
        """Mark the pools of shards that tasks went back to (every spider type: a reaped
        task's type is not returned, and an extra mark costs one empty look)."""
        refilled = [shard for shard, moved in moved_by_shard.items() if moved]
        if not refilled:
            return
        pipe = self.client.pipeline(transaction=False)
        for spider_type in self.pool_types():
            self.mark_pools(pipe, spider_type, refilled, force=True)
        pipe.execute()

    def _sum_over_shards(self, command: Callable[[Any, int], object]) -> int:
        pipe = self.client.pipeline(transaction=False)
        for shard in self.keys.all_shards():
            command(pipe, shard)
        return int(sum(pipe.execute()))

    def _templates(self, shard: int, *kinds: str) -> list[str]:
        """Templates of a shard's per-crawl keys (``crawl_<kind>``), in the order given;
        for ``stopped`` and ``paused``, the shard's hash of such crawls."""
        return [self._flags(kind)(shard) if kind in ("stopped", "paused")
                else self.keys.crawl_template(kind, shard) for kind in kinds]
