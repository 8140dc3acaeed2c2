"""A user spider's crawl outlives retention while the spider runs (crawler/userspider.py):
on a real Redis, the crawl retention retired is stored again by the spider's next check,
and only once ``REGISTER_EVERY`` has passed."""

from types import SimpleNamespace

from scrapy import Spider
from scrapy.utils.test import get_crawler

from crawler.userspider import REGISTER_EVERY, UserCrawl
from master.crawls import CrawlStore
from master.keys import Keys


class WaitingSpider(Spider):
    name = "user_spider_waiting"


def test_a_user_spiders_crawl_retired_by_retention_is_stored_again(redis, test_settings):
    crawls = CrawlStore.from_settings(redis, test_settings)
    crawler = get_crawler(WaitingSpider, {"DEPTH_LIMIT": 4})
    user = UserCrawl(SimpleNamespace(crawls=crawls, crawler=crawler), WaitingSpider())
    key = Keys.from_settings(test_settings).crawl(WaitingSpider.name)
    assert crawls.load(WaitingSpider.name)["maxdepth"] == 4
    redis.delete(key)                              # retention retired it
    user.keep_registered(user.registered_at + REGISTER_EVERY / 2)
    assert not redis.exists(key)                   # not looked at before its time
    user.keep_registered(user.registered_at + REGISTER_EVERY)
    assert redis.exists(key) and crawls.exists(WaitingSpider.name)
