"""A crawl of a generated notices site whose list pages link PDF and DOCX files: real
dispatcher and spider, nginx, Redis, ZooKeeper, MongoDB, a directory store."""

import hashlib
import re

import pytest

from manager.local.crawl import run_crawl, submit
from manager.local.noticesite import (
    NOTICE_LOCATIONS,
    NOTICE_PRECISE_RULE,
    NOTICE_RULE,
    NoticeSpec,
    generate_notice_site,
)
from manager.local.ports import free_port
from manager.local.staticsite import StaticSite
from master.frontier import Frontier
from master.siteconfig import SiteConfig
from tests.conftest import serve_or_fail
from tests.crawler.test_crawler_crawl import assert_fetched_once, link_counts
from tests.faults.test_faults_servers import S3Store

RATE = 5           # requests a second the cluster may send the site


@pytest.fixture
def notice_site(tmp_path):
    spec = NoticeSpec(port=free_port(["127.0.0.1"]))
    manifest = generate_notice_site(tmp_path / "site", spec)
    site = serve_or_fail(StaticSite(tmp_path / "site" / "www", [spec.host], spec.port,
                                    tmp_path / "site" / "run",
                                    locations={spec.host: NOTICE_LOCATIONS}))
    yield manifest, site
    site.stop()


def spider_stats(log):
    """The spider's ``crawlcluster/documents/...`` stats, as it dumped them."""
    return {name: int(count) for name, count in
            re.findall(r"'crawlcluster/documents/([\w/]+)': (\d+)", log)}


def test_notices_crawl_fetches_stores_and_reads_each_linked_document_once(
        test_settings, mongo_db, redis, zookeeper, notice_site, tmp_path):
    manifest, site = notice_site
    SiteConfig.from_settings(test_settings, zookeeper).set_limit("127.0.0.1", hits=RATE,
                                                                 window=1)
    store = tmp_path / "store"
    since = len(site.access_log())
    submit(test_settings, {"crawlid": "notices", "spider_type": "universal",
                           "url": manifest["start_url"], "rule": NOTICE_RULE})
    assert run_crawl(test_settings, "universal", tmp_path,
                     CRAWLCLUSTER_DOCUMENTS_STORE=str(store)) == [0]

    # every page and file once (the rules' PDF is linked from every list page), through
    # robots.txt (the forbidden file never), within the site's rate
    files = manifest["files"]
    assert_fetched_once(site, since, manifest["pages"] + list(files) + manifest["redirected"],
                        "notices crawl")     # a redirect's target: robots.txt, the guard
    # the forbidden file's link and the redirect into /private/
    assert link_counts(test_settings, "notices")["refused"] == {"robots": 2}
    failed = Frontier.from_settings(redis, test_settings).failed("notices")
    for guarded in manifest["guarded"] + manifest["redirected"][1:]:       # the URL guard
        assert "(metadata_address)" in failed[guarded]["reason"], failed
    entries = [e for e in site.access_log()[since:] if e["path"] != "/robots.txt"]
    times = sorted(e["time"] for e in entries)
    for i, start in enumerate(times):
        assert sum(1 for t in times[i:i + RATE + 3] if t - start < 1.0) <= RATE, times[i:]

    items = list(mongo_db["items_universal"].find({"crawlid": "notices"}))
    documents = {item["url"]: item for item in items if "document" in item}
    readable = {url: f for url, f in files.items() if f["kind"] in ("pdf", "docx")}
    assert set(documents) == set(readable) | {u for u, f in files.items()
                                              if f["kind"] == "broken"}
    for url, expected in readable.items():
        document = documents[url]
        assert expected["words"] in document["text"], url           # the text, in the item
        assert document["document"]["sha256"] == expected["sha256"]
        assert document["document"]["format"] == expected["kind"]
        assert document["linked_from"] in manifest["pages"]
        stored = store / document["document"]["path"]
        assert hashlib.sha256(stored.read_bytes()).hexdigest() == expected["sha256"]

    # one stored file per content: the copy under another URL is the same file
    hashes = {f["sha256"] for f in readable.values()} | {
        f["sha256"] for f in files.values() if f["kind"] == "broken"}
    assert len(hashes) == len(readable)            # (the copy and the broken file: +1 -1)
    assert sorted(p.name for p in store.rglob("*") if p.is_file()) == sorted(
        f"{documents[url]['document']['path'].split('/')[-1]}" for url in
        {documents[u]["document"]["sha256"]: u for u in documents}.values())
    copies = [documents[url]["document"]["stored"] for url in documents
              if url.endswith(("/notice-1.pdf", "/notice-1-copy.pdf"))]
    assert sorted(copies) == ["already", "new"]

    # a notice's page lists its file; the extension-less link answered as PDF is one
    pages = {item["url"]: item for item in items if "document" not in item}
    notice_1 = pages[manifest["start_url"] + "notices/1.html"]
    assert notice_1["documents"] == [manifest["start_url"] + "files/notice-1.pdf"]
    assert documents[manifest["start_url"] + "download/amendment-2"]["document"][
        "content_type"] == "application/pdf"

    # the broken and the oversized file cost themselves: counted with their reasons
    broken = documents[manifest["start_url"] + "files/broken.pdf"]
    assert broken["text"] == "" and broken["document"]["error"].startswith("unreadable")
    log = (tmp_path / "spider0.log").read_text()
    stats = spider_stats(log)
    assert stats["failed/too_big"] == 1 and stats["failed/unreadable"] == 1, stats
    assert stats["stored/new"] == len(hashes) and stats["stored/already"] == 1, stats
    assert "annual-report.pdf not taken (too_big)" in log
    assert "larger than download max size (65536)" in log     # cancelled, not read whole
    assert "broken.pdf not taken (unreadable)" in log


