"""Master test parts: the frontier's components on one Redis, in simulated time."""

from types import SimpleNamespace

import pytest

from master.dispatcher import Dispatcher
from master.frontier import Frontier
from master.keys import Keys
from master.registry import JobRegistry
from master.siteconfig import SiteConfig
from master.throttle import ThrottledQueues


class Clock:
    def __init__(self):
        self.now = 1_800_000_000.0

    def __call__(self):
        return self.now


@pytest.fixture
def parts(redis, test_settings):
    clock = Clock()
    keys = Keys.from_settings(test_settings)
    registry = JobRegistry(redis, keys, ttl=30, weight_minutes=10, clock=clock)
    frontier = Frontier(redis, keys, lease_seconds=60, max_retries=3, clock=clock)
    dispatcher = Dispatcher(redis, keys, registry, frontier, window=60, headroom=10,
                            default_weight=6000, clock=clock)
    queues = ThrottledQueues(redis, keys, SiteConfig(1000, 1.0), lease_seconds=60, clock=clock)
    return SimpleNamespace(clock=clock, keys=keys, registry=registry, frontier=frontier,
                           dispatcher=dispatcher, queues=queues)


