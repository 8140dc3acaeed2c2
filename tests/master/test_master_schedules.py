"""Recurring crawls: due times, and each fired exactly once by racing masters, on Redis,
in simulated time."""

import threading
from datetime import UTC, datetime

import pytest

from master.bloomgen import AgingBloomFilter
from master.crawls import CrawlStore
from master.frontier import Frontier
from master.keys import Keys
from master.schedules import RETRY_AFTER, ScheduleError, Schedules, check_when, next_due, run_id
from tests.master.conftest import Clock

MONDAY = datetime(2026, 11, 23, tzinfo=UTC).timestamp()
CRAWL = {"url": "http://news.example/", "spider_type": "universal",
         "rule": {"rules": [{"allow": ["/"]}]}}


@pytest.mark.parametrize(("schedule", "field"), [
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "every hour"}, "cron"),
    ({"cron": "0 * * * *", "every": 60}, "cron"),
    ({}, "cron"),
    ({"every": 0.5}, "every"),
    ({"every": "60"}, "every"),
])
def test_bad_timing_is_refused_naming_the_field(schedule, field):
    with pytest.raises(ScheduleError) as caught:
        check_when(schedule)
    assert caught.value.field == field


def test_due_times_of_cron_and_interval():
    assert next_due({"cron": "0 * * * *"}, MONDAY) == MONDAY + 3600
    assert next_due({"cron": "0 * * * *"}, MONDAY + 1) == MONDAY + 3600
    assert next_due({"cron": "30 6 * * 1"}, MONDAY) == MONDAY + 6.5 * 3600   # a Monday
    assert next_due({"every": 900, "start": MONDAY}, MONDAY + 899) == MONDAY + 900
    assert next_due({"every": 900, "start": MONDAY}, MONDAY + 900) == MONDAY + 1800
    assert run_id("news", MONDAY + 3600) == "news-20261123T010000Z"


def racing_masters(redis, test_settings, clock, count=2):
    """``count`` masters' schedules (their own Lua and crawl store) submitting for real."""
    keys = Keys.from_settings(test_settings)
    frontier = Frontier.from_settings(redis, test_settings)
    bloom = AgingBloomFilter.from_settings(redis, test_settings)
    store = CrawlStore(redis, keys)
    submitted, lock = [], threading.Lock()

    def submit(config):
        store.submit(config, bloom, frontier)
        with lock:
            submitted.append(config["crawlid"])

    return [Schedules(redis, keys, clock=clock) for _ in range(count)], submit, submitted


def test_two_masters_fire_each_due_time_once_over_a_simulated_week(redis, test_settings):
    clock = Clock()
    clock.now = MONDAY
    masters, submit, submitted = racing_masters(redis, test_settings, clock)
    masters[0].add({"id": "hourly", "cron": "0 * * * *", "crawl": CRAWL, "userid": "u"})
    masters[0].add({"id": "quarter", "every": 900, "crawl": CRAWL, "userid": "u"})
    masters[1].add({"id": "paused", "every": 60, "crawl": CRAWL, "userid": "u"})
    masters[1].pause("paused")
    week = 7 * 24 * 3600
    start = threading.Barrier(len(masters))
    while clock.now < MONDAY + week:
        clock.now += 60
        threads = [threading.Thread(target=lambda m=master: (start.wait(), m.fire_due(submit)))
                   for master in masters]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    hourly = [crawlid for crawlid in submitted if crawlid.startswith("hourly-")]
    quarter = [crawlid for crawlid in submitted if crawlid.startswith("quarter-")]
    assert len(hourly) == len(set(hourly)) == 7 * 24
    assert len(quarter) == len(set(quarter)) == 7 * 24 * 4
    assert sorted(hourly) == [run_id("hourly", MONDAY + 3600 * n) for n in range(1, 169)]
    assert not any(crawlid.startswith("paused-") for crawlid in submitted)
    # each run is a crawl of its own: stored once, its seed queued once
    store = CrawlStore.from_settings(redis, test_settings)
    assert store.progress(hourly[0])["total_pending"] == 1
    assert redis.zcard(Keys.from_settings(test_settings).schedule_runs()) == 0


def test_missed_due_times_fire_once_and_the_next_is_in_the_future(redis, test_settings):
    clock = Clock()
    clock.now = MONDAY
    [master], submit, _ = racing_masters(redis, test_settings, clock, count=1)
    master.add({"id": "hourly", "cron": "0 * * * *", "crawl": CRAWL})
    clock.now += 5 * 3600 + 30                         # no master ran for five hours
    assert master.fire_due(submit) == [run_id("hourly", MONDAY + 3600)]
    assert master.fire_due(submit) == []
    [listed] = master.overview()
    assert listed["next_due"] == MONDAY + 6 * 3600


def test_a_run_claimed_by_a_master_that_died_is_submitted_once_by_another(redis,
                                                                          test_settings):
    clock = Clock()
    clock.now = MONDAY
    (dying, other), submit, submitted = racing_masters(redis, test_settings, clock)
    dying.add({"id": "hourly", "cron": "0 * * * *", "crawl": CRAWL})
    clock.now = MONDAY + 3600

    def dies(config):
        raise SystemExit("the master died after its claim, before the crawl was stored")

    with pytest.raises(SystemExit):
        dying.fire_due(dies)
    assert other.fire_due(submit) == []                 # claimed: not due again
    clock.now += RETRY_AFTER + 1
    assert other.fire_due(submit) == [run_id("hourly", MONDAY + 3600)]
    assert dying.fire_due(submit) == other.fire_due(submit) == []
    assert submitted == [run_id("hourly", MONDAY + 3600)]


def test_pause_resume_delete(redis, test_settings):
    clock = Clock()
    clock.now = MONDAY
    [master], submit, _ = racing_masters(redis, test_settings, clock, count=1)
    master.add({"id": "s", "every": 60, "crawl": CRAWL})
    assert master.pause("s") and not master.pause("nope")
    clock.now += 600
    assert master.fire_due(submit) == []
    assert master.resume("s") == MONDAY + 660
    assert master.resume("nope") is None
    clock.now += 60
    assert master.fire_due(submit) == [run_id("s", MONDAY + 660)]
    assert master.delete("s") and master.overview() == []


def test_a_series_schedule_gives_every_run_its_lineage_and_deleting_it_forgets_its_pages(
        redis, test_settings):
    from master.series import PageState, SeriesPages, user_lineage

    clock = Clock()
    clock.now = MONDAY
    [master], submit, _ = racing_masters(redis, test_settings, clock, count=1)
    master.add({"id": "daily", "every": 86400, "crawl": CRAWL, "series": True})
    master.add({"id": "plain", "every": 86400, "crawl": CRAWL})
    clock.now += 86400
    fired = master.fire_due(submit)
    store = CrawlStore(redis, Keys.from_settings(test_settings))
    lineages = {crawlid: store.load(crawlid).get("lineage") for crawlid in fired}
    daily = user_lineage(None, "daily")
    assert lineages == {run_id("daily", MONDAY + 86400): daily,
                        run_id("plain", MONDAY + 86400): None}

    pages = SeriesPages.from_settings(redis, test_settings)
    pipe = redis.pipeline(transaction=False)
    pages.record(daily, {"http://news.example/a": PageState("http://news.example/a", 1.0)},
                 pipe)
    pipe.execute()
    assert pages.lookup({daily: ["http://news.example/a"]})
    assert master.delete("daily")
    assert pages.lookup({daily: ["http://news.example/a"]}) == {}
