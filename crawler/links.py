"""A page's links as Scrapy's ``LinkExtractor`` gives them, at a fraction of its cost.

``LinkExtractor`` walks every element of a page in Python, passes every ``href`` through
``urljoin``, w3lib's ``safe_url_string`` and ``urljoin`` again, builds a ``Link`` with the
anchor's text, and tests a link's extension against each of ~90 extensions in turn. The
universal spider needs the URLs only. Here:

- lxml finds the ``<a>`` and ``<area>`` elements (``iter`` with tag names, in C);
- an ``href`` that is an absolute http(s) URL, or a path to join to a plain base, and
  comes out as w3lib and ``urljoin`` would leave it (``SAFE_URL``: a lowercase ASCII
  host, an optional valid port, only characters w3lib never quotes) skips urllib and
  w3lib; any other ``href`` takes Scrapy's own steps;
- an extension is looked up in a set, once per dot of the path, and a plain URL's path
  is read by a regular expression.

``page_urls`` gives exactly ``[link.url for link in
LinkExtractor(deny_extensions=[], unique=True).extract_links(response)]``, and
``rule_urls`` exactly what a rule's ``LinkExtractor`` gives, ``restrict_xpaths`` and
``restrict_css`` included: tests/crawler/test_crawler_links.py checks both on real pages
and on generated ``href`` values, and ``python bench/links.py`` on the 751 pages of the
shared benchmarks.
"""

import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlparse

from lxml import etree
from scrapy.utils.response import get_base_url
from w3lib.html import strip_html5_whitespace
from w3lib.url import safe_url_string

if TYPE_CHECKING:
    from scrapy.http import TextResponse
    from scrapy.linkextractors import LinkExtractor

XHTML = "{http://www.w3.org/1999/xhtml}"
LINK_TAGS = ("a", "area", f"{XHTML}a", f"{XHTML}area")
VALID_SCHEMES = {"http", "https", "file", "ftp"}

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
# Characters w3lib's safe_url_string keeps as they are, in a path, in the query of an
# http(s) URL ("'" is quoted there) and in a fragment; never ";" (urljoin drops an empty
# ";params") nor the delimiters "?" and "#" where they would end the part.
_PATH = r"[A-Za-z0-9:/@!$&'()*+,=._~%-]"
_QUERY = r"[A-Za-z0-9:/?@!$&()*+,=._~%-]"
_FRAGMENT = r"[A-Za-z0-9:/?@!$&'()*+,=._~%-]"
SAFE_URL = re.compile(rf"https?://{_LABEL}(?:\.{_LABEL})*(?::([1-9][0-9]{{0,4}}))?"
                      rf"(?:/{_PATH}*(?:\?{_QUERY}+)?)?(?:#{_FRAGMENT}+)?\Z")


class _Base:
    """``urljoin(base_url, href)`` without urllib's parsing for the common ``href``: a
    root-relative path, or a relative one where the base's path has nothing urljoin would
    normalise (no ``//``, no dot segment, no ``;params``). What comes out is used only if
    it is ``SAFE_URL`` (then it is what urljoin gives); any other ``href`` is joined by
    urljoin itself."""

    def __init__(self, base_url: str) -> None:
        self.url = base_url
        try:
            parts = urlparse(base_url)
        except ValueError:                      # urljoin refuses every href: no fast path
            self.usable = self.rooted = False
            self.origin, self.directory = "", None
            return
        self.usable = True
        self.origin = f"{parts.scheme}://{parts.netloc}"
        plain = (parts.scheme in ("http", "https") and ";" not in base_url
                 and parts.path.startswith("/"))
        self.rooted = plain
        self.directory = (parts.path[:parts.path.rfind("/") + 1]
                          if plain and "//" not in parts.path and "/." not in parts.path
                          else None)

    def join(self, href: str) -> tuple[str, bool]:
        """``(urljoin(base_url, href), whether that is SAFE_URL)``."""
        joined = None
        if not self.usable:
            pass
        elif href.startswith(("http://", "https://")):
            joined = href                       # urljoin gives a SAFE_URL back as it is
        elif href[:1] == "/":
            if self.rooted and href[1:2] != "/" and "/." not in href and ";" not in href:
                joined = self.origin + href
        elif (self.directory is not None and href[:1] not in ".?#" and ":" not in href
              and ";" not in href and "//" not in href and "/." not in href):
            joined = self.origin + self.directory + href
        if joined is not None and is_plain_url(joined):
            return joined, True
        return urljoin(self.url, href), False


