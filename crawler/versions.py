"""Versions of a stored page: what changed since it was last stored.

An item is stored once per (crawl, URL); a run of a series (a schedule run as one, its
items carrying the series' ``lineage``) stores it once per (lineage, URL), so a run finds
the page the series' earlier runs stored. When its page is fetched again (a revisit, a
sitemap that says it changed, a task delivered again after its lease ran out, a series'
next run), its
``content_hash`` (what the rule extracted and the main text, not when or how it was
fetched) says whether anything changed:

- unchanged: only ``last_seen`` is written, and nothing goes downstream;
- changed: the stored item is replaced in place (same ``_id``) with ``change: changed``,
  ``previous_hash`` and ``version`` one higher, and the version it replaces is kept in
  ``versions_<spider type>`` (at most ``CRAWLCLUSTER_VERSIONS_KEEP`` per page, each for
  ``CRAWLCLUSTER_VERSIONS_TTL`` seconds);
- a stored page answered 404 or 410 is marked ``change: gone``, not deleted.

``changed_at`` is when an item last became new, changed or gone: what
``crawlcluster export --changed-since`` reads.
"""

import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

Item = dict[str, Any]
PageKey = tuple[str, str, str]    # ("lineage" or "crawlid", its value, URL): a stored page

# Fields that say how and when a page was fetched or stored, not what it holds.
NOT_CONTENT = frozenset({
    "_id", "url", "crawlid", "lineage", "spider_type", "depth", "status", "fetched_at", "stored_at",
    "stored_by", "last_seen", "changed_at", "change", "content_hash", "previous_hash",
    "version", "gone_at", "lastmod", "published", "_task", "_body"})
GONE_STATUSES = (404, 410)


