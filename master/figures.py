"""The cluster's figures, read from Redis in a few pipelined round trips.

``FigureReader`` is the one reader of what the cluster looks like as a whole:
the exporter serves it to Prometheus (manager/metrics.py) and the web UI's
Status page draws it (``overview.json``), so both always show the same
numbers. It reads totals kept by the writers themselves (counters, index-led
pool sizes, per-shard lease sets): nothing here scans the keyspace.
"""

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from master import counters
from master.bloomgen import AgingBloomFilter
from master.counters import Clock
from master.crawls import CrawlStore
from master.frontier import Frontier
from master.keys import Keys
from master.pushback import DomainPushback, PushbackStore
from master.registry import Heartbeats, JobInfo, JobRegistry, finished_last_minute
from master.shards import read_index
from master.sitehealth import SiteHealth, site_health_of, top_sites
from settings.clients import RedisClient
from settings.loader import Settings

# Response statuses the spiders count per spider type (crawler/context.py COUNTED_STATUSES).
STATUSES = ("200", "301", "302", "303", "403", "404", "500", "other")
ROLES = {"preprocess": "CRAWLCLUSTER_PREPROCESS_PLUGINS",
         "monitor": "CRAWLCLUSTER_MONITOR_PLUGINS"}
RECENT_MINUTES = 15          # the Status page's status-code window
TOTAL = counters.TOTAL       # the member of a zset of counts that holds their sum


@dataclass
class ClusterFigures:
    jobs: dict[str, JobInfo] = field(default_factory=dict)          # live jobs
    done_last_minute: dict[str, int] = field(default_factory=dict)  # job -> tasks
    pool: dict[str, int] = field(default_factory=dict)              # spider type -> waiting
    leased: int = 0
    hubs: int = 0
    monitor_work: int = 0
    crawls: dict[str, dict[str, Any]] = field(default_factory=dict)  # recent crawl -> progress
    requests: dict[str, dict[str, int]] = field(default_factory=dict)  # role -> total, fail
    plugins: dict[str, dict[str, int]] = field(default_factory=dict)   # role -> plugin -> n
    modules: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)  # heartbeats
    # spider type -> status -> {"lifetime": n, "recent": n in the last RECENT_MINUTES}
    status_codes: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    # the seen-URL filter: AgingBloomFilter.figures(), and the configured capacity
    bloom: dict[str, Any] = field(default_factory=dict)
    throttle_refusals: dict[str, int] = field(default_factory=dict)  # top domains + other
    dispatched: dict[str, int] = field(default_factory=dict)    # job -> moved, all time
    weights: dict[str, int] = field(default_factory=dict)       # job -> tasks per minute
    # domains pushing back now (the most pushbacks first, the top ones): domain ->
    # DomainPushback.as_json; and the rest as "other" (their count, least factor,
    # longest pause left)
    pushback: dict[str, dict[str, Any]] = field(default_factory=dict)
    pushback_counts: dict[str, int] = field(default_factory=dict)  # top domains + other
    # recent crawl -> its sites with the most pages and "(other)" (master/sitehealth.py)
    sites: dict[str, dict[str, SiteHealth]] = field(default_factory=dict)

    def nodes(self) -> dict[str, dict[str, int]]:
        """``{node: {"jobs": n, "pages_per_min": n}}`` from the live jobs."""
        nodes: dict[str, dict[str, int]] = {}
        for job, info in self.jobs.items():
            node = nodes.setdefault(info.get("node") or info["host"],
                                    {"jobs": 0, "pages_per_min": 0})
            node["jobs"] += 1
            node["pages_per_min"] += self.done_last_minute.get(job, 0)
        return nodes

    def as_json(self) -> dict[str, Any]:
        return dict(asdict(self), nodes=self.nodes())


