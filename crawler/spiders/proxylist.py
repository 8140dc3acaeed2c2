"""The proxy-list spider (thesis 4.3.1.2, table 4-7): proxies from listing pages.

Reads each page of ``CRAWLCLUSTER_PROXY_SOURCES`` with its rule, ``rows``
selecting one proxy per row and ``fields`` its ip, port, type, anonymity,
location, speed and alive time; every proxy found is checked through the
validator and the live ones are stored in the pool. It runs on its own, with
Scrapy's scheduler: ``scrapy crawl proxylist``.
"""

from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import scrapy
from scrapy.crawler import Crawler
from scrapy.http import Response

from crawler.context import cluster_settings
from crawler.proxy import FIELDS, Proxy, ProxyPool
from crawler.spiders import first_value
from settings.clients import mongo_client


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

    async def start(self) -> AsyncIterator[scrapy.Request]:
        sources = cluster_settings(self.crawler.settings).get("CRAWLCLUSTER_PROXY_SOURCES")
        for source in sources or ():
            yield scrapy.Request(source["url"], cb_kwargs={"source": source})

    def parse(self, response: Response, source: dict[str, Any]) -> Iterator[Proxy]:
        for row in response.xpath(source["rows"]):
            proxy = {name: first_value(row, expression)
                     for name, expression in source["fields"].items() if name in FIELDS}
            if proxy.get("ip") and proxy.get("port", "").isdigit():
                yield proxy


class ProxyStorePipeline:
    """Checks each proxy through the validator; stores the live ones in the pool."""

    def __init__(self, pool: ProxyPool, client: Any) -> None:
        self.pool = pool
        self.client = client

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "ProxyStorePipeline":
        settings = cluster_settings(crawler.settings)
        client = mongo_client(settings, "proxylist")
        return cls(ProxyPool.from_settings(client, settings), client)

    def process_item(self, item: Proxy) -> Proxy:
        if self.pool.check(item):
            self.pool.add_many([item])
        else:
            raise scrapy.exceptions.DropItem(f"proxy {item['ip']}:{item['port']} is dead")
        return item

    def close_spider(self) -> None:
        self.client.close()
