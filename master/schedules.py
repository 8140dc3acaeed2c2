"""Recurring crawls: a schedule submits a crawl of its own id at each due time, once.

A schedule is a crawl request's fields (its template) plus when to run: a cron
expression (UTC) or an interval in seconds. Its next due time is a zset score.
Every master looks for due schedules in its upkeep; to fire one it moves the
score on to the following due time with a compare-and-set (``schedule_claim.lua``),
so of several masters that read the same due time exactly one fires it, and the
same call records the run it now owes. The run is a crawl of id
``<schedule>-<due time, YYYYmmddTHHMMSSZ>``, so ``info`` and the crawl records
work as for any crawl (a schedule with ``series`` gives every run its id as the crawl's
``lineage``: master/series.py); it leaves the run record once submitted, and a run
whose master died in between is submitted by another a minute later (never
twice: a run whose crawl exists already is only dropped). Due times missed while
no master ran are not made up: the latest fires once, the next is in the future.
"""

import json
import logging
import math
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from croniter import croniter

from master.counters import Clock
from master.crawls import CrawlConfig
from master.keys import Keys
from master.lua import LuaScripts
from master.series import user_lineage
from settings.clients import RedisClient
from settings.errors import CrawlClusterError

logger = logging.getLogger(__name__)
Schedule = dict[str, Any]     # id, cron | every, crawl (a crawl request's fields), userid, ...
RETRY_AFTER = 60.0            # seconds a claimed run may stay unsubmitted before a retry
MIN_EVERY = 1.0
RUN_ID = re.compile(r"(.+)-\d{8}T\d{6}Z")     # a schedule's run: <schedule>-<due time>


