"""Pushback state against a real Redis, in driven time: the take refuses a paused domain
and scales its limits by the factor and spaces their hits; reports lower the factor, time
without pushback raises it; a new domain starts slowly."""

from datetime import UTC, datetime
from email.utils import format_datetime
from itertools import pairwise

import pytest

from master.keys import Keys
from master.pushback import PushbackPolicy, PushbackStore, retry_after_seconds
from master.siteconfig import SiteConfig
from master.throttle import ThrottledQueues
from tests.master.test_master_throttle import fill_queue

START = 1_800_000_000.0
POLICY = PushbackPolicy(decrease=0.5, floor=0.05, increase=0.0, pause=5.0, max_pause=60.0,
                        ttl=600.0)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def setup(redis, test_settings):
    clock, keys = Clock(), Keys.from_settings(test_settings)
    store = PushbackStore(redis, keys, POLICY, clock=clock)
    queues = ThrottledQueues(redis, keys, SiteConfig(10, 1.0), clock=clock, pushback=store)
    return clock, keys, store, queues


def takes_in(queues, clock, seconds, step=0.01, domain="example.com", times=None):
    """Tasks of ``domain`` taken by a take every ``step`` s for ``seconds`` s (their
    times appended to ``times``)."""
    taken = 0
    for _ in range(round(seconds / step)):
        got = sum(1 for name, _ in queues.take("job", "universal", "10.0.0.1").tasks
                  if name == domain)
        taken += got
        if times is not None:
            times += [clock.now] * got
        clock.now += step
    return taken


def with_policy(redis, keys, clock, **changes):
    """A store and queues of ``POLICY`` with ``changes``."""
    fields = {name: getattr(POLICY, name) for name in POLICY.__dataclass_fields__}
    store = PushbackStore(redis, keys, PushbackPolicy(**{**fields, **changes}), clock=clock)
    return store, ThrottledQueues(redis, keys, SiteConfig(10, 1.0), clock=clock, pushback=store)


def test_a_paused_domain_is_refused_until_its_pause_ends(redis, setup):
    clock, keys, store, queues = setup
    fill_queue(redis, keys, "job", "example.com", 50)
    store.report("example.com", "429", retry_after=12.0, window=1.0)
    clock.now += 2
    refused = queues.take("job", "universal", "10.0.0.1")
    assert not refused.tasks and refused.wait == pytest.approx(10.0)
    assert refused.paused == {"example.com": pytest.approx(10.0)}     # a pause, not a window
    assert queues.hit("job", "universal", "10.0.0.1", "example.com") == pytest.approx(10.0)
    clock.now += 9.99
    assert not queues.take("job", "universal", "10.0.0.1").tasks
    clock.now += 0.02
    assert queues.take("job", "universal", "10.0.0.1").tasks


def test_a_pause_is_capped_and_defaults_without_retry_after(redis, setup):
    _clock, _keys, store, _ = setup
    assert store.report("a.com", "429", retry_after=3600.0, window=1.0).paused_until \
        == pytest.approx(START + 60.0)            # max_pause
    assert store.report("b.com", "503", retry_after=None, window=1.0).paused_until \
        == pytest.approx(START + 5.0)             # the default pause
    # A shorter pause asked later does not cut a longer one short.
    assert store.report("a.com", "429", retry_after=1.0, window=1.0).paused_until \
        == pytest.approx(START + 60.0)


def test_the_factor_decreases_once_a_window_and_never_below_the_floor(setup):
    clock, _, store, _ = setup
    assert store.report("example.com", "429", None, window=2.0).factor == 0.5
    clock.now += 1.0                       # the answers to requests already out: no more
    assert store.report("example.com", "429", None, window=2.0).factor == 0.5
    clock.now += 1.0
    assert store.report("example.com", "429", None, window=2.0).factor == 0.25
    for _ in range(10):
        clock.now += 2.0
        state = store.report("example.com", "429", None, window=2.0)
    assert state.factor == 0.05 and state.pushbacks == 13


def test_the_factor_rises_additively_once_the_pause_is_over(redis, setup):
    clock, keys, _, _ = setup
    store, queues = with_policy(redis, keys, clock, increase=0.1)
    fill_queue(redis, keys, "job", "example.com", 200)
    store.report("example.com", "429", retry_after=2.0, window=1.0)     # factor 0.5
    clock.now += 2.0                                                   # the pause is over
    assert takes_in(queues, clock, 1.0) in range(5, 7)                 # 0.5 → 0.55
    clock.now += 4.0                                                   # 0.5 x (1 + 0.1 x 5)
    assert store.states()[0].factor == pytest.approx(0.75)
    assert takes_in(queues, clock, 1.0) in range(7, 9)
    clock.now += 10.0
    assert store.states()[0].factor == 1.0
    assert takes_in(queues, clock, 1.0) in range(10, 12)               # the full rate again


