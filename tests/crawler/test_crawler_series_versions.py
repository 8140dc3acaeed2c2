"""A series' items on a real MongoDB: its runs (each a crawl of its own id) store a page
once per lineage and URL, so a run finds the page an earlier run stored: unchanged writes
only ``last_seen``, changed is replaced in place with its previous version kept, a page
answered 404/410 is marked gone; another crawl's or series' page of the same URL is
another item."""

from crawler.pipelines import insert_items
from crawler.versions import GonePage, Stored, mark_gone


def item(url, title, crawlid, lineage=None):
    page = {"url": url, "crawlid": crawlid, "spider_type": "universal", "title": title,
            "status": 200, "depth": 1}
    if lineage:
        page["lineage"] = lineage
    return page


def store(mongo_db, items, stored_at):
    return insert_items(mongo_db, items, set(), {"stored_at": stored_at, "stored_by": "job"})


def test_a_series_run_stores_only_what_changed_since_the_last_run(mongo_db):
    first = store(mongo_db, [item("http://a.example/1", "One", "news-1", "news"),
                             item("http://a.example/2", "Two", "news-1", "news")], 100.0)
    assert first.counts == {"news-1": {"new": 2}}

    second = store(mongo_db, [item("http://a.example/1", "One", "news-2", "news"),
                              item("http://a.example/2", "Two, corrected", "news-2", "news"),
                              item("http://a.example/3", "Three", "news-2", "news")], 200.0)
    assert sorted((d["url"][-1], d["change"], d["crawlid"]) for d in second.downstream) == [
        ("2", "changed", "news-2"), ("3", "new", "news-2")]
    assert second.counts == {"news-2": {"unchanged": 1, "changed": 1, "new": 1}}

    items = {d["url"][-1]: d for d in mongo_db["items_universal"].find()}
    assert len(items) == 3                   # one item a page of the series, not one a run
    one, two = items["1"], items["2"]
    assert (one["crawlid"], one["version"], one["stored_at"], one["last_seen"]) == (
        "news-1", 1, 100.0, 200.0)           # unchanged: only when it was last seen
    assert (two["crawlid"], two["title"], two["version"]) == ("news-2", "Two, corrected", 2)
    versions = list(mongo_db["versions_universal"].find())
    assert [(v["item_id"], v["crawlid"], v["title"]) for v in versions] == [
        (two["_id"], "news-1", "Two")]


def test_pages_of_other_crawls_and_series_are_items_of_their_own(mongo_db):
    store(mongo_db, [item("http://a.example/1", "One", "news-1", "news"),
                     item("http://a.example/1", "One", "other-1", "other"),
                     item("http://a.example/1", "One", "plain")], 100.0)
    again = store(mongo_db, [item("http://a.example/1", "One", "plain-2"),
                             item("http://a.example/1", "One", "other-2", "other")], 200.0)
    assert [d["crawlid"] for d in again.downstream] == ["plain-2"]
    assert again.counts == {"plain-2": {"new": 1}, "other-2": {"unchanged": 1}}
    assert mongo_db["items_universal"].count_documents({}) == 4


def test_a_page_the_series_stored_answered_404_in_a_later_run_is_marked_gone(mongo_db):
    store(mongo_db, [item("http://a.example/1", "One", "news-1", "news")], 100.0)
    gone = Stored()
    mark_gone(mongo_db, [GonePage("universal", "news-3", "http://a.example/1", "news")], gone,
              {"stored_at": 300.0, "stored_by": "job"})
    stored = mongo_db["items_universal"].find_one()
    assert (stored["change"], stored["crawlid"], stored["title"]) == ("gone", "news-3", "One")
    assert [d["change"] for d in gone.downstream] == ["gone"]
    assert gone.counts == {"news-3": {"gone": 1}}

    back = store(mongo_db, [item("http://a.example/1", "One", "news-4", "news")], 400.0)
    assert [(d["change"], d["version"]) for d in back.downstream] == [("changed", 2)]
