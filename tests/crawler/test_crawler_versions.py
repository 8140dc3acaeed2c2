"""Versions of a stored page on a real MongoDB: a page stored again is compared by its
content hash; unchanged writes only ``last_seen``, changed is replaced in place with the
previous version kept, a page answered 404/410 is marked gone; what goes downstream is
only the new, the changed and the gone."""

from crawler.pipelines import insert_items
from crawler.versions import Stored, VersionLimits, content_hash, mark_gone


def item(url, title, crawlid="v", **more):
    return {"url": url, "crawlid": crawlid, "spider_type": "universal", "title": title,
            "status": 200, "depth": 1, **more}


def test_the_content_hash_is_of_what_the_page_holds_not_when_it_was_fetched():
    first = item("http://a.example/1", "Title", fetched_at=1.0, stored_at=2.0,
                 lastmod="2026-01-01", main_text="body")
    again = dict(first, fetched_at=5.0, stored_at=6.0, lastmod="2026-02-01", depth=3,
                 status=200, stored_by="job-2")
    assert content_hash(first) == content_hash(again)
    assert content_hash(first) != content_hash(dict(first, title="Title, corrected"))
    assert content_hash(first) != content_hash(dict(first, main_text="body, longer"))
    # field order does not matter
    assert content_hash({"a": 1, "b": 2}) == content_hash({"b": 2, "a": 1})


def store(mongo_db, items, stored_at, limits=None):
    return insert_items(mongo_db, items, set(), {"stored_at": stored_at, "stored_by": "job"},
                        limits=limits)


def test_a_page_stored_again_is_kept_unchanged_or_as_a_new_version(mongo_db):
    first = store(mongo_db, [item("http://a.example/1", "One"),
                             item("http://a.example/2", "Two")], 100.0)
    assert [d["change"] for d in first.downstream] == ["new", "new"]
    assert first.counts == {"v": {"new": 2}}

    again = store(mongo_db, [item("http://a.example/1", "One"),
                             item("http://a.example/2", "Two, corrected"),
                             item("http://a.example/3", "Three")], 200.0)
    assert sorted((d["url"][-1], d["change"]) for d in again.downstream) == [
        ("2", "changed"), ("3", "new")]
    assert again.counts == {"v": {"unchanged": 1, "changed": 1, "new": 1}}

    items = {d["url"][-1]: d for d in mongo_db["items_universal"].find()}
    assert len(items) == 3
    one, two = items["1"], items["2"]
    assert (one["change"], one["version"], one["stored_at"], one["last_seen"]) == (
        "new", 1, 100.0, 200.0)        # unchanged: only when it was last seen is written
    assert (two["title"], two["change"], two["version"], two["changed_at"]) == (
        "Two, corrected", "changed", 2, 200.0)
    versions = list(mongo_db["versions_universal"].find())
    assert [(v["item_id"], v["version"], v["title"]) for v in versions] == [
        (two["_id"], 1, "Two")]
    assert two["previous_hash"] == versions[0]["content_hash"] != two["content_hash"]


def test_only_the_newest_versions_are_kept(mongo_db):
    limits = VersionLimits(keep=2, ttl=3600)
    for n in range(5):
        store(mongo_db, [item("http://a.example/1", f"Edition {n}")], 100.0 + n, limits)
    current = mongo_db["items_universal"].find_one()
    assert (current["title"], current["version"]) == ("Edition 4", 5)
    kept = sorted(v["version"] for v in mongo_db["versions_universal"].find())
    assert kept == [3, 4]


def test_a_stored_page_answered_404_is_marked_gone_once(mongo_db):
    store(mongo_db, [item("http://a.example/1", "One")], 100.0)
    gone = Stored()
    mark_gone(mongo_db, [("universal", "v", "http://a.example/1"),
                         ("universal", "v", "http://a.example/never-stored")], gone)
    assert [(d["url"], d["change"]) for d in gone.downstream] == [
        ("http://a.example/1", "gone")]
    assert gone.counts == {"v": {"gone": 1}}
    stored = mongo_db["items_universal"].find_one({"url": "http://a.example/1"})
    assert stored["change"] == "gone" and stored["title"] == "One"    # marked, not deleted
    again = Stored()
    mark_gone(mongo_db, [("universal", "v", "http://a.example/1")], again)
    assert again.downstream == []
    # back again with the same content: a change, since it had gone
    back = store(mongo_db, [item("http://a.example/1", "One")], 300.0)
    assert [d["change"] for d in back.downstream] == ["changed"]


def test_export_changed_since_gives_what_became_new_changed_or_gone(
        mongo_db, test_settings, tmp_path, capsys, monkeypatch):
    import json

    from manager.cli import main
    from settings.loader import environment_for

    for name, value in environment_for(test_settings).items():
        if name.startswith("CRAWLCLUSTER_"):
            monkeypatch.setenv(name, value)
    store(mongo_db, [item(f"http://a.example/{n}", f"Page {n}") for n in range(5)], 100.0)
    store(mongo_db, [item("http://a.example/0", "Page 0"),           # unchanged
                     item("http://a.example/1", "Page 1, corrected"),
                     item("http://a.example/9", "Page 9")], 200.0)
    mark_gone(mongo_db, [("universal", "v", "http://a.example/2")], Stored())
    path = tmp_path / "changes.jsonl"
    assert main(["export", "--crawlid", "v", "--changed-since", "150", "-o", str(path)]) == 0
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((row["url"][-1], row["change"]) for row in rows) == [
        ("1", "changed"), ("2", "gone"), ("9", "new")]
    assert main(["export", "--crawlid", "v", "--changed-since", "4000000000"]) == 1
    assert "changed since 4000000000" in capsys.readouterr().err


def test_a_page_twice_in_one_batch_is_stored_once_as_its_last_fetch(mongo_db):
    stored = store(mongo_db, [item("http://a.example/1", "First"),
                              item("http://a.example/1", "Last")], 100.0)
    assert [(d["title"], d["change"]) for d in stored.downstream] == [("Last", "new")]
    assert mongo_db["versions_universal"].count_documents({}) == 0


def test_a_gone_page_carries_the_stamp_the_firehose_reads_back_by(mongo_db):
    store(mongo_db, [item("http://a.example/1", "One")], 100.0)
    mark_gone(mongo_db, [("universal", "v", "http://a.example/1")] * 2, Stored(),
              {"stored_at": 300.0, "stored_by": "job-9"})
    stored = mongo_db["items_universal"].find_one()
    assert (stored["change"], stored["stored_at"], stored["stored_by"]) == (
        "gone", 300.0, "job-9")
