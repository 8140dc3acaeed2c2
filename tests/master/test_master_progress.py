"""Maintained per-crawl counts (what `info` answers from) and stopping a crawl."""

import pytest

from master.counters import WindowCounts
from master.crawls import CrawlStore
from master.tasks import decode_task, encode_task
from tests.master.test_master_dispatcher import pool_members, queued, tasks


def lease_all(parts, job="a"):
    parts.registry.register(job, "universal", job, "10.0.0.1")
    parts.dispatcher.tick()
    members = []
    while True:
        taken = parts.queues.take(job, "universal", "10.0.0.1", per_domain=1000).tasks
        if not taken:
            return members
        members += [member for _, member in taken]


def test_pending_counts_follow_every_task_state(redis, parts):
    store = CrawlStore(redis, parts.keys)
    parts.frontier.push(tasks(8) + tasks(2, crawlid="other"))
    progress = store.progress("c1")
    assert progress["total_pending"] == 8
    assert progress["pending"] == {f"site{n}.com": 2 for n in range(4)}
    members = [m for m in lease_all(parts) if '"crawlid":"c1"' in m]
    assert store.progress("c1")["total_pending"] == 8          # leased is still pending
    outcomes = ["done", "done", "failed", "retry", "release", "done", "done", "done"]
    for member, outcome in zip(members, outcomes, strict=True):
        parts.frontier.finish(member, outcome, "why")
    progress = store.progress("c1")
    assert progress["total_pending"] == 2                       # the retry and the release
    assert progress["counts"] == {"queued": 8, "done": 5, "failed": 1}
    assert store.progress("other")["total_pending"] == 2


def test_many_outcomes_in_one_call_match_one_at_a_time(redis, parts):
    store = CrawlStore(redis, parts.keys)
    parts.frontier.push(tasks(8))
    members = lease_all(parts)
    outcomes = [("done", ""), ("failed", "HTTP 404"), ("retry", "HTTP 500"),
                ("release", ""), ("done", "")]
    with pytest.raises(ValueError):          # a bad outcome: nothing of the batch runs
        parts.frontier.finish_many([(members[0], "done", ""), (members[1], "lost", "")])
    assert parts.frontier.leased_count() == 8
    batch = [(m, outcome, reason)
             for m, (outcome, reason) in zip(members[:5], outcomes, strict=True)]
    assert parts.frontier.finish_many(batch) == [1, 3, 2, 2, 1]
    assert parts.frontier.finish_many(batch[:1]) == [0]          # lease no longer held
    singles = [parts.frontier.finish(m, "done") for m in members[5:]]
    assert singles == [1, 1, 1]
    assert store.progress("c1")["counts"] == {"queued": 8, "done": 5, "failed": 1}
    assert parts.frontier.failed("c1")[decode_task(members[1])["url"]] == {
        "reason": "HTTP 404", "attempts": 1}
    assert parts.frontier.leased_count() == 0

def test_stop_purges_queued_tasks_and_drops_returning_ones(redis, parts):
    store = CrawlStore(redis, parts.keys)
    parts.frontier.push(tasks(20))
    members = lease_all(parts)
    for member in members[3:]:                # 3 stay leased, the rest back in the pool
        parts.frontier.finish(member, "release")
    parts.dispatcher.tick()                   # ... and dispatched to the job's queues
    parts.frontier.push(tasks(5))             # 5 more waiting in the pool
    parts.frontier.add_hub(tasks(1)[0], span=60)
    leased = parts.frontier.leased_count()
    purged = parts.frontier.purge_crawl("c1", ["a"])
    assert purged == 25 - leased
    assert parts.frontier.pool_count() == 0 and queued(redis, parts.keys, "a") == 0
    assert parts.frontier.hubs_count() == 0
    assert parts.frontier.finish(members[0], "retry", "HTTP 500") == 4
    assert parts.frontier.finish(members[1], "done") == 1
    assert parts.frontier.push(tasks(3)) == [0, 3]        # new links refused
    progress = store.progress("c1")
    assert progress["stopped"] and progress["counts"]["purged"] == purged + 1
    assert progress["total_pending"] == leased - 2


def test_blacklisted_queue_drop_is_counted(redis, parts):
    store = CrawlStore(redis, parts.keys)
    parts.registry.register("a", "universal", "a", "10.0.0.1")
    parts.frontier.push(tasks(8))
    parts.dispatcher.tick()
    assert parts.queues.drop_blacklisted("a", ["site0.com"]) == 2
    progress = store.progress("c1")
    assert progress["total_pending"] == 6 and progress["counts"]["dropped"] == 2


