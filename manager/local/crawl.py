"""A local crawl: a dispatcher and spider processes started from the settings.

Used by the tests and the benchmarks to run real crawls on their own names
(key prefix, database, ...): ``submit`` a crawl, start a ``Crawl`` (the
dispatcher plus N ``scrapy crawl`` processes), ``wait`` until the spiders
go idle and exit.
"""

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from master.bloomgen import AgingBloomFilter
from master.crawls import CrawlConfig, CrawlStore
from master.frontier import Frontier
from settings.clients import redis_client
from settings.loader import Settings, environment_for

ROOT = Path(__file__).resolve().parents[2]    # where scrapy.cfg is
# Fast dispatch and no throttling: for crawls of a loopback test site.
FAST = {
    "CRAWLCLUSTER_DISPATCH_WINDOW": "1",
    "CRAWLCLUSTER_DISPATCH_HEADROOM": "100",
    "CRAWLCLUSTER_DISPATCH_DEFAULT_WEIGHT": "600000",
    "CRAWLCLUSTER_THROTTLE_HITS": "100000",
    "CRAWLCLUSTER_THROTTLE_WINDOW": "1",
    "CRAWLCLUSTER_IDLE_TIMEOUT": "4",
}


def cluster_env(settings: Settings, fast: bool = True, **extra: Any) -> dict[str, str]:
    """The environment that gives a process exactly these settings, sped up for a
    loopback test site unless ``fast`` is false, plus ``extra``."""
    return environment_for(settings, **{**(FAST if fast else {}), **extra})


def submit(settings: Settings, config: CrawlConfig) -> None:
    """Store a crawl's config and queue its seed, as the intake does."""
    client = redis_client(settings, "test")
    bloom = AgingBloomFilter.from_settings(client, settings)
    frontier = Frontier.from_settings(client, settings)
    CrawlStore.from_settings(client, settings).submit(config, bloom, frontier)
    client.close()


def start_spider(spider_type: str, env: dict[str, str], log_path: Path,
                 job: str | None = None) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "scrapy", "crawl", spider_type, "-s", "LOG_LEVEL=INFO"]
    if job:
        args += ["-a", f"_job={job}"]
    with open(log_path, "w") as log:       # the child keeps its own copy of the file
        return subprocess.Popen(args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT)


class Crawl:
    """A dispatcher plus spider processes, started; ``wait`` until the spiders exit."""

    def __init__(self, settings: Settings, spider_type: str, log_dir: str | Path,
                 spiders: int = 1, node_ips: list[str] | None = None, **extra: Any) -> None:
        env = cluster_env(settings, **extra)
        with open(Path(log_dir) / "master.log", "w") as log:
            self.master = subprocess.Popen(
                [sys.executable, "-m", "manager.cli", "master"], cwd=ROOT, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        ips: list[str | None] = [*node_ips] if node_ips else [None] * spiders
        self.workers = [
            start_spider(spider_type, dict(env, CRAWLCLUSTER_NODE_IP=ip) if ip else env,
                         Path(log_dir) / f"spider{n}.log", f"job{n}")
            for n, ip in enumerate(ips)]

    def wait(self, timeout: float = 240) -> list[int | None]:
        deadline = time.monotonic() + timeout
        try:
            for worker in self.workers:
                worker.wait(max(1, deadline - time.monotonic()))
        finally:
            self.stop()
        return [worker.returncode for worker in self.workers]

    def stop(self) -> None:
        """SIGTERM what still runs (the spiders release their tasks) and wait for it."""
        for process in [*self.workers, self.master]:
            if process.poll() is None:
                process.terminate()
                process.wait(10)


def run_crawl(settings: Settings, spider_type: str, log_dir: str | Path, spiders: int = 1,
              timeout: float = 240, **extra: Any) -> list[int | None]:
    """Dispatcher plus ``spiders`` spider processes until the spiders go idle and exit."""
    return Crawl(settings, spider_type, log_dir, spiders, **extra).wait(timeout)

