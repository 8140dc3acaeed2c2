"""The ``universal`` spider (thesis 4.3.1.3, tables 4-10 and 4-11): link rules.

Every page is matched against the crawl's rules in order; the first rule
whose link extractor takes a link decides how the page it leads to is
handled: items from its ``fields``, its links followed if ``follow``. The
crawl's seed page is followed with every rule. The page's links no rule takes
are counted for the crawl (``info``): outside every rule's domains (``scope``)
or not matched by the rules' patterns (``rule``). A sitemap's or feed's pages go to
the first rule that admits them, as links would.
"""

import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlparse

from scrapy.crawler import Crawler
from scrapy.http import Response, TextResponse

from crawler.documents import is_document_response
from crawler.fields import read_fields
from crawler.rules import LinkRule, compile_universal, every_url
from crawler.sources import Entry
from crawler.spiders import ClusterSpider, Follow


class UniversalSpider(ClusterSpider):
    name = "universal"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.port_hinted: set[str] = set()   # crawls told about a port outside their domains
        self.lean_links = True               # CRAWLCLUSTER_LEAN_LINKS, once bound to a crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler, *args: Any, **kwargs: Any) -> "UniversalSpider":
        spider: UniversalSpider = super().from_crawler(crawler, *args, **kwargs)
        spider.lean_links = crawler.settings.getbool("CRAWLCLUSTER_LEAN_LINKS")
        return spider

    def parse(self, response: TextResponse) -> Iterator[Any]:  # type: ignore[override]
        if is_document_response(response, self.document_option(response)):
            yield from self.parse_document(response)     # a link answered with a file
            return
        info = self.crawl_info(response)
        rules = compile_universal(info["config"]["rule"])
        index = info["task"].get("rule_index")
        matched = rules[index] if index is not None and index < len(rules) else None
        documents = self._document_links(response, rules)
        if matched is not None and matched.fields:
            fields, errors = read_fields(response, matched.fields, response, time.time())
            if documents:
                fields["documents"] = [link.url for link in documents]
            yield self.item(response, fields, page=True, field_errors=errors)
        links: list[Follow] = []
        refused: Counter[str] = Counter()
        if matched is None or matched.follow:
            urls = every_url(response, self.lean_links)
            files = {link.url for link in documents}     # taken as documents, not pages
            links = [link for link in self._links(response, rules, urls, self.lean_links)
                     if link.url not in files]
            refused = self._refused(response, rules, urls, links + documents)
        if matched is None or matched.follow or documents:
            yield from self.follow(response, links + documents, refused)

    def _document_links(self, response: TextResponse, rules: list[LinkRule]) -> list[Follow]:
        """The page's links to documents the crawl's rule takes, within the rules'
        domains (whether or not the rule that took the page follows its links)."""
        if self.document_option(response) is None:
            return []
        urls = [url for url in every_url(response, self.lean_links)
                if any(rule.admits_domain(url) for rule in rules)]
        return self.document_links(response, urls)

    def canonical_fits(self, response: Response, canonical: str) -> bool:
        """Besides the site's root: the rule that took this page admits the canonical too
        (an article naming its list page is not an alias of it)."""
        if not super().canonical_fits(response, canonical):
            return False
        info = self.crawl_info(response)
        index = info["task"].get("rule_index")
        rules = compile_universal(info["config"]["rule"])
        return index is None or index >= len(rules) or rules[index].admits(canonical)

    def entry_links(self, response: Response,
                    entries: list[Entry]) -> tuple[list[Follow], Mapping[str, int]]:
        """A source's pages as if a page linked them: each to the first rule that admits
        it; the rest refused for ``scope`` or ``rule``."""
        rules = compile_universal(self.crawl_info(response)["config"]["rule"])
        links: list[Follow] = []
        refused: Counter[str] = Counter()
        for entry in entries:
            index = next((n for n, rule in enumerate(rules) if rule.admits(entry.url)), None)
            if index is not None:
                links.append(Follow(entry.url, "parse", {"rule_index": index,
                                                         "entry": entry.fields}))
            elif any(rule.admits_domain(entry.url) for rule in rules):
                refused["rule"] += 1
            else:
                refused["scope"] += 1
        return links, refused


    @staticmethod
    def _links(response: TextResponse, rules: list[LinkRule], urls: list[str],
               lean: bool) -> list[Follow]:
        """Every link of the page once, with the index of the first rule that takes it."""
        links: list[Follow] = []
        seen: set[str] = set()
        for index, rule in enumerate(rules):
            for url in rule.take(response, urls, lean):
                if url not in seen:
                    seen.add(url)
                    links.append(Follow(url, "parse", {"rule_index": index}))
        return links

    def _refused(self, response: TextResponse, rules: list[LinkRule], urls: list[str],
                 taken: list[Follow]) -> Counter[str]:
        """The page's links no rule took, by why: ``scope`` or ``rule``."""
        taken_urls = {link.url for link in taken}
        refused: Counter[str] = Counter()
        for url in urls:
            if url in taken_urls:
                continue
            if any(rule.admits_domain(url) for rule in rules):
                refused["rule"] += 1
            else:
                refused["scope"] += 1
                self._hint_port(response, url, rules)
        return refused

    def _hint_port(self, response: TextResponse, url: str, rules: list[LinkRule]) -> None:
        """Say once per crawl when a link is out of scope only for its port (a site
        served on a non-default port while ``allow_domains`` names the bare host)."""
        crawlid = self.crawl_info(response)["task"]["crawlid"]
        parts = urlparse(url)
        if parts.port is None or parts.hostname is None or crawlid in self.port_hinted:
            return
        if any(rule.admits_domain(parts._replace(netloc=parts.hostname).geturl())
               for rule in rules):
            self.port_hinted.add(crawlid)
            self.logger.warning(
                "crawl %s: links to %s are outside every rule's allow_domains: Scrapy matches "
                "the host with its port, so name %r there", crawlid, parts.netloc, parts.netloc)
