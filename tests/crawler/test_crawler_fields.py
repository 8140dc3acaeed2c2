"""A rule's fields with processors (crawler/fields.py) on real-looking pages in three
languages: dates (absolute and relative), prices and numbers, relative links; a
processor that fails leaves its field out and names itself; rules are validated."""

from datetime import UTC, datetime

import pytest
from scrapy.http import HtmlResponse

from crawler.fields import missing_fields, read_fields
from master.rules import RuleError, validate_rule

FETCHED_AT = datetime(2026, 11, 28, 12, 0, tzinfo=UTC).timestamp()

CHINESE = """<html><head><meta charset="utf-8"></head><body>
<div class="article"><h1 class="title">市政府发布公告</h1>
<span class="date">发布时间：2026年11月3日 09:30</span>
<span class="price">价格：¥1,280.50元</span>
<a class="attachment" href="../files/notice-17.pdf">附件下载</a>
<a class="attachment" href="/files/notice-17.docx">附件二</a></div></body></html>"""

GERMAN = """<html lang="de"><body><article><h1>Neue Ausschreibung</h1>
<p class="meta">Veröffentlicht vor 2 Stunden von <b>Redaktion</b></p>
<p class="price">Preis: 1.299,00 €</p><p class="count">Seiten: 48</p>
<a class="more" href="mehr.html?id=3">Mehr</a></article></body></html>"""

ENGLISH = """<html><body><article><h1>Council approves budget</h1>
<time datetime="2026-11-02T18:45:00+00:00">2 Nov 2026</time>
<p class="byline">Posted 3 Nov 2026</p><span class="price">$2,450.99</span>
<ul class="tags"><li>budget</li><li>council</li><li> </li></ul>
<p class="updated">Updated: sometime soon</p></article></body></html>"""


def page(body, url):
    return HtmlResponse(url, body=body.encode("utf-8"), encoding="utf-8")


def read(body, url, specs):
    response = page(body, url)
    return read_fields(response, specs, response, FETCHED_AT)


def test_chinese_dates_prices_and_relative_links():
    fields, errors = read(CHINESE, "http://gov.example/notices/2026/17.html", {
        "title": "//h1/text()",
        "date": {"css": "span.date::text", "as": "date"},
        "price": {"css": "span.price::text", "as": "price"},
        "files": {"css": "a.attachment", "attr": "href", "take": "list", "as": "url"}})
    assert errors == {}
    assert fields == {"title": "市政府发布公告", "date": "2026-11-03T09:30:00",
                      "price": {"amount": 1280.5, "currency": "¥"},
                      "files": ["http://gov.example/notices/files/notice-17.pdf",
                                "http://gov.example/files/notice-17.docx"]}


def test_german_relative_dates_and_separators():
    fields, errors = read(GERMAN, "http://zeitung.example/a/1.html", {
        "published": {"xpath": "//p[@class='meta']/text()", "as": "date"},
        "price": {"xpath": "//p[@class='price']/text()", "as": "price"},
        "pages": {"xpath": "//p[@class='count']/text()", "re": r"(\d+)", "as": "number"},
        "more": {"css": "a.more", "attr": "href", "as": "url"}})
    assert errors == {}
    assert fields["published"] == "2026-11-28T10:00:00"    # two hours before the fetch
    assert fields["price"] == {"amount": 1299.0, "currency": "€"}
    assert fields["pages"] == 48.0
    assert fields["more"] == "http://zeitung.example/a/mehr.html?id=3"


def test_english_take_first_list_and_attributes():
    fields, errors = read(ENGLISH, "https://news.example/2026/budget", {
        "when": {"xpath": "//time", "attr": "datetime", "as": "date"},
        "posted": {"xpath": "//p[@class='byline']/text()", "re": r"Posted (.+)",
                   "as": "date"},
        "price": {"css": "span.price::text", "as": "number"},
        "tags": {"css": "ul.tags li::text", "take": "list"},
        "first_tag": {"css": "ul.tags li::text", "take": "first"},
        "all_tags": {"css": "ul.tags li::text"}})
    assert errors == {}
    assert fields == {"when": "2026-11-02T18:45:00+00:00", "posted": "2026-11-03",
                      "price": 2450.99, "tags": ["budget", "council"], "first_tag": "budget",
                      "all_tags": "budget\ncouncil"}


