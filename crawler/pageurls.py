"""One page, one URL: the tracking and session parameters taken out of a link, and the
canonical URL a page names for itself.

``ParameterStripper`` removes query arguments whose names match the
``CRAWLCLUSTER_STRIPPED_PARAMETERS`` patterns (w3lib's ``url_query_cleaner`` does the
removal) and ``;name=value`` path parameters of the same names (``;jsessionid=``), so
``/a?utm_source=x`` and ``/a?fbclid=y`` are both ``/a`` for the Bloom filter, the frontier
and the stored item. ``canonical_link`` reads ``<link rel="canonical">`` or an HTTP
``Link: <...>; rel="canonical"`` header, kept only when it names the page's own host.
"""

import re
from collections.abc import Iterable
from fnmatch import fnmatchcase
from urllib.parse import urljoin, urlsplit

from scrapy.http import Response, TextResponse
from w3lib.url import url_query_cleaner

_PATH_PARAMETER = re.compile(r";([^/?#;=]+)=[^/?#;]*")
_LINK_HEADER = re.compile(r'<([^>]*)>\s*;[^,]*?rel\s*=\s*"?canonical"?', re.IGNORECASE)


class ParameterStripper:
    """Takes the query arguments and path parameters named by ``patterns`` (shell-style,
    case-insensitive: ``utm_*``) out of a URL."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(pattern.lower() for pattern in patterns)

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def names(self, name: str) -> bool:
        """Whether a parameter called ``name`` is stripped."""
        lowered = name.lower()
        return any(fnmatchcase(lowered, pattern) for pattern in self.patterns)

    def clean(self, url: str) -> str:
        """``url`` without the stripped parameters (itself if it has none)."""
        if not self.patterns or ("?" not in url and ";" not in url):
            return url
        head, hash_mark, fragment = url.partition("#")
        path, question, query = head.partition("?")
        if ";" in path:
            path = _PATH_PARAMETER.sub(
                lambda found: "" if self.names(found[1]) else found[0], path)
        names = {pair.partition("=")[0] for pair in query.split("&") if pair}
        stripped = [name for name in names if self.names(name)]
        cleaned = path + question + query
        if stripped:
            cleaned = url_query_cleaner(cleaned, stripped, remove=True, unique=False)
        return cleaned + hash_mark + fragment


def canonical_link(response: Response) -> str | None:
    """The absolute URL a page names as its canonical one (``<link rel="canonical">``
    first, then a ``Link`` header), or None if it names none."""
    if isinstance(response, TextResponse):
        hrefs = response.xpath(
            "//head/link[contains(concat(' ', translate(@rel, 'CANONIL', 'canonil'), ' '),"
            " ' canonical ')]/@href").getall()
        for href in hrefs:
            if href.strip():
                return urljoin(response.url, href.strip())
    for header in response.headers.getlist(b"Link"):
        found = _LINK_HEADER.search(header.decode("latin-1"))
        if found and found[1].strip():
            return urljoin(response.url, found[1].strip())
    return None


def same_host(url: str, other: str) -> bool:
    """Whether two http(s) URLs are on one scheme-less host and port."""
    try:
        first, second = urlsplit(url), urlsplit(other)
        return (second.scheme in ("http", "https") and first.hostname == second.hostname
                and first.port == second.port)
    except ValueError:
        return False
