"""A document's format and text: PDF by pypdf, DOCX by python-docx.

``document_format`` tells the format by the file's first bytes (a server's
``Content-Type`` is often ``application/octet-stream``), then by its content type, then
by the URL's extension. ``document_text`` reads the text, bounded (pages of a PDF,
characters kept, bytes a DOCX may unpack to), and raises ``UnreadableDocument`` for a
file that is broken, encrypted or a zip bomb: a hostile file costs itself only.
"""

import io
import itertools
import logging
import time
import zipfile
from dataclasses import dataclass
from typing import Any

from crawler.links import url_path
from settings.errors import CrawlClusterError

# The formats whose text is read, by content type and by extension.
CONTENT_TYPES = {"application/pdf": "pdf",
                 "application/x-pdf": "pdf",
                 "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx"}
EXTENSIONS = {"pdf": "pdf", "docx": "docx"}
# A DOCX's parts unpacked may be at most this many times its size (a zip bomb's are
# thousands of times theirs; real documents' text parts a few times theirs).
MAX_UNPACK_RATIO = 100
# A DOCX's XML parts unpacked may be at most this many bytes, whatever its size: python-docx
# holds them parsed in memory (a file at max_bytes would otherwise be let unpack to
# gigabytes; a long real document's XML is a few MiB).
MAX_XML_BYTES = 64 * 1024 * 1024


class UnreadableDocument(CrawlClusterError):
    """A document whose text cannot be read: broken, encrypted or a zip bomb."""


@dataclass
class DocumentText:
    text: str
    pages: int | None = None       # a PDF's pages
    truncated: bool = False        # pages or characters left out (the settings' bounds)


def document_format(body: bytes, content_type: str, url: str) -> str | None:
    """``"pdf"``, ``"docx"``, or None for a format whose text is not read: by the file's
    first bytes, else its content type, else the extension of the URL's path."""
    by_bytes = bytes_format(body)
    if by_bytes or body[:4] == b"PK\x03\x04":     # a zip but no DOCX: no other guess
        return by_bytes
    by_type = CONTENT_TYPES.get(content_type.split(";")[0].strip().lower())
    if by_type:
        return by_type
    return EXTENSIONS.get(url_extension(url))


def bytes_format(body: bytes) -> str | None:
    """``"pdf"`` or ``"docx"`` if the file's first bytes say so, else None."""
    if b"%PDF-" in body[:1024]:
        return "pdf"
    if body[:4] == b"PK\x03\x04" and _is_docx(body):
        return "docx"
    return None


def url_extension(url: str) -> str:
    """The extension of a URL's path, lower case, without its dot ("" if none)."""
    name = url_path(url).rsplit("/", 1)[-1]
    return name.rpartition(".")[2].lower() if "." in name else ""


def _is_docx(body: bytes) -> bool:
    # A part's name stands in the zip's headers as it is. The spider asks this of every
    # file as it comes: parsing the directory of a hostile zip (200,000 empty entries in
    # 17 MB) held up its reactor for a second; a zip that only seems to be a DOCX is
    # found unreadable later, in a reader thread.
    return b"word/document.xml" in body


def document_text(body: bytes, kind: str, max_pages: int, max_chars: int,
                  max_seconds: float = 30.0) -> DocumentText:
    """The text of a ``kind`` (``document_format``) document, a PDF's pages read while
    ``max_seconds`` last; raises ``UnreadableDocument`` naming what is wrong with it."""
    # A parser meets every kind of broken file; whatever it raises, the file is unreadable.
    try:
        if kind == "pdf":
            result = _pdf_text(body, max_pages, time.monotonic() + max_seconds)
        else:
            result = _docx_text(body)
    except UnreadableDocument:
        raise
    except Exception as exc:  # noqa: BLE001
        raise UnreadableDocument(f"{kind}: {type(exc).__name__}: {exc}"[:300]) from None
    if len(result.text) > max_chars:
        result.text, result.truncated = result.text[:max_chars], True
    return result


def _pdf_text(body: bytes, max_pages: int, deadline: float) -> DocumentText:
    from pypdf import PdfReader

    logging.getLogger("pypdf").setLevel(logging.ERROR)   # a warning per odd object
    reader = PdfReader(io.BytesIO(body))
    if reader.is_encrypted and not reader.decrypt(""):
        raise UnreadableDocument("pdf: encrypted")
    texts = []
    for page in itertools.islice(reader.pages, max_pages):
        if time.monotonic() > deadline:        # a page crafted to be slow costs the rest
            break
        texts.append((page.extract_text() or "").strip())
    count = len(reader.pages)
    return DocumentText("\n\n".join(text for text in texts if text), count,
                        len(texts) < count)


def _check_unpacked_size(body: bytes) -> None:
    """Refuse a zip bomb, by the sizes its entries declare (Python's zipfile unpacks no
    entry past its declared size)."""
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        entries = archive.infolist()
    unpacked = sum(info.file_size for info in entries)
    if unpacked > MAX_UNPACK_RATIO * max(len(body), 64 * 1024):
        raise UnreadableDocument(f"docx: unpacks to {unpacked} bytes from {len(body)}")
    xml = sum(info.file_size for info in entries if info.filename.endswith((".xml", ".rels")))
    if xml > MAX_XML_BYTES:
        raise UnreadableDocument(f"docx: its XML unpacks to {xml} bytes, over {MAX_XML_BYTES}")


def _docx_text(body: bytes) -> DocumentText:
    import docx

    _check_unpacked_size(body)
    document: Any = docx.Document(io.BytesIO(body))
    lines = [paragraph.text for paragraph in document.paragraphs]
    for table in document.tables:
        for row in table.rows:
            lines.append("\t".join(cell.text for cell in row.cells))
    return DocumentText("\n".join(line for line in lines if line.strip()))
