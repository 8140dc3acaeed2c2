"""The proxy-list spider (thesis 4.3.1.2, table 4-7): proxies from listing pages.

Reads each page of ``CRAWLCLUSTER_PROXY_SOURCES`` with its rule, ``rows``
selecting one proxy per row and ``fields`` its ip, port, type, anonymity,
location, speed and alive time; every proxy found is checked through the
validator and the live ones are stored in the pool. It runs on its own, with
Scrapy's scheduler: ``scrapy crawl proxylist``.
"""

from typing import ClassVar

import scrapy

from crawler.proxy import FIELDS, ProxyPool
from crawler.spiders import first_value
from settings.clients import mongo_client
from settings.loader import Settings, default_settings


def _settings(crawler):
    return Settings({name: crawler.settings.get(name, default)
                     for name, default in default_settings().items()})


class ProxyListSpider(scrapy.Spider):
    name = "proxylist"
    custom_settings: ClassVar[dict] = {  # type: ignore[misc]  # Scrapy reads it from the class
        "SCHEDULER": "scrapy.core.scheduler.Scheduler",
        "DOWNLOADER_MIDDLEWARES": {"crawler.middlewares.TaskStatusMiddleware": None,
                                   "crawler.middlewares.StatusCounterMiddleware": None,
                                   "crawler.proxy.ProxyMiddleware": None},
        "SPIDER_MIDDLEWARES": {"crawler.middlewares.TaskOutputMiddleware": None},
        "ITEM_PIPELINES": {"crawler.spiders.proxylist.ProxyStorePipeline": 100},
    }

    async def start(self):
        for source in _settings(self.crawler).get("CRAWLCLUSTER_PROXY_SOURCES"):
            yield scrapy.Request(source["url"], cb_kwargs={"source": source})

    def parse(self, response, source):
        for row in response.xpath(source["rows"]):
            proxy = {name: first_value(row, expression)
                     for name, expression in source["fields"].items() if name in FIELDS}
            if proxy.get("ip") and proxy.get("port", "").isdigit():
                yield proxy


class ProxyStorePipeline:
    """Checks each proxy through the validator; stores the live ones in the pool."""

    def __init__(self, pool, client):
        self.pool = pool
        self.client = client

    @classmethod
    def from_crawler(cls, crawler):
        settings = _settings(crawler)
        client = mongo_client(settings, "proxylist")
        return cls(ProxyPool.from_settings(client, settings), client)

    def process_item(self, item):
        if self.pool.check(item):
            self.pool.add_many([item])
        else:
            raise scrapy.exceptions.DropItem(f"proxy {item['ip']}:{item['port']} is dead")
        return item

    def close_spider(self):
        self.client.close()
