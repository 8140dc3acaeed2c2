"""Scale-out benchmark: what one crawled page costs the frontier's Redis, on one Redis and
on a local 3-master Redis Cluster, in the same run; the inputs of docs/capacity.md.

  python bench/scale.py [--pages 20000] [--domains 1200] [--shards N] [--breakdown]

The workload is the frontier's share of a crawl, without Scrapy or HTTP: one process
plays the dispatcher and four spider jobs. Each round the dispatcher moves tasks from
the pools into the jobs' domain queues; each job takes what the throttle allows (2
per domain), finishes them as done, and each page "links" to 5 new URLs on random
domains of ``--domains``, checked against the crawl's Bloom filter, the new ones pushed.
These are the calls the spiders and the master make per page (push, dispatch, take,
finish, Bloom check-and-add).

Three setups in one run: one Redis (the one ``services up`` runs, no replica), one Redis
with a replica, and the local 3-master cluster with a replica each. The cluster's ratios
are taken over the replicated single Redis, like for like: a master pays CPU to feed
its replica (~10% of it here), which a lone Redis does not (the ratio over it is
printed too, ``cpu_cluster_over_unreplicated``).

Measured per page, from every master's ``INFO commandstats`` and ``INFO cpu``:
Redis commands (the commands a Lua script runs count, as well as the script call) and
Redis CPU microseconds (user + system, masters only: replicas cost as much again); from
``INFO memory`` / ``MEMORY USAGE``: bytes per queued task (50,000 tasks left in the
pools) and bytes per seen URL (a Bloom filter filled to its capacity); the share of the
frontier's keys and of the commands on the busiest master (over ``--domains``
domains); and frontier throughput, cluster over single, with this machine's own
two-process scaling beside it (the cluster's three masters share its cores).
The last line is one JSON object.
"""

import argparse
import random
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis as redis_py

from bench.common import (
    bench_redis,
    bench_settings,
    finish,
    machine,
    parallel_scaling,
    rate,
    redis_commands,
    redis_cpu_seconds,
)
from manager.local.ports import free_port, free_redis_cluster_port
from manager.local.processes import spawn, stop_process
from manager.local.serverspec import ServerSpec
from manager.local.services import LocalServers
from manager.local.sitelog import RepeatedFetches, check_fetched_once
from master.bloom import BloomFilter
from master.bloomgen import AgingBloomFilter
from master.bloomparams import BloomParams
from master.dispatcher import Dispatcher
from master.frontier import Frontier
from master.keys import Keys
from master.registry import JobRegistry
from master.siteconfig import SiteConfig
from master.tasks import decode_task, make_task
from master.throttle import ThrottledQueues

JOBS = ("job1", "job2", "job3", "job4")
LINKS_PER_PAGE = 5
QUEUED_TASKS = 50_000
SEEN_URLS = 2_000_000


class Masters:
    """The Redis masters behind a client: counters read from each, summed or per node."""

    def __init__(self, client):
        if hasattr(client, "get_primaries"):
            nodes = [(node.host, node.port) for node in client.get_primaries()]
        else:
            kwargs = client.connection_pool.connection_kwargs
            nodes = [(kwargs["host"], kwargs["port"])]
        self.nodes = {f"{host}:{port}": redis_py.Redis(host=host, port=port)
                      for host, port in nodes}

    def sample(self):
        """``{node: (commands, cpu seconds, used memory bytes)}``."""
        found = {}
        for name, node in self.nodes.items():
            found[name] = (redis_commands(node),
                           redis_cpu_seconds(node),
                           node.info("memory")["used_memory"])
        return found

    def keys_per_node(self, pattern):
        return {name: sum(1 for _ in node.scan_iter(match=pattern, count=1000))
                for name, node in self.nodes.items()}

    def close(self):
        for node in self.nodes.values():
            node.close()


def delta(before, after):
    return {name: tuple(b - a for a, b in zip(before[name], after[name], strict=True))
            for name in before}


