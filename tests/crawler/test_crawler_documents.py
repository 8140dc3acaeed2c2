"""Documents, piece by piece: a file's format and text, a rule's ``documents``, a
document's item fields, and the stores (a directory; GridFS on the real MongoDB). The
crawl of a notices site: test_crawler_documents_crawl.py."""

import hashlib
import io
import zipfile

import pytest
from pypdf import PdfReader, PdfWriter
from scrapy.http import HtmlResponse, Response
from scrapy.pipelines.files import S3FilesStore
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawler.documents import (
    DocumentFailure,
    add_text,
    document_rule,
    document_urls,
    is_document_item,
    is_document_response,
    read_document,
    text_of,
)
from crawler.documentstore import DirectoryFilesStore, GridFSFilesStore, files_store
from crawler.documenttext import UnreadableDocument, document_format, document_text
from manager.local.documentfiles import docx_file, pdf_file
from master.rules import RuleError, validate_rule

PDF = pdf_file([["Tender 42 for bridges", "Deadline: 3 March"], ["Annex (page two)"]])
DOCX = docx_file(["Regulation 12 on water", "Règlement 12 sur l'eau", "水资源条例第十二条"])
LIMITS = (500, 1_000_000)
OPTION = document_rule({"documents": {"max_bytes": 10_000}}, 1 << 20)


def response(url, body, content_type="application/octet-stream", cls=Response):
    return cls(url, body=body, headers={"Content-Type": content_type})


# --- format and text ---------------------------------------------------------------------

def test_a_document_is_known_by_its_bytes_before_its_type_and_its_name():
    assert document_format(PDF, "application/octet-stream", "http://a.test/x") == "pdf"
    assert document_format(DOCX, "text/plain", "http://a.test/x.pdf") == "docx"
    assert document_format(b"??", "application/pdf; q=1", "http://a.test/x") == "pdf"
    assert document_format(b"??", "", "http://a.test/NOTICE.DOCX?v=2") == "docx"
    assert document_format(b"??", "application/octet-stream", "http://a.test/x.xlsx") is None
    other_zip = io.BytesIO()
    with zipfile.ZipFile(other_zip, "w") as archive:
        archive.writestr("xl/workbook.xml", "<workbook/>")
    assert document_format(other_zip.getvalue(), "", "http://a.test/x.xlsx") is None


def test_a_files_format_is_told_without_unpacking_it(monkeypatch):
    """The spider tells a file's format as it comes, on its reactor: a hostile zip's
    directory (hundreds of thousands of entries) is not parsed there."""
    from crawler import documenttext

    def no_unpacking(*args, **kwargs):
        raise AssertionError("the zip was opened")

    monkeypatch.setattr(documenttext.zipfile, "ZipFile", no_unpacking)
    assert document_format(DOCX, "", "http://a.test/x") == "docx"
    assert document_format(b"PK\x03\x04 xl/workbook.xml", "", "http://a.test/x") is None


def test_the_text_of_a_pdf_page_by_page_and_of_a_docx_in_any_script():
    pdf = document_text(PDF, "pdf", *LIMITS)
    assert pdf.text == "Tender 42 for bridges\nDeadline: 3 March\n\nAnnex (page two)"
    assert (pdf.pages, pdf.truncated) == (2, False)
    docx = document_text(DOCX, "docx", *LIMITS)
    assert docx.text.splitlines() == ["Regulation 12 on water", "Règlement 12 sur l'eau",
                                      "水资源条例第十二条"]


def test_the_text_read_is_bounded_by_pages_and_characters():
    first_page = document_text(PDF, "pdf", 1, 1_000_000)
    assert first_page.text == "Tender 42 for bridges\nDeadline: 3 March" and first_page.truncated
    short = document_text(DOCX, "docx", 500, 10)
    assert short.text == "Regulatio" + "n" and short.truncated


def page_tree_pdf(pages_per_node: int, nodes: int) -> bytes:
    """A PDF whose page tree has ``nodes`` nodes of ``pages_per_node`` tiny pages each."""
    kids = b"<</Type/Page>>" * pages_per_node
    objects = [b"<</Type/Catalog/Pages 2 0 R>>", b"<</Type/Pages/Count %d/Kids [%s]>>" % (
        pages_per_node * nodes, b" ".join(b"%d 0 R" % (3 + i) for i in range(nodes)))]
    objects += [b"<</Type/Pages/Parent 2 0 R/Count %d/Kids [%s]>>" % (pages_per_node, kids)
                ] * nodes
    out, offsets = io.BytesIO(b"%PDF-1.4\n"), []
    out.seek(0, io.SEEK_END)
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    out.write(b"trailer\n<</Size %d/Root 1 0 R>>\nstartxref\n%d\n%%%%EOF\n"
              % (len(objects) + 1, xref))
    return out.getvalue()


