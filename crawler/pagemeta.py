"""What a page says of itself, without a rule: ``meta`` of every page with fields.

Most news and notice pages publish their title, dates, author and description for
search engines and social sites: JSON-LD (schema.org), OpenGraph and other ``<meta>``
tags, microdata (``itemprop``). ``page_meta`` reads them from the tree the spider
parsed already (no second parse), in that order of trust, each value with its source::

    {"title": "...", "published": "2026-11-03T09:30:00+01:00", "author": "...",
     "sources": {"title": "json-ld", "published": "opengraph", ...}}

The script, meta, title, link and time elements are found in one walk over the tree;
``itemprop`` elements are looked for only when JSON-LD and the meta tags leave title,
published or author unknown (the walk over every element costs more than the rest), and
an element's text is read only for a key still missing.

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
MICRODATA_KEYS = {"title", "published", "author"}   # the scan skipped when all are known
TAG_NAMES = ("script", "meta", "title", "link", "time")


def page_meta(root: Any, url: str, guess_date: bool = True) -> Meta:
    """The page's metadata from its lxml tree (``root``)."""
    meta: Meta = {}
    sources: dict[str, str] = {}

    def take(key: str, value: Any, source: str) -> None:
        text = _text(value)
        if text and key not in meta:
            meta[key] = text
            sources[key] = source

    tags = _tags_by_name(root)
    for key, value in _jsonld(tags["script"]):
        take(key, value, "json-ld")
    for key, value, source in _meta_tags(tags["meta"]):
        take(key, value, source)
    if not meta.keys() >= MICRODATA_KEYS:     # itemprop is looked for only when needed
        for key, element in _microdata(root):
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


def _tags_by_name(root: Any) -> dict[str, list[Any]]:
    """The page's script, meta, title, link and time elements, in one walk over the tree
    (lxml filters by tag in C: a fraction of a walk in Python or of one XPath each)."""
    tags: dict[str, list[Any]] = {name: [] for name in TAG_NAMES}
    for element in root.iter(*TAG_NAMES):
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


def _microdata(root: Any) -> Iterator[tuple[str, Any]]:
    for element in root.xpath("//*[@itemprop]")[:500]:
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


def _guess_date(root: Any, url: str) -> str | None:
    import logging

    from htmldate import find_date

    logging.getLogger("htmldate").setLevel(logging.WARNING)
    try:       # htmldate cleans a copy of the tree it is given (no copy of ours)
        found: str | None = find_date(root, url=url, extensive_search=True,
                                      original_date=True, outputformat="%Y-%m-%d")
    except Exception:  # noqa: BLE001 - a guess that fails costs the guess only
        return None
    return found