def test_window_counts_are_exact_to_the_minute(redis, parts):
    counter = WindowCounts(redis, parts.keys.window_counts("t"), clock=parts.clock)
    counter.increment(5)
    parts.clock.now += 1000                     # past the 15-minute window
    counter.increment(2)
    values = counter.values()
    assert values["900"] == 2 and values["3600"] == 7 and values["lifetime"] == 7
    parts.clock.now += 8 * 86400                # every bucket old; a new minute trims them
    counter.increment(1)
    assert counter.values() == {**{str(w): 1 for w in WindowCounts.WINDOWS}, "lifetime": 8}
    assert len(redis.hkeys(parts.keys.window_counts("t"))) == 2


def test_encoded_tasks_are_found_by_the_scripts_field_match():
    # The scripts read crawlid and domain with a pattern over canonical JSON.
    encoded = encode_task(tasks(1)[0])
    assert '"crawlid":"c1"' in encoded and '"domain":"site0.com"' in encoded


def test_pause_parks_waiting_and_returning_tasks_and_resume_brings_them_back(redis, parts):
    store, frontier = CrawlStore(redis, parts.keys), parts.frontier
    frontier.push(tasks(12) + tasks(4, crawlid="other"))
    members = lease_all(parts)
    leased = [m for m in members if '"crawlid":"c1"' in m][:2]
    for member in [m for m in members if m not in leased]:
        frontier.finish(member, "release")
    parts.dispatcher.tick()                                  # some in queues, some in the pool
    frontier.push(tasks(3))
    parked = frontier.pause_crawl("c1", ["a"])
    assert parked == 13                                      # 10 waiting + 3 new, not the leased
    assert frontier.push(tasks(2)) == [2, 0]                 # new links: parked too
    assert frontier.finish(leased[0], "retry", "HTTP 500") == 2
    frontier.finish(leased[1], "done")
    progress = store.progress("c1")
    assert progress["paused"] and progress["parked"] == 16
    assert progress["total_pending"] == 16                   # parked tasks still pending
    assert not any('"crawlid":"c1"' in m for m in pool_members(redis, parts.keys))
    assert store.progress("other")["total_pending"] == 4     # other crawls untouched

    assert frontier.resume_crawl("c1") == 16
    progress = store.progress("c1")
    assert not progress["paused"] and progress["parked"] == 0
    c1_waiting = [m for m in pool_members(redis, parts.keys) if '"crawlid":"c1"' in m]
    assert len(c1_waiting) == 16 and progress["total_pending"] == 16


def test_stopping_a_paused_crawl_purges_its_parked_tasks(redis, parts):
    frontier = parts.frontier
    frontier.push(tasks(5))
    frontier.pause_crawl("c1", [])
    assert frontier.purge_crawl("c1", []) == 5
    assert CrawlStore(redis, parts.keys).progress("c1")["total_pending"] == 0


def test_a_process_keeps_the_configs_of_a_bounded_number_of_crawls(redis, test_settings):
    from master.keys import Keys

    keys = Keys.from_settings(test_settings)
    for number in range(30):
        redis.set(keys.crawl(f"c{number}"), '{"spider_type": "universal"}')
    store = CrawlStore(redis, keys, cache_size=10)
    assert all(store.load(f"c{number}") for number in range(30))
    assert len(store._cache) == 10 and "c29" in store._cache and "c0" not in store._cache


def test_a_task_released_for_pushback_too_often_fails_naming_pushback(redis, parts):
    parts.frontier.max_pushback_releases = 2
    parts.frontier.push(tasks(1))
    codes = []
    for _ in range(3):
        (member,) = lease_all(parts)
        parts.frontier.finish(member, "release", "")     # not for pushback: not counted
        (member,) = lease_all(parts)
        codes.append(parts.frontier.finish(member, "release", "pushback: 429"))
    assert codes == [2, 2, 3]
    (failure,) = parts.frontier.failed("c1").values()
    assert failure["reason"].startswith("pushback: released 2 times (last: pushback: 429)")
    assert failure["attempts"] == 0
    assert CrawlStore(redis, parts.keys).progress("c1")["total_pending"] == 0
