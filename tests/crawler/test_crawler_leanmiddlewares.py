"""crawler/leanmiddlewares.py: the same outcome and counts as Scrapy's own middlewares."""

import pytest
from scrapy import Request
from scrapy.downloadermiddlewares.redirect import MetaRefreshMiddleware
from scrapy.downloadermiddlewares.stats import DownloaderStats as ScrapyDownloaderStats
from scrapy.http import HtmlResponse, Response, TextResponse
from scrapy.utils.test import get_crawler

from crawler.leanmiddlewares import DownloaderStats, MetaRefresh

FILLER = "<p>" + "words " * 900 + "</p>"     # pushes what follows past 4,096 characters
PAGES = {
    "none": "<html><head><title>A</title></head><body><p>text</p></body></html>",
    "refresh": '<html><head><meta http-equiv="refresh" content="0; url=/next.html">'
               "</head><body></body></html>",
    "refresh in capitals": "<HTML><HEAD><META HTTP-EQUIV=REFRESH CONTENT='1;URL=/b.html'>",
    "refresh spelled by a reference":
        '<head><meta http-equiv="&#114;efresh" content="0; url=/ref.html"></head>',
    "refresh with a base": '<head><base href="http://other.test/dir/">'
                           '<meta http-equiv="refresh" content="0;url=page.html"></head>',
    "refresh too late": f"<html><body>{FILLER}"
                        '<meta http-equiv="refresh" content="0; url=/late.html"></body>',
    "refresh delayed past the limit":
        '<meta http-equiv="refresh" content="1000; url=/slow.html">',
    "the word only": "<p>Press F5 to refresh the page</p>",
    "in a comment": '<!-- <meta http-equiv="refresh" content="0; url=/c.html"> --><p>x</p>',
}


def outcome(result):
    if isinstance(result, Request):
        return ("redirect", result.url, result.method)
    return ("page", result.url)


def page(request, text, encoding):
    return HtmlResponse(request.url, body=text.encode(encoding), encoding=encoding,
                        request=request)


@pytest.mark.parametrize("name", sorted(PAGES))
@pytest.mark.parametrize("meta", [{}, {"dont_redirect": True}])
def test_meta_refresh_redirects_as_scrapys_does(name, meta):
    crawler = get_crawler(settings_dict={"METAREFRESH_ENABLED": True})
    ours, scrapys = MetaRefresh.from_crawler(crawler), MetaRefreshMiddleware.from_crawler(crawler)
    for encoding in ("utf-8", "cp1252"):
        request = Request("http://site.test/a/page.html", meta=meta)
        assert outcome(ours.process_response(request, page(request, PAGES[name], encoding))) \
            == outcome(scrapys.process_response(request, page(request, PAGES[name], encoding))), \
            (name, encoding)


def test_meta_refresh_passes_a_non_html_response_on_untouched():
    crawler = get_crawler(settings_dict={"METAREFRESH_ENABLED": True})
    request = Request("http://site.test/feed.xml")
    for response in (Response(request.url, body=b'<meta http-equiv="refresh" content="0;url=/x">'),
                     TextResponse(request.url, body=b"refresh", encoding="utf-8")):
        assert MetaRefresh.from_crawler(crawler).process_response(request, response) is response


REQUESTS = [
    Request("http://site.test/"),
    Request("http://Site.Test:8080/a/b.html?q=1&r=%20x#fragment"),
    Request("https://site.test/p;params?x=1", method="POST", body=b"a=1&b=2",
            headers={"Content-Type": "application/x-www-form-urlencoded"}),
    Request("http://site.test/h", headers={"Accept": ["a", "b"], "X-Empty": "",
                                           "User-Agent": "crawlcluster"}),
    Request("http://site.test/ü/é.html", method="HEAD"),
    Request("http://site.test//double/slash"),
    Request("http://[::1]:8080/ipv6"),
]
RESPONSES = [
    Response("http://site.test/", status=200, body=b"<html></html>"),
    Response("http://site.test/", status=404, body=b"",
             headers={"Server": "nginx", "Set-Cookie": ["a=1", "b=2"], "X-Empty": ""}),
    Response("http://site.test/", status=599, body=b"x" * 1000),
    Response("http://site.test/", status=304, headers={}),
]


def stats_of(middleware_class):
    crawler = get_crawler()
    crawler.stats.open_spider()
    middleware = middleware_class.from_crawler(crawler)
    for request in REQUESTS:
        middleware.process_request(request)
    for response in RESPONSES:
        middleware.process_response(REQUESTS[0], response)
    return crawler.stats.get_stats()


def test_downloader_stats_count_what_scrapys_count():
    ours, scrapys = stats_of(DownloaderStats), stats_of(ScrapyDownloaderStats)
    assert ours == scrapys
    assert ours["downloader/request_count"] == len(REQUESTS)
    assert ours["downloader/response_status_count/404"] == 1
