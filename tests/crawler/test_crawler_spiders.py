"""The spiders' link output: straight to the cluster's scheduler when it runs them,
Requests under any other scheduler; the same links either way. Their field values:
what parsel gives."""

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse, XmlResponse

from crawler import spiders
from crawler.spiders import Follow, css_value, first_value, xpath_strings
from crawler.spiders.precise import PreciseSpider
from crawler.spiders.universal import UniversalSpider

PAGE = b"""<html><head><meta charset="utf-8"></head><body>
<ul>
  <li><a href="/news/1.html">One</a></li>
  <li><a href="news/2.html">Two</a></li>
  <li><a href="/news/\xe4\xb8\x89.html">Three</a></li>
</ul>
<a href="/list/2.html">next</a> <a href="/news/1.html">One again</a>
<a href="mailto:desk@example.com">mail</a>
</body></html>"""

UNIVERSAL_RULE = {"rules": [{"allow": [r"/list/\d+\.html$"], "follow": True},
                            {"allow": [r"/news/"], "fields": {"title": "//h1/text()"}}]}
PRECISE_RULE = {"first_page_xpath": {"list_from": "//li", "title": "a/text()",
                                     "second_page_url": "a/@href"},
                "second_page_xpath": {"body": "//p/text()"},
                "next_page_xpath": "//a[text()='next']/@href"}


def response_for(rule):
    request = Request("http://example.com/list/1.html", meta={"crawlcluster": {
        "task": {"crawlid": "c1", "depth": 0}, "config": {"rule": rule}, "member": "m"}})
    return HtmlResponse(request.url, body=PAGE, request=request)


def run(spider, response, sink):
    taken = []
    if sink:
        spider.link_sink = lambda page, links, refused: taken.extend(links)
    output = list(spider.parse(response))
    return taken, [o for o in output if isinstance(o, Request)], \
        [o for o in output if isinstance(o, dict)]


def test_universal_links_go_to_the_sink_as_they_would_as_requests():
    response = response_for(UNIVERSAL_RULE)
    taken, requests, _ = run(UniversalSpider(), response, sink=True)
    assert requests == []
    assert taken == [
        Follow("http://example.com/list/2.html", "parse", {"rule_index": 0}),
        Follow("http://example.com/news/1.html", "parse", {"rule_index": 1}),
        Follow("http://example.com/list/news/2.html", "parse", {"rule_index": 1}),
        Follow("http://example.com/news/%E4%B8%89.html", "parse", {"rule_index": 1}),
    ]
    _, requests, _ = run(UniversalSpider(), response, sink=False)
    assert [(r.url, r.callback.__name__, r.meta["crawlcluster_extra"]) for r in requests] == [
        tuple(link) for link in taken]


def test_precise_detail_and_next_page_links_carry_their_fields():
    response = response_for(PRECISE_RULE)
    taken, requests, items = run(PreciseSpider(), response, sink=True)
    assert requests == [] and items == []
    assert taken == [
        Follow("http://example.com/news/1.html", "parse_detail", {"item": {"title": "One"}}),
        Follow("http://example.com/list/news/2.html", "parse_detail", {"item": {"title": "Two"}}),
        Follow("http://example.com/news/%E4%B8%89.html", "parse_detail",
               {"item": {"title": "Three"}}),
        Follow("http://example.com/list/2.html"),
    ]
    _, requests, _ = run(PreciseSpider(), response, sink=False)
    assert [r.url for r in requests] == [link.url for link in taken]
    assert requests[0].callback.__name__ == "parse_detail"


def refused_by(rule, url="http://example.com/list/1.html"):
    spider = UniversalSpider()
    counts = []
    spider.link_sink = lambda page, links, refused: counts.append(refused)
    request = Request(url, meta={"crawlcluster": {"task": {"crawlid": "c1"},
                                                  "config": {"rule": rule}}})
    list(spider.parse(HtmlResponse(url, body=PAGE, request=request)))
    return counts[0]


