"""The true vanilla peer of bench/crawl.py: what a Scrapy user runs instead of the cluster.

``VanillaCrawlSpider`` is a ``CrawlSpider`` whose ``Rule``s and ``LinkExtractor``s are the
benchmark's rule; ``VanillaMongoPipeline`` inserts its items into MongoDB as Scrapy's
documentation shows. bench/crawl.py runs it outside the project (Scrapy's default
settings and components, plus the benchmark's concurrency and log level).
"""

import json
from pathlib import Path

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule

from settings.loader import load_settings


class VanillaCrawlSpider(CrawlSpider):
    """What a Scrapy user writes for the benchmark's rule: a ``CrawlSpider`` whose
    ``Rule``s and ``LinkExtractor``s are the rule's, an item of the rule's fields by
    XPath (with ``trafilatura.extract``'s main text when ``maintext`` is
    ``trafilatura``), Scrapy's own components and defaults."""

    name = "vanilla_crawl"

    def __init__(self, start, rule, crawlid="vanilla", maintext="", **kwargs):
        spec = json.loads(Path(rule).read_text())
        self.rules = tuple(
            Rule(LinkExtractor(allow=link_rule.get("allow", ())),
                 callback="parse_item" if link_rule.get("fields") else None,
                 cb_kwargs={"fields": link_rule.get("fields", {})},
                 follow=link_rule.get("follow", not link_rule.get("fields")))
            for link_rule in spec["rules"])
        super().__init__(**kwargs)
        self.start_urls = start.split()        # one URL, or several by spaces
        self.crawlid = crawlid
        self.maintext = maintext

    def parse_item(self, response, fields):
        item = {"url": response.url, "crawlid": self.crawlid}
        for name, xpath in fields.items():
            item[name] = response.xpath(xpath).get()
        if self.maintext == "trafilatura":
            import trafilatura

            item["main_text"] = trafilatura.extract(response.text)
        return item


class VanillaMongoPipeline:
    """The MongoDB pipeline of Scrapy's documentation (Item Pipeline, "Write items to
    MongoDB"): one ``insert_one`` per item."""

    def __init__(self, uri, database):
        self.uri, self.database_name = uri, database

    @classmethod
    def from_crawler(cls, crawler):
        settings = load_settings()
        return cls(settings["CRAWLCLUSTER_MONGODB_URL"],
                   settings["CRAWLCLUSTER_MONGODB_DATABASE"])

    def open_spider(self):
        import pymongo

        self.client = pymongo.MongoClient(self.uri)
        self.database = self.client[self.database_name]

    def close_spider(self):
        self.client.close()

    def process_item(self, item):
        self.database["vanilla_items"].insert_one(dict(item))
        return item