class ScheduleError(ValueError):
    """A schedule that cannot run: ``field`` names the part that is wrong."""

    def __init__(self, reason: str, field: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field


def check_when(schedule: Schedule) -> None:
    """A schedule names exactly one of a valid cron expression and an interval."""
    if ("cron" in schedule) == ("every" in schedule):
        raise ScheduleError("give exactly one of cron and every", "cron")
    if "cron" in schedule:
        expression = schedule["cron"]
        if not isinstance(expression, str) or not croniter.is_valid(expression):
            raise ScheduleError(f"not a cron expression (minute hour day month weekday): "
                                f"{expression!r}", "cron")
    elif not isinstance(schedule["every"], int | float) or schedule["every"] < MIN_EVERY:
        raise ScheduleError(f"every must be a number of seconds >= {MIN_EVERY:g}", "every")


def next_due(schedule: Schedule, after: float) -> float:
    """The first due time strictly after ``after``: the cron expression's, or the
    interval's counted from the schedule's start."""
    if "every" in schedule:
        every, start = float(schedule["every"]), float(schedule["start"])
        return start + (math.floor((after - start) / every) + 1) * every
    moment = datetime.fromtimestamp(after, UTC)
    return float(croniter(schedule["cron"], moment).get_next(float))


def run_id(schedule_id: str, due: float) -> str:
    return f"{schedule_id}-{datetime.fromtimestamp(due, UTC):%Y%m%dT%H%M%SZ}"


def run_config(schedule: Schedule, crawlid: str) -> CrawlConfig:
    """The crawl a run submits: the schedule's, with the run's id and the schedule's
    user; a series' runs share its lineage, the schedule's id within its user's."""
    config = dict(schedule["crawl"], crawlid=crawlid, userid=schedule.get("userid"))
    if schedule.get("series"):
        config["lineage"] = user_lineage(schedule.get("userid"), schedule["id"])
    return config


def schedule_of(crawlid: str) -> str | None:
    """The schedule whose run ``crawlid`` is (see ``run_id``), or None."""
    match = RUN_ID.fullmatch(crawlid)
    return match.group(1) if match else None


class Schedules:
    def __init__(self, client: RedisClient, keys: Keys, clock: Clock = time.time,
                 scripts: LuaScripts | None = None) -> None:
        self.client = client
        self.keys = keys
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)

    # --- managing schedules (the monitor's schedule plugin) --------------------------------

    def add(self, schedule: Schedule) -> float:
        """Store (or replace) a schedule; return its first due time."""
        check_when(schedule)
        now = self.clock()
        schedule = dict(schedule, start=math.floor(now), paused=False)
        due = next_due(schedule, now)
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self.keys.schedule_configs(), schedule["id"], json.dumps(schedule))
        pipe.zadd(self.keys.schedules(), {schedule["id"]: due})
        pipe.execute()
        return due

    def get(self, schedule_id: str) -> Schedule | None:
        raw = self.client.hget(self.keys.schedule_configs(), schedule_id)
        schedule: Schedule | None = json.loads(raw) if raw else None
        return schedule

    def overview(self) -> list[Schedule]:
        """Every schedule with its ``next_due`` (None while paused), by id."""
        configs = self.client.hgetall(self.keys.schedule_configs())
        due = dict(self.client.zrange(self.keys.schedules(), 0, -1, withscores=True))
        return [dict(json.loads(configs[schedule_id]), next_due=due.get(schedule_id))
                for schedule_id in sorted(configs)]

    def pause(self, schedule_id: str) -> bool:
        schedule = self.get(schedule_id)
        if schedule is None:
            return False
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self.keys.schedule_configs(), schedule_id,
                  json.dumps(dict(schedule, paused=True)))
        pipe.zrem(self.keys.schedules(), schedule_id)
        pipe.execute()
        return True

    def resume(self, schedule_id: str) -> float | None:
        """Due again from now on; its next due time (None if there is no such schedule)."""
        schedule = self.get(schedule_id)
        if schedule is None:
            return None
        due = next_due(schedule, self.clock())
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self.keys.schedule_configs(), schedule_id,
                  json.dumps(dict(schedule, paused=False)))
        pipe.zadd(self.keys.schedules(), {schedule_id: due})
        pipe.execute()
        return due

    def delete(self, schedule_id: str) -> bool:
        """Delete a schedule, and what its series knows of its pages (its items stay)."""
        schedule = self.get(schedule_id) or {}
        lineage = user_lineage(schedule.get("userid"), schedule_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hdel(self.keys.schedule_configs(), schedule_id)
        pipe.zrem(self.keys.schedules(), schedule_id)
        pipe.delete(self.keys.series_pages(lineage))
        pipe.delete(self.keys.series_fetched(lineage))
        return bool(pipe.execute()[0])

    # --- firing (the masters) -------------------------------------------------------------

    def fire_due(self, submit: Callable[[CrawlConfig], None], limit: int = 100) -> list[str]:
        """Claim and submit the due runs no other instance claimed first, and runs left
        unsubmitted too long; return the crawl ids submitted here."""
        now = self.clock()
        submitted = [self._retry(run, claimed, now, submit) for run, claimed in
                     self.client.zrangebyscore(self.keys.schedule_runs(), "-inf",
                                               repr(now - RETRY_AFTER), start=0, num=limit,
                                               withscores=True)]
        for schedule_id, due in self.client.zrangebyscore(
                self.keys.schedules(), "-inf", repr(now), start=0, num=limit, withscores=True):
            submitted.append(self._fire(schedule_id, due, now, submit))
        return [crawlid for crawlid in submitted if crawlid]

    def _fire(self, schedule_id: str, due: float, now: float,
              submit: Callable[[CrawlConfig], None]) -> str | None:
        schedule = self.get(schedule_id)
        if schedule is None:                   # deleted between the two reads
            self.client.zrem(self.keys.schedules(), schedule_id)
            return None
        run = json.dumps({"schedule": schedule_id, "due": due}, sort_keys=True)
        claimed = self.scripts.run(
            "schedule_claim", [self.keys.schedules(), self.keys.schedule_runs()],
            [schedule_id, repr(due), repr(next_due(schedule, max(due, now))), run, repr(now)])
        if not claimed:
            return None
        return self._submit(schedule, due, run, submit)

    def _retry(self, run: str, claimed: float, now: float,
               submit: Callable[[CrawlConfig], None]) -> str | None:
        if not self.scripts.run("schedule_claim", [self.keys.schedule_runs()],
                                [run, repr(claimed), repr(now)]):
            return None
        record = json.loads(run)
        schedule = self.get(record["schedule"])
        if schedule is None:
            self.client.zrem(self.keys.schedule_runs(), run)
            return None
        logger.warning("schedule %s: the run due at %s was claimed but not submitted; "
                       "submitting it now", record["schedule"], record["due"])
        return self._submit(schedule, record["due"], run, submit)

    def _submit(self, schedule: Schedule, due: float, run: str,
                submit: Callable[[CrawlConfig], None]) -> str | None:
        crawlid = run_id(schedule["id"], due)
        fresh = not self.client.exists(self.keys.crawl(crawlid))
        if fresh:
            try:
                submit(run_config(schedule, crawlid))
            except (ValueError, CrawlClusterError) as exc:   # checked when it was added
                logger.error("schedule %s: crawl %s could not be submitted, run dropped: %s",
                             schedule["id"], crawlid, exc)
                fresh = False
            else:
                logger.info("schedule %s: submitted crawl %s", schedule["id"], crawlid)
        self.client.zrem(self.keys.schedule_runs(), run)
        return crawlid if fresh else None
