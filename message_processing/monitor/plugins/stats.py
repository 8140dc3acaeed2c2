"""``stats``: rolling counts of preprocess and monitor (total, fail, per plugin),
status codes per spider type and per machine, module heartbeats, queue sizes,
nodes and jobs, in scrapy-cluster's reply shape (windows 900 s ... 7 days and
``lifetime``)."""

from typing import Any

from master.counters import grouped_window_counts
from master.throttle import job_view
from message_processing.monitor.plugins import MonitorPlugin
from message_processing.replies import reply_to
from message_processing.requests import Message
from message_processing.worklist import Entry

Section = dict[str, Any]

# scrapy-cluster's module names, and ours
ALIASES = {"kafka-monitor": "preprocess", "redis-monitor": "monitor"}
SECTIONS = {"preprocess": ("preprocess",), "monitor": ("monitor",), "spider": ("spiders",),
            "machine": ("machines",), "crawler": ("spiders", "machines", "nodes"),
            "queue": ("queues",),
            "all": ("preprocess", "monitor", "spiders", "machines", "nodes", "queues")}
SETTING = {"preprocess": "CRAWLCLUSTER_PREPROCESS_PLUGINS",
           "monitor": "CRAWLCLUSTER_MONITOR_PLUGINS"}


class StatsPlugin(MonitorPlugin):
    handles = ("stats",)

    def answer(self, entry: Entry) -> Message:
        request = entry["request"]
        module = ALIASES.get(request["stats"], request["stats"])
        scrapy_cluster = entry.get("format") == "scrapy-cluster"
        reply = reply_to(request, stats=request["stats"])
        for section in SECTIONS[module]:
            name = section
            if scrapy_cluster and section in ("preprocess", "monitor"):
                name = {v: k for k, v in ALIASES.items()}[section]
            reply[name] = getattr(self, section)()
        reply["modules"] = self.context.heartbeats.status()
        return reply

    # --- sections ------------------------------------------------------------------

    def _role(self, role: str) -> Section:
        counts = self.context.window_counts
        plugins = [path.rsplit(".", 1)[-1]
                   for path, order in self.context.settings[SETTING[role]].items()
                   if order is not None]
        return {"total": counts(f"{role}:total").values(),
                "fail": counts(f"{role}:fail").values(),
                "plugins": {name: counts(f"{role}:plugin:{name}").values() for name in plugins},
                "instances": self.context.heartbeats.status().get(role, {})}

    def preprocess(self) -> Section:
        return self._role("preprocess")

    def monitor(self) -> Section:
        """The monitor's counts, with the crawl events' rounds that failed and the
        webhook deliveries given up (message_processing/events/)."""
        section = self._role("monitor")
        counts = self.context.window_counts
        section["event_rounds_failed"] = counts("monitor:events:fail").values()
        section["webhooks_given_up"] = counts("monitor:webhooks:given_up").values()
        section["webhooks_redirected"] = counts("monitor:webhooks:redirected").values()
        section["webhooks_dropped"] = counts("monitor:webhooks:dropped").values()
        return section

    def _status_counts(self, kind: str) -> dict[str, dict[str, dict[str, int]]]:
        return grouped_window_counts(self.context.redis, self.context.keys, kind)

    def spiders(self) -> Section:
        jobs = self.context.registry.live_jobs()
        by_type: dict[str, int] = {}
        for info in jobs.values():
            by_type[info["spider_type"]] = by_type.get(info["spider_type"], 0) + 1
        spiders: dict[str, Any] = {"unique_spider_count": len(by_type),
                                   "total_spider_count": len(jobs)}
        for spider_type, statuses in self._status_counts("spider").items():
            spiders[spider_type] = {"count": by_type.get(spider_type, 0), **statuses}
        for spider_type, count in by_type.items():
            spiders.setdefault(spider_type, {"count": count})
        return spiders

    def machines(self) -> Section:
        machines = self._status_counts("machine")
        return {"count": len(machines), **machines}

    def nodes(self) -> Section:
        """Live jobs grouped by the host they run on."""
        nodes: dict[str, Any] = {}
        for job, info in sorted(self.context.registry.live_jobs().items()):
            node = nodes.setdefault(info.get("node") or info["host"],
                                    {"host": info["host"], "ip": info["ip"], "jobs": {}})
            node["jobs"][job] = {"spider_type": info["spider_type"],
                                 "done_last_minutes": None}
        counts = self.context.registry.done_counts(
            [job for node in nodes.values() for job in node["jobs"]])
        for node in nodes.values():
            for job, info in node["jobs"].items():
                info["done_last_minutes"] = counts[job]
        return nodes

    def queues(self) -> Section:
        """Tasks waiting (pools), queued per job, leased, hub schedules and the monitor's
        work list, summed over the shards."""
        context = self.context
        keys, redis, frontier = context.keys, context.redis, context.frontier
        jobs = redis.zrange(keys.jobs(), 0, -1)
        views = {job: job_view(redis, keys, job) for job in jobs}
        pipe = redis.pipeline(transaction=False)
        for job, view in views.items():
            for domain in view.all_domains():
                pipe.zcard(keys.queue(job, domain))
        sizes = iter(pipe.execute())
        per_job = {job: sum(next(sizes) for _ in view.all_domains())
                   for job, view in views.items()}
        waiting = frontier.pool_count()
        return {"pool": waiting, "leased": frontier.leased_count(),
                "hubs": frontier.hubs_count(), "monitor_work": redis.zcard(keys.monitor_work()),
                "jobs": per_job, "total_queued": waiting + sum(per_job.values())}
