"""The same spider the scrapy-redis way: a ``RedisSpider`` fed through its start-URL key
(scrapy-redis's README and example project), imported from scrapy-redis unchanged."""

from scrapy_redis.spiders import RedisSpider

from newsproject.spiders.news import NewsSpider


class NewsRedisSpider(RedisSpider):
    name = "news_redis"
    parse = NewsSpider.parse
    parse_list = NewsSpider.parse_list
    parse_news = NewsSpider.parse_news
    missing = NewsSpider.missing
    login = NewsSpider.login
    after_login = NewsSpider.after_login
    parse_member = NewsSpider.parse_member
    bad_meta = False
