"""The files a rule's pages link, taken as documents (the rule's ``documents``).

A rule's ``documents`` (docs/rules.md, "Documents") takes the files its pages link (PDF,
DOCX, ...) by extension or content type, with a size limit.

A page's links to files of the rule's ``extensions`` become links of the crawl, as its
pages' links do: filtered, queued, throttled, checked against robots.txt and the URL
guard like any page, fetched once, with the callback ``parse_document``. A page link the
rules take whose answer has one of the rule's ``content_types`` (``/download?id=3``
answered ``application/pdf``) is read as a document too. ``DocumentLimitMiddleware``
gives a document's download the rule's ``max_bytes`` (a bigger one is cancelled as it
comes); ``read_document`` makes a document's item fields: its format, size, content
hash, where it is stored and the page that linked it. crawler/documentstore.py's
pipeline reads its text (``text_of`` in a thread, then ``add_text``) and stores the file,
once per content hash.

A file that cannot be had costs that file only: it is counted
(``crawlcluster/documents/failed/<reason>``: ``too_big``, ``not_a_document``,
``unreadable``, ``store``) and logged, and the crawl goes on.
"""

import hashlib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.http import Response, TextResponse
from scrapy.statscollectors import StatsCollector

from crawler.documenttext import (
    CONTENT_TYPES,
    DocumentText,
    UnreadableDocument,
    bytes_format,
    document_format,
    document_text,
    url_extension,
)
from settings.errors import CrawlClusterError

logger = logging.getLogger(__name__)

CALLBACK = "parse_document"
BODY_FIELD = "_document"       # a document item's file, from the spider to the store
DEFAULT_EXTENSIONS = ("pdf", "docx")
STATS = "crawlcluster/documents"
SAFE_EXTENSION = re.compile(r"[a-z0-9]{1,10}")


@dataclass(frozen=True)
class DocumentRule:
    """A rule's ``documents``, with its defaults filled in."""

    extensions: frozenset[str]        # lower case, without the dot
    content_types: frozenset[str]     # lower case, without parameters
    max_bytes: int


def document_rule(rule: dict[str, Any] | None, default_max_bytes: int) -> DocumentRule | None:
    """The rule's ``documents`` option, or None if it takes no documents."""
    spec = (rule or {}).get("documents")
    if spec is None or spec is False:
        return None
    spec = spec if isinstance(spec, dict) else {}
    return DocumentRule(
        frozenset(e.lower().lstrip(".") for e in spec.get("extensions", DEFAULT_EXTENSIONS)),
        frozenset(t.lower() for t in spec.get("content_types", CONTENT_TYPES)),
        int(spec.get("max_bytes", default_max_bytes)))


def document_urls(urls: Iterable[str], option: DocumentRule) -> list[str]:
    """The URLs among ``urls`` whose path ends with one of the rule's extensions."""
    return [url for url in urls if url_extension(url) in option.extensions]


def is_document_item(item: dict[str, Any]) -> bool:
    """Whether an item is a document's (``read_document``'s fields), not a page's."""
    document = item.get("document")
    return isinstance(document, dict) and "sha256" in document


def content_type(response: Response) -> str:
    """The response's media type, lower case, without parameters ("" if none)."""
    value = response.headers.get(b"Content-Type") or b""
    return value.decode("latin-1").split(";")[0].strip().lower()


def is_document_response(response: Response, option: DocumentRule | None) -> bool:
    """Whether a page's answer is a document the rule takes (by its content type)."""
    return option is not None and content_type(response) in option.content_types


