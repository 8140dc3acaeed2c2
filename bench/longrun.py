"""A cluster that runs for a year: what its Redis holds, and how well its seen-URL
filter still filters, after 365 simulated days.

  python bench/longrun.py [--days 365] [--capacity 1000000] [--single-only]

Two parts, on one Redis and on a local 3-master Redis Cluster, in the same run:

- **The filter after 10x its capacity.** A filter of ``--capacity`` URLs at the
  configured error rate (``CRAWLCLUSTER_BLOOM_ERROR_RATE``) takes 10x that many new
  URLs, in batches of 1,000, a master's upkeep between batches; then 100,000 fresh
  URLs are looked up: the share found is ``bloom_fp_after_10x_capacity`` (target at
  most 2x ``bloom_error_rate``). ``bloom_bytes_max`` is the most its bitmaps held
  at any upkeep (target: at most ``bloom_bytes_budget``, one filter of the capacity).
- **A simulated year** (``SimulatedYear``): the real master upkeep (``Dispatcher``
  with its filter turnover, retention and schedules) on a clock this drives, an
  hourly schedule crawling a 5-page site and a continuous revisit crawl of a news hub
  that lists its last 20 articles, one new an hour; the spiders are their frontier
  calls (take, finish, link lookup, push, add), as in bench/scale.py. Retention is
  a day, the filter small enough to turn over all year. Every day at the same hour
  it counts the keys and the bytes (``MEMORY USAGE``) under the prefix, less the
  filter's bitmaps. ``keys_left_per_retired_crawl``: keys (and flag fields) naming a
  retired crawl (target 0); ``bytes_growth_per_1000_crawls``: the growth of those
  bytes from day 3 to the last, per 1,000 crawls run in between (target at most
  64 KiB).

The last line is one JSON object.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from master.bloomgen import AgingBloomFilter
from master.crawls import CrawlStore
from master.dispatcher import Dispatcher
from master.keys import Keys
from master.registry import JobRegistry
from master.schedules import Schedules
from master.siteconfig import SiteConfig
from master.tasks import decode_task, make_task
from master.throttle import ThrottledQueues

HOUR, DAY = 3600.0, 86400.0
START = 1_800_000_000.0 - 1_800_000_000.0 % DAY         # a midnight (UTC)
SITE = "http://site.test/"
SITE_PAGES = [SITE] + [f"{SITE}p/{n}" for n in range(1, 5)]
HUB = "http://news.test/"
HUB_LISTS = 20             # articles the hub lists, newest first
JOB = "sim-job"


class Clock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def year_settings(settings, capacity=2_000, shards=16):
    """Settings for the simulated year: a day's retention, a small filter, few shards."""
    return settings.copy_with(CRAWLCLUSTER_CRAWL_RETENTION=DAY,
                              CRAWLCLUSTER_BLOOM_CAPACITY=capacity,
                              CRAWLCLUSTER_BLOOM_ERROR_RATE=0.01,
                              CRAWLCLUSTER_FRONTIER_SHARDS=shards,
                              CRAWLCLUSTER_JOB_HEARTBEAT_TTL=2 * HOUR)


