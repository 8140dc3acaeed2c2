"""Documents' files: their text read, and the files stored once per content hash.

The text is read in the pipeline's own threads (crawler/documenttext.py), so a large PDF
does not hold up the spider's reactor, and slow files (a hostile PDF may take minutes)
occupy those threads only, never the reactor's pool that resolves host names and writes
items. The files go to one of Scrapy's FilesPipeline stores (a directory,
S3 or an S3-compatible store, Google Cloud Storage, FTP) or a GridFS bucket, as
``CRAWLCLUSTER_DOCUMENTS_STORE`` names it.

A document's path is ``full/<sha256 of its bytes>.<format>`` (crawler/documents.py), so
the same file linked by two URLs, or fetched by two crawls, is one stored file: a path
the store has already is not written again. The item keeps the path and says which it
was (``document.stored``: ``new`` or ``already``); a store that fails costs that file
(``crawlcluster/documents/failed/store``, logged, ``document.store_error``), never the
item nor the crawl.
"""

import asyncio
import contextlib
import io
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from scrapy.crawler import Crawler
from scrapy.pipelines.files import FilesPipeline, FSFilesStore
from scrapy.utils.defer import maybe_deferred_to_future
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread

from crawler.context import JobContext
from crawler.documents import (
    BODY_FIELD,
    STATS,
    add_text,
    count_failure,
    is_document_item,
    text_of,
)
from crawler.documenttext import DocumentText, UnreadableDocument

logger = logging.getLogger(__name__)

Item = dict[str, Any]


class GridFSFilesStore:
    """A GridFS bucket as a FilesPipeline store: a file's ``_id`` is its path, so two
    jobs storing the same file at once store it once."""

    def __init__(self, database: Any, bucket: str) -> None:
        import gridfs

        self.files = database[f"{bucket}.files"]
        self.bucket = gridfs.GridFSBucket(database, bucket_name=bucket)

    def stat_file(self, path: str, info: Any) -> dict[str, Any]:
        found = self.files.find_one({"_id": path}, {"uploadDate": 1})
        return {"last_modified": found["uploadDate"].timestamp()} if found else {}

    def persist_file(self, path: str, buf: io.BytesIO, info: Any,
                     meta: dict[str, Any] | None = None,
                     headers: dict[str, str] | None = None) -> None:
        from gridfs.errors import FileExists

        with contextlib.suppress(FileExists):       # another job stored it first
            self.bucket.upload_from_stream_with_id(path, path, buf.getvalue(), metadata=meta)


class DirectoryFilesStore(FSFilesStore):
    """Scrapy's directory store, each file written whole or not at all (to a temporary
    name, then renamed: a job killed half-way leaves no half file under a hash that
    would be taken as stored), and a stored file known by its existence alone (Scrapy's
    reads the whole file for a checksum the content hash makes needless)."""

    def persist_file(self, path: Any, buf: io.BytesIO, info: Any,
                     meta: dict[str, Any] | None = None,
                     headers: dict[str, str] | None = None) -> None:
        target = self._get_filesystem_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
        partial.write_bytes(buf.getvalue())
        os.replace(partial, target)

    def stat_file(self, path: Any, info: Any) -> Any:
        try:
            return {"last_modified": self._get_filesystem_path(path).stat().st_mtime}
        except OSError:
            return {}


def files_store(crawler: Crawler, uri: str, context: JobContext | None) -> Any:
    """The store ``uri`` names (``CRAWLCLUSTER_DOCUMENTS_STORE``): ``gridfs://<bucket>``
    in the job's MongoDB database, else the FilesPipeline store of its scheme (a path or
    ``file://`` a directory, ``s3://``, ``gs://``, ``ftp://``), configured from Scrapy's
    settings (``AWS_*``, ``GCS_PROJECT_ID``, ``FTP_*``)."""
    scheme = urlsplit(uri).scheme
    if scheme == "gridfs":
        if context is None:
            raise ValueError("a gridfs:// store needs the cluster's MongoDB")
        database = context.mongo[crawler.settings["CRAWLCLUSTER_MONGODB_DATABASE"]]
        return GridFSFilesStore(database, urlsplit(uri).netloc or "documents")
    if scheme in ("", "file"):
        return DirectoryFilesStore(os.path.expanduser(uri.removeprefix("file://")))
    if scheme not in FilesPipeline.STORE_SCHEMES:
        raise ValueError(f"CRAWLCLUSTER_DOCUMENTS_STORE: no store for {scheme}:// (a path, "
                         f"file://, s3://, gs://, ftp:// or gridfs://)")
    FilesPipeline._update_stores(crawler.settings)
    return FilesPipeline.STORE_SCHEMES[scheme](uri)


