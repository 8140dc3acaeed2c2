"""The sharded frontier: shards of domains, one hash tag per script, the stored shape,
the shard indexes and the dispatchers' shard leases, against a real Redis."""

import json
import time
from collections import Counter

import pytest

from master.bloom import BloomFilter
from master.bloomgen import AgingBloomFilter
from master.bloomparams import BloomParams
from master.counters import RollingTimeCounter, StepTimeCounter, WindowCounts
from master.crawls import CrawlStore
from master.dispatcher import Dispatcher
from master.frontier import Frontier, Revisit
from master.hashtags import cluster_slot, shard_of, shard_tags
from master.keys import Keys
from master.lua import LuaScripts, script_sources
from master.registry import JobRegistry
from master.schedules import Schedules
from master.series import PageState, SeriesPages
from master.shards import ShardLeases, check_shape, index_marks, prune, read_index
from master.siteconfig import SiteConfig
from master.sitehealth import queue_site_counts
from master.tasks import encode_task, make_task
from master.throttle import ThrottledQueues
from message_processing.worklist import WorkList
from settings.errors import ConfigError
from tests.master.conftest import Clock
from tests.master.test_master_dispatcher import tasks


def test_a_domain_always_falls_in_the_same_shard():
    assert shard_of("example.com", 1024) == 697           # CRC-32, not Python's hash
    assert len({shard_of(f"site{n}.com", 1024) for n in range(1000)}) > 600
    with pytest.raises(ValueError):
        Keys("cc", 0)


def test_every_key_of_a_domain_carries_its_shard_tag():
    keys = Keys("cc", 64)
    shard = keys.shard_of("example.com")
    tag = shard_tags("cc", 64)[shard]
    assert tag.startswith(f"cc:{shard}")
    domain_keys = [keys.queue("job", "example.com"), keys.throttle(shard),
                   keys.crawl_domain_pages("c1", "example.com"), keys.pool(shard, "universal"),
                   keys.leases(shard), keys.hubs(shard), keys.shard_owner(shard),
                   keys.job_domains("job", shard), keys.stopped_crawls(shard),
                   keys.paused_crawls(shard), *keys.crawl_shard_keys("c1", shard)]
    assert {keys.hash_tag(key) for key in domain_keys} == {tag}
    cluster_wide = [keys.jobs(), keys.job_shards("job"), keys.pool_shards("universal"),
                    keys.crawl_shards("c1"), keys.crawl("c1"), keys.frontier_meta(),
                    keys.crawls(), keys.ended_crawls(), keys.retiring_crawls(),
                    keys.retention_lock()]
    assert {keys.hash_tag(key) for key in cluster_wide} == {"cc"}


def test_a_frontier_with_another_shard_count_is_refused(redis, test_settings):
    """A frontier made with 1024 shards (the default until 2026-11-26) and a process
    started with today's default: refused, naming both counts."""
    made_before = Keys(test_settings["CRAWLCLUSTER_KEY_PREFIX"], 1024)
    check_shape(redis, made_before)
    check_shape(redis, made_before)                                  # the same: fine
    assert Keys.from_settings(test_settings).shards == 64
    refused = "has 1024 shards, but CRAWLCLUSTER_FRONTIER_SHARDS is 64: set it to 1024"
    with pytest.raises(ConfigError, match=refused):
        check_shape(redis, Keys.from_settings(test_settings))
    with pytest.raises(ConfigError, match=refused):
        Frontier.from_settings(redis, test_settings)
    Frontier.from_settings(redis, test_settings.copy_with(CRAWLCLUSTER_FRONTIER_SHARDS=1024))


def test_a_frontier_made_before_its_tags_were_spread_is_refused(redis, test_settings):
    """64 shards made with tags left to chance (no ``tags`` in its shape): its keys are
    named otherwise, so a process refuses it with a message instead of missing them."""
    keys = Keys(test_settings["CRAWLCLUSTER_KEY_PREFIX"], 64)
    redis.set(keys.frontier_meta(), json.dumps({"shards": 64}))
    with pytest.raises(ConfigError, match="made before its shards' hash tags were spread"):
        check_shape(redis, keys)
    redis.delete(keys.frontier_meta())
    check_shape(redis, keys)                       # a new one: made with spread tags
    assert json.loads(redis.get(keys.frontier_meta())) == {"shards": 64, "tags": "spread"}
    check_shape(redis, keys)


