"""Rule-driven spiders: ``precise`` (list then detail pages) and ``universal``.

Each takes its rule from the crawl the task belongs to (the scheduler puts
the crawl's config in ``response.meta["crawlcluster"]``), so one running
spider serves every crawl of its type.

Links to follow are handed to ``follow``: under the cluster's scheduler they go
straight to its next filter check, as data. A link only becomes a task (its
URL, callback and fields) for whichever job takes it, so a Request made for it
here, and the spider middlewares' and the engine's pass over that Request, were
work thrown away: about a tenth of a page's CPU on bench/crawl.py's site (~23
links a page). Under any other scheduler ``follow`` yields Requests as usual.
"""

from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import scrapy
from parsel import Selector, SelectorList
from scrapy import Request
from scrapy.http import Response, TextResponse

# What an element of a page can be read from: a page, an element, several elements.
Readable = TextResponse | Selector | SelectorList[Selector]


class Follow(NamedTuple):
    """A link to follow: an absolute, already escaped http(s) URL (as a link extractor
    gives it), the callback's name, and fields for the task of the page it leads to."""

    url: str
    callback: str = "parse"
    extra: dict[str, Any] | None = None


def first_value(selector: Readable, expression: str) -> str:
    """A field's text: every match stripped, the non-empty ones joined by newlines."""
    values = [value.strip() for value in selector.xpath(expression).getall()]
    return "\n".join(value for value in values if value)


def css_value(selector: Readable, expression: str) -> str:
    values = [value.strip() for value in selector.css(expression).getall()]
    return "\n".join(value for value in values if value)


class ClusterSpider(scrapy.Spider):
    """Base: no start requests of its own; tasks come from the cluster scheduler."""

    callbacks: tuple[str, ...] = ("parse",)
    # set by the cluster's scheduler: takes (response, [Follow, ...], refused)
    link_sink: Callable[[Response, list[Follow], Mapping[str, int] | None], None] | None = None

    async def start(self) -> AsyncIterator[Any]:
        return
        yield

    def follow(self, response: Response, links: Iterable[Follow],
               refused: Mapping[str, int] | None = None) -> Iterator[Request]:
        """Hand ``links`` (``Follow``s) on: to the cluster's scheduler if it runs this
        spider, else as Requests (with the fields in ``meta["crawlcluster_extra"]``).
        ``refused`` counts the page's other links by why the rules did not take them
        (``{"rule": n, "scope": n}``), for the crawl's link counts."""
        if self.link_sink is not None:
            self.link_sink(response, list(links), refused)
            return
        for link in links:
            yield Request(link.url, callback=getattr(self, link.callback),
                          meta={"crawlcluster_extra": link.extra})

    @staticmethod
    def crawl_info(response: Response) -> dict[str, Any]:
        return response.meta["crawlcluster"]

    def item(self, response: TextResponse, fields: dict[str, str], url: str | None = None,
             page: bool = False) -> dict[str, Any]:
        info = self.crawl_info(response)
        item = dict(fields, url=url or response.url, crawlid=info["task"]["crawlid"],
                    spider_type=self.name, depth=info["task"].get("depth", 0))
        if page and info["config"]["rule"].get("main_text", True):
            item["_body"] = response.selector.root     # parsed already: not parsed again
        return item
