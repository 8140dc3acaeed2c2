"""Crawls: a crawl's config stored once, the task of its seed URL put in the pool.

The config (rule, spider type, maxdepth, domain_max_pages, allowed domains,
cookie, user agent, expires, attrs, ...) is one JSON string per crawl; tasks
carry only the crawl id. Submitting the same crawl twice stores the same
config and queues its seed once more, which the Bloom filter in the
spiders makes harmless for its links. A crawl's counts live in the shards of
its domains and are summed over the shards it has been in.
"""

import json
import time
from typing import Any
from urllib.parse import urlsplit

from cachetools import FIFOCache

from master.bloomgen import AgingBloomFilter
from master.frontier import Frontier
from master.keys import Keys
from master.shards import crawl_shards
from master.siteconfig import domain_of
from master.tasks import Task, check_name, make_task
from settings.clients import RedisClient
from settings.loader import Settings

# Keys.crawl_render: a crawl's rendered pages, and pages that looked built by scripts
RENDERED, LOOKS_SCRIPTED = "~rendered", "~looks_scripted"
# pages of a URL pattern compared before its pages go one way: so many if they agree,
# else up to the larger number (a sequential sample: a clear pattern is learnt sooner)
RENDER_SAMPLE, RENDER_SAMPLE_MAX = 2, 5
HUB_SPAN = 3600.0     # seconds between visits of a hub, unless its crawl says (hub_span)
CrawlConfig = dict[str, Any]     # a crawl request as stored (crawl.json, defaults filled)
ShardWrites = dict[str, list[Any]]


