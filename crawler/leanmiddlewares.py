"""Two of Scrapy's downloader middlewares, doing what Scrapy's do at less CPU a page.

Each runs on every page of every crawl, and on small pages each took a few percent of a
spider process's time for work that changes nothing on nearly every page:

- ``MetaRefresh``: Scrapy's ``MetaRefreshMiddleware`` reads a page's ``<base>`` and
  searches its first 4,096 characters for a ``<meta http-equiv="refresh">``. This one
  first looks for the word in those characters and stops there when it is missing
  (and no character reference could spell it).
- ``DownloaderStats``: Scrapy's ``downloader/*`` counters with the same values, the
  byte counts summed from the request's and response's parts instead of writing the
  request out as HTTP and normalising every header again.
"""

from typing import Any
from urllib.parse import urlunparse

from scrapy import Request, Spider
from scrapy.downloadermiddlewares.redirect import MetaRefreshMiddleware
from scrapy.downloadermiddlewares.stats import DownloaderStats as ScrapyDownloaderStats
from scrapy.downloadermiddlewares.stats import get_status_size
from scrapy.http import HtmlResponse, Response
from scrapy.utils.httpobj import urlparse_cached

# What Scrapy's get_meta_refresh reads of a page.
META_REFRESH_WINDOW = 4096
HTTP_LINE_END = len(b"\r\n")


class MetaRefresh(MetaRefreshMiddleware):
    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Request | Response:
        if isinstance(response, HtmlResponse):
            head = response.text[:META_REFRESH_WINDOW]
            if "&#" not in head and "refresh" not in head.lower():
                return response
        return super().process_response(request, response)


class DownloaderStats(ScrapyDownloaderStats):
    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        self.stats.inc_value("downloader/request_count")
        self.stats.inc_value(f"downloader/request_method_count/{request.method}")
        self.stats.inc_value("downloader/request_bytes", request_size(request))

    def process_response(self, request: Request, response: Response,
                         spider: Spider | None = None) -> Response:
        self.stats.inc_value("downloader/response_count")
        self.stats.inc_value(f"downloader/response_status_count/{response.status}")
        size = (len(response.body) + header_size(response.headers)
                + get_status_size(response.status) + 2 * HTTP_LINE_END)
        self.stats.inc_value("downloader/response_bytes", size)
        return response


def request_size(request: Request) -> int:
    """``len(scrapy.utils.request.request_httprepr(request))``."""
    parsed = urlparse_cached(request)
    target = urlunparse(("", "", parsed.path or "/", parsed.params, parsed.query, ""))
    size = len(f"{request.method} {target} HTTP/1.1\r\nHost: {parsed.hostname or ''}\r\n"
               .encode())
    if request.headers:
        line_bytes, lines = _header_lines(request.headers)
        size += line_bytes + HTTP_LINE_END * max(lines - 1, 0) + HTTP_LINE_END
    return size + HTTP_LINE_END + len(request.body)


def header_size(headers: Any) -> int:
    """Scrapy's ``get_header_size``, to the byte: each value's ``key: value``, and a line
    end between keys (not between one key's values; and -2 for no headers)."""
    return _header_lines(headers)[0] + HTTP_LINE_END * (len(headers) - 1)


def _header_lines(headers: Any) -> tuple[int, int]:
    """The bytes of each ``key: value`` line of ``headers`` (a Scrapy ``Headers``,
    read as the dict it is underneath: normalised keys, lists of bytes), and the lines."""
    size = lines = 0
    for key, values in dict.items(headers):
        for value in values:
            size += len(key) + len(b": ") + len(value)
            lines += 1
    return size, lines