# Every call a script makes goes through this check first: each key it names must be
# one of its KEYS, or carry the hash tag KEYS[1] carries (and every KEYS[i] that tag).
# That is Redis Cluster's rule, checked here on one Redis for every script.
CHECK = """
local function __tag_of(key) return string.match(key, '{([^}]*)}') end
local __declared, __tag = {}, KEYS[1] and __tag_of(KEYS[1])
for _, key in ipairs(KEYS) do
  __declared[key] = true
  if __tag_of(key) ~= __tag then error('CROSSTAG declared ' .. key) end
end
local function __checked(...)
  local args = {...}
  for i = 2, #args do
    local a = args[i]
    if type(a) == 'string' and string.sub(a, 1, #ARGV_PREFIX) == ARGV_PREFIX
        and not __declared[a] and (__tag == nil or __tag_of(a) ~= __tag) then
      error('CROSSTAG ' .. args[1] .. ' ' .. a .. ' in a script whose KEYS[1] is '
            .. tostring(KEYS[1]))
    end
  end
  return redis.call(...)
end
"""


class CheckedScripts(LuaScripts):
    """The cluster's scripts with the tag check in front of every call; records which ran."""

    def __init__(self, client, prefix):
        prelude = CHECK.replace("ARGV_PREFIX", repr(prefix + ":"))
        sources = {name: prelude + source.replace("redis.call(", "__checked(")
                   for name, source in script_sources().items()}
        for source in sources.values():
            client.script_load(source)
        super().__init__(client, sources)
        self.ran = set()

    def run(self, name, keys=(), args=(), pipe=None):
        self.ran.add(name)
        return super().run(name, keys, args, pipe=pipe)


def exercise_every_script(client, keys, scripts):
    """Run every frontier operation once (each Lua script at least once) on ``client``,
    in simulated time; returns what a crawl's counts say afterwards."""
    clock = Clock()
    common = {"clock": clock, "scripts": scripts}
    registry = JobRegistry(client, keys, ttl=30, **common)
    frontier = Frontier(client, keys, lease_seconds=60, **common)
    dispatcher = Dispatcher(client, keys, registry, frontier, window=60, headroom=10,
                            default_weight=6000, **common)
    queues = ThrottledQueues(client, keys, SiteConfig(1000, 1.0), lease_seconds=60, **common)

    for job in ("a", "b"):
        registry.register(job, "universal", job, "10.0.0.1")
    frontier.push(tasks(40) + tasks(4, crawlid="c2"))
    assert frontier.push_links(tasks(1, crawlid="c3") * 2) == "qr"   # a link pushed once
    frontier.add_hub(make_task("http://hub.com/", "c1", "universal"), span=60)
    dispatcher.tick()                                             # pool -> job queues
    taken = [member for _, member in queues.take("a", "universal", "10.0.0.1",
                                                 per_domain=100).tasks]
    frontier.finish_many([(taken[0], "done", ""), (taken[1], "retry", "HTTP 500")])
    pushed_back = json.loads(taken[2])["domain"]
    queues.pushback.report(pushed_back, "429", None, window=1.0)      # pushback_report
    queues.take("a", "universal", "10.0.0.1", per_domain=1)           # reads its factor
    queues.steal("a", ["b"], count=10)
    queues.drop_blacklisted("b", ["site3.com"])
    frontier.pause_crawl("c2", ["a", "b"])
    frontier.resume_crawl("c2")
    frontier.purge_crawl("c2", ["a", "b"])
    clock.now += 61
    frontier.reap_leases()
    frontier.issue_due_hubs()
    hub = encode_task(make_task("http://hub.com/", "c1", "universal"))
    for fingerprint in ("f1", "f2"):
        frontier.hub_visited(hub, fingerprint, {}, Revisit(60, 3600), first_span=60)
    registry.deregister("b")
    queues.take("a", "universal", "10.0.0.1", per_domain=1)
    registry.requeue("a", cutoff=float("inf"))                    # its leases expire now
    dispatcher.leases.release_all()
    dispatcher.tick()                                             # an empty shard pruned
    BloomFilter(client, keys, "t", BloomParams.for_capacity(1000, 0.01, counting=True),
                scripts=scripts).remove_many(["http://a.com/"])
    AgingBloomFilter(client, keys, "g", BloomParams.for_capacity(1000, 0.01), 1000, 2, 0.01,
                     **common).add_many(["http://a.com/"])          # made: bloom_rotate
    RollingTimeCounter(client, keys.rolling_counter("r"), 60, **common).increment()
    StepTimeCounter(client, keys, "s", step=60, keep=2, **common).increment()
    WindowCounts(client, keys.window_counts("w"), **common).increment()
    worklist = WorkList(client, keys, **common)
    worklist.add({"id": "e1", "kind": "expire"})
    worklist.claim()
    schedules = Schedules(client, keys, **common)
    schedules.add({"id": "s1", "every": 60, "crawl": {}})
    clock.now += 61
    schedules.fire_due(lambda config: None)
    pipe = client.pipeline(transaction=False)
    SeriesPages(client, keys, scripts, max_pages=1).record(
        "s1", {url: PageState(url, 1.0) for url in ("http://a.com/1", "http://a.com/2")}, pipe)
    queue_site_counts(pipe, scripts, keys, {"c1": Counter({("a.com", "pages"): 1})})
    pipe.execute()
    scripts.run("event_claim", [keys.event_claim("c1:started"), keys.event_outbox()],
                [repr(clock.now), 60, json.dumps({"id": "c1:started"})])
    return CrawlStore(client, keys).progress("c1")


