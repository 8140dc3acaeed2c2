"""Item pipelines: encoding, cleaning, main text, MongoDB (thesis 4.3.1.4).

Pages are decoded by Scrapy before the spiders see them: the HTTP header's
charset, then a BOM, then ``<meta charset>``, then detection (w3lib), with
GBK/GB2312 read as GB18030, so Chinese pages come out as correct Unicode.
``EncodingPipeline`` then normalizes every text field (NFC, trimmed).
``CleaningPipeline`` drops items missing a required field, logging the crawl,
the URL and the fields. ``MainTextPipeline`` adds ``main_text`` for pages.
``MongoPipeline`` inserts items in batches, one collection per spider type,
unique on (crawlid, url), so a page crawled twice is stored once, and keeps
one record per crawl; a task is acknowledged only after its items are stored.
"""

import logging
import time
import unicodedata
from collections import Counter
from typing import Any

from scrapy.crawler import Crawler
from scrapy.exceptions import DropItem
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from crawler.context import ClusterComponent
from crawler.documents import is_document_item
from crawler.fields import missing_fields
from crawler.firehose import Firehose
from crawler.maintext import Described, extract_main_text, parse_page
from crawler.metrics import count_recorded
from crawler.pagemeta import page_meta, prepare_date_guess
from crawler.versions import (
    GonePage,
    Stored,
    VersionLimits,
    ensure_series_indexes,
    ensure_versions,
    mark_gone,
    mark_new,
    page_key,
    store_again,
)
from master.rules import field_names
from master.siteconfig import domain_of

logger = logging.getLogger(__name__)

INTERNAL = ("_task", "_body")
Item = dict[str, Any]        # a spider's item: its fields, url, crawlid, spider_type, ...
Progress = dict[str, Counter[str]]    # crawlid -> pages, items, failures not yet recorded


def _normalize(value: Any) -> Any:
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value).strip()
    return value


class EncodingPipeline:
    def process_item(self, item: Item) -> Item:
        for name, value in list(item.items()):
            if name not in INTERNAL:
                item[name] = _normalize(value)
        return item


class CleaningPipeline(ClusterComponent):
    def process_item(self, item: Item) -> Item:
        if is_document_item(item):     # a linked file's: the rule's fields are its page's
            return item
        config = self.context.crawls.load(item["crawlid"]) or {}
        rule = config.get("rule")
        missing = missing_fields(config["spider_type"], rule, item) if rule else []
        fields = field_names(config["spider_type"], rule) if rule else []
        self.context.tracker.sites.item(item["crawlid"], domain_of(item.get("url", "")),
                                        fields, item, missing)
        if missing:
            self.crawler.stats.inc_value("crawlcluster/items/incomplete")
            if "_task" in item:
                self.context.tracker.item_finished(item["_task"])
            reasons = item.get("field_errors", {})      # a processor's (crawler/fields.py)
            raise DropItem(f"incomplete item dropped: crawl {item['crawlid']}, "
                           f"{item['url']}, missing " + ", ".join(
                               f"{name} ({reasons[name]})" if name in reasons else name
                               for name in missing))
        return item


class MainTextPipeline:
    """``main_text`` and ``meta`` (crawler/pagemeta.py) of pages with fields."""

    def __init__(self, meta: bool = True, guess_date: bool = True) -> None:
        self.meta, self.guess_date = meta, guess_date
        if meta and guess_date:
            prepare_date_guess()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "MainTextPipeline":
        settings = crawler.settings
        return cls(settings.getbool("CRAWLCLUSTER_PAGE_META", True),
                   settings.getbool("CRAWLCLUSTER_PAGE_META_DATE_GUESS", True))

    def process_item(self, item: Item) -> Item:
        body = item.pop("_body", None)     # the page's HTML, or its parsed lxml tree
        if body is None:                   # (a tree's truth value is its child count)
            return item
        root = parse_page(body)            # parsed once, for both
        if root is None:
            item["main_text"] = ""
            return item
        described = Described() if self.meta else None     # gathered by the text's walk
        text = extract_main_text(root, described=described)
        if described is not None:
            item["meta"] = page_meta(root, item.get("url", ""), self.guess_date, described)
        item["main_text"] = text
        return item


def _add_progress(progress: Progress, more: Progress) -> None:
    """Add ``{crawlid: Counter}`` counts into ``progress``."""
    for crawlid, counts in more.items():
        progress.setdefault(crawlid, Counter()).update(counts)