class CrawlStore:
    def __init__(self, client: RedisClient, keys: Keys, cache_size: int = 1024) -> None:
        self.client = client
        self.keys = keys
        self.cache_size = cache_size
        # crawl id -> its config (never changed once stored), the first read forgotten
        # first past cache_size
        self._cache: FIFOCache[str, CrawlConfig] = FIFOCache(cache_size)

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings) -> "CrawlStore":
        return cls(client, Keys.from_settings(settings))

    def load(self, crawlid: str) -> CrawlConfig | None:
        """The crawl's config (cached in this process once found), or None if unknown."""
        config = self._cache.get(crawlid)
        if config is None:
            raw = self.client.get(self.keys.crawl(crawlid))
            if raw is None:
                return None
            config = self._cache[crawlid] = json.loads(raw)
        return config

    def exists(self, crawlid: str) -> bool:
        """Is the crawl in Redis now (submitted, not retired)? Asks Redis, not the cache."""
        return bool(self.client.exists(self.keys.crawl(crawlid)))

    def forget(self, crawlid: str) -> None:
        """Drop a retired crawl's cached config."""
        self._cache.pop(crawlid, None)

    def submit(self, config: CrawlConfig, bloom: AgingBloomFilter, frontier: Frontier) -> None:
        """Store the crawl, index it under its user and queue its seed task in one round
        trip (the crawl-wide keys first; the seed's shard may be on another Redis
        Cluster master); the seed URL goes into the filter so the crawl does not fetch
        it again when a page links back to it."""
        batch = WriteBatch(self.client.pipeline(transaction=False))
        self.stage(config, frontier, batch)
        batch.flush_cluster_wide(frontier)
        batch.apply_shard_writes(frontier, batch.shard_writes(), batch.pipe)
        batch.pipe.execute()
        bloom.add_many([config["url"]], scope=config["crawlid"])

    def register(self, config: CrawlConfig) -> bool:
        """Store and index a crawl that has no seed unless it is stored already (a user
        spider's crawl, which every process of the spider registers: the first stores
        it). Returns whether this call stored it."""
        check_name("crawl id", config["crawlid"])
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.keys.crawl(config["crawlid"]), json.dumps(config, sort_keys=True),
                 nx=True)
        pipe.zadd(self.keys.crawls(), {config["crawlid"]: time.time()}, nx=True)
        stored, _ = pipe.execute()
        return bool(stored)

    def stage(self, config: CrawlConfig, frontier: Frontier, batch: "WriteBatch",
              seed: Task | None = None) -> None:
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
            batch.domain_pages.append([config["crawlid"], seed["domain"]])
        sources = self.source_tasks(config)
        batch.seeds += sources
        hubs = [dict(seed, url=url, domain=domain_of(url)) for url in config.get("hubs") or ()]
        if config.get("revisit"):              # the sources are revisited too
            hubs += sources
        for hub in hubs:
            batch.hubs.append([dict(hub, id=f"hub:{hub['url']}"),
                               config.get("hub_span", HUB_SPAN)])

    def progress(self, crawlid: str) -> dict[str, Any]:
        """A crawl's pending tasks per domain, its counts, whether it is stopped or
        paused (and how many of its tasks are parked), summed over its shards, and what
        became of the links its pages yielded (``link_counts``)."""
        shards = crawl_shards(self.client, self.keys, crawlid)
        pipe = self.client.pipeline(transaction=False)
        pipe.hexists(self.keys.stopped_crawls(0), crawlid)     # flags are in every shard
        pipe.hexists(self.keys.paused_crawls(0), crawlid)
        pipe.hgetall(self.keys.crawl_links(crawlid))
        pipe.hgetall(self.keys.crawl_render(crawlid))
        pipe.hgetall(self.keys.crawl_changes(crawlid))
        for shard in shards:
            pipe.hgetall(self.keys.crawl_pending(crawlid, shard))
            pipe.hgetall(self.keys.crawl_counts(crawlid, shard))
            pipe.zcard(self.keys.crawl_parked(crawlid, shard))
        stopped, paused, links, render, changes, *per_shard = pipe.execute()
        pending: dict[str, int] = {}
        counts: dict[str, int] = {}
        parked = 0
        for n in range(0, len(per_shard), 3):
            for domain, count in per_shard[n].items():
                if int(count) > 0:
                    pending[domain] = pending.get(domain, 0) + int(count)
            for name, count in per_shard[n + 1].items():
                counts[name] = counts.get(name, 0) + int(count)
            parked += per_shard[n + 2]
        return {"pending": pending, "total_pending": sum(pending.values()), "counts": counts,
                "stopped": bool(stopped), "paused": bool(paused), "parked": parked,
                "links": link_counts(links), "render": render_counts(render),
                "changes": change_counts(changes)}

    def pending_totals(self, crawlids: list[str]) -> dict[str, int]:
        """``{crawlid: tasks pending}`` over each crawl's shards, in two round trips."""
        pipe = self.client.pipeline(transaction=False)
        for crawlid in crawlids:
            pipe.smembers(self.keys.crawl_shards(crawlid))
        shards = pipe.execute()
        pipe = self.client.pipeline(transaction=False)
        for crawlid, names in zip(crawlids, shards, strict=True):
            for shard in names:
                pipe.hvals(self.keys.crawl_pending(crawlid, int(shard)))
        values = iter(pipe.execute())
        return {crawlid: sum(max(0, int(n)) for _ in names for n in next(values))
                for crawlid, names in zip(crawlids, shards, strict=True)}

    def user_crawls(self, userid: str) -> list[str]:
        return sorted(self.client.smembers(self.keys.user_crawls(userid)))

    def recent_crawls(self, limit: int = 50) -> list[str]:
        """The crawl ids submitted last, newest first."""
        return list(self.client.zrevrange(self.keys.crawls(), 0, limit - 1))

    @staticmethod
    def source_tasks(config: CrawlConfig) -> list[Task]:
        """Tasks for the crawl's sitemaps, feeds and (if asked) the seed host's
        robots.txt: pages that list the pages to crawl (crawler/sources.py)."""
        urls = [(url, "parse_sitemap") for url in config.get("sitemaps") or ()]
        urls += [(url, "parse_feed") for url in config.get("feeds") or ()]
        if config.get("robots_sitemaps"):
            seed = urlsplit(config["url"])
            urls.append((f"{seed.scheme}://{seed.netloc}/robots.txt", "parse_robots"))
        return [make_task(url, config["crawlid"], config["spider_type"],
                          priority=config.get("priority", 0), depth=0,
                          userid=config.get("userid"), callback=callback)
                for url, callback in urls]

    def seed_task(self, config: CrawlConfig) -> Task:
        """The crawl's first task (depth 0) for its ``url``."""
        return make_task(config["url"], config["crawlid"], config["spider_type"],
                         priority=config.get("priority", 0), depth=0,
                         userid=config.get("userid"))


