"""Prometheus ``/metrics``: a node's spiders (on each manager) and the cluster (on the
exporter, ``crawlcluster exporter``).

A manager starts its spider processes with ``PROMETHEUS_MULTIPROC_DIR`` pointing
at its own directory; prometheus_client keeps each process's values in files
there, and the manager's ``/metrics`` sums them (crawler/metrics.py says what
they count). Counters of a process that ended stay counted; its live gauges
are dropped at the next scrape.

The exporter's ``/metrics`` turns ``master.figures.FigureReader``'s figures into metric
families at each scrape: the same figures the Status page shows. Run one per
cluster (each scrape costs Redis a few thousand cheap reads); its heartbeat
shows it in ``stats`` and on the Status page like every role.
"""

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from twisted.web import resource

from manager.registry import state_dir, watch_reactor
from master.figures import ClusterFigures, FigureReader
from settings.loader import Settings

logger = logging.getLogger(__name__)
ROLE = "exporter"
_LIVE_GAUGE_FILE = re.compile(r"gauge_live\w+?_(\d+)\.db")


# --- a node: its spider processes ---------------------------------------------------------

def metrics_dir(settings: Settings) -> Path:
    """Where this node's spider processes keep their Prometheus metrics."""
    return state_dir(settings) / "metrics"


def fresh_metrics_dir(path: Path) -> Path:
    """An empty directory for the spider processes' metric files (what a previous run
    left would be counted again)."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


class NodeCollector(MultiProcessCollector):
    """The spider processes' metrics summed, without the live gauges of ended ones."""

    def __init__(self, path: Path) -> None:
        self.metrics_path = path
        super().__init__(None, path=str(path))

    def collect(self) -> Iterator[Metric]:
        for name in os.listdir(self.metrics_path):
            match = _LIVE_GAUGE_FILE.fullmatch(name)
            if match and not _alive(int(match.group(1))):
                mark_process_dead(int(match.group(1)), str(self.metrics_path))
        yield from super().collect()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- the cluster ----------------------------------------------------------------------------

class ClusterCollector:
    """The cluster's figures as metric families, read at each scrape."""

    def __init__(self, client: Any, settings: Any) -> None:
        self.reader = FigureReader(client, settings)
        # what a local cluster's supervisor writes of the roles it starts again
        self.restarts = settings.getpath("CRAWLCLUSTER_STATE_DIR") / "supervisor.json"

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        figures = self.reader.read()
        yield from cluster_metrics(figures)
        yield _gauge("crawlcluster_role_waiting", "1 while a role of a local cluster died "
                     "too often and waits for the servers to answer to start again "
                     "(crawlcluster supervisor)", ["role"],
                     {role: float(bool(entry.get("waiting")))
                      for role, entry in read_json(self.restarts).items()})
        yield GaugeMetricFamily("crawlcluster_exporter_read_seconds",
                                "Time the last scrape took to read the figures from Redis",
                                value=time.perf_counter() - started)


def cluster_metrics(figures: ClusterFigures) -> Iterator[Metric]:
    yield from _frontier_metrics(figures)
    yield from _crawl_metrics(figures)
    yield from _site_metrics(figures)
    yield from _job_metrics(figures)
    yield from _role_metrics(figures)
    yield from _bloom_metrics(figures)


