"""Crawl retention: an ended crawl leaves Redis ``CRAWLCLUSTER_CRAWL_RETENTION`` after
it ended, its final figures kept in its MongoDB crawl record.

A crawl has ended when it is stopped (or expired, which stops it), or when nothing of
it is pending anywhere and it has no hubs to revisit (a revisit crawl runs until it
is stopped). Masters look at a slice of the crawl index each pass
(``CRAWLCLUSTER_RETENTION_SLICE`` crawls) and note in ``Keys.ended_crawls`` when each
was first found ended; one found running again when due (re-submitted, or work came
back) is taken out, and noted again when it ends again. Once a crawl has been ended
for the retention time it retires, in steps that a master killed anywhere leaves for
the next pass to finish:

1. its final figures (counts, links, failures, stopped, health per site) go to its
   MongoDB crawl record (``retired_at``), written again if the master dies before step 2;
2. it moves from ``ended`` to ``retiring`` (one transaction);
3. every key it made is deleted: its keys in each shard it touched, its flags in
   every shard, its config, link counts, hub states, its place in the indexes;
4. it leaves ``retiring``.

A schedule keeps the crawl records of its last ``CRAWLCLUSTER_SCHEDULE_KEEP_RUNS``
retired runs; older runs' records are deleted (their items stay).
"""

import logging
import time
from collections.abc import Callable
from typing import Any

from pymongo.errors import PyMongoError

from master.counters import Clock
from master.crawls import CrawlConfig, CrawlStore
from master.keys import Keys
from master.schedules import schedule_of
from master.shards import crawl_shards
from master.siteconfig import domain_of
from master.sitehealth import read_site_health
from settings.errors import ServerUnreachable
from settings.loader import Settings

logger = logging.getLogger(__name__)
FRESH = 60.0          # seconds a crawl is not taken as drained after it was submitted
RETIRE_PER_PASS = 20  # crawls retired per pass at most: a pass runs in the dispatcher's loop
Database = Any        # a pymongo Database