def test_a_pdf_of_too_many_pages_is_unreadable_not_unpacked_into_memory():
    """120,000 pages in 1.7 MB would be some 200 MB of page objects: pypdf (>= 7.1) stops
    its page tree at 100,000 entries."""
    assert document_text(page_tree_pdf(3, 2), "pdf", 5, 1000).pages == 6
    with pytest.raises(UnreadableDocument, match="page tree entry limit"):
        document_text(page_tree_pdf(60_000, 2), "pdf", 5, 1000)


def test_a_pdf_is_read_only_while_its_time_lasts():
    unread = document_text(PDF, "pdf", 500, 1_000_000, max_seconds=0.0)
    assert (unread.text, unread.pages, unread.truncated) == ("", 2, True)
    assert document_text(PDF, "pdf", 500, 1_000_000, max_seconds=60.0).truncated is False


@pytest.mark.parametrize("body, kind, says", [
    (PDF[:len(PDF) // 2], "pdf", "pdf: "),                      # cut off
    (b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog", "pdf", "pdf: "),   # a header and nothing
    (b"PK\x03\x04 not a zip", "docx", "docx: BadZipFile"),
])
def test_a_broken_file_is_unreadable_naming_why(body, kind, says):
    with pytest.raises(UnreadableDocument, match=says):
        document_text(body, kind, *LIMITS)


def test_an_encrypted_pdf_and_a_zip_bomb_are_unreadable():
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(PDF)))
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    encrypted = io.BytesIO()
    writer.write(encrypted)
    with pytest.raises(UnreadableDocument, match="encrypted"):
        document_text(encrypted.getvalue(), "pdf", *LIMITS)
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"<w:document>" + b" " * 50_000_000)
    with pytest.raises(UnreadableDocument, match="unpacks to 50000012 bytes"):
        document_text(bomb.getvalue(), "docx", *LIMITS)