def insert_items(database: Any, items: list[Item], ensured: set[str],
                 stamp: dict[str, Any] | None = None, by_job: bool = False,
                 limits: VersionLimits | None = None) -> Stored:
    """Store items in ``items_<spider type>`` in bulk, each with ``stamp``'s fields
    (``stored_at``, ``stored_by``) and its version fields (crawler/versions.py); return
    what to send downstream (new and changed items) and the counts per crawl.

    Pages stored for the first time (nearly all, in a crawl) are one unordered insert:
    inserts cost the server far less than upserts. The unique index on (crawlid, url),
    and for a series' items on (lineage, url), turns a page stored before into a
    duplicate-key error; only those are read back, in one query, and updated.
    ``ensured`` remembers the collections whose indexes were created; ``by_job`` adds
    the index the firehose reads a job's items back by."""
    from pymongo.errors import BulkWriteError

    stamp = stamp or {"stored_at": time.time()}
    limits = limits or VersionLimits(keep=10, ttl=90 * 86400)
    by_type: dict[str, list[Item]] = {}
    # one document per page a batch: the last fetched (a canonical URL reached twice)
    latest = {(item["spider_type"], *page_key(item)): item for item in items}
    for item in latest.values():
        document = {k: v for k, v in item.items() if k not in INTERNAL}
        document.update(stamp)
        mark_new(document, stamp)
        by_type.setdefault(item["spider_type"], []).append(document)
    stored = Stored()
    for spider_type, documents in by_type.items():
        collection = database[f"items_{spider_type}"]
        if spider_type not in ensured:
            _ensure_indexes(database, spider_type, by_job, limits)
            ensured.add(spider_type)
        if f"{spider_type} series" not in ensured and any(d.get("lineage") for d in documents):
            ensure_series_indexes(collection)
            ensured.add(f"{spider_type} series")
        stored_before: set[int] = set()
        try:
            collection.insert_many(documents, ordered=False)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", ())
            if exc.details.get("writeConcernErrors") or any(e.get("code") != 11000
                                                             for e in errors):
                raise
            stored_before = {error["index"] for error in errors}
        for n, document in enumerate(documents):
            if n not in stored_before:
                stored.downstream.append(document)
                stored.count(document["crawlid"], "new")
        again = [d for n, d in enumerate(documents) if n in stored_before]
        if again:
            store_again(collection, database[f"versions_{spider_type}"], again, limits,
                        stored)
    return stored


def _ensure_indexes(database: Any, spider_type: str, by_job: bool,
                    limits: VersionLimits) -> None:
    collection = database[f"items_{spider_type}"]
    collection.create_index([("crawlid", 1), ("url", 1)], unique=True)
    if by_job:
        collection.create_index([("stored_by", 1), ("stored_at", 1)])
    ensure_versions(database[f"versions_{spider_type}"], limits)


