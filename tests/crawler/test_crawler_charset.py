"""Pure logic: which charset reads a page whose declared one lies; a compressed page's
charset read once decompressed; redirect loops."""

import gzip

import pytest
from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, TextResponse
from scrapy.utils.test import get_crawler

from crawler.middlewares import DecompressionMiddleware, RedirectLoopMiddleware, better_encoding

SENTENCE = "记者今天表示，相关部门将进一步推进工作。"
ARTICLE = f"<h1>城市交通新规今日起实施</h1><p>{SENTENCE * 4}</p>"


def page(meta, text=ARTICLE):
    return f'<html><head><meta charset="{meta}"></head><body>{text}</body></html>'


def test_a_gbk_page_declared_utf8_in_the_header_is_read_with_its_meta_charset():
    assert better_encoding(page("gbk").encode("gbk"), "utf-8") == "gb18030"


def test_a_gbk_page_whose_meta_also_lies_is_read_with_the_detected_charset():
    body = page("utf-8").encode("gbk")
    assert body.decode(better_encoding(body, "utf-8")) == page("utf-8")


def test_a_page_its_charset_reads_is_left_alone():
    assert better_encoding(page("utf-8").encode(), "utf-8") is None


def test_a_few_bad_bytes_do_not_change_the_charset():
    body = page("utf-8", ARTICLE * 3).encode() + b"\xff"
    assert better_encoding(body, "utf-8") is None


def test_a_redirect_chain_back_to_a_url_a_third_time_is_refused():
    loop = RedirectLoopMiddleware()
    a, b = "http://x/a", "http://x/b"
    assert loop.process_request(Request(a, meta={"redirect_urls": [a]})) is None  # set-cookie
    with pytest.raises(IgnoreRequest, match="redirect loop: http://x/a -> http://x/b"):
        loop.process_request(Request(a, meta={"redirect_urls": [a, b, a, b]}))


def test_a_compressed_page_is_read_with_the_charset_of_its_decompressed_bytes(monkeypatch):
    """Scrapy's decompression guesses the charset of the gzip bytes of a page whose
    Content-Type names none (wasted: 0.5-2 ms a page); ours guesses it once, from the page."""
    guessed = []
    guess = TextResponse._auto_detect_fun
    monkeypatch.setattr(TextResponse, "_auto_detect_fun",
                        lambda self, text: guessed.append(text) or guess(self, text))
    body = f"<html><body>{ARTICLE}</body></html>".encode()
    compressed = HtmlResponse("http://x/a", body=gzip.compress(body), headers={
        "Content-Type": "text/html", "Content-Encoding": "gzip"})
    middleware = DecompressionMiddleware.from_crawler(get_crawler())
    page = middleware.process_response(Request("http://x/a"), compressed)
    assert isinstance(page, HtmlResponse) and page.body == body
    assert SENTENCE in page.text and page.encoding == "utf-8"
    assert guessed == [body]
    head = middleware.process_response(Request("http://x/a", method="HEAD"), compressed)
    assert head is compressed
