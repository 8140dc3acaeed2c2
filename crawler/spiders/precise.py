"""The ``precise`` spider (thesis 4.3.1.3, table 4-9): list pages, then details.

On a list page every element ``list_from`` selects becomes an item with the
rule's ``first_page_xpath`` fields (relative to the element); if the rule goes
on (``continue``) and the element links a detail page (``second_page_url``),
the item travels with that page's task and is completed there with the
``second_page_xpath`` fields. ``next_page_xpath`` reads every list page of the
layer (seed 003). A sitemap's or feed's pages are taken as detail pages.
"""

import time
from collections.abc import Iterator, Mapping
from typing import Any

from scrapy.http import Response, TextResponse
from w3lib.url import safe_url_string

from crawler.documents import is_document_response
from crawler.fields import read_fields
from crawler.links import page_urls
from crawler.sources import Entry
from crawler.spiders import SOURCE_CALLBACKS, ClusterSpider, Follow
from master.rules import PRECISE_KEYWORDS


class PreciseSpider(ClusterSpider):
    name = "precise"
    callbacks = ("parse", "parse_detail", "parse_document", *SOURCE_CALLBACKS)

    def entry_links(self, response: Response,
                    entries: list[Entry]) -> tuple[list[Follow], Mapping[str, int]]:
        """A source's pages are detail pages (their fields from ``second_page_xpath``)."""
        return [Follow(entry.url, "parse_detail", {"entry": entry.fields})
                for entry in entries], {}

    def parse(self, response: TextResponse) -> Iterator[Any]:  # type: ignore[override]
        rule = self.crawl_info(response)["config"]["rule"]
        first = rule["first_page_xpath"]
        goes_on = first.get("continue", True) in (True, "true") and bool(
            rule.get("second_page_xpath"))
        links = []
        specs = {name: spec for name, spec in first.items() if name not in PRECISE_KEYWORDS}
        for position, element in enumerate(response.xpath(first["list_from"])):
            fields, errors = read_fields(element, specs, response, time.time())
            if errors:
                fields["field_errors"] = errors
            link = (element.xpath(first["second_page_url"]).get() or "").strip() \
                if "second_page_url" in first else ""
            documents = self.document_links(response, [absolute(response, link)] if link
                                            else [], {"item": fields})
            if link and documents:           # the entry's link is a document: its detail
                links += documents
            elif link and goes_on:
                links.append(Follow(absolute(response, link), "parse_detail", {"item": fields}))
            else:
                url = response.urljoin(link) if link else f"{response.url}#{position}"
                yield self.item(response, fields, url=url)
        if rule.get("next_page_xpath"):
            links += [Follow(absolute(response, link.strip()))
                      for link in response.xpath(rule["next_page_xpath"]).getall()]
        yield from self.follow(response, links)

    def parse_detail(self, response: TextResponse) -> Iterator[Any]:
        if is_document_response(response, self.document_option(response)):
            yield from self.parse_document(response)     # a detail link answered with a file
            return
        info = self.crawl_info(response)
        fields = dict(info["task"].get("item", {}))
        errors = fields.pop("field_errors", {})
        more, more_errors = read_fields(response, info["config"]["rule"].get(
            "second_page_xpath", {}), response, time.time())
        fields.update(more)
        documents = self.document_links(response, page_urls(response)) \
            if self.document_option(response) else []
        if documents:
            fields["documents"] = [link.url for link in documents]
        yield self.item(response, fields, page=True, field_errors={**errors, **more_errors})
        if documents:
            yield from self.follow(response, documents)


def absolute(response: TextResponse, link: str) -> str:
    """A link as a page gives it, made absolute and escaped (as a Request would)."""
    return safe_url_string(response.urljoin(link), response.encoding)
