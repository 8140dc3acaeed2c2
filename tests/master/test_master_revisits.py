"""Adaptive revisits of hubs, on Redis, over a simulated day: a hub is revisited about
as often as what it lists changes, one that never changes backs off to the maximum, a
304 counts as unchanged (master/lua/hub_visit.lua, hubs_due.lua)."""

from collections import Counter

from master.frontier import Frontier, Revisit
from master.keys import Keys
from master.tasks import decode_task, make_task
from tests.master.conftest import Clock

HOUR = 3600.0
REVISIT = Revisit(minimum=600, maximum=4 * HOUR)


def hub(url):
    return make_task(url, "fresh", "universal", id=f"hub:{url}")


def small_frontier(redis, test_settings, clock):
    """A frontier of 16 shards: a simulated day looks at every shard every minute."""
    keys = Keys(test_settings["CRAWLCLUSTER_KEY_PREFIX"], shards=16)
    return keys, Frontier(redis, keys, clock=clock)


def visit_due_hubs(redis, keys, frontier, version_of, visits, not_modified=False):
    """The spiders' part: take every issued hub out of the pool and report a visit,
    the hub's content being ``version_of(url)`` now."""
    frontier.issue_due_hubs()
    for shard in keys.all_shards():
        for member, _ in redis.zpopmin(keys.pool(shard, "universal"), 100):
            url = decode_task(member)["url"]
            visits[url] += 1
            fingerprint = None if not_modified else f"{url}@{version_of(url)}"
            frontier.hub_visited(member, fingerprint, {"ETag": '"v1"'}, REVISIT, HOUR)


def test_over_a_simulated_day_revisits_follow_how_often_a_hub_changes(redis, test_settings):
    clock = Clock()
    start = clock.now
    keys, frontier = small_frontier(redis, test_settings, clock)
    rates = {"http://news.example/hourly": HOUR, "http://news.example/3h": 3 * HOUR,
             "http://docs.example/never": None}
    for url in rates:
        frontier.add_hub(hub(url), span=HOUR)
    visits = Counter()

    def version_of(url):
        return 0 if rates[url] is None else int((clock.now - start + 1234) // rates[url])

    for minute in range(24 * 60):
        clock.now = start + minute * 60
        visit_due_hubs(redis, keys, frontier, version_of, visits)
    print(dict(visits))
    assert 24 <= visits["http://news.example/hourly"] <= 40     # every 36 to 60 minutes
    assert 8 <= visits["http://news.example/3h"] <= 18
    never = frontier.hub_state(hub("http://docs.example/never"))
    assert visits["http://docs.example/never"] <= 10
    assert never["span"] == REVISIT.maximum and never["etag"] == '"v1"'
    hourly = frontier.hub_state(hub("http://news.example/hourly"))
    assert hourly["changes"] >= 15 and REVISIT.minimum <= hourly["span"] < 2 * HOUR


def test_not_modified_counts_as_unchanged_and_keeps_the_fingerprint(redis, test_settings):
    clock = Clock()
    keys, frontier = small_frontier(redis, test_settings, clock)
    url = "http://news.example/"
    frontier.add_hub(hub(url), span=HOUR)
    visits = Counter()
    clock.now += HOUR
    visit_due_hubs(redis, keys, frontier, lambda _: 1, visits)
    first = frontier.hub_state(hub(url))
    clock.now += first["span"]
    visit_due_hubs(redis, keys, frontier, lambda _: 2, visits, not_modified=True)
    state = frontier.hub_state(hub(url))
    assert visits[url] == 2 and state["fingerprint"] == first["fingerprint"]
    assert state["span"] == first["span"] * REVISIT.slower and state.get("changes", 0) == 0
    # its next visit is due a span after this one
    [(_, due)] = redis.zrange(keys.hubs(keys.shard_of(hub(url)["domain"])), 0, -1,
                                   withscores=True)
    assert due == clock.now + state["span"]
