"""Shared pieces of the benchmarks: servers, a private key prefix, output.

Each benchmark runs a peer and crawlcluster in the same run on the same
machine, prints what it measured, and ends with one line: a JSON object.
"""

import importlib.util
import json
import platform
import sys
import time
import uuid
from contextlib import contextmanager

from manager.local.cluster import with_local_sites_allowed
from manager.local.services import LocalServers
from manager.local.sitelog import RepeatedFetches, check_fetched_once, page_fetches
from master.keys import Keys
from settings.clients import redis_client
from settings.loader import load_settings


def require_peers(*modules):
    """Exit with the install command when a peer this benchmark runs is missing."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        sys.exit(f"{', '.join(missing)} not installed: pip install -e '.[bench]'")


def bench_settings(kinds=("redis",)):
    """Settings with a private key prefix and ZooKeeper root (no rate limit or blacklist
    someone set on the cluster's own, e.g. ``crawlcluster demo``'s, applies) and the
    loopback sites the benchmarks serve allowed past the URL guard; the servers of
    ``kinds`` started if needed."""
    settings = load_settings()
    LocalServers(settings, out=lambda line: None).up(kinds)
    token = uuid.uuid4().hex[:8]
    return with_local_sites_allowed(settings).copy_with(
        CRAWLCLUSTER_KEY_PREFIX=f"bench:{token}",
        CRAWLCLUSTER_ZOOKEEPER_ROOT=f"/crawlcluster-bench/{token}")


def drop_zookeeper_root(settings):
    """Remove the benchmark's ZooKeeper tree."""
    from settings.clients import zookeeper_client

    client = zookeeper_client(settings, "bench")
    try:
        client.delete(settings["CRAWLCLUSTER_ZOOKEEPER_ROOT"], recursive=True)
    finally:
        client.stop()
        client.close()


def drop_bench_database(settings):
    """Drop the benchmark's MongoDB database. Done after every round: the items of many
    rounds take the MongoDB-wire server longer to drop than a socket timeout allows,
    and later rounds would insert into ever larger indexes."""
    from settings.clients import mongo_client

    client = mongo_client(settings.copy_with(CRAWLCLUSTER_SOCKET_TIMEOUT=120.0), "bench")
    try:
        client.drop_database(settings["CRAWLCLUSTER_MONGODB_DATABASE"])
    finally:
        client.close()


@contextmanager
def bench_redis(settings):
    """A Redis client from the factory; every key under the prefix deleted after."""
    client = redis_client(settings, "bench")
    try:
        yield client
    finally:
        keys = list(client.scan_iter(match=Keys.from_settings(settings).pattern(), count=1000))
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start:start + 1000])
        client.close()


def storage_cpu_seconds(settings):
    """CPU seconds so far of the Redis and MongoDB-wire servers this machine runs for
    ``settings`` (what a peer that stores in its own process pays for too): Redis from
    INFO cpu, MongoDB from /proc by the PID ``services up`` recorded (0 if not ours)."""
    from bench.crawl import process_cpu_seconds
    from manager.local.statedir import StateDir

    client = redis_client(settings, "bench")
    try:
        seconds = redis_cpu_seconds(client)
    finally:
        client.close()
    record = StateDir(settings.getpath("CRAWLCLUSTER_STATE_DIR")).recorded("mongodb")
    return seconds + (process_cpu_seconds(record["pid"]) if record else 0.0)


def redis_cpu_seconds(client):
    """The Redis server's CPU time so far (user + system), from INFO cpu."""
    cpu = client.info("cpu")
    return cpu["used_cpu_user"] + cpu["used_cpu_sys"]


def redis_commands(client):
    """Commands the Redis server ran so far, from INFO commandstats: a script call counts,
    and so does every command the script runs."""
    return sum(entry["calls"] for entry in client.info("commandstats").values())


class RedisWork:
    """What the Redis server did from ``start()`` on: CPU seconds (user + system) and
    commands, read from its INFO (every client's work, this process's or not)."""

    def __init__(self, client):
        self.client = client
        self.cpu = self.commands = 0.0

    def start(self):
        self.cpu, self.commands = redis_cpu_seconds(self.client), redis_commands(self.client)
        return self

    def per(self, units):
        """``(CPU microseconds, commands)`` per unit of work since ``start()``; the INFO
        calls of the readings themselves (2 commands) are left out."""
        cpu = redis_cpu_seconds(self.client) - self.cpu
        commands = redis_commands(self.client) - self.commands - 2
        return cpu * 1e6 / max(units, 1), commands / max(units, 1)


class CpuClock:
    """CPU time spent from ``start()`` on, by this process (all its threads) and by the
    Redis server: what a measured piece of work costs beyond its wall time."""

    def __init__(self, client):
        self.client = client
        self.process = self.redis = None

    def start(self):
        self.process, self.redis = time.process_time(), redis_cpu_seconds(self.client)

    def read(self):
        """``{"process": s, "redis": s}`` since ``start()``."""
        return {"process": time.process_time() - self.process,
                "redis": redis_cpu_seconds(self.client) - self.redis}


def rate(count, seconds):
    return count / seconds if seconds > 0 else float("inf")


@contextmanager
def timed(result, key):
    """Store the seconds the block took in ``result[key]``."""
    started = time.perf_counter()
    yield
    result[key] = time.perf_counter() - started


def machine():
    import os

    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, "
            f"Python {platform.python_version()}")


_SPIN = """
import time
stop, count = time.perf_counter() + {seconds}, 0
while time.perf_counter() < stop:
    sum(i * i for i in range(1000))
    count += 1
print(count)
"""


def parallel_scaling(processes=2, seconds=3.0):
    """What this machine gives ``processes`` CPU-bound Python processes at once: their
    total work over one process's alone (2.0 on two idle cores). On a shared VM it is
    often less; read the crawl benchmarks' scaling against it."""
    import subprocess
    import sys

    def spin(count):
        workers = [subprocess.Popen([sys.executable, "-c", _SPIN.format(seconds=seconds)],
                                    stdout=subprocess.PIPE, text=True) for _ in range(count)]
        return sum(int(worker.communicate()[0]) for worker in workers)

    return spin(processes) / spin(1)


def served_pages(site, since, pages, label, ours=True):
    """``(distinct pages fetched, fetches, seconds from the first to the last)`` of a
    run, from nginx's log entry ``since`` on (robots.txt left out). A run of ours, which
    has no fault, that fetched a page twice or missed one of ``pages`` (their URLs)
    stops the benchmark (``RepeatedFetches``, naming the pages); a peer's repeats are
    printed (vanilla Scrapy fetches its start page twice: a start request bypasses its
    dupefilter)."""
    entries = [e for e in site.access_log()[since:] if not e["path"].endswith("/robots.txt")]
    fetched = page_fetches(entries, site.port)
    try:
        check_fetched_once(fetched, pages, what=label.strip())
    except RepeatedFetches as exc:
        if ours:
            raise
        print(f"    (the peer, not us: {exc})", flush=True)
    return len(fetched), len(entries), entries[-1]["time"] - entries[0]["time"]


def site_pages(manifest):
    """The URLs of a generated site's pages a crawl of it fetches (``sitegen``)."""
    return [p["url"] for p in manifest["pages"] if p["kind"] in ("index", "list", "detail")]


def finish(summary):
    """Print the closing JSON line (floats rounded)."""
    rounded = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in summary.items()}
    print(json.dumps(rounded, sort_keys=True))
