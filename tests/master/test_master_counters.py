"""Counters' window arithmetic against a real Redis, in simulated time."""

import pytest

from master.counters import RollingTimeCounter, StepTimeCounter
from master.keys import Keys


class Clock:
    def __init__(self, now=1_700_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def clock():
    return Clock()


def test_rolling_counter_counts_the_last_window(redis, test_settings, clock):
    counter = RollingTimeCounter.from_settings(redis, test_settings, "plugin:crawl",
                                               window=60, clock=clock)
    assert counter.increment() == 1
    clock.now += 30
    assert counter.increment(4) == 5
    clock.now += 29.999
    assert counter.value() == 5          # first event is 59.999 s old: still in
    clock.now += 0.001
    assert counter.value() == 4          # exactly 60 s old: out of (now-60, now]
    clock.now += 30
    assert counter.value() == 0


def test_rolling_counter_cannot_grow_without_bound(redis, test_settings, clock):
    counter = RollingTimeCounter.from_settings(redis, test_settings, "busy",
                                               window=10, clock=clock)
    for _ in range(100):
        counter.increment(3)
        clock.now += 1
    assert counter.value() == 27                   # the 9 seconds after now - 10 s
    assert redis.hlen(counter.key) <= 10 + 2       # a bucket per second of the window
    assert 0 < redis.ttl(counter.key) <= 11        # an idle counter expires


def test_rolling_counters_share_one_key_across_instances(redis, test_settings, clock):
    one = RollingTimeCounter.from_settings(redis, test_settings, "shared", window=5, clock=clock)
    two = RollingTimeCounter.from_settings(redis, test_settings, "shared", window=5, clock=clock)
    one.increment()
    two.increment()
    assert one.value() == two.value() == 2


def test_rolling_counter_on_a_pipeline(redis, test_settings, clock):
    counter = RollingTimeCounter.from_settings(redis, test_settings, "piped", window=5,
                                               clock=clock)
    pipe = redis.pipeline()
    counter.increment(pipe=pipe)
    counter.increment(2, pipe=pipe)
    assert pipe.execute() == [1, 3]


def test_step_counter_counts_per_fixed_window(redis, test_settings, clock):
    clock.now = 8 * 3600 + 25 * 60        # 08:25: the hour window starts at 08:00
    counter = StepTimeCounter(redis, Keys.from_settings(test_settings), "plugin:info",
                              step=3600, keep=3, clock=clock)
    assert counter.window_start() == 8 * 3600
    counter.increment()
    counter.increment(2)
    clock.now = 9 * 3600 - 0.001          # 08:59:59.999: same window
    assert counter.increment() == 4
    clock.now = 9 * 3600                  # 09:00: a new window
    assert counter.increment() == 1
    assert counter.value() == 1
    assert counter.value(at=8 * 3600 + 1) == 4
    assert counter.history() == [(7 * 3600, 0), (8 * 3600, 4), (9 * 3600, 1)]


def test_step_counter_windows_expire(redis, test_settings, clock):
    clock.now = 1000 * 60 + 10
    counter = StepTimeCounter(redis, Keys.from_settings(test_settings), "short",
                              step=60, keep=2, clock=clock)
    counter.increment()
    # Kept until two windows have passed since this one started.
    assert 100 <= redis.ttl(counter.key()) <= 110


def test_counters_refuse_nonsense(redis):
    with pytest.raises(ValueError):
        RollingTimeCounter(redis, "k", window=0)
    with pytest.raises(ValueError):
        StepTimeCounter(redis, Keys("p"), "n", step=60, keep=0)