def test_every_script_touches_the_keys_of_one_hash_tag_only(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    scripts = CheckedScripts(redis, keys.prefix)
    progress = exercise_every_script(redis, keys, scripts)
    assert scripts.ran == set(script_sources())                  # every script was checked
    assert progress["counts"]["done"] == 1 and progress["total_pending"] == 40 - 1 - 2


def test_the_checked_scripts_do_catch_a_key_of_another_shard(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    scripts = CheckedScripts(redis, keys.prefix)
    frontier = Frontier(redis, keys, scripts=scripts)
    task = tasks(1)[0]
    wrong = keys.shard_of(task["domain"]) + 1
    with pytest.raises(Exception, match="CROSSTAG"):
        scripts.run("pool_push", [keys.pool(wrong, "universal"), keys.pushed(wrong)],
                    [*frontier._templates(wrong - 1, "pending", "counts", "stopped", "paused",
                                          "parked"), 0, 60, 0, '{"crawlid":"c1","domain":"x"}',
                     "", "c1", "x"])


def test_a_shard_marked_after_it_was_seen_empty_stays_in_the_index(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    scripts = LuaScripts(redis)
    index = keys.pool_shards("universal")
    redis.zadd(index, {"1": 100.0, "2": 100.0, "3": 200.0})
    pipe = redis.pipeline(transaction=False)
    prune(scripts, pipe, index, [1, 2, 3], seen_at=200.0)        # 3 was marked 0 s before
    pipe.execute()
    assert read_index(redis, index) == [3]


def test_a_shard_read_as_marked_lately_is_not_pruned_at_all(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    index = keys.pool_shards("universal")
    redis.zadd(index, {"1": 100.0, "2": 200.0})
    marks = index_marks(redis.zrange(index, 0, -1, withscores=True))
    pipe = redis.pipeline(transaction=False)
    prune(LuaScripts(redis), pipe, index, [1, 2], seen_at=200.0, marks=marks)
    assert len(pipe) == 1                                         # one call, for shard 1
    pipe.execute()
    assert read_index(redis, index) == [2]
    pipe = redis.pipeline(transaction=False)
    prune(LuaScripts(redis), pipe, index, [2], seen_at=200.0, marks=marks)
    assert len(pipe) == 0                                         # no call at all


def test_a_crawl_over_many_shards_is_summed_and_stopped_everywhere(redis, test_settings):
    frontier = Frontier.from_settings(redis, test_settings)
    many = [make_task(f"http://site{n}.com/", "wide", "universal") for n in range(300)]
    assert frontier.push(many) == [300, 0]
    store = CrawlStore(redis, frontier.keys)
    assert len(frontier.crawl_shards("wide")) == len({frontier.keys.shard_of(t["domain"])
                                                     for t in many})
    assert store.progress("wide")["total_pending"] == 300
    assert store.pending_totals(["wide", "none"]) == {"wide": 300, "none": 0}
    assert frontier.purge_crawl("wide", []) == 300
    assert frontier.push([make_task("http://new-site.org/", "wide", "universal")]) == [0, 1]
    assert store.progress("wide")["stopped"] and frontier.pool_count() == 0


def test_two_dispatchers_share_the_shards_and_one_takes_over_from_a_dead_one(
        redis, test_settings):
    keys = Keys(test_settings["CRAWLCLUSTER_KEY_PREFIX"], 64)
    first = ShardLeases(redis, keys, "first", ttl=1.0)
    second = ShardLeases(redis, keys, "second", ttl=1.0)
    first.refresh()
    assert first.held == set(range(64))                          # alone: every shard
    second.refresh()
    first.refresh()                                               # sees "second", gives back
    deadline = time.monotonic() + 5
    while len(second.refresh()) + len(first.held) != 64 or not second.held:
        assert time.monotonic() < deadline, (first.held, second.held)
        time.sleep(0.05)
        first.refresh()
    assert not first.held & second.held and 16 <= len(second.held) <= 48
    # "first" dies (stops renewing): "second" holds everything once its leases expire
    deadline = time.monotonic() + 5
    while len(second.refresh()) < 64:
        assert time.monotonic() < deadline, len(second.held)
        time.sleep(0.1)
    owners = redis.mget([keys.shard_owner(shard) for shard in range(64)])
    assert set(owners) == {"second"}


def test_dispatchers_that_saw_each_other_late_still_split_every_shard(redis, test_settings):
    """"second" starts while "first"'s beat looks stale (a slow upkeep) and takes every
    shard; once each has seen the other, an upkeep or two each leaves every shard held by
    the one that ranks first for it."""
    now = [100.0]
    keys = Keys(test_settings["CRAWLCLUSTER_KEY_PREFIX"], 64)
    first = ShardLeases(redis, keys, "first", ttl=1.0, clock=lambda: now[0])
    second = ShardLeases(redis, keys, "second", ttl=1.0, clock=lambda: now[0])
    assert first.refresh() == set(range(64))
    now[0] += 2                                                   # first looks gone
    assert second.refresh() == set(range(64))
    for _ in range(2):
        first.refresh()
        second.refresh()
        now[0] += 0.5
    owners = redis.mget([keys.shard_owner(shard) for shard in range(64)])
    assert set(owners) == {"first", "second"}
    assert {s for s, o in enumerate(owners) if o == "first"} == first.held
    assert {s for s, o in enumerate(owners) if o == "second"} == second.held


def test_shards_taken_from_a_dispatcher_unseen_go_back_to_it(redis, test_settings):
    """"first" claims its share while "second", starting at that instant, has not seen
    it yet and takes every shard. Once "second" sees "first", it hands first's share
    back to it: no shard is left free while "first" thinks it already holds it."""
    now = [100.0]
    keys = Keys(test_settings["CRAWLCLUSTER_KEY_PREFIX"], 64)
    first = ShardLeases(redis, keys, "first", ttl=1.0, clock=lambda: now[0])
    second = ShardLeases(redis, keys, "second", ttl=1.0, clock=lambda: now[0])
    redis.zadd(keys.dispatchers(), {"second": now[0]})
    share = first.refresh()
    assert 16 <= len(share) <= 48
    now[0] += 2                                                   # first looks gone
    assert second.refresh() == set(range(64))
    now[0] -= 2
    second.refresh()                                              # sees first: hands over
    owners = redis.mget([keys.shard_owner(shard) for shard in range(64)])
    assert {s for s, o in enumerate(owners) if o == "first"} == first.held == share
    assert {s for s, o in enumerate(owners) if o == "second"} == second.held
    assert None not in owners


def test_a_dispatcher_stopping_hands_its_shards_to_the_others(redis, test_settings):
    keys = Keys(test_settings["CRAWLCLUSTER_KEY_PREFIX"], 64)
    first = ShardLeases(redis, keys, "first", ttl=5.0)
    second = ShardLeases(redis, keys, "second", ttl=5.0)
    first.refresh()
    second.refresh()
    first.refresh()
    second.refresh()
    first.release_all()
    owners = redis.mget([keys.shard_owner(shard) for shard in range(64)])
    assert set(owners) == {"second"}
    assert second.refresh() == set(range(64))                     # and knows it next upkeep
    second.release_all()
    assert redis.mget([keys.shard_owner(shard) for shard in range(64)]) == [None] * 64


@pytest.mark.parametrize("shards", [3, 64, 100, 512])
def test_shard_tags_spread_evenly_over_equal_ranges_of_slots(shards):
    """Masters holding equal ranges of the slots (``redis-cli --cluster create``) hold
    equal numbers of shards, whatever the prefix."""
    for prefix in ("crawlcluster", "test:1f2e3d"):
        slots = [cluster_slot(tag) for tag in shard_tags(prefix, shards)]
        assert all(n * 16384 // shards <= slot < (n + 1) * 16384 // shards
                   for n, slot in enumerate(slots))
        for masters in (3, 6):
            held = Counter(slot * masters // 16384 for slot in slots)
            # A shard whose range straddles two masters' goes to either.
            assert max(held.values()) - min(held.values()) <= 2


def test_a_frontier_of_1024_shards_keeps_its_tags():
    """1024 shards (the default) keep the tags frontiers were made with."""
    assert Keys("cc", 1024).leases(700) == "cc:{cc:700}:leases"

