"""A ``CrawlSpider`` with ``Rule``s, and the same as scrapy-redis's ``RedisCrawlSpider``
(its example project's ``mycrawler_redis``), its start URLs from its Redis key."""

from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule
from scrapy_redis.spiders import RedisCrawlSpider

RULES = (Rule(LinkExtractor(allow=r"/list/\d+\.html$"), follow=True),
         Rule(LinkExtractor(allow=r"/news/\d+\.html$"), callback="parse_item"))


def parse_item(spider, response):
    return {"url": response.url, "title": response.css("h1::text").get(),
            "date": response.css("span.date::text").get(),
            "link_text": response.meta.get("link_text")}


class NewsRulesSpider(CrawlSpider):
    name = "news_rules"
    rules = RULES
    parse_item = parse_item

    def __init__(self, start: str = "", **kwargs):
        self.start_urls = [start]
        super().__init__(**kwargs)


class NewsRulesRedisSpider(RedisCrawlSpider):
    name = "news_rules_redis"
    rules = RULES
    parse_item = parse_item
