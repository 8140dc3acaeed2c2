"""Crawls: a crawl's config stored once, its seed task queued.

The config (rule, spider type, maxdepth, domain_max_pages, allowed domains,
cookie, user agent, expires, attrs, ...) is one JSON string per crawl; tasks
carry only the crawl id. Submitting the same crawl twice stores the same
config and queues the seed once more, which the Bloom filter in the spiders
makes harmless for its links.
"""

import json
import time

from master.keys import Keys
from master.siteconfig import domain_of
from master.tasks import check_name, make_task


class CrawlStore:
    def __init__(self, client, keys, cache_size=1024):
        self.client = client
        self.keys = keys
        self.cache_size = cache_size
        self._cache = {}          # crawlid -> config (configs never change once stored)

    @classmethod
    def from_settings(cls, client, settings):
        return cls(client, Keys.from_settings(settings))

    def load(self, crawlid):
        """The crawl's config (cached in this process once found), or None if unknown."""
        config = self._cache.get(crawlid)
        if config is None:
            raw = self.client.get(self.keys.crawl(crawlid))
            if raw is None:
                return None
            if len(self._cache) >= self.cache_size:
                self._cache.pop(next(iter(self._cache)))      # the oldest entry
            config = self._cache[crawlid] = json.loads(raw)
        return config

    def submit(self, config, bloom, frontier):
        """Store the crawl, index it under its user and queue its seed in one
        transaction; the seed URL goes into the filter so the crawl does not fetch it
        again when a page links back to it."""
        batch = WriteBatch(self.client.pipeline())
        self.stage(config, frontier, batch)
        batch.flush(frontier)
        batch.pipe.execute()
        bloom.add_many([config["url"]], scope=config["crawlid"])

    def stage(self, config, frontier, batch, seed=None):
        """Add the crawl's writes to ``batch``: config, user index, seed task, hubs."""
        check_name("crawl id", config["crawlid"])
        batch.strings[self.keys.crawl(config["crawlid"])] = json.dumps(config, sort_keys=True)
        batch.index[config["crawlid"]] = time.time()
        if config.get("userid"):
            batch.sets.setdefault(self.keys.user_crawls(config["userid"]),
                                  []).append(config["crawlid"])
        seed = seed or self.seed_task(config)
        batch.seeds.append(seed)
        if config.get("domain_max_pages"):      # the seed is one of the domain's pages
            batch.pipe.hincrby(self.keys.crawl_domain_pages(config["crawlid"]), seed["domain"])
        for url in config.get("hubs") or ():
            hub = dict(seed, url=url, domain=domain_of(url), id=f"hub:{url}")
            frontier.add_hub(hub, config.get("hub_span", 3600.0), pipe=batch.pipe)

    def progress(self, crawlid):
        """A crawl's pending tasks per domain, its counts, whether it is stopped or
        paused (and how many of its tasks are parked)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self.keys.crawl_pending(crawlid))
        pipe.hgetall(self.keys.crawl_counts(crawlid))
        pipe.exists(self.keys.crawl_stopped(crawlid))
        pipe.exists(self.keys.crawl_paused(crawlid))
        pipe.zcard(self.keys.crawl_parked(crawlid))
        pending, counts, stopped, paused, parked = pipe.execute()
        pending = {domain: int(n) for domain, n in pending.items() if int(n) > 0}
        return {"pending": pending, "total_pending": sum(pending.values()),
                "counts": {name: int(n) for name, n in counts.items()},
                "stopped": bool(stopped), "paused": bool(paused), "parked": parked}

    def user_crawls(self, userid):
        return sorted(self.client.smembers(self.keys.user_crawls(userid)))

    def recent_crawls(self, limit=50):
        """The crawl ids submitted last, newest first."""
        return self.client.zrevrange(self.keys.crawls(), 0, limit - 1)

    def seed_task(self, config):
        """The crawl's first task (depth 0) for its ``url``."""
        return make_task(config["url"], config["crawlid"], config["spider_type"],
                         priority=config.get("priority", 0), depth=0,
                         userid=config.get("userid"))


class WriteBatch:
    """Writes of many requests gathered for one transaction: per-request commands go
    on ``pipe`` as they come; strings, set members and seed tasks are gathered and
    written with one command each by ``flush`` (fewer commands, same result)."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.strings = {}      # key -> value (MSET)
        self.sets = {}         # key -> members (SADD)
        self.seeds = []        # tasks (one seeds_push call)
        self.index = {}        # crawl id -> submitted at (one ZADD to the crawl index)

    def flush(self, frontier):
        if self.strings:
            self.pipe.mset(self.strings)
        if self.index:
            self.pipe.zadd(frontier.keys.crawls(), self.index)
        for key, members in self.sets.items():
            self.pipe.sadd(key, *members)
        frontier.push_seeds(self.seeds, pipe=self.pipe)
