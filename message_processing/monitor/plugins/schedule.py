"""``schedule``: add, list, pause, resume or delete recurring crawls
(master/schedules.py; the masters fire them). Replies carry ``schedule_action`` and,
for one schedule, its ``next_due`` (ISO time, UTC; none while paused); ``list``
replies with ``schedules``."""

from datetime import UTC, datetime

from master.schedules import Schedules
from message_processing.monitor.plugins import MonitorPlugin
from message_processing.replies import reply_to
from message_processing.requests import Message
from message_processing.worklist import Entry


def iso(moment: float | None) -> str | None:
    return None if moment is None else datetime.fromtimestamp(moment, UTC).isoformat()


class SchedulePlugin(MonitorPlugin):
    handles = ("schedule",)

    @property
    def schedules(self) -> Schedules:
        return Schedules(self.context.redis, self.context.keys)

    def answer(self, entry: Entry) -> Message:
        request = entry["request"]
        action, schedules = request["action"], self.schedules
        reply = {"action": "schedule", "schedule_action": action}
        if action == "list":
            listed = [dict(schedule, next_due=iso(schedule["next_due"]))
                      for schedule in schedules.overview()]
            return reply_to(request, schedules=listed, **reply)
        schedule_id = request["schedule_id"]
        reply["schedule_id"] = schedule_id
        if action == "add":
            when = {name: request[name] for name in ("cron", "every") if name in request}
            first = schedules.add({"id": schedule_id, "crawl": request["crawl"],
                                   "userid": request["userid"],
                                   "series": bool(request.get("series")), **when})
            return reply_to(request, status="ok", next_due=iso(first), **reply)
        if action == "resume":
            due = schedules.resume(schedule_id)
            found = due is not None
        else:
            due = None
            found = (schedules.pause if action == "pause" else schedules.delete)(schedule_id)
        if not found:
            return reply_to(request, status="error", error=f"no schedule {schedule_id!r}",
                            field="schedule_id", **reply)
        return reply_to(request, status="ok", next_due=iso(due), **reply)
