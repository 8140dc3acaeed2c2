"""The cluster as a Scrapy add-on (crawler/addon.py): what it sets in a project's
settings, and what it says of each scrapy-redis setting. Pure logic."""

import logging

from scrapy.downloadermiddlewares.httpcompression import HttpCompressionMiddleware
from scrapy.settings import Settings
from scrapy.utils.misc import load_object

from crawler.addon import ClusterAddon, scrapy_redis_report
from crawler.middlewares import (
    DecompressionMiddleware,
    ParsedPageRelease,
    TaskOutputMiddleware,
    TaskStatusMiddleware,
)
from crawler.pushback import PushbackMiddleware

SCRAPY_REDIS_PROJECT = {
    "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
    "SCHEDULER_PERSIST": True,
    "REDIS_URL": "redis://10.0.0.5:6380/0",
    "REDIS_START_URLS_AS_SET": True,
}


def project(values, monkeypatch, environ=None):
    monkeypatch.delenv("CRAWLCLUSTER_REDIS_URL", raising=False)
    for name, value in (environ or {}).items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    settings.setdict(values, priority="project")
    ClusterAddon().update_settings(settings)
    return settings


def components(settings, name):
    return {load_object(key) if isinstance(key, str) else key: order
            for key, order in settings.getdict(name).items()}


def test_the_addon_puts_the_cluster_scheduler_and_middlewares_in_a_scrapy_redis_project(
        monkeypatch):
    settings = project(SCRAPY_REDIS_PROJECT, monkeypatch)
    assert settings["SCHEDULER"] == "crawler.scheduler.ClusterScheduler"
    assert components(settings, "SPIDER_MIDDLEWARES")[TaskOutputMiddleware] == 950
    assert components(settings, "SPIDER_MIDDLEWARES")[ParsedPageRelease] == 1
    downloader = components(settings, "DOWNLOADER_MIDDLEWARES")
    assert downloader[TaskStatusMiddleware] == 50
    assert downloader[PushbackMiddleware] == 587          # a user's spider slows down too
    assert downloader[DecompressionMiddleware] == 590
    assert downloader[HttpCompressionMiddleware] is None
    # the project's Redis is the cluster's, unless the environment names one
    assert settings["CRAWLCLUSTER_REDIS_URL"] == "redis://10.0.0.5:6380/0"
    settings = project(SCRAPY_REDIS_PROJECT, monkeypatch,
                       {"CRAWLCLUSTER_REDIS_URL": "redis://127.0.0.1:7000/0"})
    assert settings["CRAWLCLUSTER_REDIS_URL"] == "redis://127.0.0.1:7000/0"
    settings = project({"REDIS_HOST": "redis.internal", "REDIS_PORT": 6390}, monkeypatch)
    assert settings["CRAWLCLUSTER_REDIS_URL"] == "redis://redis.internal:6390/0"


def test_a_project_value_of_a_cluster_setting_wins(monkeypatch):
    settings = project({"CRAWLCLUSTER_IDLE_TIMEOUT": 9.0}, monkeypatch)
    assert settings.getfloat("CRAWLCLUSTER_IDLE_TIMEOUT") == 9.0
    assert settings["CRAWLCLUSTER_KEY_PREFIX"]          # and the rest are read as every role


def test_each_scrapy_redis_setting_a_project_sets_is_said_honoured_or_not(monkeypatch, caplog):
    settings = Settings()
    settings.setdict(SCRAPY_REDIS_PROJECT, priority="project")
    report = {line.split(" = ")[0]: honoured
              for honoured, line in scrapy_redis_report(settings)}
    assert report == {"SCHEDULER": True, "DUPEFILTER_CLASS": False,
                      "SCHEDULER_PERSIST": False, "REDIS_URL": True,
                      "REDIS_START_URLS_AS_SET": True}
    # Scrapy's own scheduler and dupefilter are not scrapy-redis settings
    assert scrapy_redis_report(Settings()) == []
    with caplog.at_level(logging.INFO, logger="crawler.addon"):
        project(SCRAPY_REDIS_PROJECT, monkeypatch)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(line.startswith("scrapy-redis setting SCHEDULER_PERSIST = True: not used")
               for line in warned), warned