class WriteBatch:
    """Writes of many requests gathered for one pipeline, in two parts.

    The cluster-wide part (configs, indexes, anything the plugins put on ``pipe``) is
    under the cluster-wide hash tag, so it can be one transaction even on a Redis
    Cluster. The shard part (seed tasks into their shards' pools, domain page counts,
    hubs) spans shards: ``shard_writes()`` is its JSON form, which the intake stores
    in the transaction and applies after it (``apply_shard_writes``)."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        # key -> value (a SET each: a cluster pipeline has no MSET)
        self.strings: dict[str, str] = {}
        self.sets: dict[str, list[str]] = {}      # key -> members (SADD)
        # crawl id -> submitted at (one ZADD to the crawl index)
        self.index: dict[str, float] = {}
        self.seeds: list[Task] = []         # crawls' seed tasks (one pool_push call per shard)
        # [crawlid, domain]: a page counted for domain_max_pages
        self.domain_pages: list[list[str]] = []
        self.hubs: list[list[Any]] = []     # [hub task, span]: re-issued every span seconds

    def flush_cluster_wide(self, frontier: Frontier) -> None:
        """Put the gathered cluster-wide writes on ``pipe``."""
        for key, value in self.strings.items():
            self.pipe.set(key, value)
        if self.index:
            self.pipe.zadd(frontier.keys.crawls(), self.index)
        for key, members in self.sets.items():
            self.pipe.sadd(key, *members)

    def shard_writes(self) -> ShardWrites | None:
        """The shard part as a JSON-able dict, or None when there is none."""
        if not (self.seeds or self.domain_pages or self.hubs):
            return None
        return {"seeds": self.seeds, "domain_pages": self.domain_pages, "hubs": self.hubs}

    @staticmethod
    def apply_shard_writes(frontier: Frontier, writes: ShardWrites | None, pipe: Any) -> None:
        """Put a ``shard_writes()`` dict on ``pipe``. Applying the same dict twice
        queues each seed once (by its task id, within ``CRAWLCLUSTER_PUSH_DEDUPE_SECONDS``,
        even if it was dispatched in between), and re-adds the same hubs; only a domain
        page is counted twice."""
        if not writes:
            return
        frontier.push(writes["seeds"], pipe=pipe, once=True)
        for crawlid, domain in writes["domain_pages"]:
            pipe.hincrby(frontier.keys.crawl_domain_pages(crawlid, domain), domain)
        for hub, span in writes["hubs"]:
            frontier.add_hub(hub, span, pipe=pipe)


def link_counts(fields: dict[str, str]) -> dict[str, Any]:
    """The ``crawl_links`` hash as ``{"found", "new", "duplicate", "refused": {reason: n}}``."""
    counts: dict[str, Any] = {"found": 0, "new": 0, "duplicate": 0}
    refused = counts["refused"] = {}
    for field, count in fields.items():
        kind, _, reason = field.partition(":")
        if reason:
            refused[reason] = int(count)
        else:
            counts[kind] = int(count)
    return counts


def change_counts(fields: dict[str, str]) -> dict[str, int]:
    """The ``crawl_changes`` hash as ``{"new", "changed", "unchanged", "gone",
    "not_modified"}`` (of the unchanged, those a series' conditional GET found not
    modified: crawler/series.py)."""
    return {change: int(fields.get(change, 0))
            for change in ("new", "changed", "unchanged", "gone", "not_modified")}


def render_patterns(fields: dict[str, str]) -> dict[str, tuple[int, int]]:
    """``{URL template: (pages compared, pages that needed rendering)}`` of a crawl's
    ``Keys.crawl_render`` hash."""
    return {name.removesuffix(" compared"): (int(count), int(fields.get(
        name.removesuffix(" compared") + " needed", 0)))
        for name, count in fields.items() if name.endswith(" compared")}


def render_counts(fields: dict[str, str]) -> dict[str, int]:
    """What ``info`` says of a crawl's rendering: pages rendered, pages compared and
    found to need it, URL patterns learnt (compared enough) and how many of them are
    rendered, and pages that looked built by scripts in a crawl that renders none."""
    patterns = render_patterns(fields)
    learnt = [counts for counts in patterns.values() if render_sample_left(*counts) == 0]
    return {"rendered": int(fields.get(RENDERED, 0)),
            "needed": sum(needed for _, needed in patterns.values()),
            "patterns_learnt": len(learnt),
            "patterns_rendered": sum(1 for compared, needed in learnt if 2 * needed > compared),
            "looks_scripted": int(fields.get(LOOKS_SCRIPTED, 0))}


def render_sample_left(compared: int, needed: int) -> int:
    """Pages of a URL pattern still to compare before its pages go one way: up to
    ``RENDER_SAMPLE`` while its comparisons agree, up to ``RENDER_SAMPLE_MAX`` if not."""
    agree = needed in (0, compared)
    return max((RENDER_SAMPLE if agree else RENDER_SAMPLE_MAX) - compared, 0)
