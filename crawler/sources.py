"""Sitemaps, feeds and robots.txt as sources of URLs to crawl (a crawl's ``sitemaps``,
``feeds`` and ``robots_sitemaps``).

Pure functions over a response body, with the bounds every source gets: a
sitemap's body is gunzipped to at most ``max_bytes`` (the protocol allows 50
MB), at most ``max_urls`` entries are taken from one sitemap or feed (50,000),
and the caller stops following sitemap indexes nested deeper than its limit.
Parsing is Scrapy's own sitemap reader (lxml, entities never resolved) and
feedparser for RSS and Atom. What cannot be read gives a ``Source`` whose
``problem`` says why, never an exception; an entry no URL can be made of (a port out
of range, a bad IPv6 literal, control characters) is left out and counted
(``invalid``).
"""

import calendar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import feedparser
from lxml import etree
from scrapy.utils.gz import gunzip
from scrapy.utils.sitemap import Sitemap, sitemap_urls_from_robots

from crawler.urlshape import url_problem

GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class Entry:
    url: str
    fields: dict[str, str] = field(default_factory=dict)   # lastmod, published, feed_title


@dataclass
class Source:
    """What one sitemap, feed or robots.txt listed."""

    pages: list[Entry] = field(default_factory=list)        # URLs to crawl
    sitemaps: list[str] = field(default_factory=list)       # sitemaps it points to
    dropped: int = 0                                        # entries past max_urls
    invalid: int = 0                                        # entries that are no URL
    problem: str | None = None       # why it could not be read (sitemap_invalid, ...)


def read_sitemap(body: bytes, max_urls: int, max_bytes: int) -> Source:
    """A sitemap (``urlset``: its pages with their ``lastmod``) or a sitemap index (the
    sitemaps it lists); gzip bodies are unpacked first."""
    if body[:2] == GZIP_MAGIC:
        try:
            body = gunzip(body, max_size=max_bytes)
        except ValueError:
            return Source(problem="sitemap_too_big")
        except (OSError, EOFError):
            return Source(problem="sitemap_invalid")
    elif len(body) > max_bytes:
        return Source(problem="sitemap_too_big")
    try:
        sitemap = Sitemap(body)
        entries = [entry for entry in sitemap if entry.get("loc")]
    except (etree.XMLSyntaxError, StopIteration):
        return Source(problem="sitemap_invalid")
    if sitemap.type not in ("urlset", "sitemapindex"):
        return Source(problem="sitemap_invalid")
    source = Source(dropped=max(0, len(entries) - max_urls))
    for entry in _valid(entries[:max_urls], "loc", source):
        if sitemap.type == "sitemapindex":
            source.sitemaps.append(entry["loc"])
        else:
            fields = {"lastmod": entry["lastmod"]} if entry.get("lastmod") else {}
            source.pages.append(Entry(entry["loc"], fields))
    return source


def read_feed(body: bytes, max_urls: int) -> Source:
    """An RSS or Atom feed's entries: their links, dates (``published``, ISO, UTC) and
    titles."""
    parsed: Any = feedparser.parse(body)
    if not parsed.version:
        return Source(problem="feed_invalid")
    # absolute links only (feedparser offers an entry's id as its link when it has none)
    entries = [entry for entry in parsed.entries
               if str(entry.get("link", "")).startswith(("http://", "https://"))]
    source = Source(dropped=max(0, len(entries) - max_urls))
    for entry in _valid(entries[:max_urls], "link", source):
        fields = {"feed_title": entry["title"]} if entry.get("title") else {}
        moment = entry.get("published_parsed") or entry.get("updated_parsed")
        if moment:
            fields["published"] = datetime.fromtimestamp(calendar.timegm(moment),
                                                          UTC).isoformat()
        source.pages.append(Entry(entry["link"], fields))
    return source


def read_robots(body: bytes, base_url: str) -> Source:
    """The sitemaps a robots.txt names on its ``Sitemap:`` lines."""
    source = Source()
    named = [{"loc": url} for url in sitemap_urls_from_robots(body, base_url=base_url)]
    source.sitemaps = [entry["loc"] for entry in _valid(named, "loc", source)]
    return source


def _valid(entries: list[Any], field: str, source: Source) -> list[Any]:
    """The ``entries`` whose URL (``entry[field]``) is well formed; the others are
    counted in ``source.invalid``."""
    valid = [entry for entry in entries if not url_problem(str(entry[field]).strip())]
    source.invalid += len(entries) - len(valid)
    return valid
