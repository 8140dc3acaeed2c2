"""What a page says of itself, without a rule: ``meta`` of every page with fields.

Most news and notice pages publish their title, dates, author and description for
search engines and social sites: JSON-LD (schema.org), OpenGraph and other ``<meta>``
tags, microdata (``itemprop``). ``page_meta`` reads them from the tree the spider
parsed already (no second parse), in that order of trust, each value with its source::

    {"title": "...", "published": "2026-11-03T09:30:00+01:00", "author": "...",
     "sources": {"title": "json-ld", "published": "opengraph", ...}}

Keys: title, published, modified, author, description, language, canonical, image.
A page whose markup gives no publication date gets htmldate's guess from its text and
URL (``sources.published: "htmldate"``), when ``CRAWLCLUSTER_PAGE_META_DATE_GUESS``.
"""

import json
from collections.abc import Iterator
from typing import Any

Meta = dict[str, Any]
JSONLD_MAX = 1 << 20      # characters of one JSON-LD block read at most
JSONLD_KEYS = {"title": ("headline", "name"), "published": ("datePublished", "dateCreated"),
               "modified": ("dateModified",), "author": ("author", "creator"),
               "description": ("description",), "image": ("image", "thumbnailUrl"),
               "language": ("inLanguage",)}
META_TAGS = {  # <meta property|name=...> -> key, source
    "og:title": ("title", "opengraph"), "og:description": ("description", "opengraph"),
    "og:image": ("image", "opengraph"), "og:locale": ("language", "opengraph"),
    "article:published_time": ("published", "opengraph"),
    "article:modified_time": ("modified", "opengraph"),
    "article:author": ("author", "opengraph"),
    "description": ("description", "meta"), "author": ("author", "meta"),
    "date": ("published", "meta"), "pubdate": ("published", "meta"),
    "publishdate": ("published", "meta"), "publish-date": ("published", "meta"),
    "dc.date": ("published", "meta"), "dc.date.issued": ("published", "meta"),
    "dcterms.created": ("published", "meta"), "dc.creator": ("author", "meta"),
    "sailthru.date": ("published", "meta"), "parsely-pub-date": ("published", "meta"),
    "twitter:title": ("title", "meta"), "twitter:description": ("description", "meta"),
    "twitter:image": ("image", "meta"), "last-modified": ("modified", "meta"),
}
MICRODATA = {"headline": "title", "datePublished": "published", "dateModified": "modified",
             "author": "author", "description": "description", "image": "image"}


def page_meta(root: Any, url: str, guess_date: bool = True) -> Meta:
    """The page's metadata from its lxml tree (``root``)."""
    meta: Meta = {}
    sources: dict[str, str] = {}

    def take(key: str, value: Any, source: str) -> None:
        text = _text(value)
        if text and key not in meta:
            meta[key] = text
            sources[key] = source

    for key, value in _jsonld(root):
        take(key, value, "json-ld")
    for key, value, source in _meta_tags(root):
        take(key, value, source)
    for key, value in _microdata(root):
        take(key, value, "microdata")
    _page_itself(root, take)
    if guess_date and "published" not in meta:
        guessed = _guess_date(root, url)
        if guessed:
            take("published", guessed, "htmldate")
    if meta:
        meta["sources"] = sources
    return meta


def _text(value: Any) -> str:
    """A value as one string: a schema.org Person or ImageObject by its name or URL, the
    first of a list."""
    if isinstance(value, list):
        value = value[0] if value else ""
    if isinstance(value, dict):
        value = value.get("name") or value.get("url") or value.get("@id") or ""
        return _text(value)
    return " ".join(str(value).split())[:1000] if value is not None else ""


def _jsonld(root: Any) -> Iterator[tuple[str, Any]]:
    for script in root.xpath('//script[@type="application/ld+json"]/text()')[:20]:
        if len(script) > JSONLD_MAX:
            continue
        try:
            data = json.loads(script)
        except (ValueError, RecursionError):      # a hostile page's nesting costs the block
            continue
        for thing in _things(data):
            for key, names in JSONLD_KEYS.items():
                for name in names:
                    if thing.get(name):
                        yield key, thing[name]
                        break


def _things(data: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    """The schema.org objects of a JSON-LD block: itself, its ``@graph``, lists of them;
    an article first (a page's WebSite and Organization blocks have names too)."""
    if depth > 3:
        return
    if isinstance(data, list):
        items = [thing for part in data for thing in _things(part, depth + 1)]
        yield from sorted(items, key=lambda thing: not _is_article(thing))
    elif isinstance(data, dict):
        if "@graph" in data:
            yield from _things(data["@graph"], depth + 1)
        else:
            yield data


def _is_article(thing: dict[str, Any]) -> bool:
    kinds = thing.get("@type", "")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return any("Article" in str(kind) or "Posting" in str(kind) for kind in kinds)


def _meta_tags(root: Any) -> Iterator[tuple[str, str, str]]:
    for tag in root.xpath("//meta[@content]"):
        name = (tag.get("property") or tag.get("name") or tag.get("itemprop") or "").lower()
        if name in META_TAGS:
            key, source = META_TAGS[name]
            yield key, tag.get("content"), source


def _microdata(root: Any) -> Iterator[tuple[str, str]]:
    for element in root.xpath("//*[@itemprop]")[:500]:
        key = MICRODATA.get(element.get("itemprop", ""))
        if key:
            value = (element.get("content") or element.get("datetime")
                     or element.get("src") or element.text_content())
            yield key, value


def _page_itself(root: Any, take: Any) -> None:
    for title in root.xpath("//title/text()")[:1]:
        take("title", title, "html")
    for language in root.xpath("/html/@lang")[:1]:
        take("language", language, "html")
    for canonical in root.xpath('//link[@rel="canonical"]/@href')[:1]:
        take("canonical", canonical, "html")
    for published in root.xpath("//time/@datetime")[:1]:
        take("published", published, "html")


def _guess_date(root: Any, url: str) -> str | None:
    import logging

    from htmldate import find_date

    logging.getLogger("htmldate").setLevel(logging.WARNING)
    import copy

    try:       # on a copy: htmldate cleans the tree it is given
        found: str | None = find_date(copy.deepcopy(root), url=url, extensive_search=True,
                                      original_date=True, outputformat="%Y-%m-%d")
    except Exception:  # noqa: BLE001 - a guess that fails costs the guess only
        return None
    return found
