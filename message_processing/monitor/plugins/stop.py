"""``stop``: purge a crawl's pending tasks from every queue; tasks in flight are
dropped as they come back and its new links refused. Reply: ``total_purged``.
Without a crawl id (scrapy-cluster only) every crawl of the app is stopped."""

from message_processing.monitor.plugins import MonitorPlugin
from message_processing.replies import reply_to
from message_processing.requests import Message
from message_processing.worklist import Entry


class StopPlugin(MonitorPlugin):
    handles = ("stop",)
    action = "stop"
    total_field = "total_purged"

    def answer(self, entry: Entry) -> Message:
        request = entry["request"]
        crawlids = ([request["crawlid"]] if request.get("crawlid")
                    else self.context.crawls.user_crawls(request["appid"]))
        # A retired crawl (or one never submitted) has nothing to stop: flagging it would
        # leave flags no retention pass removes.
        crawlids = [crawlid for crawlid in crawlids if self.context.crawls.exists(crawlid)]
        jobs = self.context.redis.zrange(self.context.keys.jobs(), 0, -1)
        purged = sum(self.context.frontier.purge_crawl(crawlid, jobs) for crawlid in crawlids)
        return reply_to(request, action=self.action, **{self.total_field: purged})