class DocumentPipeline:
    """Reads the text of each document item's file (its ``_document`` bytes, taken out
    of the item) in a thread, and stores the file unless the store has its path
    already; other items pass as they are."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.uri = str(crawler.settings["CRAWLCLUSTER_DOCUMENTS_STORE"])
        self.limits = (crawler.settings.getint("CRAWLCLUSTER_DOCUMENTS_MAX_PAGES"),
                       crawler.settings.getint("CRAWLCLUSTER_DOCUMENTS_MAX_TEXT"),
                       crawler.settings.getfloat("CRAWLCLUSTER_DOCUMENTS_READ_SECONDS"))
        self._store: Any = None         # built at the first document: most crawls have none
        self.readers = ThreadPoolExecutor(
            crawler.settings.getint("CRAWLCLUSTER_DOCUMENTS_READERS"),
            thread_name_prefix="document-text")
        self.writing: dict[str, asyncio.Lock] = {}     # path -> held while it is stored

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "DocumentPipeline":
        return cls(crawler)

    def close_spider(self) -> None:
        self.readers.shutdown(wait=False, cancel_futures=True)

    @property
    def store(self) -> Any:
        if self._store is None:
            context = JobContext.of(self.crawler) if self.uri.startswith("gridfs:") else None
            self._store = files_store(self.crawler, self.uri, context)
        return self._store

    async def process_item(self, item: Item) -> Item:
        if not is_document_item(item):      # a page's (a rule may name a field _document)
            return item
        body = item.pop(BODY_FIELD)
        document = item["document"]
        stats = self.crawler.stats
        read = await self.read_text(body, document["format"])
        add_text(item, read, stats)
        try:
            document["stored"] = await self._store_once(document["path"], body, item["url"])
        except Exception as exc:  # noqa: BLE001 - any store's error (disk, network, auth)
            count_failure(stats, item["url"], "store", f"{type(exc).__name__}: {exc}")
            document["store_error"] = f"{type(exc).__name__}: {exc}"[:300]
            return item
        if stats is not None:
            stats.inc_value(f"{STATS}/stored/{document['stored']}")
        return item

    async def read_text(self, body: bytes, kind: str | None
                        ) -> DocumentText | UnreadableDocument | None:
        """``text_of`` the file in one of the pipeline's reader threads: a parser's CPU
        (seconds for a large PDF) off the reactor, which goes on crawling."""
        return await asyncio.wrap_future(
            self.readers.submit(text_of, body, kind, self.limits))

    async def _store_once(self, path: str, body: bytes, url: str) -> str:
        """Store the file at ``path`` unless the store has it: ``"new"`` or ``"already"``.
        One file at a time per path in this process (two items of one content, in the
        pipeline at once, would both find it missing); two jobs at the same moment may
        both write it, the same bytes under the same name."""
        lock = self.writing.setdefault(path, asyncio.Lock())
        try:
            async with lock:
                if await self._call("stat_file", path, None):
                    return "already"
                await self._call("persist_file", path, io.BytesIO(body), None, {"url": url})
                return "new"
        finally:
            if not lock.locked():
                self.writing.pop(path, None)

    async def _call(self, method: str, *args: Any) -> Any:
        """A store's method: off the reactor for the stores that block (a directory,
        GridFS), as it is for those that give a Deferred (S3, GCS, FTP)."""
        store = self.store
        if isinstance(store, (DirectoryFilesStore, GridFSFilesStore)):
            return await maybe_deferred_to_future(deferToThread(getattr(store, method), *args))
        result = getattr(store, method)(*args)
        if isinstance(result, Deferred):
            try:
                return await maybe_deferred_to_future(result)
            except Exception:
                if method == "stat_file":      # S3 answers a missing key with an error
                    return {}
                raise
        return result