def test_a_failing_processor_leaves_its_field_out_and_names_itself():
    fields, errors = read(ENGLISH, "https://news.example/2026/budget", {
        "title": "//h1/text()",
        "updated": {"css": "p.updated::text", "re": "Updated: (.+)", "as": "date"},
        "price": {"css": "h1::text", "as": "price"},
        "missing": {"css": "p.nothing::text", "as": "date"}})
    assert fields == {"title": "Council approves budget", "missing": ""}
    assert errors == {"updated": "as date: no date in 'sometime soon'",
                      "price": "as price: no amount in 'Council approves budget'"}


def test_rules_with_processors_are_validated():
    rule = {"rules": [{"allow": ["/a/"], "fields": {
        "date": {"xpath": "//time", "attr": "datetime", "as": "date", "take": "first"},
        "price": {"css": ".price::text", "re": r"(\d+)", "as": "price"}}}]}
    assert validate_rule("universal", rule) is rule
    precise = {"first_page_xpath": {"list_from": "//li", "title": "a/text()",
                                    "date": {"xpath": "span/text()", "as": "date"}},
               "second_page_xpath": {"price": {"css": ".price", "as": "number"}}}
    assert validate_rule("precise", precise) is precise
    bad = {"rules": [{"allow": ["/a/"], "fields": {"date": {"xpath": "//t", "as": "when"}}}]}
    with pytest.raises(RuleError, match=r"rule.rules\[0\].fields.date"):
        validate_rule("universal", bad)
    bad_re = {"rules": [{"allow": ["/a/"], "fields": {"d": {"xpath": "//t", "re": "(unclosed"}}}]}
    with pytest.raises(RuleError, match=r"rule.rules\[0\].fields.d.re: invalid regex"):
        validate_rule("universal", bad_re)


def test_an_item_is_asked_for_the_fields_of_the_rule_that_made_it():
    """A universal crawl whose rules name different fields: each item carries its rule's
    ("" when one matched nothing), and only those are required of it, unless the rule
    says ``required``; 0 is a value, an empty list is not."""
    rule = {"rules": [{"allow": ["/list/"], "fields": {"heading": "//h2/text()"}},
                      {"allow": ["/news/"], "fields": {"title": "//h1/text()",
                                                       "price": {"xpath": "//b", "as": "price"},
                                                       "tags": {"xpath": "//li",
                                                                "take": "list"}}}]}
    list_item = {"url": "http://a.example/list/1", "heading": "News"}
    news_item = {"url": "http://a.example/news/1", "title": "Budget",
                 "price": {"amount": 0, "currency": "EUR"}, "tags": ["a"]}
    assert missing_fields("universal", rule, list_item) == []
    assert missing_fields("universal", rule, news_item) == []
    assert missing_fields("universal", rule, {**news_item, "title": "", "tags": []}) == [
        "tags", "title"]
    failed = {"url": "http://a.example/news/2", "title": "Budget", "tags": ["a"],
              "field_errors": {"price": "as price: no price in 'soon'"}}
    assert missing_fields("universal", rule, failed) == ["price"]
    assert missing_fields("universal", {**rule, "required": ["title"]}, list_item) == ["title"]
    # a precise rule's item is asked for the fields of both its pages, as before
    precise = {"first_page_xpath": {"list_from": "//li", "second_page_url": "a/@href",
                                    "title": "a/text()"},
               "second_page_xpath": {"pages": {"xpath": "//p", "as": "number"}}}
    assert missing_fields("precise", precise, {"title": "Budget"}) == ["pages"]
    assert missing_fields("precise", precise, {"title": "Budget", "pages": 0}) == []