def test_a_precise_crawl_reads_the_files_its_list_entries_and_detail_pages_link(
        test_settings, mongo_db, notice_site, tmp_path):
    """An entry whose link is a file becomes a document item with the entry's fields; a
    notice page lists its file, which is fetched once however many pages link it. The
    files go to GridFS, once each."""
    manifest, site = notice_site
    base = manifest["start_url"]
    since = len(site.access_log())
    submit(test_settings, {"crawlid": "precise-notices", "spider_type": "precise",
                           "url": base + "notices/list-1.html", "rule": NOTICE_PRECISE_RULE})
    assert run_crawl(test_settings, "precise", tmp_path,
                     CRAWLCLUSTER_DOCUMENTS_STORE="gridfs://notices") == [0]
    files = manifest["files"]
    assert_fetched_once(site, since, [url for url in manifest["pages"] if url != base]
                        + list(files) + manifest["redirected"], "precise notices crawl")

    items = {item["url"]: item for item in mongo_db["items_precise"].find(
        {"crawlid": "precise-notices"})}
    for url, expected in files.items():
        if expected["kind"] in ("pdf", "docx"):
            item = items[url]
            assert item["name"] == url.rsplit("/", 1)[-1]        # the list entry's field
            assert expected["words"] in item["text"], url
            assert item["linked_from"].startswith(base + "notices/list-")
    assert items[base + "download/amendment-2"]["document"]["format"] == "pdf"
    stored = {f["_id"]: f["length"] for f in mongo_db["notices.files"].find()}
    documents = [item["document"] for item in items.values() if "document" in item]
    assert stored == {d["path"]: d["bytes"] for d in documents}     # one file per content
    assert len(stored) == len(documents) - 1           # notice-1.pdf and its copy: one
    notice_2 = items[base + "notices/2.html"]
    assert (notice_2["name"], notice_2["title"]) == ("2.html", "Notice 2")
    assert notice_2["documents"] == [base + "files/notice-2.docx"]
    stats = spider_stats((tmp_path / "spider0.log").read_text())
    assert stats["failed/too_big"] == 1 and stats["failed/unreadable"] == 1, stats


def test_a_store_that_fails_costs_its_files_only(test_settings, mongo_db, notice_site,
                                                 tmp_path):
    """A store that cannot be written (a file where its directory should be): every
    document keeps its item and text, says why it is not stored, and is counted."""
    manifest, _ = notice_site
    (tmp_path / "occupied").write_text("a file, not a directory")
    submit(test_settings, {"crawlid": "no-store", "spider_type": "universal",
                           "url": manifest["start_url"], "rule": NOTICE_RULE})
    assert run_crawl(test_settings, "universal", tmp_path,
                     CRAWLCLUSTER_DOCUMENTS_STORE=str(tmp_path / "occupied" / "store")) == [0]
    documents = [item for item in mongo_db["items_universal"].find({"crawlid": "no-store"})
                 if "document" in item]
    readable = [url for url, f in manifest["files"].items() if f["kind"] in ("pdf", "docx")]
    assert len(documents) == len(readable) + 1                   # and the broken one
    assert all("stored" not in d["document"] for d in documents)
    assert all(d["document"]["store_error"].startswith(("NotADirectoryError",
                                                        "FileExistsError")) for d in documents)
    assert sum(1 for d in documents if d["text"]) == len(readable)
    stats = spider_stats((tmp_path / "spider0.log").read_text())
    assert stats["failed/store"] == len(documents), stats


def test_documents_go_to_an_s3_compatible_store_once_each(test_settings, mongo_db,
                                                          notice_site, tmp_path):
    """Scrapy's S3 store, on moto's S3 server, configured as botocore reads it (the
    endpoint and keys from the environment): a file the bucket has is not sent again."""
    import boto3

    manifest, _ = notice_site
    s3 = S3Store(tmp_path).start()
    try:
        environment = {"AWS_ENDPOINT_URL": s3.url, "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
        submit(test_settings, {"crawlid": "s3", "spider_type": "universal",
                               "url": manifest["start_url"], "rule": NOTICE_RULE})
        assert run_crawl(test_settings, "universal", tmp_path, **environment,
                         CRAWLCLUSTER_DOCUMENTS_STORE=f"s3://{s3.bucket}/notices/") == [0]
        bucket = boto3.client("s3", endpoint_url=s3.url, region_name="us-east-1",
                              aws_access_key_id="test", aws_secret_access_key="test")
        keys = {entry["Key"]: entry["Size"] for entry in bucket.list_objects_v2(
            Bucket=s3.bucket, Prefix="notices/")["Contents"]}
    finally:
        s3.stop()
    documents = [item["document"] for item in mongo_db["items_universal"].find(
        {"crawlid": "s3"}) if "document" in item]
    assert keys == {f"notices/{d['path']}": d["bytes"] for d in documents}
    assert sorted(d["stored"] for d in documents).count("already") == 1   # the copy
    assert len(keys) == len(documents) - 1
