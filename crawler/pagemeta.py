"""What a page says of itself, without a rule: ``meta`` of every page with fields.

Most news and notice pages publish their title, dates, author and description for
search engines and social sites: JSON-LD (schema.org), OpenGraph and other ``<meta>``
tags, microdata (``itemprop``). ``page_meta`` reads them from the tree the spider
parsed already (no second parse), in that order of trust, each value with its source::

    {"title": "...", "published": "2026-11-03T09:30:00+01:00", "author": "...",
     "sources": {"title": "json-ld", "published": "opengraph", ...}}

The script, meta, title, link and time elements, and those with an ``itemprop``, are
taken from the main-text walk (``Described``, crawler/maintext.py): the item pipeline
extracts the main text first, and a walk over the tree costs more than the rest. Given
no ``Described``, they are found in one walk of its own, and ``itemprop`` elements are
looked for only when JSON-LD and the meta tags leave title, published or author
unknown. An element's text is read only for a key still missing.

Keys: title, published, modified, author, description, language, canonical, image.
A page whose markup gives no publication date gets htmldate's guess from its text and
URL (``sources.published: "htmldate"``), when ``CRAWLCLUSTER_PAGE_META_DATE_GUESS``.
"""

import json
import logging
from collections.abc import Iterator
from functools import cache
from typing import Any

from crawler.maintext import DESCRIBING_TAGS, Described

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
MICRODATA_KEYS = {"title", "published", "author"}   # the scan skipped when all are known


def page_meta(root: Any, url: str, guess_date: bool = True,
              described: Described | None = None) -> Meta:
    """The page's metadata from its lxml tree (``root``), and from what the main-text
    walk gathered of it (``described``) when it has been walked."""
    meta: Meta = {}
    sources: dict[str, str] = {}

    def take(key: str, value: Any, source: str) -> None:
        if key in meta:                       # the first source of a key wins
            return
        text = _text(value)
        if text:
            meta[key] = text
            sources[key] = source

    tags = _tags_by_name(root if described is None else described.tagged)
    for key, value in _jsonld(tags["script"]):
        take(key, value, "json-ld")
    for key, value, source in _meta_tags(tags["meta"]):
        take(key, value, source)
    if not meta.keys() >= MICRODATA_KEYS:     # itemprop is looked for only when needed
        marked = None if described is None else described.marked
        for key, element in _microdata(root, marked):
            if key not in meta:               # an element's text only when it is taken
                take(key, _microdata_value(element), "microdata")
    _page_itself(root, tags, take)
    if guess_date and "published" not in meta:
        guessed = _guess_date(root, url)
        if guessed:
            take("published", guessed, "htmldate")
    if meta:
        meta["sources"] = sources
    return meta


def _tags_by_name(found: Any) -> dict[str, list[Any]]:
    """The page's script, meta, title, link and time elements by tag: those the main-text
    walk gathered (a list), or from one walk over the tree (``root.iter``: lxml filters
    by tag in C, a fraction of a walk in Python or of one XPath each)."""
    elements = found if isinstance(found, list) else found.iter(*DESCRIBING_TAGS)
    tags: dict[str, list[Any]] = {name: [] for name in DESCRIBING_TAGS}
    for element in elements:
        tags[element.tag].append(element)
    return tags


def _text(value: Any) -> str:
    """A value as one string: a schema.org Person or ImageObject by its name or URL, the
    first of a list."""
    if isinstance(value, list):
        value = value[0] if value else ""
    if isinstance(value, dict):
        value = value.get("name") or value.get("url") or value.get("@id") or ""
        return _text(value)
    return " ".join(str(value).split())[:1000] if value is not None else ""


def _jsonld(scripts: list[Any]) -> Iterator[tuple[str, Any]]:
    blocks = [script.text for script in scripts
              if script.get("type") == "application/ld+json" and script.text]
    for script in blocks[:20]:
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


def _meta_tags(tags: list[Any]) -> Iterator[tuple[str, str, str]]:
    for tag in tags:
        if tag.get("content") is None:
            continue
        name = (tag.get("property") or tag.get("name") or tag.get("itemprop") or "").lower()
        if name in META_TAGS:
            key, source = META_TAGS[name]
            yield key, tag.get("content"), source


def _microdata(root: Any, marked: list[Any] | None) -> Iterator[tuple[str, Any]]:
    """The itemprop elements that give a key: of those the main-text walk marked, or
    looked for in the tree."""
    if marked is None:
        elements = root.xpath("//*[@itemprop]")
    else:
        elements = [element for element in marked if element.get("itemprop") is not None]
    for element in elements[:500]:
        key = MICRODATA.get(element.get("itemprop", ""))
        if key:
            yield key, element


def _microdata_value(element: Any) -> str:
    return (element.get("content") or element.get("datetime") or element.get("src")
            or element.text_content())


def _page_itself(root: Any, tags: dict[str, list[Any]], take: Any) -> None:
    for title in tags["title"][:1]:
        take("title", title.text, "html")
    take("language", root.get("lang") if root.tag == "html" else None, "html")
    for link in tags["link"]:
        if link.get("rel") == "canonical" and link.get("href"):
            take("canonical", link.get("href"), "html")
            break
    for time_tag in tags["time"]:
        if time_tag.get("datetime"):
            take("published", time_tag.get("datetime"), "html")
            break


@cache
def prepare_date_guess() -> None:
    """Load htmldate and quiet its debug lines, once: before a spider's first page (what
    is loaded when its engine starts is never scanned by the garbage collector again,
    crawler/extensions.py), and not per guess (setting a logger's level clears every
    logger's cache)."""
    import htmldate  # noqa: F401

    logging.getLogger("htmldate").setLevel(logging.WARNING)


def _guess_date(root: Any, url: str) -> str | None:
    """htmldate's guess: first its quick search of the page's article, then its
    extensive search of the whole page. The article alone costs a fraction of the page,
    its date is the page's (not a sidebar's or a related story's), and on the
    benchmark's pages stripped of their date markup it finds more of their days than
    the whole page does (bench/fields.py)."""
    prepare_date_guess()
    article = _article(root)
    found = _find_date(article, url, False) if article is not None else None
    return found or _find_date(root, url, True)


def _article(root: Any) -> Any:
    """The page's first ``<article>`` or ``<main>``; without one, the container two
    levels around its first ``<h1>`` (a headline's date line sits beside it)."""
    heading = None
    for element in root.iter("article", "main", "h1"):
        if element.tag != "h1":
            return element
        heading = element if heading is None else heading
    for _ in range(2):
        parent = heading.getparent() if heading is not None else None
        if parent is None or parent.tag in ("body", "html"):
            break
        heading = parent
    return heading


def _find_date(element: Any, url: str, extensive: bool) -> str | None:
    from htmldate import find_date

    try:       # htmldate cleans a copy of the tree it is given (no copy of ours)
        found: str | None = find_date(element, url=url, extensive_search=extensive,
                                      original_date=True, outputformat="%Y-%m-%d")
    except Exception:  # noqa: BLE001 - a guess that fails costs the guess only
        return None
    return found