def test_a_new_domain_starts_slowly_and_its_first_pushback_ends_that(redis, setup):
    """Slow start at 0.2 of 10 a second, doubling every second: 10 a second is reached in
    about 2.3 s; a pushback halves the factor in force then (back to the rate of a
    second before), and the state says so."""
    clock, keys, _, _ = setup
    store, queues = with_policy(redis, keys, clock, start_factor=0.2, increase=0.1, decrease=0.7)
    fill_queue(redis, keys, "job", "example.com", 200)
    firsts = [takes_in(queues, clock, 1.0) for _ in range(4)]
    assert firsts[0] in range(2, 4) and firsts[1] in range(4, 8) and firsts[3] in range(10, 12)
    assert store.states() == []                 # slow start alone is no pushback
    clock.now += 1.0
    state = store.report("example.com", "429", retry_after=1.0, window=1.0)
    assert state.factor == 0.5 and state.reason == "429"         # halved, not x 0.7
    clock.now += 1.0
    assert takes_in(queues, clock, 1.0) in range(5, 7)      # no doubling any more


def test_the_factor_scales_the_limit(redis, setup):
    """10 a second: 5 a second at 0.5; at 0.05 one every 2 s (one hit, a longer window)."""
    clock, keys, store, queues = setup
    fill_queue(redis, keys, "job", "example.com", 400)
    assert takes_in(queues, clock, 10.0) in range(95, 101)
    clock.now += 5
    store.report("example.com", "429", retry_after=0.0, window=1.0)
    assert takes_in(queues, clock, 10.0) in range(45, 51)
    for _ in range(4):
        clock.now += 1.0
        store.report("example.com", "429", retry_after=0.0, window=0.5)
    assert store.states()[0].factor == 0.05
    clock.now += 5
    assert takes_in(queues, clock, 20.0) in range(9, 12)


def test_a_slowed_domains_hits_are_spaced_for_the_whole_cluster(redis, setup):
    """At 5 a second, takes every 10 ms from two nodes get one task each 0.2 s, never
    the window's five at once: not when the pause ends, not after a second idle."""
    clock, keys, store, queues = setup
    other = ThrottledQueues(redis, keys, SiteConfig(10, 1.0), clock=clock, pushback=store)
    fill_queue(redis, keys, "job", "example.com", 200)
    store.report("example.com", "429", retry_after=1.0, window=1.0)     # factor 0.5
    clock.now += 1.0
    times = []
    for _ in range(300):
        for node in (queues, other):
            times += [clock.now] * len(node.take("job", "universal", "10.0.0.1").tasks)
        clock.now += 0.01
        if len(times) == 5:
            clock.now += 1.0             # idle a second: no catching up after it
    gaps = [later - earlier for earlier, later in pairwise(times)]
    assert len(times) in range(15, 18) and min(gaps) > 0.1 - 1e-5


def test_spacing_follows_the_rate_as_it_rises(redis, setup):
    """In a slow start from 1/64 of 10 a second (one hit per 6.4 s), the second hit
    comes as the doubling rate allows (about 1.2 s later), not 3.2 s later at the
    spacing of the first."""
    clock, keys, _, _ = setup
    _, queues = with_policy(redis, keys, clock, start_factor=1 / 64)
    fill_queue(redis, keys, "job", "example.com", 50)
    times = []
    takes_in(queues, clock, 3.0, times=times)
    assert len(times) >= 2 and times[1] - times[0] < 2.0, times


def test_other_domains_keep_their_rate(redis, setup):
    clock, keys, store, queues = setup
    fill_queue(redis, keys, "job", "example.com", 200)
    fill_queue(redis, keys, "job", "other.org", 200)
    store.report("example.com", "429", retry_after=30.0, window=1.0)
    assert takes_in(queues, clock, 5.0, domain="other.org") in range(45, 51)


def test_a_state_past_its_ttl_is_ignored_and_removed(redis, setup):
    clock, keys, store, queues = setup
    fill_queue(redis, keys, "job", "example.com", 100)
    store.report("example.com", "429", retry_after=0.0, window=1.0)
    key = keys.pushback(keys.shard_of("example.com"))
    assert 0 < redis.pttl(key) <= 600_000
    clock.now += 601
    assert takes_in(queues, clock, 1.0) in range(9, 11)     # the full rate again
    assert redis.hget(key, "example.com") is None
    assert store.states() == []


