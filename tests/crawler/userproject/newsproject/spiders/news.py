"""A tutorial-style spider: Python callbacks, ``response.follow``, pagination (its
next pages first: a priority), ``cb_kwargs`` and ``meta`` carried down three levels,
items as dicts, an errback (a page the site does not have gives an item saying so), and a
``FormRequest`` login whose session cookie the members' pages need."""

import scrapy
from scrapy.http import FormRequest


class NewsSpider(scrapy.Spider):
    name = "news"

    def __init__(self, start: str = "", bad_meta: str = "", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.bad_meta = bool(bad_meta)

    def parse(self, response):
        if self.bad_meta:      # a value a task cannot carry: refused, and said so
            yield response.follow("/list/1.html", self.parse_list, cb_kwargs={"page": 1},
                                  meta={"trail": [response.url], "seen": {"a set"}})
        yield response.follow("/no-such-page.html", self.parse_list, errback=self.missing,
                              cb_kwargs={"page": 0})
        yield response.follow("/login.html", self.login)
        for href in response.css("a::attr(href)").getall():
            if "/list/" in href:
                yield response.follow(href, self.parse_list, cb_kwargs={"page": 1},
                                      meta={"trail": [response.url]})

    def parse_list(self, response, page):
        trail = [*response.meta["trail"], response.url]
        for entry in response.css("ul.news-list li"):
            yield response.follow(entry.css("a::attr(href)").get(), self.parse_news,
                                  cb_kwargs={"listed_as": entry.css("a::text").get()},
                                  meta={"trail": trail, "page": page})
        following = response.css("a.next::attr(href)").get()
        if following:
            yield response.follow(following, self.parse_list, cb_kwargs={"page": page + 1},
                                  meta={"trail": response.meta["trail"]}, priority=1)

    def parse_news(self, response, listed_as):
        yield {"url": response.url,
               "title": response.css("h1::text").get(),
               "listed_as": listed_as,
               "date": response.css("span.date::text").get(),
               "trail_length": len(response.meta["trail"]),
               "list_page": response.meta["page"]}

    def missing(self, failure):
        yield {"url": failure.request.url, "error": failure.value.response.status}

    def login(self, response):
        yield FormRequest.from_response(response, formdata={"user": "ann", "password": "pw"},
                                        callback=self.after_login)

    def after_login(self, response):       # the members' index, after the redirect
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.parse_member)

    def parse_member(self, response):
        yield {"url": response.url, "title": response.css("h1::text").get(), "members": True}
