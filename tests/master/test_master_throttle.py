"""Throttled takes against a real Redis and ZooKeeper."""

import math
import multiprocessing
import time
from collections import Counter

import pytest

from master.keys import Keys
from master.siteconfig import SiteConfig, domain_of, validate_limit
from master.tasks import decode_task, encode_task, make_task
from master.throttle import ThrottledQueues
from settings.errors import ConfigError


def fill_queue(client, keys, job, domain, count, crawlid="c1", prioritized=False):
    """``count`` tasks in ``job``'s queue for ``domain``; with ``prioritized`` the n-th
    has priority n (a queue's score is -priority), else all have priority 0."""
    tasks = [make_task(f"http://www.{domain}/{n}", crawlid, "universal") for n in range(count)]
    client.zadd(keys.queue(job, domain),
                {encode_task(t): -n if prioritized else 0 for n, t in enumerate(tasks)})
    shard = keys.shard_of(domain)
    client.sadd(keys.job_domains(job, shard), domain)
    client.zadd(keys.job_shards(job), {str(shard): time.time()})
    return tasks


def hammer(settings, job, ip, seconds, start_at, out):
    from settings.clients import redis_client

    client = redis_client(settings, "test")
    queues = ThrottledQueues(client, Keys.from_settings(settings), SiteConfig(10, 1.0))
    while time.time() < start_at:
        time.sleep(0.001)
    taken = []
    while time.time() < start_at + seconds:
        result = queues.take(job, "universal", ip)
        taken += [time.time() for _ in result.tasks]
        time.sleep(min(result.wait or 0.002, 0.02))
    out.put(taken)