class SimulatedYear:
    """The master's upkeep and a job's frontier calls, hour by hour on a driven clock."""

    def __init__(self, client, settings, database):
        self.client, self.settings = client, settings
        self.keys = Keys.from_settings(settings)
        self.clock = Clock()
        self.dispatcher = Dispatcher.from_settings(client, settings, clock=self.clock,
                                                   instance="sim-master")
        self.dispatcher.bloom.refresh = 0.0          # every call sees the latest generations
        self.dispatcher.retention.database = lambda: database
        self.bloom = AgingBloomFilter.from_settings(client, settings, clock=self.clock,
                                                    refresh=0.0)
        self.registry = JobRegistry.from_settings(client, settings, clock=self.clock)
        self.registry.register(JOB, "universal", "sim-host", "10.0.0.1")
        self.queues = ThrottledQueues(client, self.keys, SiteConfig(100_000, 1.0),
                                      clock=self.clock)
        self.store = CrawlStore(client, self.keys)
        self.view = None
        self.fetches: dict[tuple[str, str], int] = {}    # (crawl, url) -> fetches
        self.articles = 0
        self.runs = 0
        self.bloom_bytes_max = 0

    def start(self):
        """The revisit crawl of the news hub, and the hourly schedule of the site."""
        self.store.submit({"crawlid": "news", "url": HUB, "spider_type": "universal",
                           "hubs": [HUB], "hub_span": HOUR}, self.bloom,
                          self.dispatcher.frontier)
        Schedules(self.client, self.keys, clock=self.clock).add(
            {"id": "hourly", "every": HOUR,
             "crawl": {"url": SITE, "spider_type": "universal"}})

    def hour(self):
        """One hour: a new article, the master's upkeep, the job crawling what it gets."""
        self.clock.now += HOUR
        self.articles += 1
        self.registry.heartbeat(JOB)
        for _ in range(3):           # the seed, its links, and room for a retry
            self.dispatcher.frontier.issue_due_hubs()
            self.dispatcher.tick()
            self.crawl_round()
            self.clock.now += 1           # an upkeep each round, the chores once an hour
        self.bloom_bytes_max = max(self.bloom_bytes_max, self.bloom_bytes())

    def crawl_round(self):
        result = self.queues.take(JOB, "universal", "10.0.0.1", self.view, per_domain=50)
        self.view = result.view
        if not result.tasks:
            return
        tasks = [decode_task(member) for _, member in result.tasks]
        self.dispatcher.frontier.finish_many([(member, "done", "") for _, member in result.tasks])
        for task in tasks:
            self.fetches[task["crawlid"], task["url"]] = \
                self.fetches.get((task["crawlid"], task["url"]), 0) + 1
        self.follow([(task, url) for task in tasks for url in self.links(task["url"])])

    def links(self, url):
        if url == HUB:
            return [f"{HUB}a/{n}" for n in range(self.articles, self.articles - HUB_LISTS, -1)
                    if n > 0]
        if url.startswith(SITE):
            return SITE_PAGES
        return []

    def follow(self, found):
        """The scheduler's link round: look up, push the unseen, add them."""
        if not found:
            return
        urls = [url for _, url in found]
        crawlids = [task["crawlid"] for task, _ in found]
        seen = self.bloom.contains_many(urls, scope=crawlids)
        unseen = [(task, url) for (task, url), known in zip(found, seen, strict=True)
                  if not known]
        self.dispatcher.frontier.push_links([
            make_task(url, task["crawlid"], "universal", depth=task["depth"] + 1)
            for task, url in unseen])
        self.bloom.add_many([url for _, url in unseen],
                            scope=[task["crawlid"] for task, _ in unseen])

    # --- measures --------------------------------------------------------------------

    def bloom_bytes(self):
        return sum(self.client.strlen(key) for key in self._bloom_blocks())

    def _bloom_blocks(self):
        return [key for key in self.client.scan_iter(match=f"{self.keys.prefix}:bloom:*",
                                                     count=1000)
                if not key.endswith((":meta", ":generations"))]

    def state(self):
        """``(keys, bytes)`` under the prefix, less the filter's (bounded by its own
        measure) and the keys
        Redis expires itself (dispatch windows, counters: their TTLs run in real time,
        which this clock does not drive)."""
        keys = [key for key in self.client.scan_iter(match=self.keys.pattern(), count=1000)
                if not key.startswith(f"{self.keys.prefix}:bloom:")]
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.ttl(key)
        keys = [key for key, ttl in zip(keys, pipe.execute(), strict=True) if ttl < 0]
        return len(keys), sum(self.client.memory_usage(key) or 0 for key in keys)

    def leftovers(self, retired):
        """Keys and flag fields that still name one of the ``retired`` crawls."""
        retired = set(retired)
        left = [key for key in self.client.scan_iter(match=self.keys.pattern(), count=1000)
                if any(f":{crawlid}:" in key for crawlid in retired)]
        for shard in self.keys.all_shards():
            for flags in (self.keys.stopped_crawls(shard), self.keys.paused_crawls(shard)):
                left += [field for field in self.client.hkeys(flags) if field in retired]
        for index in (self.keys.crawls(), self.keys.ended_crawls()):
            left += [member for member in self.client.zrange(index, 0, -1) if member in retired]
        return left

    def lost(self):
        """Articles the hub listed that were never fetched (a false positive of the
        filter takes a new link for one seen: the configured error rate allows some)."""
        fetched = {url for crawlid, url in self.fetches if crawlid == "news"}
        return [n for n in range(1, self.articles) if f"{HUB}a/{n}" not in fetched]

    def refetched(self):
        """(crawl, url) fetched more than once within one crawl (but the hub: revisited)."""
        return {key: count for key, count in self.fetches.items()
                if count > 1 and key[1] != HUB}


def run_year(client, settings, database, days, progress=print):
    """Simulate ``days`` days; returns the figures (see the module's docstring)."""
    year = SimulatedYear(client, settings, database)
    year.start()
    daily = []
    started = time.monotonic()
    for day in range(days):
        for _ in range(24):
            year.hour()
        daily.append(year.state())
        if progress and (day % 30 == 29 or day == days - 1):
            progress(f"  day {day + 1}/{days}: {daily[-1][0]} keys, {daily[-1][1]:,} bytes "
                     f"(less the filter), {time.monotonic() - started:.0f} s")
    runs = [crawlid for crawlid, _ in year.fetches if crawlid.startswith("hourly-")]
    runs = sorted(set(runs))
    kept = set(year.client.zrange(year.keys.crawls(), 0, -1))
    retired = [crawlid for crawlid in runs if crawlid not in kept]
    steady = daily[2:] or daily
    fresh = [f"http://fresh.test/{n}" for n in range(20_000)]
    return SimpleNamespace(
        year=year, daily=daily, runs=len(runs), retired=len(retired),
        keys_left=len(year.leftovers(retired)),
        keys_range=(min(k for k, _ in steady), max(k for k, _ in steady)),
        bytes_growth=steady[-1][1] - steady[0][1], crawls_between=24 * (len(steady) - 1),
        refetched=year.refetched(), lost=len(year.lost()), articles=year.articles,
        fp=sum(year.bloom.contains_many(fresh, scope="probe")) / len(fresh),
        figures=year.bloom.figures(), bloom_bytes_max=year.bloom_bytes_max)


