"""A crawl's health per site: counted by the spiders, bounded in Redis, read back."""

from master.keys import Keys
from master.lua import LuaScripts
from master.sitehealth import (
    OTHER,
    SiteCounts,
    SiteHealth,
    queue_site_counts,
    read_site_health,
    site_health_of,
    top_sites,
)


def send(redis, keys, counts, max_sites=500):
    pipe = redis.pipeline(transaction=False)
    queue_site_counts(pipe, LuaScripts(redis), keys, counts.take(), max_sites)
    pipe.execute()


def test_pages_items_drops_coverage_statuses_pushback_and_rendering_per_site(
        redis, test_settings):
    keys = Keys.from_settings(test_settings)
    counts = SiteCounts()
    for status in (200, 200, 404, 301):
        counts.page("c1", "a.com", status)
    counts.rendered("c1", "a.com")
    counts.pushback("c1", "a.com", "429")
    fields = ["title", "date"]
    counts.item("c1", "a.com", fields, {"title": "T", "date": "D"}, [])
    counts.item("c1", "a.com", fields, {"title": "", "date": "D"}, ["title"])
    counts.item("c1", "b.org", fields, {"title": "T", "date": ""}, [])
    send(redis, keys, counts)

    sites = read_site_health(redis, keys, "c1")
    assert set(sites) == {"a.com", "b.org"}
    a = sites["a.com"]
    assert (a.pages, a.items, a.dropped, a.rendered) == (4, 2, 1, 1)
    assert a.statuses == {"200": 2, "404": 1, "301": 1}
    assert a.pushback == {"429": 1}
    assert a.dropped_by_field == {"title": 1}
    assert a.coverage == {"title": 0.5, "date": 1.0}
    assert sites["b.org"].coverage == {"title": 1.0, "date": 0.0}   # a field never matched
    assert read_site_health(redis, keys, "unknown") == {}


def test_counts_add_up_over_sends_and_sites_past_the_bound_go_to_other(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    counts = SiteCounts()
    for site in ("a.com", "b.com", "c.com"):
        counts.page("c1", site, 200)
    send(redis, keys, counts, max_sites=2)
    for site in ("a.com", "c.com", "d.com"):
        counts.page("c1", site, 500)
    send(redis, keys, counts, max_sites=2)

    sites = read_site_health(redis, keys, "c1")
    assert set(sites) == {"a.com", "b.com", OTHER}
    assert sites["a.com"].statuses == {"200": 1, "500": 1}
    assert sites[OTHER].pages == 3 and sites[OTHER].statuses == {"200": 1, "500": 2}
    assert redis.hget(keys.crawl_sites("c1"), "~sites") == "2"


def test_counts_taken_and_restored_are_sent_once():
    counts = SiteCounts()
    counts.page("c1", "a.com", 200)
    taken = counts.take()
    assert not counts
    counts.page("c1", "a.com", 200)
    counts.restore(taken)
    assert counts.pending["c1"][("a.com", "pages")] == 2


def test_problems_name_low_coverage_errors_drops_and_pushback():
    health = site_health_of({"a.com pages": "10", "a.com status:200": "4",
                             "a.com status:503": "6", "a.com items": "4",
                             "a.com matched:title": "1", "a.com matched:date": "4",
                             "a.com dropped": "3", "a.com dropped:title": "3",
                             "a.com pushback:503": "6", "a.com ~": "1", "~sites": "1"})
    assert health["a.com"].problems() == ["title coverage 25%", "60% of pages in errors",
                                          "75% of items dropped", "pushback 6"]
    assert SiteHealth("b.com", pages=3, items=3, matched={"title": 3},
                      statuses={"200": 3}).problems() == []


def test_top_sites_fold_the_rest_into_other():
    sites = {name: SiteHealth(name, pages=pages, statuses={"200": pages})
             for name, pages in (("a", 5), ("b", 9), ("c", 1), (OTHER, 2))}
    top = top_sites(sites, 1)
    assert list(top) == ["b", OTHER]
    assert top[OTHER].pages == 8 and top[OTHER].statuses == {"200": 8}


def test_a_crawls_site_health_expires_twice_its_retention_after_the_last_count(
        redis, test_settings):
    """Retention deletes the hash when the crawl retires; counts a spider sends after
    that (a late flush) make a hash that expires on its own."""
    keys = Keys.from_settings(test_settings)
    counts = SiteCounts()
    counts.page("late", "a.com", 200)
    pipe = redis.pipeline(transaction=False)
    queue_site_counts(pipe, LuaScripts(redis), keys, counts.take(), retention=3600)
    pipe.execute()
    assert 7000 < redis.ttl(keys.crawl_sites("late")) <= 7200
    assert read_site_health(redis, keys, "late")["a.com"].pages == 1