def test_universal_counts_the_links_no_rule_takes_by_why():
    assert refused_by(UNIVERSAL_RULE) == {}
    assert refused_by({"rules": [{"allow": [r"/list/"], "allow_domains": ["example.com"]},
                                 {"allow": [r"/news/"], "allow_domains": ["other.org"]}]}) \
        == {"rule": 2}           # the two /news/ links: in the first rule's domain only
    assert refused_by({"rules": [{"allow_domains": ["other.org"]}]}) == {"scope": 4}


def test_a_port_outside_allow_domains_is_out_of_scope_and_said(caplog):
    rule = {"rules": [{"allow_domains": ["example.com"]}]}
    assert refused_by(rule, "http://example.com:8080/list/1.html") == {"scope": 4}
    assert "name 'example.com:8080' there" in caplog.text


def test_a_rule_takes_what_its_own_link_extractor_would():
    from crawler.rules import LinkRule, every_url

    response = response_for(UNIVERSAL_RULE)
    for spec in ({}, {"allow": ["/news/"], "deny": [r"1\.html"]},
                 {"deny_extensions": ["html"]}, {"deny_domains": ["example.com"]},
                 {"restrict_xpaths": ["//li"]}, {"restrict_css": ["ul"], "allow": ["2"]}):
        rule = LinkRule(spec)
        expected = [link.url for link in rule.extractor.extract_links(response)]
        for lean in (True, False):
            assert rule.take(response, every_url(response, lean), lean) == expected, spec


FIELD_PAGE = b"""<html><head><title>A title</title>
<meta property="og:title" content="Og title"></head><body>
<h1> Head <b>line</b> </h1><!-- a comment -->
<div class="content"><p>One &amp; two</p><p>  </p><p>Three<br>four</p></div>
<a href="/x">x</a><a href="/y">y</a></body></html>"""
FIELD_XPATHS = ["//h1//text()", "//title/text()", "//div[@class='content']/p/text()",
                "//meta[@property='og:title']/@content", "//div[@class='content']",
                "count(//a)", "boolean(//h1)", "//comment()", "re:test(//title, 'title')",
                "string(//h1)", "//missing/text()", "//a/@href"]
FIELD_CSS = ["h1::text", "h1 ::text", "div.content p::text", "a::attr(href)", "div.content",
             "meta[property='og:title']::attr(content)"]


@pytest.mark.parametrize("kind", ["html", "xml"])
def test_field_values_are_what_parsel_gives_without_a_selector_a_match(kind):
    response = (HtmlResponse if kind == "html" else XmlResponse)(
        url="http://a.test/", body=FIELD_PAGE.replace(b"<br>", b"<br/>").replace(
            b'"Og title">', b'"Og title"/>'), encoding="utf-8")
    for expression in FIELD_XPATHS:
        assert xpath_strings(response, expression) == \
            response.xpath(expression).getall(), expression
        for element in response.xpath("//div"):         # relative, from an element
            for relative in (".//text()", "./@class", ".", "string(.)"):
                assert xpath_strings(element, relative) == element.xpath(relative).getall()
    for expression in FIELD_CSS:
        assert css_value(response, expression) == "\n".join(
            value.strip() for value in response.css(expression).getall() if value.strip())
    assert first_value(response, "//div[@class='content']/p/text()") == "One & two\nThree\nfour"
    assert set(FIELD_XPATHS) <= set(spiders._XPATHS)     # compiled by us, not read by parsel
    with pytest.raises(ValueError, match=r"XPath error.*//h1\["):
        first_value(response, "//h1[")


def test_compiled_field_expressions_are_kept_within_a_bound(monkeypatch):
    monkeypatch.setattr(spiders, "_XPATHS", {})
    response = HtmlResponse(url="http://a.test/", body=FIELD_PAGE, encoding="utf-8")
    for n in range(10_050):                       # every crawl's rules over months
        xpath_strings(response, f"//p[{n + 1}]/text()")
    assert 0 < len(spiders._XPATHS) <= 10_001