def _final_url(joined: str, response_url: str, encoding: str) -> str | None:
    """What ``LinkExtractor`` makes of an ``href`` joined to the page's base (when it is
    not ``SAFE_URL``): w3lib's ``safe_url_string`` in the page's encoding, then joined to
    the page's URL again; ``None`` for a URL Scrapy skips as bogus."""
    try:
        url = safe_url_string(joined, encoding=encoding)
    except ValueError:
        return None
    return urljoin(response_url, url)


def is_plain_url(url: str) -> bool:
    """Whether ``url`` is ``SAFE_URL`` with a port in range: a lowercase ASCII host,
    only characters w3lib never quotes (so well formed, with nothing to check further)."""
    found = SAFE_URL.match(url)
    return found is not None and (found.group(1) is None or int(found.group(1)) <= 65535)


def _hrefs(root: Any) -> Iterator[str]:
    for element in root.iter(*LINK_TAGS):
        href = element.get("href")
        if href is not None:
            yield href


def element_urls(root: Any, base_url: str, response_url: str, encoding: str) -> list[str]:
    """The URL of every ``<a href>`` and ``<area href>`` under ``root`` (the element
    included), in document order, duplicates kept, as ``LinkExtractor`` makes them."""
    base, ascii_safe = _Base(base_url), _ascii_compatible(encoding)
    urls = []
    for href in _hrefs(root):
        try:
            joined, safe = base.join(strip_html5_whitespace(href))
        except ValueError:
            continue                            # Scrapy skips bogus links too
        url = joined if safe and ascii_safe else _final_url(joined, response_url, encoding)
        if url is not None:
            urls.append(url)
    return urls


def _ascii_compatible(encoding: str) -> bool:
    try:
        return "a=b&c".encode(encoding) == b"a=b&c"
    except LookupError:
        return False


def unique_valid(urls: Iterable[str]) -> list[str]:
    """``urls`` of the schemes a link extractor keeps, without repeats, in first-seen
    order."""
    return list(dict.fromkeys(url for url in urls if url.split("://", 1)[0] in VALID_SCHEMES))


def page_urls(response: "TextResponse") -> list[str]:
    """Every link of the page once (any extension): ``LinkExtractor(deny_extensions=[],
    unique=True)``'s URLs."""
    urls = element_urls(response.selector.root, get_base_url(response), response.url,
                        response.encoding)
    return unique_valid(urls)


class ExtensionSet:
    """``url_has_any_extension(url, extensions)`` by set lookups: a path ends with one of
    the extensions when its part from one of its dots on is one."""

    def __init__(self, extensions: Iterable[str]) -> None:
        self.extensions = frozenset(extensions)
        # An extension without a leading dot (never from LinkExtractor) needs the loop.
        self.dotted = all(extension.startswith(".") for extension in self.extensions)

    def __bool__(self) -> bool:
        return bool(self.extensions)

    def denies(self, url: str) -> bool:
        path = url_path(url).lower()
        if not self.dotted:
            return any(path.endswith(extension) for extension in self.extensions)
        dot = path.find(".")
        while dot != -1:
            if path[dot:] in self.extensions:
                return True
            dot = path.find(".", dot + 1)
        return False


# A plain http(s) URL's path: after the host, up to the query or the fragment.
_PLAIN_PATH = re.compile(r"https?://[^/?#]*([^?#]*)")


def url_path(url: str) -> str:
    """``urlparse(url).path``, without urllib for a printable ASCII http(s) URL with no
    ``;params`` and no bracketed host ("" for one urllib cannot read)."""
    if url.isascii() and url.isprintable() and ";" not in url and "[" not in url:
        found = _PLAIN_PATH.match(url)
        if found is not None:
            return found.group(1)
    try:
        return urlparse(url).path
    except ValueError:           # a bad IPv6 literal: refused as invalid when admitted
        return ""


def rule_urls(response: "TextResponse", extractor: "LinkExtractor",
              every_url: list[str], extensions: ExtensionSet) -> list[str]:
    """What ``extractor.extract_links(response)`` gives (its URLs), from the page's
    ``every_url`` (``page_urls``) or, for a rule restricted to regions, from those."""
    if extractor.restrict_xpaths:
        regions = [region.root for xpath in extractor.restrict_xpaths
                   for region in response.xpath(xpath)]
        if not all(isinstance(root, etree._Element) for root in regions):
            return [link.url for link in extractor.extract_links(response)]
        base_url = get_base_url(response)
        every_url = unique_valid(url for root in regions
                                 for url in element_urls(root, base_url, response.url,
                                                         response.encoding))
    return [url for url in every_url
            if extractor.matches(url) and not (extensions and extensions.denies(url))]