def _gauge(name: str, doc: str, labels: list[str], values: Mapping[Any, float]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for key, value in values.items():
        family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family


def _counter(name: str, doc: str, labels: list[str], values: Mapping[Any, float]) -> Metric:
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, value in values.items():
        family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family


def _frontier_metrics(figures: ClusterFigures) -> Iterator[Metric]:
    yield _gauge("crawlcluster_pool_tasks", "Tasks waiting in the frontier's pools for the "
                 "dispatcher, per spider type", ["spider"], figures.pool)
    yield GaugeMetricFamily("crawlcluster_leased_tasks", "Tasks a job has taken and not "
                            "finished yet", value=figures.leased)
    yield GaugeMetricFamily("crawlcluster_hub_tasks", "Hub pages scheduled for their next "
                            "visit", value=figures.hubs)
    yield GaugeMetricFamily("crawlcluster_monitor_work", "Requests waiting for the monitor",
                            value=figures.monitor_work)
    yield _counter("crawlcluster_throttle_refusals", "Takes a full throttle window refused, "
                   "per domain (the most refused; the rest as other)", ["domain"],
                   figures.throttle_refusals)
    yield from _pushback_metrics(figures)


def _pushback_metrics(figures: ClusterFigures) -> Iterator[Metric]:
    yield _counter("crawlcluster_pushbacks", "429s, 503s, 403 bursts and block pages sites "
                   "answered, per domain (the most; the rest as other)", ["domain"],
                   figures.pushback_counts)
    now = figures.pushback
    yield _gauge("crawlcluster_pushback_rate_factor", "Share of its configured limit a "
                 "domain pushing back may use now (the most pushed back; other: the least "
                 "of the rest)", ["domain"],
                 {domain: state["factor"] for domain, state in now.items()})
    yield _gauge("crawlcluster_pushback_paused_seconds", "Seconds left of a domain's "
                 "pause after pushback (other: the longest of the rest)", ["domain"],
                 {domain: state["paused_for"] for domain, state in now.items()})


def _crawl_metrics(figures: ClusterFigures) -> Iterator[Metric]:
    crawls = figures.crawls
    yield _gauge("crawlcluster_crawl_pending_tasks", "A recent crawl's tasks not finished "
                 "(waiting, queued for a job or leased)", ["crawlid"],
                 {crawlid: progress["total_pending"] for crawlid, progress in crawls.items()})
    yield _counter("crawlcluster_crawl_tasks", "A recent crawl's tasks by what became of "
                   "them (queued, done, failed, dropped, purged)", ["crawlid", "state"],
                   {(crawlid, state): count for crawlid, progress in crawls.items()
                    for state, count in progress["counts"].items()})
    links: dict[tuple[str, str], int] = {}
    for crawlid, progress in crawls.items():
        counts = progress["links"]
        for fate in ("found", "new", "duplicate"):
            links[(crawlid, fate)] = counts.get(fate, 0)
        for reason, count in counts.get("refused", {}).items():
            links[(crawlid, f"refused:{reason}")] = count
    yield _counter("crawlcluster_crawl_links", "Links a recent crawl's pages yielded, by "
                   "what became of them", ["crawlid", "fate"], links)


def _site_metrics(figures: ClusterFigures) -> Iterator[Metric]:
    """A recent crawl's health per site: its sites with the most pages, the rest summed
    as site="(other)" (CRAWLCLUSTER_METRICS_TOP_DOMAINS), so the series stay bounded."""
    sites = [(crawlid, health) for crawlid, per_site in figures.sites.items()
             for health in per_site.values()]
    labels = ["crawlid", "site"]
    for name, about, measure in (
            ("pages", "Pages a recent crawl fetched from a site", "pages"),
            ("items", "Items a recent crawl extracted from a site's pages", "items"),
            ("items_dropped", "Of those, items dropped as missing a required field",
             "dropped"),
            ("rendered_pages", "Pages of a site a recent crawl rendered", "rendered")):
        yield _counter(f"crawlcluster_site_{name}", about, labels,
                       {(crawlid, health.site): getattr(health, measure)
                        for crawlid, health in sites})
    for name, about, label, grouped in (
            ("responses", "A site's responses to a recent crawl by status", "status",
             "statuses"),
            ("pushbacks", "A site's pushback to a recent crawl by reason", "reason",
             "pushback"),
            ("dropped_items_by_field", "Items of a site dropped, by missing field", "field",
             "dropped_by_field")):
        yield _counter(f"crawlcluster_site_{name}", about, [*labels, label],
                       {(crawlid, health.site, key): count for crawlid, health in sites
                        for key, count in getattr(health, grouped).items()})
    yield _gauge("crawlcluster_site_field_coverage", "Share of a site's items where a rule "
                 "field matched (0 to 1)", [*labels, "field"],
                 {(crawlid, health.site, name): share for crawlid, health in sites
                  for name, share in health.coverage.items()})


def _job_metrics(figures: ClusterFigures) -> Iterator[Metric]:
    per_node: dict[tuple[str, str], int] = {}
    for info in figures.jobs.values():
        key = (info.get("node") or info["host"], info["spider_type"])
        per_node[key] = per_node.get(key, 0) + 1
    yield _gauge("crawlcluster_jobs", "Live spider jobs per node and spider type",
                 ["node", "spider"], per_node)
    yield _gauge("crawlcluster_job_done_last_minute", "Tasks a live job finished in the "
                 "last minute", ["job"], figures.done_last_minute)
    live = set(figures.jobs)
    yield _counter("crawlcluster_dispatched_tasks", "Tasks the dispatchers moved into a "
                   "live job's queues", ["job"],
                   {job: n for job, n in figures.dispatched.items() if job in live})
    yield _gauge("crawlcluster_dispatch_weight", "A job's weight in the weighted round "
                 "robin (tasks per minute)", ["job"], figures.weights)


def _role_metrics(figures: ClusterFigures) -> Iterator[Metric]:
    yield _counter("crawlcluster_requests", "Requests preprocess and monitor handled",
                   ["role"], {role: n["total"] for role, n in figures.requests.items()})
    yield _counter("crawlcluster_request_failures", "Requests preprocess and monitor "
                   "answered with an error", ["role"],
                   {role: n["fail"] for role, n in figures.requests.items()})
    yield _counter("crawlcluster_plugin_requests", "Requests per plugin", ["role", "plugin"],
                   {(role, plugin): n for role, plugins in figures.plugins.items()
                    for plugin, n in plugins.items()})
    beats = [(role, instance, beat) for role, instances in figures.modules.items()
             for instance, beat in instances.items()]
    yield _gauge("crawlcluster_up", "1 while a role instance's heartbeat is alive (master, "
                 "preprocess, monitor, manager, exporter)", ["role", "instance"],
                 {(role, instance): float(beat["up"]) for role, instance, beat in beats})
    yield _gauge("crawlcluster_stalled", "1 while a role instance's watchdog has found its "
                 "loop stuck (until its heartbeat runs out)", ["role", "instance"],
                 {(role, instance): float(beat.get("stalled", False))
                  for role, instance, beat in beats})
    yield _gauge("crawlcluster_last_beat_age_seconds", "Seconds since a role instance's "
                 "last heartbeat", ["role", "instance"],
                 {(role, instance): beat["last_beat"] for role, instance, beat in beats})


# (metric name after crawlcluster_bloom_, figure of AgingBloomFilter.figures, help)
BLOOM_GAUGES = (
    ("fill_ratio", "fill", "Share of the newest generation's cells set (sampled)"),
    ("urls_estimated", "urls", "URLs the live generations hold, estimated from their fill"),
    ("capacity_urls", "capacity", "URLs the filter's memory is sized for"),
    ("generations", "generations", "Live generations of the seen-URL filter"),
    ("newest_share", "newest_share", "How full the newest generation is (turned over at 1)"),
    ("oldest_age_seconds", "oldest_age", "Age of the oldest live generation"),
    ("error_rate_estimated", "error_now", "Chance a new URL is taken as seen now (estimated)"),
    ("error_rate_configured", "error_rate", "CRAWLCLUSTER_BLOOM_ERROR_RATE"),
    ("bytes", "bytes", "Memory of the live generations"),
)


def _bloom_metrics(figures: ClusterFigures) -> Iterator[Metric]:
    for name, figure, about in BLOOM_GAUGES:
        yield GaugeMetricFamily(f"crawlcluster_bloom_{name}", about, value=figures.bloom[figure])


# --- serving ------------------------------------------------------------------------------

class MetricsPage(resource.Resource):
    """``GET /metrics``: a registry in Prometheus's text format; a collector that fails
    (Redis down) answers 503 with the reason, and the next scrape tries again."""

    isLeaf = True

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__()
        self.registry = registry

    def render_GET(self, request: Any) -> bytes:
        try:
            body = generate_latest(self.registry)
        except Exception as exc:      # noqa: BLE001 -- any collector's failure is the reply
            logger.error("metrics could not be collected: %s", exc)
            request.setResponseCode(503)
            request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
            return f"metrics could not be collected: {exc}\n".encode()
        request.setHeader(b"Content-Type", CONTENT_TYPE_LATEST.encode())
        return body


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file; {} if there is none, or it is being rewritten."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def node_registry(metrics_dir: Path,
                  waiting: Callable[[], Mapping[str, Mapping[str, Any]]] | None = None
                  ) -> CollectorRegistry:
    """The node's spiders' metrics, and (``waiting``: the launcher's) how many of its
    spiders wait for their servers to start again."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(metrics_dir))
    if waiting is not None:
        registry.register(WaitingCollector(waiting))
    return registry


class WaitingCollector:
    """``crawlcluster_spiders_waiting{spider}``: spiders of this node that died too often
    and are started again once their servers answer (manager/launcher.py)."""

    def __init__(self, waiting: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self.waiting = waiting

    def collect(self) -> Iterator[Metric]:
        counts: dict[str, float] = {}
        for entry in list(self.waiting().values()):
            counts[entry["spider"]] = counts.get(entry["spider"], 0) + 1
        yield _gauge("crawlcluster_spiders_waiting", "Spiders of this node that died too "
                     "often and wait for their servers to answer to start again", ["spider"],
                     counts)


def cluster_registry(client: Any, settings: Any) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector(client, settings))
    return registry


def exporter_address(settings: Any) -> tuple[str, int]:
    host, _, port = settings["CRAWLCLUSTER_EXPORTER_ADDRESS"].rpartition(":")
    return host or "127.0.0.1", int(port)


def main(settings: Any) -> int:
    """``crawlcluster exporter``: serve the cluster's ``/metrics`` until SIGTERM/SIGINT."""
    import socket

    from twisted.internet import reactor, task
    from twisted.web import server

    from master.registry import Heartbeats
    from settings.clients import redis_client
    from settings.process import exit_within

    client = redis_client(settings, ROLE)
    root = resource.Resource()
    # Twisted declares its resources and reactor through zope interfaces mypy cannot see.
    root.putChild(b"metrics", MetricsPage(cluster_registry(client, settings)))  # type: ignore[arg-type]
    host, port = exporter_address(settings)
    reactor.listenTCP(port, server.Site(root), interface=host)  # type: ignore[arg-type]
    beats = Heartbeats.from_settings(client, settings)
    instance = f"{socket.gethostname()}:{port}"
    beat = task.LoopingCall(_beat_safely, beats, instance)
    beat.start(beats.interval)
    watchdog = beats.watchdog(settings, ROLE, instance, start=False)
    reactor.callWhenRunning(watch_reactor, watchdog)
    logger.info("exporter: the cluster's metrics on http://%s:%d/metrics", host, port)
    bound = settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT")
    for call in ((watchdog.stop,), (exit_within, bound, "the exporter"),
                 (beats.stop, ROLE, instance)):
        reactor.addSystemEventTrigger("before", "shutdown", *call)  # type: ignore[arg-type]
    reactor.run()  # type: ignore[misc]
    return 0


def _beat_safely(beats: Any, instance: str) -> None:
    import redis

    try:
        beats.beat(ROLE, instance)
    except redis.RedisError as exc:
        logger.error("exporter heartbeat failed (tried again at the next): %s", exc)