def test_several_processes_share_one_window(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    jobs = [("job-a", "10.0.0.1"), ("job-b", "10.0.0.2"), ("job-c", "10.0.0.1")]
    for job, _ in jobs:
        fill_queue(redis, keys, job, "example.com", 200)
    out = multiprocessing.Queue()
    start_at = time.time() + 1.0
    workers = [multiprocessing.Process(target=hammer,
                                       args=(test_settings, job, ip, 5.0, start_at, out))
               for job, ip in jobs]
    for worker in workers:
        worker.start()
    times = sorted(t for _ in workers for t in out.get(timeout=30))
    for worker in workers:
        worker.join()
    assert 45 <= len(times) <= 51          # >= 90% of the allowance, never more
    for i, t in enumerate(times):          # no 1 s window ever held more than 10
        assert len([u for u in times[i:i + 11] if u - t < 1.0]) <= 10 + 1


def test_blacklisted_domain_yields_nothing(redis, test_settings, zookeeper):
    keys = Keys.from_settings(test_settings)
    fill_queue(redis, keys, "job", "spam.com", 5)
    fill_queue(redis, keys, "job", "good.com", 5)
    config = SiteConfig.from_settings(test_settings, zookeeper).start()
    version = config.version
    config.blacklist_add("spam.com")
    assert config.wait_for_version(version, 5)
    queues = ThrottledQueues(redis, keys, config)
    result = queues.take("job", "universal", "10.0.0.1")
    assert [domain for domain, _ in result.tasks] == ["good.com"]
    assert result.blacklisted == ["spam.com"]
    assert redis.zcard(keys.queue("job", "spam.com")) == 5
    assert redis.zcard(keys.leases(keys.shard_of("good.com"))) == 1


def test_live_rate_change_applies_within_two_seconds(redis, test_settings, zookeeper):
    from settings.clients import zookeeper_client

    keys = Keys.from_settings(test_settings)
    fill_queue(redis, keys, "job", "slow.com", 50)
    reader = SiteConfig.from_settings(test_settings, zookeeper).start()
    version = reader.version
    reader.set_limit("slow.com", hits=1, window=60)
    reader.wait_for_version(version, 5)
    queues = ThrottledQueues(redis, keys, reader)
    assert len(queues.take("job", "universal", "ip1").tasks) == 1
    assert queues.take("job", "universal", "ip1").wait > 50

    other_client = zookeeper_client(test_settings, "test")     # another process's writer
    try:
        changed_at = time.monotonic()
        SiteConfig.from_settings(test_settings, other_client).set_limit(
            "slow.com", hits=100, window=1)
        while not queues.take("job", "universal", "ip1").tasks:
            assert time.monotonic() - changed_at < 2.0
            time.sleep(0.02)
    finally:
        other_client.stop()
        other_client.close()


def test_last_config_stays_when_zookeeper_goes_away(test_settings, zookeeper):
    from settings.clients import zookeeper_client

    client = zookeeper_client(test_settings, "test")
    config = SiteConfig.from_settings(test_settings, client).start()
    version = config.version
    config.set_limit("kept.com", hits=3, window=7)
    config.blacklist_add("gone.com")
    config.wait_for_version(version + 1, 5)
    client.stop()                                             # connection lost
    client.close()
    assert config.limit("kept.com") == (3, 7.0)
    assert config.is_blacklisted("gone.com")


def test_bad_config_in_zookeeper_is_ignored(test_settings, zookeeper):
    config = SiteConfig.from_settings(test_settings, zookeeper).start()
    version = config.version
    config.set_limit("a.com", hits=5, window=10)
    config.wait_for_version(version, 5)
    zookeeper.set(config.path, b"{not json")
    time.sleep(0.5)
    assert config.limit("a.com") == (5, 10.0)


def test_crawl_delay_only_tightens(redis, test_settings):
    queues = ThrottledQueues(redis, Keys.from_settings(test_settings), SiteConfig(10, 10.0))
    assert queues.limit("a.com", None) == (10, 10.0)
    assert queues.limit("a.com", 2.0) == (5, 10.0)        # tighter: applied
    assert queues.limit("a.com", 0.5) == (10, 10.0)       # looser: ignored
    assert queues.limit("a.com", 30.0) == (1, 30.0)       # longer than the window


def test_domain_of_uses_the_registered_domain():
    assert domain_of("http://news.163.com/a") == "163.com"
    assert domain_of("http://a.b.co.uk/") == "b.co.uk"
    assert domain_of("http://127.0.0.2:8080/x") == "127.0.0.2"


def test_an_idle_job_takes_half_of_the_longest_backlog_of_each_shard(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    assert keys.shard_of("a.com") != keys.shard_of("b.com")
    queues = ThrottledQueues(redis, keys, SiteConfig(1000, 1.0))
    short = fill_queue(redis, keys, "job-a", "a.com", 3)
    long = fill_queue(redis, keys, "job-b", "b.com", 10, prioritized=True)
    fill_queue(redis, keys, "job-c", "c.com", 1)            # a single task is left alone

    assert queues.steal("idle", ["job-a", "job-b", "job-c"], count=64) == 5 + 1
    kept = [decode_task(m)["url"] for m in redis.zrange(keys.queue("job-b", "b.com"), 0, -1)]
    moved = [decode_task(m)["url"] for m in redis.zrange(keys.queue("idle", "b.com"), 0, -1)]
    # job-b keeps its five highest-priority tasks; every task is in exactly one queue
    assert kept == [t["url"] for t in reversed(long)][:5]
    assert sorted(kept + moved) == sorted(t["url"] for t in long)
    assert queues.job_domains("idle") == ["a.com", "b.com"]
    assert redis.zcard(keys.queue("job-a", "a.com")) == len(short) - 1
    assert redis.zcard(keys.queue("job-c", "c.com")) == 1
    # what it takes over is bounded, and it can take it
    assert queues.steal("idle", ["job-b"], count=2) == 2
    assert queues.steal("idle", ["job-c"], count=64) == 0
    assert queues.steal("idle", [], count=64) == 0
    result = queues.take("idle", "universal", "10.0.0.9", per_domain=10)
    assert len(result.tasks) == 7 + 1


def test_ip_hits_limits_each_address_and_hits_the_whole_cluster(redis, test_settings):
    """hits 10, ip_hits 4 per window: a job takes 4, a second job on the same address
    none, one on another address 4 more; a third address only the 2 left of 10."""
    keys = Keys.from_settings(test_settings)
    config = SiteConfig(100, 60.0)
    config._config = {"domains": {"example.com": {"hits": 10, "window": 60.0, "ip_hits": 4}},
                      "blacklist": []}
    queues = ThrottledQueues(redis, keys, config)
    taken = {}
    for job, ip in (("a", "10.0.0.1"), ("b", "10.0.0.1"), ("c", "10.0.0.2"),
                    ("d", "10.0.0.3"), ("e", "10.0.0.4")):
        fill_queue(redis, keys, job, "example.com", 20)
        taken[job] = len(queues.take(job, "universal", ip, per_domain=10).tasks)
    assert taken == {"a": 4, "b": 0, "c": 4, "d": 2, "e": 0}


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_ip_hits_is_checked_with_the_rest_of_a_limit(bad):
    assert validate_limit("x.com", 10, 60, ip_hits=3)["ip_hits"] == 3
    assert "ip_hits" not in validate_limit("x.com", 10, 60)
    with pytest.raises(ConfigError, match="ip_hits must be a whole number"):
        validate_limit("x.com", 10, 60, ip_hits=bad)


def test_a_window_is_exact_and_stale_windows_are_swept(redis, test_settings):
    """One hash per shard holds its windows, as hits per twentieth of a window: a full
    window refuses until its oldest slot has passed (a hit counts as made at its slot's
    end), and windows whose last take is past are swept, the hash expiring."""
    keys = Keys.from_settings(test_settings)
    now = [1_000_000.0]
    queues = ThrottledQueues(redis, keys, SiteConfig(3, 10.0), clock=lambda: now[0])
    fill_queue(redis, keys, "job", "example.com", 20)
    shard = keys.shard_of("example.com")
    assert len(queues.take("job", "universal", "10.0.0.1", per_domain=2).tasks) == 2
    now[0] += 4
    result = queues.take("job", "universal", "10.0.0.1", per_domain=2)
    assert len(result.tasks) == 1                       # 3 hits per 10 s
    now[0] += 1
    refused = queues.take("job", "universal", "10.0.0.1", per_domain=2)
    assert not refused.tasks and refused.wait == pytest.approx(5.5)   # the first slot + 10 s
    now[0] += 5.5
    assert len(queues.take("job", "universal", "10.0.0.1", per_domain=2).tasks) == 2
    field = keys.throttle_field("type", "universal", "example.com")
    # Slots of 0.5 s from the second take's (the first left the window): 1 hit, then 2.
    assert redis.hget(keys.throttle(shard), field) == "0.5|2000008|1," + "0," * 12 + "2"
    # A minute later another domain of the shard is taken: the old windows go.
    other = next(f"site{n}.org" for n in range(10_000) if keys.shard_of(f"site{n}.org") == shard
                 and f"site{n}.org" != "example.com")
    fill_queue(redis, keys, "job", other, 1)
    redis.srem(keys.job_domains("job", shard), "example.com")
    now[0] += 61
    assert len(queues.take("job", "universal", "10.0.0.1").tasks) == 1
    fields = redis.hkeys(keys.throttle(shard))
    assert field not in fields and keys.throttle_field("type", "universal", other) in fields
    assert 0 < redis.pttl(keys.throttle(shard)) <= 70_000     # a sweep minute + the window


def test_a_window_taken_from_all_along_keeps_its_rate(redis, test_settings):
    """Takes every 10 ms for 20 s (a driven clock) under 10 hits a second: at least 95%
    of the 200 allowed, and never more than 10 in any second (the slots a window is
    stored in must not drift later take after take)."""
    keys = Keys.from_settings(test_settings)
    now = [1_795_000_000.0]
    queues = ThrottledQueues(redis, keys, SiteConfig(10, 1.0), clock=lambda: now[0])
    fill_queue(redis, keys, "job", "example.com", 400)
    times = []
    for step in range(2000):
        now[0] = 1_795_000_000.0 + step * 0.01
        times += [now[0]] * len(queues.take("job", "universal", "10.0.0.1").tasks)
    assert len(times) >= 190
    for i, t in enumerate(times):
        assert len([u for u in times[i:i + 11] if u - t < 1.0]) <= 10
    # Each hit is still in the slot it was made in, after the 200 takes that wrote it.
    length, first, counts = redis.hget(keys.throttle(keys.shard_of("example.com")),
                                       keys.throttle_field("type", "universal",
                                                           "example.com")).split("|")
    stored = {int(first) + n: int(count) for n, count in enumerate(counts.split(","))
              if int(count)}
    made = Counter(math.floor(t / float(length)) for t in times
                   if (math.floor(t / float(length)) + 1) * float(length) + 1.0 > now[0])
    assert stored == dict(made)


def test_a_browser_hit_counts_in_the_windows_takes_share(redis, test_settings):
    """A rendering browser's own request (``hit``) uses the same windows as a take."""
    keys = Keys.from_settings(test_settings)
    queues = ThrottledQueues(redis, keys, SiteConfig(4, 10.0))
    fill_queue(redis, keys, "job", "example.com", 10)
    assert [queues.hit("job", "universal", "10.0.0.1", "example.com") for _ in range(3)] \
        == [0.0, 0.0, 0.0]
    assert len(queues.take("job", "universal", "10.0.0.1", per_domain=10).tasks) == 1
    wait = queues.hit("job", "universal", "10.0.0.1", "example.com")
    assert 0 < wait <= 10.5          # full: nothing counted; a wait (up to a slot late)
    assert queues.take("job", "universal", "10.0.0.1").throttled == ["example.com"]
    assert redis.zcard(keys.queue("job", "example.com")) == 9   # no task taken by a hit


def test_a_window_full_for_under_a_millisecond_more_is_still_a_wait(redis, test_settings):
    """The script answers "wait:0.000" when a window frees in under a millisecond; that
    is a wait, not a hit: a caller taking it as one sent a request no window counted."""
    keys = Keys.from_settings(test_settings)
    now = [1_800_000_000.0]
    queues = ThrottledQueues(redis, keys, SiteConfig(2, 1.0), clock=lambda: now[0])
    assert [queues.hit("job", "universal", "10.0.0.1", "example.com") for _ in range(2)] \
        == [0.0, 0.0]
    wait = queues.hit("job", "universal", "10.0.0.1", "example.com")
    now[0] += wait - 0.0004                      # the window frees 0.4 ms from now
    assert queues.hit("job", "universal", "10.0.0.1", "example.com") > 0
    now[0] += 0.001
    assert queues.hit("job", "universal", "10.0.0.1", "example.com") == 0.0


@pytest.mark.parametrize("send_grace", [0.0, 0.05])
def test_a_slow_domains_throttle_window_is_lengthened_by_the_send_grace(test_settings, redis,
                                                                      send_grace):
    """A slow domain's token may be spent up to ``send_grace`` after its take
    (crawler/token_deadlines.py): its hits stay in the window that much longer."""
    keys = Keys.from_settings(test_settings)
    now = [1_800_000_000.0499]                   # at a 50 ms slot's end
    queues = ThrottledQueues(redis, keys, SiteConfig(2, 1.0), clock=lambda: now[0],
                             send_grace=send_grace)
    assert queues.window_ms(2, 1.0) == (1050 if send_grace else 1000)
    assert queues.window_ms(100, 1.0) == 1000    # a fast domain's: no grace
    assert [queues.hit("job", "universal", "10.0.0.1", "example.com") for _ in range(2)] \
        == [0.0, 0.0]
    now[0] += 1.02
    full = queues.hit("job", "universal", "10.0.0.1", "example.com") > 0
    assert full == bool(send_grace)