class MongoPipeline(ClusterComponent):
    """Batched inserts in a worker thread (the reactor keeps crawling meanwhile);
    each stored batch finishes its items' tasks in the tracker. A batch is written
    when full or when its first item has waited CRAWLCLUSTER_MONGODB_FLUSH_AFTER
    (a MongoDB-wire server spends less per item on larger batches). The crawl
    records are brought up to date at most every ``RECORD_EVERY`` seconds, and
    once more when the spider closes."""

    RECORD_EVERY = 1.0

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        self.batch: list[Item] = []
        self.batch_since = 0.0     # when the batch's first item came
        self.ensured: set[str] = set()
        self.writing: Deferred[Any] | None = None     # the write in flight
        self.last_record = 0.0
        self.closing = False
        self.stored_at = 0.0       # the last batch's; every batch gets a later one
        self.firehose: Firehose | None = None

    def open_spider(self) -> None:
        self.context.periodic.append(self.flush)    # the scheduler's round flushes too
        if self.context.settings.getbool("CRAWLCLUSTER_FIREHOSE"):
            self.firehose = Firehose(self.context)

    @property
    def database(self) -> Any:
        context = self.context
        return context.mongo[context.settings["CRAWLCLUSTER_MONGODB_DATABASE"]]

    def process_item(self, item: Item) -> Item:
        if not self.batch:
            self.batch_since = time.monotonic()
        self.batch.append(item)
        if len(self.batch) >= self.context.settings.getint("CRAWLCLUSTER_MONGODB_BATCH"):
            self.flush()
        return item

    def _batch_due(self) -> bool:
        settings = self.context.settings
        return bool(self.batch) and (
            self.closing or len(self.batch) >= settings.getint("CRAWLCLUSTER_MONGODB_BATCH")
            or time.monotonic() - self.batch_since
            >= settings.getfloat("CRAWLCLUSTER_MONGODB_FLUSH_AFTER"))

    def flush(self) -> Deferred[Any] | None:
        """Start writing the batch, when due, and the crawl records, when due (with
        whatever batch there is), in a thread, unless a write is in flight."""
        from twisted.internet.threads import deferToThread

        if self.writing is not None:
            return self.writing
        tracker = self.context.tracker
        record_due = self.closing or time.monotonic() - self.last_record >= self.RECORD_EVERY
        if not self._batch_due() and not (record_due and tracker.progress) \
                and not self.context.gone:
            return None
        batch, self.batch = self.batch, []
        gone, self.context.gone = self.context.gone, []
        progress: Progress = {}
        if record_due:
            progress, tracker.progress = tracker.progress, {}
            self.last_record = time.monotonic()
        self.writing = deferToThread(self._write, batch, gone, progress)
        self.writing.addBoth(self._written, batch, gone, progress)
        return self.writing

    def _write(self, batch: list[Item], gone: list[GonePage],
               progress: Progress) -> Stored:
        """Store the batch, mark the gone pages, record the crawls; return what was
        stored (what to send downstream, the counts)."""
        stored = Stored()
        if batch or gone:
            self.stored_at = max(time.time(), self.stored_at + 1e-6)
        stamp = {"stored_at": self.stored_at, "stored_by": self.context.job}
        if batch:
            stored = insert_items(self.database, batch, self.ensured, stamp,
                                  by_job=self.firehose is not None, limits=self._limits())
        if gone:
            mark_gone(self.database, gone, stored, stamp)
        if progress:
            self._record_crawls(progress)
        return stored

    def _limits(self) -> VersionLimits:
        settings = self.context.settings
        return VersionLimits(keep=settings.getint("CRAWLCLUSTER_VERSIONS_KEEP"),
                             ttl=settings.getfloat("CRAWLCLUSTER_VERSIONS_TTL"))

    def _written(self, result: Any, batch: list[Item], gone: list[GonePage],
                 progress: Progress) -> None:
        self.writing = None
        tracker = self.context.tracker
        if isinstance(result, Failure):
            # Kept for the next flush; their tasks stay open, so nothing is acknowledged.
            logger.error("MongoDB write failed, %d items kept for the next try: %s",
                         len(batch), result.getErrorMessage())
            self.batch[:0] = batch
            self.context.gone[:0] = gone
            self.batch_since = 0.0          # tried again at the next flush
            _add_progress(tracker.progress, progress)
            return
        if self.firehose is not None and result.downstream:
            self.firehose.put(result.downstream, self.stored_at)
        for item in batch:
            if "_task" in item:
                tracker.item_finished(item["_task"])
            tracker.progress.setdefault(item["crawlid"], Counter())["items"] += 1
        self.crawler.stats.inc_value("crawlcluster/items/stored", len(batch))
        count_recorded(self.context.spider_type, {"items": len(batch)})
        for crawlid, counts in result.counts.items():
            tracker.changes.setdefault(crawlid, Counter()).update(counts)
            for change, count in counts.items():
                self.crawler.stats.inc_value(f"crawlcluster/items/{change}", count)

    async def close_spider(self) -> None:
        """Write what is left (a few tries; unwritten items' tasks stay leased)."""
        from scrapy.utils.defer import maybe_deferred_to_future

        self.closing = True        # from now on every flush records the crawls too
        for _ in range(10):
            if self.writing is not None:
                await maybe_deferred_to_future(self.writing)
            elif self.batch:
                self.flush()
            else:
                break
        if self.firehose is not None:
            from twisted.internet.threads import deferToThread

            timeout = self.context.settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT") / 2
            await maybe_deferred_to_future(deferToThread(self.firehose.close, timeout))

    def _record_crawls(self, progress: Progress) -> None:
        """Seed 004's task table: per crawl its pages (in all and per node), items,
        failures, jobs, nodes, and ``finished_at`` once nothing of it is pending (removed
        if work comes back)."""
        from pymongo import UpdateOne

        context = self.context
        now = time.time()
        drained = self._drained(progress)
        node_field = "pages_by_node." + mongo_field_name(context.node)
        updates: list[UpdateOne] = []
        for crawlid, counts in progress.items():
            increments = {field: counts[field] for field in ("pages", "items", "failures")}
            increments[node_field] = counts["pages"]
            update: dict[str, dict[str, Any]] = {"$setOnInsert": {"started_at": now},
                                                 "$set": {"last_activity_at": now},
                                                 "$inc": increments,
                                                 "$addToSet": {"jobs": context.job,
                                                               "nodes": context.host}}
            if crawlid in drained:
                update["$set"]["finished_at"] = now
            else:
                update["$unset"] = {"finished_at": ""}
            updates.append(UpdateOne({"crawlid": crawlid}, update, upsert=True))
        self.database["crawls"].bulk_write(updates, ordered=False)

    def _drained(self, crawlids: Progress) -> set[str]:
        """The crawls with no task pending anywhere (queued, in a job's queue, leased)."""
        totals = self.context.crawls.pending_totals(list(crawlids))
        return {crawlid for crawlid, pending in totals.items() if pending <= 0}


def mongo_field_name(name: str) -> str:
    """``name`` usable as one step of a MongoDB field path (no dots, no leading ``$``)."""
    return name.replace(".", "_").lstrip("$") or "_"