class CrawlCycle:
    """The frontier's calls for a crawl of ``domains`` domains, page by page."""

    def __init__(self, client, settings, domains):
        self.keys = Keys.from_settings(settings)
        self.frontier = Frontier(client, self.keys)
        registry = JobRegistry(client, self.keys)
        for job in JOBS:
            registry.register(job, "universal", job, f"10.0.0.{JOBS.index(job) + 1}")
        self.dispatcher = Dispatcher(client, self.keys, registry, self.frontier)
        self.dispatcher.leases.refresh()
        self.queues = ThrottledQueues(client, self.keys, SiteConfig(100_000, 1.0))
        self.bloom = AgingBloomFilter.from_settings(client, settings)
        self.domains = [f"site{n}.com" for n in range(domains)]
        self.views = dict.fromkeys(JOBS)
        self.made = 0
        self.random = random.Random(7)
        self.taken = []                  # task members taken, checked once timed

    def new_urls(self, count):
        urls = []
        for _ in range(count):
            self.made += 1
            urls.append(f"http://{self.random.choice(self.domains)}/p/{self.made}")
        return urls

    def push(self, urls):
        fresh = [url for url, new in zip(urls, self.bloom.add_many(urls, scope="scale"),
                                         strict=True) if new]
        self.frontier.push([make_task(url, "scale", "universal") for url in fresh])

    def run(self, pages):
        """Crawl ``pages`` pages; return the seconds it took and the pages crawled."""
        self.push([f"http://{domain}/" for domain in self.domains])
        started, done = time.perf_counter(), 0
        while done < pages:
            self.phase("dispatch", lambda: self.dispatcher._dispatch(
                "universal", dict.fromkeys(JOBS, 600), 4_000))
            for job in JOBS:
                done += self.crawl_pages(job)
        seconds = time.perf_counter() - started
        check_fetched_once(Counter(decode_task(member)["url"] for member in self.taken),
                           what="scale: the pages taken")
        return seconds, done

    def crawl_pages(self, job):
        """One job's take, its pages finished and their links pushed; how many pages."""
        result = self.phase("take", lambda: self.queues.take(
            job, "universal", f"10.0.0.{JOBS.index(job) + 1}", self.views[job], per_domain=2))
        self.views[job] = result.view
        self.taken += [member for _, member in result.tasks]
        if result.tasks:
            self.phase("finish", lambda: self.frontier.finish_many(
                [(member, "done", "") for _, member in result.tasks]))
            self.phase("push", lambda: self.push(
                self.new_urls(len(result.tasks) * LINKS_PER_PAGE)))
        return len(result.tasks)

    def phase(self, name, call):
        return call()


class CountedCycle(CrawlCycle):
    """The same, counting the Redis commands of each phase (``INFO commandstats`` around
    every call, the INFO itself taken off): where a page's commands go."""

    def __init__(self, client, settings, domains):
        super().__init__(client, settings, domains)
        self.client = client
        self.phases = {name: Counter() for name in ("dispatch", "take", "finish", "push")}

    def phase(self, name, call):
        before = self.commands()
        result = call()
        used = self.commands() - before
        used["info"] -= 1
        self.phases[name].update(used)
        return result

    def commands(self):
        return Counter({name.removeprefix("cmdstat_"): stats["calls"]
                        for name, stats in self.client.info("commandstats").items()})


def breakdown(settings, pages, domains):
    """Print the commands per page of each phase on one Redis, by command."""
    with bench_redis(settings) as client:
        cycle = CountedCycle(client, settings, domains)
        _, done = cycle.run(pages)
    total = sum(sum(used.values()) for used in cycle.phases.values())
    print(f"  {total / done:.1f} commands a page ({done:,} pages over {domains:,} domains), "
          "by phase and command:")
    for name, used in cycle.phases.items():
        print(f"  {name:<9} {sum(used.values()) / done:5.2f}: " + ", ".join(
            f"{command} {calls / done:.2f}" for command, calls in used.most_common()
            if calls > 0))


