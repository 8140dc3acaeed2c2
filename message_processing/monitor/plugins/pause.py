"""``pause``: park a crawl's waiting tasks (in the pools and the jobs' queues) until it
is resumed; tasks in flight finish, and new links and retries are parked too. Reply:
``total_parked``. ``resume``: the parked tasks go back to the pools. Reply:
``total_resumed``."""

from message_processing.monitor.plugins import MonitorPlugin
from message_processing.replies import reply_to
from message_processing.requests import Message
from message_processing.worklist import Entry


class PausePlugin(MonitorPlugin):
    handles = ("pause", "resume")

    def answer(self, entry: Entry) -> Message:
        request = entry["request"]
        crawlid, frontier = request["crawlid"], self.context.frontier
        if entry["kind"] == "pause":
            jobs = self.context.redis.zrange(self.context.keys.jobs(), 0, -1)
            return reply_to(request, action="pause",
                            total_parked=frontier.pause_crawl(crawlid, jobs))
        return reply_to(request, action="resume", total_resumed=frontier.resume_crawl(crawlid))
