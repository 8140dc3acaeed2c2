"""Tracking and session parameters stripped from links; a page's canonical URL read."""

import pytest
from scrapy import Request
from scrapy.http import HtmlResponse

from crawler.pageurls import ParameterStripper, canonical_link, same_host
from crawler.spiders import ClusterSpider, Follow
from settings import defaults

STRIPPER = ParameterStripper(defaults.CRAWLCLUSTER_STRIPPED_PARAMETERS)


@pytest.mark.parametrize(("url", "expected"), [
    ("http://h/a?utm_source=x", "http://h/a"),
    ("http://h/a?utm_campaign=c&utm_medium=m", "http://h/a"),
    ("http://h/a?fbclid=y", "http://h/a"),
    ("http://h/a?id=3&gclid=g&msclkid=m", "http://h/a?id=3"),
    ("http://h/a?PHPSESSID=1&page=2", "http://h/a?page=2"),
    ("http://h/a;jsessionid=ABC123?page=2", "http://h/a?page=2"),
    ("http://h/a?UTM_Source=x#part", "http://h/a#part"),
    ("http://h/a?sidebar=1&side=2", "http://h/a?sidebar=1&side=2"),   # only whole names
    ("http://h/a?b=2&a=1", "http://h/a?b=2&a=1"),                     # order kept
    ("http://h/a", "http://h/a"),
])
def test_tracking_and_session_parameters_are_stripped(url: str, expected: str) -> None:
    assert STRIPPER.clean(url) == expected


def test_an_empty_list_strips_nothing() -> None:
    assert ParameterStripper([]).clean("http://h/a?utm_source=x") == "http://h/a?utm_source=x"


def test_the_spider_follows_links_stripped() -> None:
    spider = ClusterSpider(name="s")
    taken: list[str] = []
    spider.link_sink = lambda response, links, refused: taken.extend(link.url for link in links)
    index = HtmlResponse("http://h/", body=b"<html></html>", encoding="utf-8",
                         request=Request("http://h/", meta={"crawlcluster": {"task": {}}}))
    list(spider.follow(index, [Follow("http://h/a?utm_source=x"), Follow("http://h/b?fbclid=1")]))
    assert taken == ["http://h/a", "http://h/b"]


def page(url: str, head: str = "", headers: dict[str, str] | None = None) -> HtmlResponse:
    return HtmlResponse(url, body=f"<html><head>{head}</head><body>x</body></html>".encode(),
                        headers=headers or {}, encoding="utf-8")


def test_a_canonical_link_element_is_read() -> None:
    response = page("http://h/c", '<link rel="canonical" href="/a?utm_source=z">')
    assert canonical_link(response) == "http://h/a?utm_source=z"
    spider = ClusterSpider(name="s")
    assert spider.page_url(response) == "http://h/a"


def test_a_canonical_link_header_is_read() -> None:
    response = page("http://h/c", headers={"Link": '<http://h/a>; rel="canonical"'})
    assert canonical_link(response) == "http://h/a"


def test_a_canonical_on_another_site_is_ignored() -> None:
    response = page("http://h/c", '<link rel="canonical" href="http://other/a">')
    assert not same_host(response.url, "http://other/a")
    assert ClusterSpider(name="s").page_url(response) == "http://h/c"


def test_a_page_without_canonical_keeps_its_url() -> None:
    assert ClusterSpider(name="s").page_url(page("http://h/c")) == "http://h/c"


def test_the_site_root_named_canonical_by_another_page_is_ignored() -> None:
    """A template naming the home page canonical on every article would store them all
    as one item."""
    spider = ClusterSpider(name="s")
    assert spider.page_url(page("http://h/2026/budget", '<link rel="canonical" href="/">')) \
        == "http://h/2026/budget"
    assert spider.page_url(page("http://h/?utm_source=x", '<link rel="canonical" href="/">')) \
        == "http://h/"


def universal_page(url: str, canonical: str, rule_index: int) -> HtmlResponse:
    rule = {"rules": [{"allow": [r"/list/"], "follow": True},
                      {"allow": [r"/article/"], "fields": {"title": "//h1/text()"}}]}
    meta = {"crawlcluster": {"task": {"rule_index": rule_index}, "config": {"rule": rule}}}
    return HtmlResponse(url, body=f'<html><head><link rel="canonical" href="{canonical}">'
                        '</head><body>x</body></html>'.encode(), encoding="utf-8",
                        request=Request(url, meta=meta))


def test_a_canonical_the_pages_rule_does_not_admit_is_ignored() -> None:
    from crawler.spiders.universal import UniversalSpider

    spider = UniversalSpider()
    assert spider.page_url(universal_page("http://h/article/7?view=print",
                                          "/article/7", 1)) == "http://h/article/7"
    assert spider.page_url(universal_page("http://h/article/7", "/list/3", 1)) \
        == "http://h/article/7"
