"""The cluster a preview reads: its blacklist from ZooKeeper, its seen-URL filter and
its throttle in Redis, made from the settings once per process."""

import socket
from typing import Any

from scrapy.settings import Settings as ScrapySettings

from crawler.preview.fetch import PageFetcher, RobotsRules
from crawler.preview.page import Cluster
from crawler.urlguard import UrlGuard
from master.bloomgen import AgingBloomFilter
from master.siteconfig import SiteConfig
from master.throttle import ThrottledQueues
from master.urls import canonical_url
from settings.clients import redis_client, stop_zookeeper, zookeeper_client
from settings.loader import Settings
from settings.node import node_ip

ROLE = "preview"


class PreviewServers:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Scrapy's settings as a spider has them (USER_AGENT, ROBOTSTXT_OBEY, ...)
        self.scrapy_settings = ScrapySettings()
        self.scrapy_settings.setdict({**settings.scrapy, **settings}, priority="project")
        self.redis = redis_client(settings, ROLE)
        self.zookeeper = zookeeper_client(settings, ROLE)
        self.site_config = SiteConfig.from_settings(settings, self.zookeeper).start()
        self.queues = ThrottledQueues.from_settings(self.redis, settings, self.site_config)
        self.bloom = AgingBloomFilter.from_settings(self.redis, settings)
        self.ip = node_ip(settings)
        # robots.txt read, shared by the previews
        self.robots = RobotsRules(settings.getfloat("CRAWLCLUSTER_ROBOTS_MAX_AGE"))
        self.guard = UrlGuard.from_settings(settings)
        self.job = f"preview-{settings['CRAWLCLUSTER_NODE_NAME'] or socket.gethostname()}"

    def cluster(self) -> Cluster:
        return Cluster(url_length_limit=self.scrapy_settings.getint("URLLENGTH_LIMIT"),
                       lean_links=self.settings.getbool("CRAWLCLUSTER_LEAN_LINKS"),
                       max_links_per_page=self.settings.getint("CRAWLCLUSTER_MAX_LINKS_PER_PAGE"),
                       is_blacklisted=self.site_config.is_blacklisted,
                       seen=self.seen, fetcher=self.fetcher,
                       browser=self.settings["CRAWLCLUSTER_BROWSER"])

    def fetcher(self, config: dict[str, Any]) -> PageFetcher:
        agent = config.get("useragent") or self.scrapy_settings.get("USER_AGENT")
        return PageFetcher(self.queues, self.job, config["spider_type"], self.ip,
                           self.scrapy_settings.getbool("ROBOTSTXT_OBEY"), agent, self.guard,
                           self.robots)

    def seen(self, urls: list[str], crawlid: str) -> list[bool]:
        keys = [canonical_url(url) for url in urls]
        return list(self.bloom.contains_many(keys, scope=[crawlid] * len(keys)))

    def close(self) -> None:
        stop_zookeeper(self.zookeeper)
        self.redis.close()
