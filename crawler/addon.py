"""The cluster as a Scrapy add-on, for a Scrapy project of one's own.

In the project's settings::

    ADDONS = {"crawler.addon.ClusterAddon": 0}

sets ``SCHEDULER`` to the cluster's scheduler (over a scrapy-redis line left in the
project) and ``DOWNLOADER`` to Scrapy's with the throttle's send-by check, adds the
middlewares that report each task's outcome and mark a page's requests with their task,
the process's guards, and Scrapy's decompression without its charset guess on compressed
bytes (``settings.defaults.CLUSTER_COMPONENTS``), and reads the ``CRAWLCLUSTER_*``
settings from the environment and the settings file as every role does (a value the
project sets itself wins). A scrapy-redis project's Redis address (``REDIS_URL``, or
``REDIS_HOST``/``REDIS_PORT``) names the cluster's Redis unless the environment names
one. The project's own pipelines, middlewares and settings run as under plain Scrapy;
Scrapy's retries are left to the cluster, which retries a failed task on another job.
What becomes of each scrapy-redis setting the project sets is logged as the crawler
starts (``SCRAPY_REDIS_SETTINGS``, docs/migrating.md): a line each, a warning for those
the cluster does not use.
"""

import logging
import os

from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from settings.defaults import CLUSTER_COMPONENTS
from settings.loader import load_settings

logger = logging.getLogger(__name__)

SCHEDULER = "crawler.scheduler.ClusterScheduler"
# Scrapy's downloader, checking a slow domain's throttle token as its request is sent.
DOWNLOADER = "crawler.token_deadlines.DeadlineDownloader"

# scrapy-redis's settings: (honoured?, what the cluster does with it)
SCRAPY_REDIS_SETTINGS = {
    "SCHEDULER": (True, "replaced by the cluster's scheduler (the add-on sets it)"),
    "DUPEFILTER_CLASS": (False, ("not used: the cluster's seen-URL filter (a Bloom filter "
                                "per crawl, by canonical URL or request fingerprint) "
                                "filters every request before it is queued")),
    "SCHEDULER_PERSIST": (False, ("not used: a spider's crawl and its queues stay in Redis "
                                 "whichever process closes, until the crawl is retired "
                                 "(CRAWLCLUSTER_CRAWL_RETENTION after it ends)")),
    "SCHEDULER_FLUSH_ON_START": (False, ("not used: other processes may be running the "
                                        "crawl; `crawlcluster stop <spider>` ends it")),
    "SCHEDULER_IDLE_BEFORE_CLOSE": (False, ("not used: the cluster's scheduler never "
                                           "blocks on Redis")),
    "SCHEDULER_QUEUE_CLASS": (False, ("not used: requests are JSON tasks in the cluster's "
                                     "per-domain queues")),
    "SCHEDULER_QUEUE_KEY": (False, "not used: the cluster's keys (CRAWLCLUSTER_KEY_PREFIX)"),
    "SCHEDULER_DUPEFILTER_KEY": (False, "not used: the cluster's seen-URL filter"),
    "SCHEDULER_SERIALIZER": (False, "not used: tasks are JSON, never pickle"),
    "MAX_IDLE_TIME_BEFORE_CLOSE": (True, ("the spider closes after that many seconds "
                                         "without work (0: CRAWLCLUSTER_IDLE_TIMEOUT)")),
    "REDIS_URL": (True, "the cluster's Redis, unless CRAWLCLUSTER_REDIS_URL is set"),
    "REDIS_HOST": (True, ("the cluster's Redis (with REDIS_PORT), unless REDIS_URL or "
                         "CRAWLCLUSTER_REDIS_URL is set")),
    "REDIS_PORT": (True, "with REDIS_HOST"),
    "REDIS_PARAMS": (False, ("not used for the cluster's clients (their timeouts and "
                            "retries are CRAWLCLUSTER_* settings); RedisPipeline and "
                            "scrapy-redis's stats still use it")),
    "REDIS_START_URLS_KEY": (True, ("read by the cluster's scheduler, with an "
                                   "acknowledgement")),
    "REDIS_START_URLS_AS_SET": (True, "read by the cluster's scheduler"),
    "REDIS_START_URLS_AS_ZSET": (True, "read by the cluster's scheduler"),
    "REDIS_ENCODING": (True, "the spider's make_request_from_data decodes entries with it"),
}


class ClusterAddon:
    def update_settings(self, settings: BaseSettings) -> None:
        for honoured, line in scrapy_redis_report(settings):
            logger.log(logging.INFO if honoured else logging.WARNING,
                       "scrapy-redis setting %s", line)
        settings.set("SCHEDULER", SCHEDULER, priority="project")
        settings.set("DOWNLOADER", DOWNLOADER, priority="project")
        for name, components in CLUSTER_COMPONENTS.items():
            for component, order in components.items():
                settings.set_in_component_priority_dict(name, load_object(component), order)
        for name, value in load_settings().items():
            settings.setdefault(name, value, priority="addon")
        redis_url = scrapy_redis_url(settings)
        if redis_url and "CRAWLCLUSTER_REDIS_URL" not in os.environ:
            settings.set("CRAWLCLUSTER_REDIS_URL", redis_url, priority="addon")


def scrapy_redis_url(settings: BaseSettings) -> str | None:
    """The Redis a scrapy-redis project names (``REDIS_URL``, else ``REDIS_HOST`` and
    ``REDIS_PORT``), or None."""
    if settings.get("REDIS_URL"):
        return str(settings.get("REDIS_URL"))
    if settings.get("REDIS_HOST"):
        return f"redis://{settings.get('REDIS_HOST')}:{settings.getint('REDIS_PORT', 6379)}/0"
    return None


def scrapy_redis_report(settings: BaseSettings) -> list[tuple[bool, str]]:
    """``(honoured, line)`` for each scrapy-redis setting the project sets."""
    lines = []
    for name, (honoured, meaning) in SCRAPY_REDIS_SETTINGS.items():
        value = settings.get(name)
        # Scrapy has its own SCHEDULER and DUPEFILTER_CLASS: only scrapy-redis's count
        set_here = (value is not None if name not in ("SCHEDULER", "DUPEFILTER_CLASS")
                    else "scrapy_redis" in str(value))
        if set_here:
            lines.append((honoured, f"{name} = {value!r}: {meaning}"))
    return lines
