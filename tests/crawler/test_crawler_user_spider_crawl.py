"""A user spider's crawl (crawler/userspider.py), on a real Redis: the crawl retention
retired is stored again by the spider's next check (only once ``REGISTER_EVERY`` has
passed), and a session cookie set in one process goes with the tasks."""

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


class LoginSpider(Spider):
    name = "user_spider_login"

    def parse(self, response):
        pass


def test_a_session_cookie_set_in_one_process_travels_with_the_task(redis, test_settings):
    """What a login's response set in this process's jar goes into the task of each
    request to that site (so another process fetching it sends it), the request's own
    cookies winning; none to another site."""
    from scrapy.downloadermiddlewares.cookies import CookiesMiddleware
    from scrapy.http import HtmlResponse, Request

    crawler = get_crawler(LoginSpider)
    spider = LoginSpider()
    user = UserCrawl(SimpleNamespace(crawls=CrawlStore.from_settings(redis, test_settings),
                                     crawler=crawler), spider)
    cookies = CookiesMiddleware()
    login = Request("http://news.example/login", method="POST")
    cookies.process_request(login)
    cookies.process_response(login, HtmlResponse(
        "http://news.example/login", headers={"Set-Cookie": "session=ann; Path=/"}))
    user.cookie_jars = cookies.jars
    fields = user.link(Request("http://news.example/members/1.html", cookies={"lang": "en"}),
                       start=False).extra["request"]
    assert fields["cookies"] == {"session": "ann", "lang": "en"}
    own = user.link(Request("http://news.example/m", cookies=[{"name": "session", "value": "x"}]),
                    start=False).extra["request"]
    assert own["cookies"] == [{"name": "session", "value": "x"}]
    elsewhere = user.link(Request("http://other.example/"), start=False).extra["request"]
    assert "cookies" not in elsewhere
