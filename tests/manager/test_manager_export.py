"""``crawlcluster export`` and the manager's ``export`` download, on a real MongoDB: a large
crawl's items come out as JSON lines, CSV and Parquet equal to what MongoDB holds, in
bounded memory, with a progress bar; ``--since`` keeps the later ones; bad input is
refused with the reason."""

import csv
import io
import json
import tracemalloc
import urllib.error
import urllib.request

import pyarrow.parquet as pq
import pytest

from crawler.pipelines import insert_items
from manager.cli import main
from manager.export import CrawlItems, ExportError, export_items, parse_since
from settings.loader import environment_for
from tests.manager.test_manager_node import Manager

LARGE = 30_000


def make_items(count, crawlid="big"):
    """Items with the fields a crawl stores, some with more (a sitemap's lastmod, a list)."""
    items = []
    for n in range(count):
        item = {"url": f"http://example.com/{n}", "crawlid": crawlid, "spider_type": "precise",
                "title": f"Título {n}, \"quoted\"\nsecond line", "status": 200,
                "fetched_at": 1_700_000_000.0 + n, "depth": n % 4,
                "main_text": "text " * (n % 50)}
        if n % 7 == 0:
            item["lastmod"] = "2026-11-01"
        if n % 11 == 0:
            item["tags"] = ["a", "b", n]
        items.append(item)
    return items


@pytest.fixture
def big_crawl(mongo_db):
    items = make_items(LARGE)
    ensured: set[str] = set()
    for start in range(0, LARGE, 5_000):
        insert_items(mongo_db, items[start:start + 5_000], ensured,
                     {"stored_at": 1_800_000_000.0 + start, "stored_by": "job0"})
    insert_items(mongo_db, make_items(10, "other"), ensured)
    return {document["url"]: {"id": str(document.pop("_id")), **document}
            for document in mongo_db["items_precise"].find({"crawlid": "big"})}


def normal(item):
    """An item as CSV and Parquet hold it: lists as JSON."""
    return {k: json.dumps(v) if isinstance(v, list) else v for k, v in item.items()}


def export_measured(mongo_db, fmt, path):
    """Export crawl ``big`` to ``path``; return the file's bytes and the export's peak of
    Python memory (a file takes none of it)."""
    tracemalloc.start()
    with open(path, "wb") as out:
        assert export_items(CrawlItems(mongo_db, "big"), fmt, out) == LARGE
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return path.read_bytes(), peak


def test_a_large_crawl_exports_equal_to_mongodb_in_every_format(mongo_db, big_crawl, tmp_path):
    # the items are ~15 MB as JSON, more as Python objects: an export holding them shows
    data, peak = export_measured(mongo_db, "jsonl", tmp_path / "big.jsonl")
    assert peak < 5_000_000, peak
    exported = [json.loads(line) for line in data.splitlines()]
    assert {item["url"]: item for item in exported} == big_crawl
    assert len(exported) == LARGE

    data, peak = export_measured(mongo_db, "csv", tmp_path / "big.csv")
    assert peak < 5_000_000, peak
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
    assert len(rows) == LARGE
    assert list(rows[0])[:7] == ["id", "crawlid", "url", "spider_type", "status",
                                 "fetched_at", "stored_at"]
    for row in rows:
        expected = normal(big_crawl[row["url"]])
        assert row == {name: "" if name not in expected else str(expected[name])
                       for name in row}

    data, _ = export_measured(mongo_db, "parquet", tmp_path / "big.parquet")
    table = pq.read_table(io.BytesIO(data))
    assert table.num_rows == LARGE and table.schema.field("status").type == "int64"
    for row in table.to_pylist():
        assert {k: v for k, v in row.items() if v is not None} == normal(big_crawl[row["url"]])


def test_the_command_writes_a_file_with_a_progress_bar(mongo_db, test_settings, big_crawl,
                                                       tmp_path, capsys, monkeypatch):
    environment = environment_for(test_settings, CRAWLCLUSTER_LOG_LEVEL="WARNING")
    for name, value in environment.items():
        if name.startswith("CRAWLCLUSTER_"):
            monkeypatch.setenv(name, value)
    path = tmp_path / "later.csv"
    # the last 10,000 items, stored at 1,800,020,000 and after (a UTC time, no zone given)
    assert main(["export", "--crawlid", "big", "--format", "csv", "--since",
                 "2027-01-15T13:33:20", "-o", str(path)]) == 0
    err = capsys.readouterr().err
    assert "exporting big [" in err and "10000/10000 items" in err
    assert "10000 items of big written to" in err and not (tmp_path / "later.csv.partial").exists()
    rows = list(csv.DictReader(path.open(newline="", encoding="utf-8")))
    assert len(rows) == 10_000 and all(float(r["stored_at"]) >= 1_800_020_000.0 for r in rows)

    assert main(["export", "--crawlid", "nothing-here", "-o", str(tmp_path / "x.jsonl")]) == 1
    assert "crawl nothing-here has no items stored" in capsys.readouterr().err
    assert main(["export", "--crawlid", "big", "--since", "last tuesday"]) == 2
    assert "give seconds since the epoch or an ISO 8601" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", "--crawlid", "big", "--format", "xml"])


def test_since_reads_epochs_and_iso_times():
    assert parse_since("1800000000") == 1_800_000_000.0
    assert parse_since("1970-01-01T01:00:00+01:00") == 0.0
    assert parse_since("1970-01-02") == 86_400.0
    with pytest.raises(ExportError, match="--since 'yesterday'"):
        parse_since("yesterday")


def test_the_manager_streams_a_download(test_settings, zookeeper, redis, mongo_db, big_crawl,
                                        tmp_path):
    manager = Manager(test_settings, tmp_path).start()
    try:
        url = f"http://127.0.0.1:{manager.port}/export?crawlid=big&format="
        with urllib.request.urlopen(url + "parquet", timeout=120) as response:
            assert response.headers["Content-Type"] == "application/vnd.apache.parquet"
            assert 'filename="big.parquet"' in response.headers["Content-Disposition"]
            table = pq.read_table(io.BytesIO(response.read()))
        assert sorted(table.column("url").to_pylist()) == sorted(big_crawl)
        with urllib.request.urlopen(url + "jsonl", timeout=120) as response:
            lines = response.read().splitlines()
        assert {json.loads(line)["id"] for line in lines} == \
            {item["id"] for item in big_crawl.values()}
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url + "xml", timeout=30)
        assert refused.value.code == 400
        assert b"format 'xml': choose from jsonl, csv, parquet" in refused.value.read()
    finally:
        manager.stop()


def test_the_manager_says_why_an_export_failed(test_settings, zookeeper, redis, tmp_path):
    from manager.local.ports import free_port

    manager = Manager(test_settings, tmp_path, CRAWLCLUSTER_CONNECT_TIMEOUT=1.0,
                      CRAWLCLUSTER_MONGODB_URL=f"mongodb://127.0.0.1:{free_port()}/").start()
    try:
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(f"http://127.0.0.1:{manager.port}/export?crawlid=big",
                                   timeout=60)
        assert failed.value.code == 503
        body = failed.value.read().decode()
        assert body.startswith("export failed:") and "mongodb" in body.lower(), body
        # the manager goes on serving
        assert manager.call("daemonstatus.json")["status"] == "ok"
    finally:
        manager.stop()