def test_states_list_every_domain_pushed_back(setup):
    clock, _, store, _ = setup
    store.report("a.com", "429", 10.0, window=1.0)
    clock.now += 1
    store.report("b.com", "503", None, window=1.0)
    store.report("b.com", "503", None, window=1.0)
    states = store.states()
    assert [(s.domain, s.pushbacks, s.reason) for s in states] == [("b.com", 2, "503"),
                                                                  ("a.com", 1, "429")]
    assert states[1].as_json(clock.now)["paused_for"] == pytest.approx(9.0)


def test_retry_after_reads_seconds_and_http_dates():
    now = START
    assert retry_after_seconds("120", now) == 120.0
    assert retry_after_seconds(b" 3 ", now) == 3.0
    date = format_datetime(datetime.fromtimestamp(now + 30, UTC), usegmt=True)
    assert retry_after_seconds(date, now) == pytest.approx(30.0)
    past = format_datetime(datetime.fromtimestamp(now - 30, UTC), usegmt=True)
    assert retry_after_seconds(past, now) == 0.0
    assert retry_after_seconds("soon", now) is None
    assert retry_after_seconds("-5", now) is None
    assert retry_after_seconds(None, now) is None
    assert retry_after_seconds(b"\xb2", now) is None              # "²": a digit to isdigit
    assert retry_after_seconds("9" * 400, now) == 1e9             # not inf


def test_the_take_tells_the_caller_the_scaled_limit(redis, setup):
    """A take reports the factors it read, so the next one asks the caller's
    ``per_domain`` with the scaled limit (a slowed domain's tasks are spaced by it)."""
    clock, keys, _store, queues = setup
    fill_queue(redis, keys, "job", "example.com", 20)
    asked = []

    def wanted(domain, hits, window):
        asked.append((hits, window))
        return 1

    queues.take("job", "universal", "10.0.0.1", per_domain=wanted)
    other = PushbackStore(redis, keys, POLICY, clock=clock)      # another node reports
    for _ in range(4):
        clock.now += 1.0
        other.report("example.com", "429", retry_after=0.0, window=0.5)   # 0.0625
    clock.now += 1.0
    queues.take("job", "universal", "10.0.0.1", per_domain=wanted)   # reads the factor
    queues.take("job", "universal", "10.0.0.1", per_domain=wanted)
    assert asked[0] == (10, 1.0) and asked[1] == (10, 1.0)
    assert asked[2] == (1, pytest.approx(1.6))          # 0.625 a second: one per 1.6 s


def test_reports_sweep_expired_states_so_the_hash_stays_bounded(redis, setup):
    clock, keys, store, _ = setup
    domains = [f"gone{n}.com" for n in range(300)]
    shard = keys.shard_of("live.com")
    ours = [domain for domain in domains if keys.shard_of(domain) == shard]
    for domain in ours:
        store.report(domain, "429", retry_after=None, window=1.0)
    clock.now += POLICY.ttl + 1           # all of them expired; the hash lives on
    for _ in range(len(ours) // 50 + 5):     # a shard still reporting: slices swept
        store.report("live.com", "503", retry_after=None, window=1.0)
        clock.now += 1
    fields = redis.hkeys(keys.pushback(shard))
    assert sorted(field for field in fields if not field.startswith("~")) == ["live.com"]
    assert [state.domain for state in store.states()] == ["live.com"]


def test_takes_sweep_expired_slow_start_states_so_the_hash_stays_bounded(redis, setup):
    """New domains' states (slow start) go once expired, by the takes' own sweep: no
    report may ever come to sweep them."""
    clock, keys, _, _ = setup
    _, queues = with_policy(redis, keys, clock, start_factor=0.2)
    shard = keys.shard_of("live.com")
    ours = [domain for domain in (f"old{n}.com" for n in range(400))
            if keys.shard_of(domain) == shard]
    for domain in ours:
        fill_queue(redis, keys, "job", domain, 1)
    queues.take("job", "universal", "10.0.0.1")          # a state each, slow start
    clock.now += 1.0
    queues.take("job", "universal", "10.0.0.1")          # their queues empty: not named again
    key = keys.pushback(shard)
    assert len(redis.hkeys(key)) >= len(ours) and 0 < redis.pttl(key) <= 600_000
    clock.now += POLICY.ttl + 61                          # expired; a sweep is due
    fill_queue(redis, keys, "job", "live.com", 1)
    for _ in range(len(ours) // 100 + 3):                # a slice a minute
        queues.take("job", "universal", "10.0.0.1")
        clock.now += 61
    assert [f for f in redis.hkeys(key) if not f.startswith("~")] == ["live.com"]