def measure(settings, pages, domains, label):
    with bench_redis(settings) as client:
        masters = Masters(client)
        try:
            cycle = CrawlCycle(client, settings, domains)
            before = masters.sample()
            seconds, done = cycle.run(pages)
            used = delta(before, masters.sample())
            keys = masters.keys_per_node(Keys.from_settings(settings).pattern())
            queued = queued_task_bytes(client, settings, masters)
            seen = seen_url_bytes(client, settings)
        finally:
            masters.close()
    commands = sum(c for c, _, _ in used.values())
    cpu = sum(s for _, s, _ in used.values())
    row = {"pages_per_s": rate(done, seconds), "redis_cmds_per_page": commands / done,
           "redis_cpu_us_per_page": cpu * 1e6 / done, "bytes_per_queued_task": queued,
           "bytes_per_seen_url": seen, "masters": len(used),
           "max_master_share_commands": max(c for c, _, _ in used.values()) / commands,
           "max_master_share_keys": max(keys.values()) / max(sum(keys.values()), 1)}
    print(f"  {label:<14} {row['pages_per_s']:>8,.0f} pages/s  "
          f"{row['redis_cmds_per_page']:6.1f} cmds/page  "
          f"{row['redis_cpu_us_per_page']:7.1f} Redis CPU us/page  "
          f"{queued:6.0f} B/queued task  {seen:5.2f} B/seen URL  "
          f"busiest master: {row['max_master_share_commands']:.0%} of commands, "
          f"{row['max_master_share_keys']:.0%} of keys ({len(used)} masters)", flush=True)
    return row


def queued_task_bytes(client, settings, masters):
    """Memory per task waiting in the pools (the zset member and the pending counts)."""
    frontier = Frontier(client, Keys.from_settings(settings))
    before = sum(m for _, _, m in masters.sample().values())
    for start in range(0, QUEUED_TASKS, 10_000):
        frontier.push([make_task(f"http://q{n % 5000}.com/queued/page-{n}.html",
                                 "queued", "universal")
                       for n in range(start, start + 10_000)])
    after = sum(m for _, _, m in masters.sample().values())
    return (after - before) / QUEUED_TASKS


def seen_url_bytes(client, settings):
    """A filter of the configured error rate filled to its capacity: bytes per URL."""
    params = BloomParams.for_capacity(SEEN_URLS,
                                      settings.getfloat("CRAWLCLUSTER_BLOOM_ERROR_RATE"))
    bloom = BloomFilter(client, Keys.from_settings(settings), "capacity", params)
    for start in range(0, SEEN_URLS, 10_000):
        bloom.add_many([f"http://seen.com/{n}" for n in range(start, start + 10_000)])
    pattern = f"{Keys.from_settings(settings).prefix}:bloom:capacity:*"
    stored = sum(client.memory_usage(key) or 0 for key in client.scan_iter(match=pattern))
    return stored / SEEN_URLS


def local_cluster(settings, state_dir):
    port = free_redis_cluster_port()
    cluster = settings.copy_with(CRAWLCLUSTER_REDIS_CLUSTER=True,
                                 CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{port}/0",
                                 CRAWLCLUSTER_STATE_DIR=str(state_dir))
    servers = LocalServers(cluster, out=lambda line: None)
    servers.up(["redis"])
    return cluster, servers


@contextmanager
def replicated_single(settings, state_dir):
    """A single Redis of the bench's own with one replica, like each master of the local
    cluster: what the cluster is compared with (replication costs a master CPU too)."""
    master, replica = free_port(), free_port()
    spec, pids = ServerSpec("redis"), []
    try:
        for port, extra in ((master, []), (replica, ["--replicaof", "127.0.0.1", str(master)])):
            data = Path(state_dir) / str(port)
            data.mkdir()
            command = spec.command("127.0.0.1", port, data, settings) + extra
            pids.append(spawn(command, data / "redis.log").pid)
        wait_for_replica(master)
        yield settings.copy_with(CRAWLCLUSTER_REDIS_URL=f"redis://127.0.0.1:{master}/0")
    finally:
        for pid in pids:
            stop_process(pid)


