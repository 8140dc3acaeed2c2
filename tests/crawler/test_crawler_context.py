"""A job's counts against a real Redis: status and pages-done counts are sent once a
second (each tick would cost Redis more than the pages' own work), link counts with
every report, and whatever is left when the job closes."""

from types import SimpleNamespace

from crawler import context as context_module
from crawler.context import TaskTracker
from master.counters import WindowCounts
from master.keys import Keys
from master.lua import LuaScripts
from master.registry import JobRegistry
from master.sitehealth import read_site_health


def job_context(redis, settings):
    keys = Keys.from_settings(settings)
    return SimpleNamespace(redis=redis, keys=keys, scripts=LuaScripts(redis), settings=settings,
                           registry=JobRegistry.from_settings(redis, settings),
                           spider_type="universal", host="node1", job="job1")


def statuses_counted(redis, settings):
    return WindowCounts.from_settings(redis, settings, "spider:universal:200").values()["900"]


def test_counts_go_once_a_second_links_every_report_and_the_rest_at_close(
        redis, test_settings, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(context_module.time, "monotonic", lambda: now[0])
    context = job_context(redis, test_settings)
    tracker = TaskTracker(context)
    links = context.keys.crawl_links("c1")

    tracker.count_status(200)
    tracker.report()                                   # the first counts go at once
    assert statuses_counted(redis, test_settings) == 1

    now[0] += 0.5
    tracker.count_status(200)
    tracker.count_links("c1", "found", 3)
    tracker.report()                                   # links now, the status in a second
    assert statuses_counted(redis, test_settings) == 1
    assert redis.hget(links, "found") == "3"

    now[0] += 0.6
    tracker.report()
    assert statuses_counted(redis, test_settings) == 2

    now[0] += 0.1
    tracker.count_status(200)
    tracker.report(force=True)                         # a closing job sends what is left
    assert statuses_counted(redis, test_settings) == 3


def test_site_health_goes_with_the_counts_once_a_second_and_the_rest_at_close(
        redis, test_settings, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(context_module.time, "monotonic", lambda: now[0])
    context = job_context(redis, test_settings)
    tracker = TaskTracker(context)

    tracker.sites.page("c1", "a.com", 200)
    tracker.report()                                   # the first counts go at once
    now[0] += 0.5
    tracker.sites.page("c1", "a.com", 404)
    tracker.report()                                   # the next a second after
    assert read_site_health(redis, context.keys, "c1")["a.com"].pages == 1
    now[0] += 0.6
    tracker.report()
    assert read_site_health(redis, context.keys, "c1")["a.com"].pages == 2

    tracker.sites.item("c1", "a.com", ["title"], {"title": ""}, ["title"])
    tracker.report(force=True)                         # a closing job sends what is left
    health = read_site_health(redis, context.keys, "c1")["a.com"]
    assert (health.items, health.dropped, health.coverage) == (1, 1, {"title": 0.0})