def content_hash(item: Item) -> str:
    """A hash of the item's content: its fields but those in ``NOT_CONTENT``, in a
    canonical JSON form (sorted keys), so the same content always hashes the same."""
    content = {name: value for name, value in item.items() if name not in NOT_CONTENT}
    text = json.dumps(content, sort_keys=True, ensure_ascii=False, default=str,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass
class Stored:
    """What one batch did: the documents to send downstream, and counts per crawl."""

    downstream: list[Item] = field(default_factory=list)
    counts: dict[str, Counter[str]] = field(default_factory=dict)

    def count(self, crawlid: str, change: str, number: int = 1) -> None:
        if number:
            self.counts.setdefault(crawlid, Counter())[change] += number


def mark_new(document: Item, stamp: dict[str, Any]) -> None:
    document["content_hash"] = content_hash(document)
    document["change"] = "new"
    document["version"] = 1
    document["changed_at"] = document["last_seen"] = stamp["stored_at"]


def store_again(collection: Any, versions: Any, documents: list[Item],
                limits: "VersionLimits", stored: Stored) -> None:
    """Documents whose (crawl, URL) was stored before: compare with what is stored, in
    one query; write ``last_seen`` for the unchanged and replace the changed, keeping
    their previous versions."""
    from pymongo import ReplaceOne, UpdateMany

    before = _stored_before(collection, documents)
    writes: list[Any] = []
    archived: list[Item] = []
    unchanged: list[Any] = []        # their _ids: one update for all (one last_seen)
    for document in documents:
        previous = before.get(page_key(document))
        if previous is None:      # deleted meanwhile: counted as unchanged, not lost
            stored.count(document["crawlid"], "unchanged")
            continue
        if previous.get("content_hash") == document["content_hash"] \
                and previous.get("change") != "gone":
            unchanged.append(previous["_id"])
            stored.count(document["crawlid"], "unchanged")
            continue
        document.update(_id=previous["_id"], change="changed",
                        previous_hash=previous.get("content_hash"),
                        version=previous.get("version", 1) + 1)
        writes.append(ReplaceOne({"_id": previous["_id"]}, document))
        archived.append(_archived(previous))
        stored.downstream.append(document)
        stored.count(document["crawlid"], "changed")
    if archived:
        versions.insert_many(archived, ordered=False)
        _prune(versions, archived, limits.keep)
    if unchanged:
        writes.append(UpdateMany({"_id": {"$in": unchanged}},
                                 {"$set": {"last_seen": documents[0]["last_seen"]}}))
    if writes:
        collection.bulk_write(writes, ordered=False)


def page_key(document: Item) -> PageKey:
    """What a page is stored once per: its series (``lineage``) or its crawl, and its URL."""
    if document.get("lineage"):
        return ("lineage", document["lineage"], document["url"])
    return ("crawlid", document["crawlid"], document["url"])


def _stored_before(collection: Any, documents: list[Item]) -> dict[PageKey, Item]:
    """The stored documents of ``documents``' pages, one query per crawl or series."""
    wanted: dict[tuple[str, str], list[str]] = {}
    for document in documents:
        name, value, url = page_key(document)
        wanted.setdefault((name, value), []).append(url)
    found: dict[PageKey, Item] = {}
    for (name, value), urls in wanted.items():
        for previous in collection.find({name: value, "url": {"$in": urls}}):
            found[(name, value, previous["url"])] = previous
    return found


def ensure_series_indexes(collection: Any) -> None:
    """A series' pages are unique on (lineage, URL): a partial index, so items of other
    crawls (no lineage) are not in it. The MongoDB-wire server answers no query through
    a partial index (it scans the collection), so the lookups have an index of their
    own; both are made only once a series stores into the collection."""
    collection.create_index([("lineage", 1), ("url", 1)], unique=True,
                            name="lineage_url_unique",
                            partialFilterExpression={"lineage": {"$exists": True}})
    collection.create_index([("lineage", 1), ("url", 1), ("_id", 1)], name="lineage_url")


def _archived(previous: Item) -> Item:
    version = {name: value for name, value in previous.items() if name != "_id"}
    version.update(item_id=previous["_id"], version=previous.get("version", 1),
                   archived_at=datetime.now(UTC))
    return version


def _prune(versions: Any, archived: list[Item], keep: int) -> None:
    """Keep the newest ``keep`` versions of each page."""
    from pymongo import DeleteMany

    deletes = [DeleteMany({"item_id": version["item_id"],
                           "version": {"$lte": version["version"] - keep}})
               for version in archived if version["version"] > keep]
    if deletes:
        versions.bulk_write(deletes, ordered=False)


@dataclass
class VersionLimits:
    keep: int         # versions kept per page (the current one not counted)
    ttl: float        # seconds a version is kept


def ensure_versions(versions: Any, limits: VersionLimits) -> None:
    versions.create_index([("item_id", 1), ("version", 1)])
    versions.create_index("archived_at", expireAfterSeconds=int(limits.ttl))


class GonePage(NamedTuple):
    """A page answered 404 or 410: marked gone if it was stored before."""

    spider_type: str
    crawlid: str
    url: str
    lineage: str | None = None    # a series' run: its page as the series stored it


def mark_gone(database: Any, gone: list[GonePage] | list[tuple[str, str, str]],
              stored: Stored, stamp: dict[str, Any] | None = None) -> None:
    """Mark stored pages answered 404/410 as gone, with ``stamp`` (``stored_at``,
    ``stored_by``: the firehose's catch-up reads them back); a series' page takes the
    crawl id of the run that found it gone."""
    by_type: dict[str, list[GonePage]] = {}
    for page in dict.fromkeys(GonePage(*entry) for entry in gone):
        by_type.setdefault(page.spider_type, []).append(page)
    fields = {"change": "gone", "gone_at": time.time(), **(stamp or {})}
    fields["changed_at"] = fields["gone_at"]
    for spider_type, pages in by_type.items():
        _mark_gone_in(database[f"items_{spider_type}"], pages, fields, stored)


def _mark_gone_in(collection: Any, pages: list[GonePage], fields: Item,
                  stored: Stored) -> None:
    """The stored pages are read in one query and updated by ``_id``: the MongoDB-wire
    server scans the whole collection for a filter with ``$ne`` (``change`` not gone),
    50 ms a page at a thousand items."""
    from pymongo import UpdateOne

    documents = [{"lineage": page.lineage, "crawlid": page.crawlid, "url": page.url}
                 for page in pages]
    before = _stored_before(collection, documents)
    updates: list[Any] = []
    for page, document in zip(pages, documents, strict=True):
        previous = before.get(page_key(document))
        if previous is None or previous.get("change") == "gone":
            continue
        marked = dict(fields, crawlid=page.crawlid) if page.lineage else fields
        updates.append(UpdateOne({"_id": previous["_id"]}, {"$set": marked}))
        previous.update(marked, previous_hash=previous.get("content_hash"))
        stored.downstream.append(previous)
        stored.count(page.crawlid, "gone")
    if updates:
        collection.bulk_write(updates, ordered=False)