def filter_after_10x(client, settings, capacity, progress=print):
    """Stream 10x ``capacity`` new URLs through a filter sized for it; the share of
    fresh URLs it then takes as seen, and the most its bitmaps held."""
    clock = Clock()
    settings = settings.copy_with(CRAWLCLUSTER_BLOOM_CAPACITY=capacity)
    bloom = AgingBloomFilter.from_settings(client, settings, name="tenx", clock=clock,
                                           refresh=0.0)
    most, batch = 0, 1_000
    started = time.monotonic()
    for start in range(0, 10 * capacity, batch):
        bloom.add_many([f"http://a.test/{n}" for n in range(start, start + batch)])
        clock.now += 10
        if bloom.upkeep() or start % (capacity // 2) == 0:
            most = max(most, sum(client.strlen(key) for key in client.scan_iter(
                match=f"{bloom.keys.prefix}:bloom:tenx.*", count=1000)
                if not key.endswith(":meta")))
        if progress and start % capacity == 0 and start:
            progress(f"  {start // capacity}x capacity through the filter, "
                     f"{time.monotonic() - started:.0f} s")
    fresh = [f"http://fresh.test/{n}" for n in range(100_000)]
    return (sum(bloom.contains_many(fresh)) / len(fresh), most, bloom.budget.bytes,
            bloom.error_rate)


def measure(settings, database, days, capacity, label):
    from bench.common import bench_redis

    print(f"{label}:", flush=True)
    with bench_redis(settings) as client:
        fp, most, budget, rate = filter_after_10x(client, settings, capacity)
    print(f"  filter after 10x its capacity: {fp:.5f} of fresh URLs taken as seen "
          f"(configured {rate}), bitmaps at most {most:,} bytes of {budget:,.0f}", flush=True)
    year_config = year_settings(settings)
    with bench_redis(year_config) as client:
        year = run_year(client, year_config, database, days)
    print(f"  year: {year.runs} runs, {year.retired} retired, {year.keys_left} keys left of "
          f"them; keys each day {year.keys_range[0]}..{year.keys_range[1]}; "
          f"{year.bytes_growth:,} bytes growth over {year.crawls_between} crawls; "
          f"filter fp at the end {year.fp:.4f}, {len(year.refetched)} pages fetched twice "
          f"in a run, {year.lost} of {year.articles} articles lost to false positives",
          flush=True)
    return {"bloom_fp_after_10x_capacity": fp, "bloom_error_rate": rate,
            "bloom_bytes_max": most, "bloom_bytes_budget": budget,
            "keys_left_per_retired_crawl": year.keys_left / max(1, year.retired),
            "bytes_growth_per_1000_crawls":
                max(0, year.bytes_growth) * 1000 / max(1, year.crawls_between),
            "keys_per_day_min": year.keys_range[0], "keys_per_day_max": year.keys_range[1],
            "year_fp_end": year.fp, "year_fp_configured": 0.01,
            "fetched_twice_in_a_run": len(year.refetched), "articles": year.articles,
            "articles_lost": year.lost, "days_simulated": days,
            "crawls_run": year.runs, "crawls_retired": year.retired}


def main():
    from bench.common import bench_settings, finish, machine
    from bench.scale import local_cluster
    from settings.clients import mongo_client

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--single-only", action="store_true")
    args = parser.parse_args()
    print(f"longrun: {args.days} simulated days, a filter of {args.capacity:,} URLs; "
          f"{machine()}", flush=True)
    settings = bench_settings(("redis", "mongodb"))
    mongo = mongo_client(settings, "bench")
    database = mongo[f"bench_longrun_{settings['CRAWLCLUSTER_KEY_PREFIX'].split(':')[1]}"]
    try:
        summary = measure(settings, database, args.days, args.capacity, "one Redis")
        if not args.single_only:
            with tempfile.TemporaryDirectory() as state:
                cluster_settings, servers = local_cluster(settings, state)
                try:
                    cluster = measure(cluster_settings, database, args.days, args.capacity,
                                      "3-master Redis Cluster")
                finally:
                    servers.down(["redis"])
            summary.update({f"cluster_{name}": value for name, value in cluster.items()})
    finally:
        mongo.drop_database(database.name)
        mongo.close()
    finish(summary)


if __name__ == "__main__":
    main()