class DocumentFailure(CrawlClusterError):
    """A document not taken: ``reason`` is the stats' and the log's word for why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def count_failure(stats: StatsCollector | None, url: str, reason: str, detail: str) -> None:
    """A document that cost itself: counted by reason, logged."""
    if stats is not None:
        stats.inc_value(f"{STATS}/failed/{reason}")
    # %r: a parser's message may quote the hostile file (new lines, control characters)
    logger.warning("document %s not taken (%s): %r", url[:300], reason, detail[:300])


def read_document(response: Response, option: DocumentRule,
                  linked_from: str | None) -> dict[str, Any]:
    """A document's item fields (``document``, ``linked_from``, an empty ``text`` that
    ``add_text`` fills in); raises ``DocumentFailure`` for an answer that is no document
    (an HTML page) or is over ``max_bytes``."""
    body, media_type = response.body, content_type(response)
    kind = document_format(body, media_type, response.url)
    if len(body) > option.max_bytes:
        raise DocumentFailure("too_big", f"{len(body)} bytes, over max_bytes {option.max_bytes}")
    if isinstance(response, TextResponse) and media_type.startswith(
            ("text/html", "application/xhtml")) and bytes_format(body) is None:
        raise DocumentFailure("not_a_document", f"answered {media_type}, a page")
    digest = hashlib.sha256(body).hexdigest()
    extension = kind or store_extension(url_extension(response.url))
    document: dict[str, Any] = {"format": kind, "content_type": media_type, "bytes": len(body),
                                "sha256": digest, "path": f"full/{digest}.{extension}"}
    fields: dict[str, Any] = {"text": "", "document": document}
    if linked_from:
        fields["linked_from"] = linked_from
    return fields


def store_extension(extension: str) -> str:
    """A URL's extension fit for a store's path (a file name, an S3 key): a hostile URL's
    (``x.%2e%2e%2fetc``, 300 characters) gives ``bin``."""
    return extension if SAFE_EXTENSION.fullmatch(extension) else "bin"


def add_text(item: dict[str, Any], read: DocumentText | UnreadableDocument | None,
             stats: StatsCollector | None) -> None:
    """Put what ``document_text`` made of a document item's file into the item: its
    text, pages and whether it was cut; or, for a file it could not read, the reason
    in ``document.error`` (counted ``unreadable``); None: a format whose text is not
    read (counted ``without_text``)."""
    document = item["document"]
    if read is None:
        if stats is not None:
            stats.inc_value(f"{STATS}/without_text")
    elif isinstance(read, UnreadableDocument):
        count_failure(stats, item["url"], "unreadable", str(read))
        document["error"] = f"unreadable: {read}"
    else:
        item["text"] = read.text
        if read.pages is not None:
            document["pages"] = read.pages
        if read.truncated:
            document["text_truncated"] = True


def text_of(body: bytes, kind: str | None, limits: tuple[int, int] | tuple[int, int, float]
            ) -> DocumentText | UnreadableDocument | None:
    """``document_text`` of a file (None for a format whose text is not read), with the
    refusal given back rather than raised: it runs in a thread (a pipeline's)."""
    if kind is None:
        return None
    try:
        return document_text(body, kind, *limits)
    except UnreadableDocument as exc:
        return exc


class DocumentLimitMiddleware:
    """Gives a document's download its rule's ``max_bytes`` (Scrapy's
    ``download_maxsize``, so a bigger file is cancelled as it comes, by its
    Content-Length if it says), and counts a document cancelled so (``too_big``); the
    cluster's ``TaskStatusMiddleware`` then fails its task for good."""

    def __init__(self, stats: StatsCollector, default_max_bytes: int) -> None:
        self.stats = stats
        self.default_max_bytes = default_max_bytes

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "DocumentLimitMiddleware":
        assert crawler.stats is not None
        return cls(crawler.stats, crawler.settings.getint("CRAWLCLUSTER_DOCUMENTS_MAX_BYTES"))

    def _option(self, request: Request) -> DocumentRule | None:
        info = request.meta.get("crawlcluster")
        if not info or info["task"].get("callback") != CALLBACK:
            return None
        return document_rule(info["config"].get("rule"), self.default_max_bytes)

    def process_request(self, request: Request) -> None:
        option = self._option(request)
        if option is not None:
            request.meta["download_maxsize"] = option.max_bytes

    def process_exception(self, request: Request, exception: Exception) -> None:
        if self._option(request) is not None and "larger than download max size" in str(
                exception):
            count_failure(self.stats, request.url, "too_big", str(exception))