class FigureReader:
    """Reads ``ClusterFigures``; the parts it uses are opened once (opening the frontier
    or the Bloom filter checks their stored shape: a write), then each ``read`` reads."""

    def __init__(self, client: RedisClient, settings: Settings,
                 clock: Clock = time.time) -> None:
        self.client = client
        self.settings = settings
        self.clock = clock
        self.keys = Keys.from_settings(settings)
        self.registry = JobRegistry.from_settings(client, settings, clock=clock)
        self.heartbeats = Heartbeats.from_settings(client, settings, clock=clock)
        self.frontier = Frontier.from_settings(client, settings)
        self.crawls = CrawlStore(client, self.keys)
        self.bloom = AgingBloomFilter.from_settings(client, settings)
        self.pushback = PushbackStore.from_settings(client, settings, clock=clock)

    def read(self) -> ClusterFigures:
        client, keys, settings = self.client, self.keys, self.settings
        figures = ClusterFigures()
        figures.jobs = self.registry.live_jobs()
        figures.done_last_minute = finished_last_minute(client, keys, list(figures.jobs),
                                                        self.clock)
        figures.modules = self.heartbeats.status()
        self._read_frontier(figures)
        figures.crawls = {crawlid: self.crawls.progress(crawlid) for crawlid in
                          self.crawls.recent_crawls(settings.getint("CRAWLCLUSTER_METRICS_CRAWLS"))}
        figures.sites = self._read_sites(list(figures.crawls))
        _read_counters(figures, client, settings, keys, self.clock)
        top = settings.getint("CRAWLCLUSTER_METRICS_TOP_DOMAINS")
        figures.throttle_refusals = top_with_other(client, keys.throttle_refusals(), top)
        figures.pushback = pushback_now(self.pushback.states(), top, self.clock())
        figures.pushback_counts = top_with_other(client, keys.pushback_counts(), top)
        figures.bloom = dict(self.bloom.figures(),
                             capacity=settings.getint("CRAWLCLUSTER_BLOOM_CAPACITY"))
        return figures

    def _read_sites(self, crawlids: list[str]) -> dict[str, dict[str, SiteHealth]]:
        """Each crawl's health per site: its top sites by pages, the rest as other (one
        round trip)."""
        pipe = self.client.pipeline(transaction=False)
        for crawlid in crawlids:
            pipe.hgetall(self.keys.crawl_sites(crawlid))
        most = self.settings.getint("CRAWLCLUSTER_METRICS_TOP_DOMAINS")
        return {crawlid: top_sites(site_health_of(raw), most)
                for crawlid, raw in zip(crawlids, pipe.execute(), strict=True) if raw}

    def _read_frontier(self, figures: ClusterFigures) -> None:
        """Pool sizes per spider type (only the shards their index names), leases and hubs
        (every shard), the monitor's work list, the dispatchers' moves and weights."""
        client, keys = self.client, self.keys
        types = self.frontier.pool_types()
        shards = {name: read_index(client, keys.pool_shards(name)) for name in types}
        pipe = client.pipeline(transaction=False)
        for name in types:
            for shard in shards[name]:
                pipe.zcard(keys.pool(shard, name))
        for shard in keys.all_shards():
            pipe.zcard(keys.leases(shard))
            pipe.zcard(keys.hubs(shard))
        pipe.zcard(keys.monitor_work())
        pipe.hgetall(keys.dispatched_by_job())
        pipe.hgetall(keys.dispatch_weights())
        replies = iter(pipe.execute())
        figures.pool = {name: sum(next(replies) for _ in shards[name]) for name in types}
        for _ in keys.all_shards():
            figures.leased += next(replies)
            figures.hubs += next(replies)
        figures.monitor_work = next(replies)
        figures.dispatched = {job: int(n) for job, n in next(replies).items()}
        figures.weights = {job: int(n) for job, n in next(replies).items()}


def _read_counters(figures: ClusterFigures, client: RedisClient, settings: Settings,
                   keys: Keys, clock: Clock) -> None:
    """Requests preprocess and monitor handled and failed (and per plugin), responses
    per spider type and status: each counter's lifetime field, and for the statuses the
    last RECENT_MINUTES minute buckets too."""
    plugins = {role: [path.rsplit(".", 1)[-1] for path, order in settings[name].items()
                      if order is not None] for role, name in ROLES.items()}
    spider_types = sorted({info["spider_type"] for info in figures.jobs.values()}
                          | set(figures.pool))
    minute = int(clock() // 60)
    recent = [str(minute - back) for back in range(RECENT_MINUTES)]
    pipe = client.pipeline(transaction=False)
    for role, names in plugins.items():
        for name in ("total", "fail", *(f"plugin:{plugin}" for plugin in names)):
            pipe.hget(keys.window_counts(f"{role}:{name}"), "lifetime")
    for spider_type in spider_types:
        for status in STATUSES:
            pipe.hmget(keys.window_counts(f"spider:{spider_type}:{status}"),
                       ["lifetime", *recent])
    replies = iter(pipe.execute())
    for role, names in plugins.items():
        figures.requests[role] = {"total": int(next(replies) or 0),
                                  "fail": int(next(replies) or 0)}
        figures.plugins[role] = {plugin: int(next(replies) or 0) for plugin in names}
    for spider_type in spider_types:
        for status in STATUSES:
            lifetime, *minutes = next(replies)
            if lifetime:
                figures.status_codes.setdefault(spider_type, {})[status] = {
                    "lifetime": int(lifetime),
                    "recent": sum(int(n) for n in minutes if n)}


def top_with_other(client: RedisClient, key: str, top: int) -> dict[str, int]:
    """The ``top`` members of a zset of counts, plus ``other``: the sum of the rest (the
    zset's ``TOTAL`` member less the top ones), so a per-domain metric's labels stay
    bounded. One command: the total ranks first."""
    best = client.zrevrange(key, 0, top, withscores=True)
    counts = {member: int(score) for member, score in best if member != TOTAL}
    counts = dict(sorted(counts.items(), key=lambda item: -item[1])[:top])
    total = next((int(score) for member, score in best if member == TOTAL), 0)
    if total > sum(counts.values()):
        counts["other"] = total - sum(counts.values())
    return counts


def pushback_now(states: list[DomainPushback], top: int, now: float) -> dict[str, dict[str, Any]]:
    """The ``top`` domains' pushback states (``states`` come most pushed back first) and
    the rest as ``other``: how many, their pushbacks, least factor, longest pause left."""
    shown = {state.domain: state.as_json(now) for state in states[:top]}
    rest = states[top:]
    if rest:
        shown["other"] = {"domains": len(rest), "pushbacks": sum(s.pushbacks for s in rest),
                          "factor": min(s.factor for s in rest),
                          "paused_for": max(max(s.paused_until - now, 0.0) for s in rest)}
    return shown