def test_a_large_docx_whose_xml_unpacks_past_the_bound_is_unreadable():
    import os

    large = io.BytesIO()      # 1 MiB of picture keeps it under the ratio, not under the bound
    with zipfile.ZipFile(large, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/media/image1.png", os.urandom(1 << 20), zipfile.ZIP_STORED)
        archive.writestr("word/document.xml", b"<w:document>" + b" " * 70_000_000)
    with pytest.raises(UnreadableDocument, match="its XML unpacks to 70000012 bytes"):
        document_text(large.getvalue(), "docx", *LIMITS)


# --- the rule's option -------------------------------------------------------------------

def test_a_rule_takes_documents_only_if_it_says_so_with_its_defaults_filled_in():
    assert document_rule({"rules": []}, 100) is None
    option = document_rule({"documents": {}}, 100)
    assert option.extensions == {"pdf", "docx"} and option.max_bytes == 100
    assert "application/pdf" in option.content_types
    option = document_rule({"documents": {"extensions": [".PDF", "odt"], "max_bytes": 7,
                                           "content_types": ["Application/X-Foo"]}}, 100)
    assert (option.extensions, option.content_types, option.max_bytes) == (
        {"pdf", "odt"}, {"application/x-foo"}, 7)
    assert document_urls(["http://a.test/a.pdf", "http://a.test/b.PDF?x=1",
                          "http://a.test/c.pdf.html", "http://a.test/d.odt#p2",
                          "http://a.test/pdf"], option) == [
        "http://a.test/a.pdf", "http://a.test/b.PDF?x=1", "http://a.test/d.odt#p2"]


@pytest.mark.parametrize("documents, field", [
    ({"extensions": []}, "rule.documents.extensions"),
    ({"extensions": ["p df"]}, "rule.documents.extensions[0]"),
    ({"content_types": ["text/html"]}, "rule.documents.content_types[0]"),
    ({"content_types": ["pdf"]}, "rule.documents.content_types[0]"),
    ({"max_bytes": 0}, "rule.documents.max_bytes"),
    ({"max_bytes": "1MB"}, "rule.documents.max_bytes"),
    ({"max_bytes": 1 << 30}, "rule.documents.max_bytes"),
    ({"size": 1}, "rule.documents"),
    ("pdf", "rule.documents"),
])
def test_a_bad_documents_option_is_refused_naming_the_value(documents, field):
    for spider_type, rule in (("universal", {"rules": [{"allow": "/"}]}),
                              ("precise", {"first_page_xpath": {"list_from": "//li"}})):
        with pytest.raises(RuleError) as refused:
            validate_rule(spider_type, {**rule, "documents": documents})
        assert refused.value.field == field, str(refused.value)


# --- a document's item fields ------------------------------------------------------------

def test_a_documents_fields_name_its_hash_path_text_and_the_page_that_linked_it():
    stats = MemoryStatsCollector(get_crawler())
    item = {"url": "http://a.test/n.pdf", **read_document(
        response("http://a.test/n.pdf", PDF), OPTION, "http://a.test/list.html")}
    document = item["document"]
    assert item["linked_from"] == "http://a.test/list.html" and item["text"] == ""
    assert document["path"] == f"full/{document['sha256']}.pdf"
    assert document["sha256"] == hashlib.sha256(PDF).hexdigest()
    assert (document["format"], document["bytes"]) == ("pdf", len(PDF))
    assert is_document_item(item) and not is_document_item({"document": "a field"})
    add_text(item, text_of(PDF, "pdf", LIMITS), stats)
    assert item["text"].startswith("Tender 42") and document["pages"] == 2
    assert "text_truncated" not in document and "error" not in document
    add_text(item, text_of(PDF, "pdf", (1, 100)), stats)
    assert document["text_truncated"] is True


def test_a_file_that_costs_itself_is_counted_with_its_reason():
    stats = MemoryStatsCollector(get_crawler())
    broken = {"url": "http://a.test/b.pdf", **read_document(
        response("http://a.test/b.pdf", PDF[:300]), OPTION, None)}
    add_text(broken, text_of(PDF[:300], broken["document"]["format"], LIMITS), stats)
    assert broken["text"] == "" and broken["document"]["error"].startswith("unreadable: pdf")
    assert stats.get_value("crawlcluster/documents/failed/unreadable") == 1
    with pytest.raises(DocumentFailure) as big:
        read_document(response("http://a.test/big.pdf", PDF + b" " * 10_000), OPTION, None)
    assert big.value.reason == "too_big"
    with pytest.raises(DocumentFailure) as page:
        read_document(response("http://a.test/moved.pdf", b"<html>Log in</html>",
                               "text/html", HtmlResponse), OPTION, None)
    assert page.value.reason == "not_a_document"
    sheet = {"url": "http://a.test/s.xlsx", **read_document(
        response("http://a.test/s.xlsx", b"PK\x03\x04..."), OPTION, None)}
    assert sheet["document"]["format"] is None and sheet["document"]["path"].endswith(".xlsx")
    for hostile in ("x.%2e%2e%2fetc", "x." + "z" * 300, "x.p%0Ad"):
        odd = read_document(response(f"http://a.test/{hostile}", b"PK\x03\x04..."), OPTION, None)
        assert odd["document"]["path"] == f"full/{odd['document']['sha256']}.bin", hostile
    add_text(sheet, text_of(b"PK\x03\x04...", None, LIMITS), stats)
    assert sheet["text"] == "" and "error" not in sheet["document"]
    assert stats.get_value("crawlcluster/documents/without_text") == 1


def test_a_failures_log_line_is_one_line_whatever_the_file_says(caplog):
    from crawler.documents import count_failure

    count_failure(None, "http://a.test/x.pdf", "unreadable", "pdf: bad\nERROR forged line\x1b[2J")
    [record] = caplog.records
    assert "\n" not in record.getMessage() and "\x1b" not in record.getMessage()
    assert "forged line" in record.getMessage()


def test_a_page_link_answered_with_a_listed_content_type_is_a_document():
    assert is_document_response(response("http://a.test/get?id=3", PDF, "application/pdf"),
                                OPTION)
    assert not is_document_response(response("http://a.test/x", b"", "text/html"), OPTION)
    assert not is_document_response(response("http://a.test/x", PDF, "application/pdf"),
                                    None)


# --- stores -------------------------------------------------------------------------------

def test_a_directory_store_writes_a_file_whole_once(tmp_path):
    store = files_store(get_crawler(), str(tmp_path / "docs"), None)
    assert isinstance(store, DirectoryFilesStore)
    assert store.stat_file("full/abc.pdf", None) == {}
    store.persist_file("full/abc.pdf", io.BytesIO(PDF), None)
    assert store.stat_file("full/abc.pdf", None)["last_modified"] > 0
    assert (tmp_path / "docs" / "full" / "abc.pdf").read_bytes() == PDF
    assert [p.name for p in (tmp_path / "docs" / "full").iterdir()] == ["abc.pdf"]  # no temp


def test_a_gridfs_store_keeps_one_file_per_path(mongo_db):
    store = GridFSFilesStore(mongo_db, "documents")
    assert store.stat_file("full/abc.pdf", None) == {}
    for _ in range(2):              # a second job storing the same file
        store.persist_file("full/abc.pdf", io.BytesIO(PDF), None, {"url": "http://a.test/"})
    assert store.stat_file("full/abc.pdf", None)["last_modified"] > 0
    assert mongo_db["documents.files"].count_documents({}) == 1
    assert store.bucket.open_download_stream("full/abc.pdf").read() == PDF


def test_an_s3_store_is_scrapys_configured_from_its_settings():
    crawler = get_crawler(settings_dict={"AWS_ENDPOINT_URL": "http://127.0.0.1:9/",
                                         "AWS_ACCESS_KEY_ID": "k",
                                         "AWS_SECRET_ACCESS_KEY": "s"})
    store = files_store(crawler, "s3://notices/docs/", None)
    assert isinstance(store, S3FilesStore)
    assert (store.bucket, store.prefix) == ("notices", "docs/")
    assert store.s3_client.meta.endpoint_url == "http://127.0.0.1:9/"
    with pytest.raises(ValueError, match="no store for sftp://"):
        files_store(crawler, "sftp://host/docs/", None)


def test_documents_are_read_in_the_pipelines_own_bounded_threads(monkeypatch):
    """A slow (hostile) file holds one of the pipeline's readers, never the reactor's
    thread pool, and no more files are read at once than it has readers."""
    import asyncio
    import threading

    from crawler import documentstore

    release, running = threading.Event(), []

    def slow_text_of(body, kind, limits):
        running.append(threading.current_thread().name)
        release.wait(5)

    monkeypatch.setattr(documentstore, "text_of", slow_text_of)
    pipeline = documentstore.DocumentPipeline(get_crawler(settings_dict={
        "CRAWLCLUSTER_DOCUMENTS_READERS": 2, "CRAWLCLUSTER_DOCUMENTS_STORE": "unused"}))

    async def read_three():
        reads = [asyncio.ensure_future(pipeline.read_text(PDF, "pdf")) for _ in range(3)]
        await asyncio.sleep(0.3)
        started = list(running)
        release.set()
        return started, await asyncio.wait_for(asyncio.gather(*reads), 10)

    try:
        started, results = asyncio.run(read_three())
    finally:
        pipeline.close_spider()
    assert len(started) == 2 and all(name.startswith("document-text") for name in started)
    assert results == [None, None, None] and len(running) == 3


def test_a_pages_item_with_a_field_named_like_the_file_passes_the_pipeline_as_it_is():
    import asyncio

    from crawler import documentstore

    pipeline = documentstore.DocumentPipeline(get_crawler(settings_dict={
        "CRAWLCLUSTER_DOCUMENTS_READERS": 1, "CRAWLCLUSTER_DOCUMENTS_STORE": "unused"}))
    page = {"url": "http://a.test/n/1.html", "_document": "a rule's field", "text": "x"}
    try:
        assert asyncio.run(pipeline.process_item(dict(page))) == page
    finally:
        pipeline.close_spider()


# --- the preview ---------------------------------------------------------------------------

def test_the_preview_shows_a_pages_documents_and_their_links(test_settings):
    from crawler.preview import preview
    from crawler.preview.servers import PreviewServers

    html = ("<html><body><h1>Notice 7</h1><a href='/files/notice-7.pdf'>PDF</a>"
            "<a href='/files/notice-7.pdf?utm_source=list#page=2'>PDF, page 2</a>"
            "<a href='/files/notice-7.docx'>Word</a><a href='/files/photo.jpg'>photo</a>"
            "</body></html>")
    rule = {"rules": [{"allow": [r"/n/"], "fields": {"title": "//h1/text()"}}],
            "documents": {}}
    servers = PreviewServers(test_settings)
    try:
        result = preview({"url": "http://amt.test/", "spider_type": "universal",
                          "rule": rule}, servers.cluster(), url="http://amt.test/n/7.html",
                         html=html)
    finally:
        servers.close()
    files = ["http://amt.test/files/notice-7.pdf", "http://amt.test/files/notice-7.docx"]
    [item] = result["items"]
    assert item["item"]["documents"] == files
    links = {link["url"]: link for link in result["links"]}
    assert all(links[url]["fate"] == "follow" and links[url]["document"] for url in files)
    assert links["http://amt.test/files/photo.jpg"]["fate"] == "refused"
