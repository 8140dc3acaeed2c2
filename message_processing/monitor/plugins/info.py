"""``info``: a crawl's pending tasks per domain and its counts, from maintained counts
(one read per crawl, however long its queues), in scrapy-cluster's reply shape, plus
what became of the links its pages yielded: ``links: {found, new, duplicate,
refused: {reason: count}}`` (reasons: rule, scope, depth, robots, blacklist,
domain_max_pages, scheme, url_length, invalid), and its rendering: ``render: {rendered,
needed, patterns_learnt, patterns_rendered, looks_scripted}`` (``master.crawls.render_counts``),
and its items: ``changes: {new, changed, unchanged, gone, not_modified}``
(crawler/versions.py; a series' 304s: crawler/series.py).
Without a crawl id (scrapy-cluster only) every crawl of the app is reported. A crawl
retired from Redis (``CRAWLCLUSTER_CRAWL_RETENTION`` after it ended) is answered from
its MongoDB crawl record, with ``retired: true``. ``pushback`` gives the crawl's pending
domains that are pushing back now: ``{domain: {factor, paused_for, pushbacks, reason,
...}}`` (master/pushback.py). With ``sites: true`` the reply has the crawl's health per
site too: ``sites: [SiteHealth.as_json(), ...]`` (master/sitehealth.py), most pages first."""

import time
from typing import Any

from master.sitehealth import read_site_health
from message_processing.monitor.plugins import MonitorPlugin
from message_processing.replies import reply_to
from message_processing.requests import Message
from message_processing.worklist import Entry


class InfoPlugin(MonitorPlugin):
    handles = ("info",)

    def answer(self, entry: Entry) -> Message:
        request = entry["request"]
        if request.get("crawlid"):
            info = self.crawl_info(request["crawlid"])
            if request.get("sites"):
                info["sites"] = self.sites(request["crawlid"], info)
            return reply_to(request, action="info", **info)
        crawls = {crawlid: self.crawl_info(crawlid)
                  for crawlid in self.context.crawls.user_crawls(request["appid"])}
        domains = {domain for info in crawls.values() for domain in info["domains"]}
        return reply_to(request, action="info", crawlids=crawls, total_crawlids=len(crawls),
                        total_domains=len(domains),
                        total_pending=sum(info["total_pending"] for info in crawls.values()))

    def crawl_info(self, crawlid: str) -> Message:
        known = self.context.crawls.exists(crawlid)
        if not known:
            record = self.context.retired_record(crawlid)
            if record is not None:
                return retired_info(record)
        progress = self.context.crawls.progress(crawlid)
        counts = progress["counts"]
        now = time.time()
        pushback = {domain: state.as_json(now) for domain, state in
                    self.context.pushback.states_of(sorted(progress["pending"])).items()}
        return {
            "total_pending": progress["total_pending"],
            "total_domains": len(progress["pending"]),
            "domains": {domain: {"total": count} for domain, count in progress["pending"].items()},
            "queued": counts.get("queued", 0),
            "done": counts.get("done", 0),
            "failed": counts.get("failed", 0),
            "dropped": counts.get("dropped", 0),
            "purged": counts.get("purged", 0),
            "stopped": progress["stopped"],
            "paused": progress["paused"],
            "parked": progress["parked"],
            "links": progress["links"],
            "render": progress["render"],
            "changes": progress["changes"],
            "pushback": pushback,
            "known": known,
        }


    def sites(self, crawlid: str, info: Message) -> list[dict[str, Any]]:
        """The crawl's health per site, most pages first (a retired crawl's from its
        record)."""
        if info.get("retired"):
            record = self.context.retired_record(crawlid) or {}
            return list(record.get("final", {}).get("sites", []))
        sites = read_site_health(self.context.redis, self.context.keys, crawlid).values()
        return [health.as_json() for health in
                sorted(sites, key=lambda health: (-health.pages, health.site))]


def retired_info(record: dict[str, Any]) -> Message:
    """``info`` of a crawl whose Redis state was retired, from its MongoDB crawl record
    (``master/retention.py``): its final figures, ``retired: true`` and when."""
    final = record["final"]
    counts = final["counts"]
    return {"total_pending": 0, "total_domains": 0, "domains": {},
            **{field: counts.get(field, 0)
               for field in ("queued", "done", "failed", "dropped", "purged")},
            "stopped": final["stopped"], "paused": False, "parked": 0, "links": final["links"],
            "changes": final.get("changes", {}), "known": True, "retired": True,
            "retired_at": record["retired_at"],
            "pages": record.get("pages", 0), "items": record.get("items", 0)}
