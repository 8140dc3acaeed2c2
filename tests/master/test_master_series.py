"""What a series of crawls knows of its pages, on Redis: recorded, bounded, expiring, and
swept in parts that list every page due once, whatever is fetched meanwhile."""

from master.keys import Keys
from master.series import PageState, SeriesPages, conditional_headers


def record(pages, redis, lineage, states):
    pipe = redis.pipeline(transaction=False)
    pages.record(lineage, states, pipe)
    return pipe.execute()


def state(n, at, **fields):
    return PageState(f"http://news.example/{n}.html", at, **fields)


def test_pages_are_recorded_bounded_and_expire_with_the_retention(redis, test_settings):
    pages = SeriesPages(redis, Keys.from_settings(test_settings), max_pages=3,
                        retention=3600)
    first = state(1, 10.0, etag='"abc"', modified="Sat, 28 Nov 2026 08:00:00 GMT",
                  task={"callback": "parse", "depth": 2, "rule_index": 1})
    assert record(pages, redis, "paper", {"k1": first}) == [0]
    assert pages.lookup({"paper": ["k1", "k2"], "other": ["k1"]}) == {("paper", "k1"): first}
    assert conditional_headers(first.validators(10.0)) == {
        "If-None-Match": '"abc"', "If-Modified-Since": "Sat, 28 Nov 2026 08:00:00 GMT"}
    # past three pages, those fetched longest ago are forgotten
    assert record(pages, redis, "paper", {f"k{n}": state(n, 10.0 + n) for n in (2, 3, 4)}) \
        == [1]
    assert set(pages.lookup({"paper": ["k1", "k2", "k3", "k4"]})) == {
        ("paper", "k2"), ("paper", "k3"), ("paper", "k4")}
    keys = Keys.from_settings(test_settings)
    for key in (keys.series_pages("paper"), keys.series_fetched("paper")):
        assert 3500 < redis.ttl(key) <= 3600
    pipe = redis.pipeline(transaction=False)
    pages.forget("paper", ["k2"], pipe)
    pipe.execute()
    assert set(pages.lookup({"paper": ["k2", "k3"]})) == {("paper", "k3")}


def test_a_sweep_lists_every_page_due_once_in_parts(redis, test_settings):
    """Parts of two pages over pages sharing fetch times, while pages already listed are
    fetched again (and so leave the range): each due page is listed exactly once."""
    pages = SeriesPages(redis, Keys.from_settings(test_settings))
    times = {f"k{n}": 100.0 + n // 3 for n in range(10)}        # three pages a time
    record(pages, redis, "paper", {key: state(key, at) for key, at in times.items()})
    record(pages, redis, "paper", {"late": state("late", 500.0)})    # fetched after the cutoff
    listed, after, skip = [], float("-inf"), set()
    while True:
        part = pages.due("paper", 200.0, after, skip, 2)
        listed += [key for key, _, _ in part]
        # what was listed is fetched again now: its fetch time moves past the cutoff
        record(pages, redis, "paper", {key: state(key, 900.0) for key, _, _ in part})
        if len(part) < 2:
            break
        last = part[-1][1]
        at_last = {key for key, at, _ in part if at == last}
        skip, after = (skip | at_last if last == after else at_last), last
    assert sorted(listed) == sorted(times)


def test_a_state_that_cannot_be_read_is_taken_as_a_page_new_to_the_series(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    pages = SeriesPages(redis, keys)
    record(pages, redis, "paper", {"good": state("good", 10.0)})
    redis.hset(keys.series_pages("paper"), "bad", "{not json")
    redis.zadd(keys.series_fetched("paper"), {"bad": 5.0})
    assert set(pages.lookup({"paper": ["good", "bad"]})) == {("paper", "good")}
    assert [(key, found is not None) for key, _, found
            in pages.due("paper", 100.0, float("-inf"), set(), 10)] == [("bad", False),
                                                                          ("good", True)]
