"""The user-spider peer of bench/crawl.py: a plain Scrapy spider as a Scrapy user writes
one (Python callbacks, ``response.follow``, items as dicts), the same under
scrapy-redis's scheduler and dupefilter and under the cluster's add-on
(``ADDONS = {"crawler.addon.ClusterAddon": 0}``), so that the two runs differ only in
what carries the requests. It follows the start page's and list pages' links (the
rule's ``/``, ``/list/N.html``) and every detail page's related articles, as a news
crawl does, and stores each detail page (``/news/N.html``) as an item: its title, date
and text, into MongoDB in batches as both runs do.

  scrapy runspider bench/crawl_user.py -a start=URL [-a crawlid=ID]
"""

import re

import scrapy

from settings.clients import mongo_client
from settings.loader import load_settings

FOLLOW = re.compile(r"/$|/list/\d+\.html$")
DETAIL = re.compile(r"/news/\d+\.html$")


class UserNewsSpider(scrapy.Spider):
    name = "user_news"

    def __init__(self, start="", crawlid="user", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.crawlid = crawlid

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            if DETAIL.search(url):
                yield response.follow(url, self.parse_news)
            elif FOLLOW.search(url):
                yield response.follow(url, self.parse)

    def parse_news(self, response):
        yield from self.parse(response)
        yield {"url": response.url, "crawlid": self.crawlid,
               "title": response.css("h1::text").get(),
               "date": response.css("span.date::text").get(),
               "content": "\n".join(response.css("div.content p::text").getall())}


class UserMongoPipeline:
    """Items into MongoDB, 100 at a time (the same for both runs)."""

    def open_spider(self, spider):
        settings = load_settings()
        self.client = mongo_client(settings, "bench")
        self.collection = self.client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]["items_user"]
        self.batch = []

    def process_item(self, item, spider):
        self.batch.append(dict(item))
        if len(self.batch) >= 100:
            self.flush()
        return item

    def flush(self):
        if self.batch:
            self.collection.insert_many(self.batch, ordered=False)
            self.batch = []

    def close_spider(self, spider):
        self.flush()
        self.client.close()