class Retention:
    def __init__(self, client: Any, keys: Keys, retention: float,
                 database: Callable[[], Database], keep_runs: int = 24, slice_size: int = 200,
                 clock: Clock = time.time, **_: Any) -> None:
        self.client = client
        self.keys = keys
        self.retention = retention
        self.database = database         # called once, when a crawl first retires
        self._database: Database | None = None
        self.keep_runs = keep_runs
        self.slice_size = slice_size
        self.clock = clock
        self.crawls = CrawlStore(client, keys)
        self._cursor = 0

    @classmethod
    def from_settings(cls, client: Any, settings: Settings, **kwargs: Any) -> "Retention":
        def database() -> Database:
            from settings.clients import mongo_client

            return mongo_client(settings, "master")[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]

        return cls(client, Keys.from_settings(settings),
                   settings.getfloat("CRAWLCLUSTER_CRAWL_RETENTION"), database,
                   keep_runs=settings.getint("CRAWLCLUSTER_SCHEDULE_KEEP_RUNS"),
                   slice_size=settings.getint("CRAWLCLUSTER_RETENTION_SLICE"), **kwargs)

    def run(self) -> dict[str, int]:
        """One pass (if no other master runs one): note the crawls of the next slice of
        the index that ended, retire those ended long enough ago (or un-note them, if
        running again). Returns ``{"ended", "retired"}``: counts of this pass."""
        lock = self.keys.retention_lock()
        if not self.client.set(lock, str(self.clock()), nx=True, ex=300):
            return {"ended": 0, "retired": 0}
        try:
            ended = self._note_slice()
            retired = self._retire_due()
        finally:
            self.client.delete(lock)
        return {"ended": ended, "retired": retired}

    # --- which crawls ended ----------------------------------------------------------

    def _note_slice(self) -> int:
        """Note the crawls of the next slice of the index found ended."""
        index = self.client.zrange(self.keys.crawls(), self._cursor,
                                   self._cursor + self.slice_size - 1, withscores=True)
        self._cursor = 0 if len(index) < self.slice_size else self._cursor + len(index)
        if not index:
            return 0
        crawlids = [crawlid for crawlid, _ in index]
        pipe = self.client.pipeline(transaction=False)
        pipe.zmscore(self.keys.ended_crawls(), crawlids)
        pipe.zmscore(self.keys.retiring_crawls(), crawlids)
        noted, retiring = pipe.execute()
        # Noted ones are looked at again when due (``_retire``), and taken out if running;
        # retiring ones are on their way out.
        running = {crawlid: submitted for (crawlid, submitted), ended_at, going
                   in zip(index, noted, retiring, strict=True)
                   if ended_at is None and going is None}
        now = self.clock()
        newly = {crawlid: now for crawlid, over in self._ended(running, now).items() if over}
        if newly:
            self.client.zadd(self.keys.ended_crawls(), newly)
        return len(newly)

    def _ended(self, submitted: dict[str, float], now: float) -> dict[str, bool]:
        """``{crawlid: has it ended?}``: stopped, or drained with no hubs to revisit."""
        crawlids = list(submitted)
        pipe = self.client.pipeline(transaction=False)
        for crawlid in crawlids:
            pipe.hexists(self.keys.stopped_crawls(0), crawlid)
        stopped = dict(zip(crawlids, pipe.execute(), strict=True))
        pending = self.crawls.pending_totals(crawlids)
        states = {}
        for crawlid in crawlids:
            config = self.crawls.load(crawlid)
            states[crawlid] = bool(stopped[crawlid]) or (
                pending[crawlid] <= 0 and now - submitted[crawlid] >= FRESH
                and not (config and _revisits(config)))
        return states

    # --- retiring --------------------------------------------------------------------

    def _retire_due(self) -> int:
        """Retire the crawls ended for the retention time; finish those half-retired."""
        retired = 0
        for crawlid in self.client.zrange(self.keys.retiring_crawls(), 0, RETIRE_PER_PASS - 1):
            self._delete_state(crawlid)
            retired += 1
        due = self.client.zrangebyscore(self.keys.ended_crawls(), "-inf",
                                        self.clock() - self.retention, start=0,
                                        num=RETIRE_PER_PASS, withscores=True)
        for crawlid, ended_at in due:
            if self._retire(crawlid, ended_at):
                retired += 1
        return retired

    def _retire(self, crawlid: str, ended_at: float) -> bool:
        submitted = self.client.zscore(self.keys.crawls(), crawlid)
        if (submitted is None            # retired already (by a master killed after)
                or submitted > ended_at
                or not self._ended({crawlid: submitted}, self.clock())[crawlid]):
            self.client.zrem(self.keys.ended_crawls(), crawlid)     # or running again
            return False
        try:
            self._record(crawlid)
        except (PyMongoError, ServerUnreachable) as exc:     # the crawl waits in Redis
            logger.error("crawl %s not retired: its final record could not be written to "
                         "MongoDB (tried again next pass): %s", crawlid, exc)
            return False
        pipe = self.client.pipeline(transaction=True)
        pipe.zadd(self.keys.retiring_crawls(), {crawlid: self.clock()})
        pipe.zrem(self.keys.ended_crawls(), crawlid)
        pipe.execute()
        self._delete_state(crawlid)
        logger.info("crawl %s retired: its Redis state is deleted, its figures are in its "
                    "MongoDB crawl record", crawlid)
        return True

    def _record(self, crawlid: str) -> None:
        """Write the crawl's final figures into its MongoDB crawl record; keep only a
        schedule's last runs."""
        progress = self.crawls.progress(crawlid)
        config = self.crawls.load(crawlid) or {}
        final = {"counts": progress["counts"], "links": progress["links"],
                 "changes": progress["changes"],
                 "stopped": progress["stopped"], "pending": progress["total_pending"],
                 "failed_urls": sum(len(urls) for urls in self._failed(crawlid)),
                 "sites": [health.as_json() for health in
                           read_site_health(self.client, self.keys, crawlid).values()]}
        now = self.clock()
        record: dict[str, Any] = {"final": final, "retired_at": now}
        schedule = schedule_of(crawlid)
        if schedule:
            record["schedule"] = schedule
        for field in ("url", "spider_type", "userid"):
            if config.get(field):
                record[field] = config[field]
        if self._database is None:
            self._database = self.database()
        records = self._database["crawls"]
        records.update_one({"crawlid": crawlid},
                           {"$set": record, "$setOnInsert": {"started_at": now}}, upsert=True)
        if schedule:
            self._keep_last_runs(records, schedule)

    def _failed(self, crawlid: str) -> list[list[str]]:
        pipe = self.client.pipeline(transaction=False)
        for shard in crawl_shards(self.client, self.keys, crawlid):
            pipe.hkeys(self.keys.crawl_failed(crawlid, shard))
        return list(pipe.execute())

    def _keep_last_runs(self, records: Any, schedule: str) -> None:
        old = [doc["_id"] for doc in records.find(
            {"schedule": schedule, "retired_at": {"$exists": True}}, {"_id": 1},
            sort=[("retired_at", -1)], skip=self.keep_runs)]
        if old:
            records.delete_many({"_id": {"$in": old}})

    def _delete_state(self, crawlid: str) -> None:
        """Delete every key the crawl made, then its place in ``retiring``."""
        config = self.crawls.load(crawlid) or {}
        keys = self.keys
        pipe = self.client.pipeline(transaction=False)
        for shard in crawl_shards(self.client, keys, crawlid):
            for key in keys.crawl_shard_keys(crawlid, shard):
                pipe.delete(key)
        for shard in keys.all_shards():
            pipe.hdel(keys.stopped_crawls(shard), crawlid)
            pipe.hdel(keys.paused_crawls(shard), crawlid)
        for url in _hub_urls(config):
            pipe.hdel(keys.hub_state(keys.shard_of(domain_of(url))), url)
        pipe.delete(keys.crawl_links(crawlid))
        pipe.delete(keys.crawl_changes(crawlid))
        pipe.delete(keys.crawl_sites(crawlid))
        pipe.delete(keys.crawl_render(crawlid))          # one key a call: Redis Cluster
        pipe.delete(keys.crawl_render_variables(crawlid))
        pipe.execute()
        pipe = self.client.pipeline(transaction=True)      # the cluster-wide keys
        pipe.delete(keys.crawl(crawlid), keys.crawl_shards(crawlid))
        pipe.zrem(keys.crawls(), crawlid)
        if config.get("userid"):
            pipe.srem(keys.user_crawls(config["userid"]), crawlid)
        pipe.zrem(keys.retiring_crawls(), crawlid)
        pipe.zrem(keys.ended_crawls(), crawlid)
        pipe.execute()
        self.crawls.forget(crawlid)


def _revisits(config: CrawlConfig) -> bool:
    """Does the crawl revisit hubs (so it runs until stopped)?"""
    return bool(config.get("hubs") or config.get("revisit"))


def _hub_urls(config: CrawlConfig) -> list[str]:
    """The URLs whose revisit state (``Keys.hub_state``) the crawl may have made."""
    urls = list(config.get("hubs") or ())
    if config.get("revisit"):
        urls += [task["url"] for task in CrawlStore.source_tasks(config)]
    return urls
