"""Peers of bench/crawl.py running crawlcluster's spider logic (bench/crawl_vanilla.py
is what a Scrapy user runs instead).

``PeerUniversalSpider`` is crawler/spiders/universal.py with the rule and the start URL
given as spider arguments instead of coming from the cluster; run with Scrapy's own
scheduler it is "the same spider logic" peer, with scrapy-redis's scheduler and
dupefilter it is "scrapy-redis". Items go through the same encoding and main-text
pipelines and the same batched MongoDB inserts as the cluster's.
"""

import json
from pathlib import Path

from scrapy import Request

from crawler.pipelines import insert_items
from crawler.spiders.universal import UniversalSpider
from settings.clients import mongo_client
from settings.loader import load_settings


class PeerUniversalSpider(UniversalSpider):
    name = "peer_universal"

    def __init__(self, start, rule, crawlid="peer", **kwargs):
        super().__init__(**kwargs)
        self.start_url = start
        self.rule = json.loads(Path(rule).read_text())
        self.crawlid = crawlid

    async def start(self):
        yield Request(self.start_url, callback=self.parse)

    def crawl_info(self, response):
        extra = response.meta.get("crawlcluster_extra", {})
        return {"config": {"rule": self.rule},
                "task": {"crawlid": self.crawlid, "rule_index": extra.get("rule_index"),
                         "depth": response.meta.get("depth", 0)}}


class PeerMongoPipeline:
    """The same batched inserts as crawler.pipelines.MongoPipeline, without the cluster."""

    def __init__(self, settings):
        self.client = mongo_client(settings, "bench")
        self.database = self.client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]
        self.batch_size = settings.getint("CRAWLCLUSTER_MONGODB_BATCH")
        self.batch, self.ensured = [], set()

    @classmethod
    def from_crawler(cls, crawler):
        return cls(load_settings())

    def process_item(self, item):
        self.batch.append(item)
        if len(self.batch) >= self.batch_size:
            self.flush()
        return item

    def flush(self):
        if self.batch:
            insert_items(self.database, self.batch, self.ensured)
            self.batch = []

    def close_spider(self):
        self.flush()
        self.client.close()