def wait_for_replica(port):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if redis_py.Redis(port=port).info("replication").get("connected_slaves") == 1:
                return
        except redis_py.ConnectionError:
            pass                                     # not listening yet
        time.sleep(0.1)
    raise RuntimeError(f"the bench's replica of 127.0.0.1:{port} did not connect")


def main():
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--domains", type=int, default=1_200)
    parser.add_argument("--shards", type=int, default=None,
                        help="frontier shards (default: CRAWLCLUSTER_FRONTIER_SHARDS)")
    parser.add_argument("--breakdown", action="store_true",
                        help="only print where a page's commands go, phase by phase, on "
                             "one Redis")
    args = parser.parse_args()
    settings = bench_settings(("redis",))
    if args.shards:
        settings = settings.copy_with(CRAWLCLUSTER_FRONTIER_SHARDS=args.shards)
    if args.breakdown:
        return breakdown(settings, args.pages, args.domains)
    print(f"scale: {args.pages:,} pages over {args.domains:,} domains "
          f"({settings.getint('CRAWLCLUSTER_FRONTIER_SHARDS')} shards), "
          f"{LINKS_PER_PAGE} links each; {machine()}", flush=True)
    unreplicated = measure(settings, args.pages, args.domains, "one Redis")
    with tempfile.TemporaryDirectory() as state, \
            replicated_single(settings, state) as replicated:
        single = measure(replicated, args.pages, args.domains, "+ a replica")
    with tempfile.TemporaryDirectory() as state:
        cluster_settings, servers = local_cluster(settings, state)
        try:
            cluster = measure(cluster_settings, args.pages, args.domains, "3-master cluster")
        finally:
            servers.down(["redis"])
    two_proc = parallel_scaling()
    summary = {
        "pages": args.pages, "domains": args.domains,
        "shards": settings.getint("CRAWLCLUSTER_FRONTIER_SHARDS"),
        "redis_cmds_per_page": cluster["redis_cmds_per_page"],
        "redis_cpu_us_per_page": cluster["redis_cpu_us_per_page"],
        "single_redis_cmds_per_page": single["redis_cmds_per_page"],
        "single_redis_cpu_us_per_page": single["redis_cpu_us_per_page"],
        "cmds_cluster_over_single": cluster["redis_cmds_per_page"] / single["redis_cmds_per_page"],
        "cpu_cluster_over_single":
            cluster["redis_cpu_us_per_page"] / single["redis_cpu_us_per_page"],
        "unreplicated_redis_cpu_us_per_page": unreplicated["redis_cpu_us_per_page"],
        "cpu_cluster_over_unreplicated":
            cluster["redis_cpu_us_per_page"] / unreplicated["redis_cpu_us_per_page"],
        "bytes_per_queued_task": single["bytes_per_queued_task"],
        "bytes_per_seen_url": single["bytes_per_seen_url"],
        "cluster_vs_single": cluster["pages_per_s"] / single["pages_per_s"],
        "machine_two_proc_scaling": two_proc,
        "max_master_share": max(cluster["max_master_share_commands"],
                                cluster["max_master_share_keys"]),
        "max_master_share_commands": cluster["max_master_share_commands"],
        "max_master_share_keys": cluster["max_master_share_keys"],
        "single_pages_per_s": single["pages_per_s"], "cluster_pages_per_s": cluster["pages_per_s"],
    }
    print(f"  cluster over single: {summary['cluster_vs_single']:.2f}x frontier throughput "
          f"(this machine gives two processes {two_proc:.2f}x one)")
    finish(summary)


if __name__ == "__main__":
    try:
        main()
    except RepeatedFetches as exc:      # a page taken twice: the frontier lost track
        sys.exit(f"bench/scale.py: {exc}")
