"""Extraction rules compiled for the spiders: a universal rule's link rules, and every
link of a page (the rules' contract, their schemas and validation: master/rules.py)."""

import json
import weakref
from functools import cache
from typing import TYPE_CHECKING, Any

from scrapy.utils.url import url_is_from_any_domain

from crawler.links import ExtensionSet, page_urls, rule_urls
from master.rules import Rule, as_list

if TYPE_CHECKING:
    from scrapy.http import TextResponse


class LinkRule:
    """One compiled universal rule: which links, follow them or not, which fields."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from scrapy.linkextractors import IGNORED_EXTENSIONS, LinkExtractor

        self.fields = spec.get("fields", {})
        self.follow = spec.get("follow", not self.fields)
        self.extractor = LinkExtractor(
            allow=as_list(spec.get("allow")), deny=as_list(spec.get("deny")),
            allow_domains=as_list(spec.get("allow_domains")),
            deny_domains=as_list(spec.get("deny_domains")),
            restrict_xpaths=as_list(spec.get("restrict_xpaths")),
            restrict_css=as_list(spec.get("restrict_css")),
            deny_extensions=spec.get("deny_extensions", IGNORED_EXTENSIONS),
            unique=True)
        self.extensions = ExtensionSet(self.extractor.deny_extensions)

    def take(self, response: "TextResponse", every_url: list[str], lean: bool = True
             ) -> list[str]:
        """The URLs of the page's links this rule takes, in page order, given all of them
        (``crawler.links.page_urls``): what its own ``LinkExtractor`` gives, without a
        second pass over the page unless the rule restricts the regions. ``lean=False``:
        by the ``LinkExtractor`` itself."""
        if not lean:
            return [link.url for link in self.extractor.extract_links(response)]
        return rule_urls(response, self.extractor, every_url, self.extensions)

    def admits(self, url: str) -> bool:
        return self.extractor.matches(url) and not (
            self.extensions and self.extensions.denies(url))

    def admits_domain(self, url: str) -> bool:
        """Whether the URL's host is within this rule's domains, as Scrapy's link
        extractor matches them (``host:port`` against each domain and its subdomains)."""
        allow, deny = self.extractor.allow_domains, self.extractor.deny_domains
        if deny and url_is_from_any_domain(url, deny):
            return False
        return not allow or url_is_from_any_domain(url, allow)


def every_url(response: "TextResponse", lean: bool = True) -> list[str]:
    """Every link of the page once, to count those no rule takes: ``page_urls``, or with
    ``lean=False`` Scrapy's own ``LinkExtractor`` taking every link. Kept with the
    response: a ``render: auto`` page's links are read before the spider reads them."""
    cached = _EVERY_URL.get(response)
    if cached is not None and cached[0] == lean:
        return cached[1]
    if lean:
        urls = page_urls(response)
    else:
        urls = [link.url for link in _every_link_extractor().extract_links(response)]
    _EVERY_URL[response] = (lean, urls)
    return urls


_EVERY_URL: "weakref.WeakKeyDictionary[Any, tuple[bool, list[str]]]" = weakref.WeakKeyDictionary()


@cache
def _every_link_extractor() -> Any:
    from scrapy.linkextractors import LinkExtractor

    return LinkExtractor(deny_extensions=[], unique=True)


def compile_universal(rule: Rule) -> list[LinkRule]:
    """The LinkRules of a validated universal rule (compiled once per distinct rule)."""
    return _compile_universal(json.dumps(rule, sort_keys=True))


@cache
def _compile_universal(encoded: str) -> list[LinkRule]:
    return [LinkRule(spec) for spec in json.loads(encoded)["rules"]]
