"""What the sharded frontier needs beyond one shard: its stored shape, the indexes of
which shards hold work, and the dispatchers' shard leases.

A shard's own state changes only in Lua scripts of that shard. The indexes
(``Keys.pool_shards``, ``Keys.job_shards``) are cluster-wide zsets, shard ->
when last marked: a writer marks a shard *before* (or with) the write that puts
work there, and a reader removes a shard only if it saw it empty and nobody
marked it for ``PRUNE_MARGIN`` seconds before that look (``index_prune.lua``).
A crash between the mark and the work leaves a harmless extra entry; an entry
lost anyway (a writer stalled longer than the margin) is found again by the
slower full sweeps (the dispatcher's upkeep, an idle job's rescan).
"""

import json
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from master.counters import Clock
from master.hashtags import SPREAD_TAGS_UP_TO
from master.keys import Keys
from master.lua import LuaScripts
from settings.clients import RedisClient
from settings.errors import ConfigError

# Seconds a shard's index entry is kept after its last mark, however empty it looks.
PRUNE_MARGIN = 5.0
# A writer marks a shard at most this often (well inside PRUNE_MARGIN).
MARK_EVERY = 1.0


def check_shape(client: RedisClient, keys: Keys) -> None:
    """Store the frontier's shape the first time; refuse to work on a frontier made
    with another shard count, or with its shards' tags left to chance where this version
    spreads them (its domains would be looked for under other keys)."""
    shape: dict[str, object] = {"shards": keys.shards}
    if keys.spread_tags:
        shape["tags"] = "spread"
    if client.set(keys.frontier_meta(), json.dumps(shape), nx=True):
        return
    stored = json.loads(client.get(keys.frontier_meta()) or json.dumps(shape))
    if stored.get("shards") != keys.shards:
        raise ConfigError(
            f"the frontier under key prefix {keys.prefix!r} has {stored.get('shards')} shards, "
            f"but CRAWLCLUSTER_FRONTIER_SHARDS is {keys.shards}: set it to "
            f"{stored.get('shards')}, or use another CRAWLCLUSTER_KEY_PREFIX")
    if stored.get("tags") != shape.get("tags"):
        raise ConfigError(
            f"the frontier under key prefix {keys.prefix!r} was made before its shards' "
            f"hash tags were spread evenly (up to {SPREAD_TAGS_UP_TO} shards), and its keys "
            "are named otherwise: let its crawls end with the version that made it, or use "
            "another CRAWLCLUSTER_KEY_PREFIX")


class Marks:
    """Index marks one process makes, each (index, shard) at most every MARK_EVERY s."""

    def __init__(self, clock: Clock = time.time) -> None:
        self.clock = clock
        self._last: dict[tuple[str, int], float] = {}   # (index, shard) -> marked at

    def mark(self, pipe: Any, index: str, shards: Iterable[int], force: bool = False) -> None:
        """ZADD ``shards`` (those not marked lately, or all with ``force``) to ``index``."""
        now = self.clock()
        due = [shard for shard in shards
               if force or now - self._last.get((index, shard), -1e18) >= MARK_EVERY]
        if not due:
            return
        for shard in due:
            self._last[(index, shard)] = now
        if len(self._last) > 100_000:
            self._last.clear()
        mark_index(pipe, index, due, now)


def mark_index(target: Any, index: str, shards: Iterable[int], now: float) -> None:
    """ZADD ``shards`` to ``index`` (a shard index) as marked at ``now``."""
    target.zadd(index, {str(shard): now for shard in shards})


def wake_dispatchers(target: Any, keys: Keys) -> None:
    """Wake a dispatcher waiting between ticks (``Keys.dispatch_wake``: one entry at most):
    a job short of work pushed links, or a new job wants its first tasks."""
    target.lpush(keys.dispatch_wake(), 1)
    target.ltrim(keys.dispatch_wake(), 0, 0)


def prune(scripts: LuaScripts, pipe: Any, index: str, shards: Sequence[int],
          seen_at: float, marks: Mapping[int, float] | None = None) -> None:
    """Remove ``shards`` from ``index`` unless marked within PRUNE_MARGIN of ``seen_at``
    (when they were seen empty). ``marks`` (shard -> marked at, as read before the look)
    leaves out at once those marked too lately to go: a busy shard, seen empty between
    two pushes, costs no call."""
    cutoff = seen_at - PRUNE_MARGIN
    if marks is not None:
        shards = [shard for shard in shards if marks.get(shard, cutoff) <= cutoff]
    if shards:
        scripts.run("index_prune", [index], [repr(seen_at - PRUNE_MARGIN),
                                             *map(str, shards)], pipe=pipe)


