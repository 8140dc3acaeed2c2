"""A user spider's Request as task JSON and back (crawler/taskrequests.py): pure logic."""

import json
from datetime import datetime

import pytest
from scrapy import FormRequest, Request, Spider
from scrapy.http import JsonRequest

from crawler.taskrequests import RequestNotJSON, request_from_json, request_to_json


class UserSpider(Spider):
    name = "books"

    def parse(self, response):
        pass

    def parse_book(self, response, shelf):
        pass

    def failed(self, failure):
        pass


def round_trip(request, spider):
    data = request_to_json(request, spider)
    return data, request_from_json(json.loads(json.dumps(data)), spider)


def test_a_plain_get_is_its_url_alone():
    spider = UserSpider()
    data, again = round_trip(Request("http://example.com/a?b=1"), spider)
    assert data == {"url": "http://example.com/a?b=1"}
    assert again.url == "http://example.com/a?b=1" and again.method == "GET"


def test_every_field_a_spider_sets_comes_back():
    spider = UserSpider()
    request = FormRequest("http://example.com/login", formdata={"user": "ann", "pw": "é"},
                          callback=spider.parse_book, errback=spider.failed,
                          cb_kwargs={"shelf": 3}, meta={"trail": ["a", {"b": 1.5}], "n": None},
                          cookies={"session": "x"}, priority=7, dont_filter=True,
                          flags=["login"], headers={"X-Token": "t"})
    data, again = round_trip(request, spider)
    assert data["_class"] == "scrapy.http.request.form.FormRequest"
    assert type(again) is FormRequest
    assert again.callback == spider.parse_book and again.errback == spider.failed
    assert (again.method, again.body, again.cb_kwargs, again.meta) == (
        "POST", request.body, {"shelf": 3}, {"trail": ["a", {"b": 1.5}], "n": None})
    assert (again.cookies, again.priority, again.dont_filter, again.flags) == (
        {"session": "x"}, 7, True, ["login"])
    assert again.headers.getlist("X-Token") == [b"t"]
    assert again.headers["Content-Type"] == b"application/x-www-form-urlencoded"


def test_a_json_request_and_a_binary_body_come_back():
    spider = UserSpider()
    _, again = round_trip(JsonRequest("http://example.com/api", data={"q": [1, 2]}), spider)
    assert type(again) is JsonRequest and json.loads(again.body) == {"q": [1, 2]}
    data, again = round_trip(Request("http://example.com/up", method="PUT",
                                     body=b"\xff\x00raw"), spider)
    assert "body_base64" in data and again.body == b"\xff\x00raw"


def test_the_clusters_own_meta_is_not_carried():
    spider = UserSpider()
    data = request_to_json(Request("http://example.com/", meta={
        "crawlcluster_parent": {"task": {}}, "crawlcluster": {}, "mine": 1}), spider)
    assert data["meta"] == {"mine": 1}


@pytest.mark.parametrize("meta, where", [
    ({"when": datetime(2026, 1, 1)}, "meta['when'] holds a datetime"),
    ({"item": {"tags": {"a", "b"}}}, "meta['item']['tags'] holds a set"),
    ({"rows": [1, object()]}, "meta['rows'][1] holds a object"),
    ({"by_id": {3: "x"}}, "meta['by_id'] holds a key 3"),
])
def test_a_value_that_is_not_json_is_refused_naming_spider_callback_and_key(meta, where):
    spider = UserSpider()
    with pytest.raises(RequestNotJSON) as refused:
        request_to_json(Request("http://example.com/", callback=spider.parse_book,
                                meta=meta), spider)
    assert "spider 'books', callback 'parse_book': request " + where in str(refused.value)


def test_a_callback_that_is_not_a_method_of_the_spider_is_refused():
    with pytest.raises(ValueError, match="not an instance method"):
        request_to_json(Request("http://example.com/", callback=lambda r: None), UserSpider())


class ChildSpider(UserSpider):
    name = "child"


@pytest.mark.parametrize("make", [
    lambda spider: Request("http://example.com/", callback=spider.parse_book,
                           errback=spider.failed, cb_kwargs={"shelf": 1}),
    lambda spider: FormRequest("http://example.com/f", formdata={"a": "1"}),
    lambda spider: JsonRequest("http://example.com/j", data={"a": 1}, callback=spider.parse),
])
def test_the_fields_are_scrapys_own_to_dict(make):
    """The callbacks are named without Scrapy's search of the spider's members, and the
    result is what ``Request.to_dict`` gives (an inherited method included)."""
    from crawler.taskrequests import _request_dict

    spider = ChildSpider()
    request = make(spider)
    assert _request_dict(request, spider) == request.to_dict(spider=spider)