def read_index(client: RedisClient, index: str) -> list[int]:
    return sorted(int(shard) for shard in client.zrange(index, 0, -1))


def index_marks(entries: Iterable[tuple[str, float]]) -> dict[int, float]:
    """An index read with its scores (``ZRANGE ... WITHSCORES``): shard -> marked at."""
    return {int(shard): float(marked) for shard, marked in entries}


def crawl_shards(client: RedisClient, keys: Keys, crawlid: str) -> list[int]:
    """The shards a crawl has (had) tasks in."""
    return sorted(int(shard) for shard in client.smembers(keys.crawl_shards(crawlid)))


def first_for(shard: int, instances: Sequence[str]) -> str:
    """Rendezvous hashing: the instance that ranks first for ``shard``. Every
    dispatcher computes the same answer from the same list, and only the shards of an
    instance that joins or leaves change hands."""
    def rank(name: str) -> int:
        return zlib.crc32(f"{name}/{shard}".encode())
    return max(instances, key=lambda name: (rank(name), name))


def prefers(instance: str, shard: int, instances: Sequence[str]) -> bool:
    """Does ``instance`` rank first for ``shard`` among ``instances``?"""
    return first_for(shard, instances) == instance


class ShardLeases:
    """The shards one dispatcher holds: it beats in the dispatchers' registry and holds
    the shards it ranks first for among the live dispatchers (those that beat within
    ``ttl``), taking over those of a dispatcher gone silent and handing those another
    ranks first for to it. Holding costs no call per shard while the dispatchers stay
    the same: a shard is claimed when the live dispatchers change, when it is found not
    held, and in a full pass every ``CLAIM_ALL_EVERY`` seconds."""

    CLAIM_ALL_EVERY = 60.0

    def __init__(self, client: RedisClient, keys: Keys, instance: str, ttl: float = 10.0,
                 clock: Clock = time.time, scripts: LuaScripts | None = None) -> None:
        self.client = client
        self.keys = keys
        self.instance = instance
        self.ttl = ttl
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)
        self.held: set[int] = set()
        self._claimed_all_at = -1e18
        self._members: list[str] = []

    def live_dispatchers(self) -> list[str]:
        cutoff = self.clock() - self.ttl
        return sorted(self.client.zrangebyscore(self.keys.dispatchers(), f"({cutoff!r}", "+inf"))

    def refresh(self) -> set[int]:
        """Beat, then claim / release as the live dispatchers rank; returns the shards
        held."""
        now = self.clock()
        self.client.zadd(self.keys.dispatchers(), {self.instance: now})
        members = self.live_dispatchers()
        if self.instance not in members:
            members = sorted([*members, self.instance])
        mine = {shard for shard in self.keys.all_shards()
                if prefers(self.instance, shard, members)}
        if members != self._members or now - self._claimed_all_at >= self.CLAIM_ALL_EVERY:
            self._claim(mine, mine, members)
            self._members, self._claimed_all_at = members, now
        elif mine != self.held:
            self._claim(mine, mine - self.held, members)
        return self.held

    def _claim(self, mine: set[int], wanted: set[int], members: list[str]) -> None:
        """Claim ``wanted`` (of ``mine``), give back what is held and not mine."""
        pipe = self.client.pipeline(transaction=False)
        claimed, given_back = sorted(wanted), sorted(self.held - mine)
        for shard in claimed:
            self._run(pipe, shard, "hold", members)
        for shard in given_back:
            self._run(pipe, shard, "release", [first_for(shard, members)])
        replies = pipe.execute()
        got = {shard for shard, reply in zip(claimed, replies, strict=False) if reply == 1}
        self.held = (self.held & (mine - wanted)) | got

    def _run(self, pipe: Any, shard: int, mode: str, members: Sequence[str] = ()) -> None:
        self.scripts.run("shard_claim", [self.keys.shard_owner(shard)],
                         [self.instance, mode, *members], pipe=pipe)

    def release_all(self) -> None:
        """A dispatcher stopping cleanly: its shards go at once to the live dispatchers
        that rank first for them (or are free), not once its beat is ``ttl`` old."""
        others = [name for name in self.live_dispatchers() if name != self.instance]
        pipe = self.client.pipeline(transaction=False)
        for shard in sorted(self.held):
            self._run(pipe, shard, "release", [first_for(shard, others)] if others else [])
        pipe.zrem(self.keys.dispatchers(), self.instance)
        pipe.execute()
        self.held = set()
