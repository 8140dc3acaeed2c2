"""The seen-URL filter: generations of Bloom filters, so that a cluster running for
years keeps its memory and its error rate within what was configured.

A plain Bloom filter cannot forget: past its capacity its false-positive rate climbs,
and a false positive is a new link taken for one already seen, silently not crawled.
So the filter is a short list of generations, each a ``BloomFilter`` of its own:

- a URL is seen if any live generation holds it;
- adding puts it in the newest generation; looking up a URL only the oldest
  generation holds (the next to go) puts it in the newest too, so a link found again
  and again (a hub listing an article) stays remembered;
- a master's upkeep starts a new generation once the newest holds its capacity
  (estimated from a sample of its cells), or is ``max_age`` old if that is set, and
  drops the oldest once there are more than ``generations``.

Every generation is sized for ``capacity / generations``-ish URLs at ``error_rate /
generations``, so all of them together take no more memory than one filter sized for
``capacity`` at ``error_rate`` (``generation_shape``), and the error, summed over the
live generations, is at most ``error_rate`` however many URLs went through. What is
given up is memory of the distant past: a URL not met since ``generations - 1`` full
generations were filled may be crawled again. docs/architecture.md ("Duplicate
filtering over months") says what that means for revisits and schedules.

Every process reads the generation list again every ``refresh`` seconds. A
generation stops being the newest at least a few refreshes before it can be dropped
(``MIN_GAP``), so a process never adds to a dropped one unless it stalled for that
long; a retired generation's keys are deleted again for a while (``RETIRED_KEEP``)
in case such a late writer made them anew.
"""

import json
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from master.bloom import BloomFilter
from master.bloomparams import BloomParams, Scope, scope_of
from master.bloomwire import flags, missing_from
from master.counters import Clock
from master.keys import Keys
from master.lua import LuaScripts
from settings.clients import RedisClient
from settings.errors import ConfigError
from settings.loader import Settings

logger = logging.getLogger(__name__)
RETIRED_KEEP = 3600.0       # seconds a dropped generation's keys are deleted again
MIN_GAP = 5                 # refreshes a generation stays newest at least
FILL_SAMPLE = 1024          # words per block sampled to estimate the newest's URLs

State = dict[str, Any]      # {"next": n, "live": [generation], "retired": [...]}


def generation_shape(capacity: int, error_rate: float, generations: int,
                     **shape: Any) -> tuple[int, BloomParams, BloomParams]:
    """``(URLs per generation, a generation's shape, the budget)``: generations sized
    at ``error_rate / generations`` whose memory together stays within the budget, one
    filter of ``capacity`` URLs at ``error_rate`` (``shape``: groups, counting,
    block_bits)."""
    if generations < 2:
        raise ConfigError(f"CRAWLCLUSTER_BLOOM_GENERATIONS must be 2 or more, got {generations}")
    budget = BloomParams.for_capacity(capacity, error_rate, **shape)
    per_generation = max(1, capacity // generations)
    while True:
        params = BloomParams.for_capacity(per_generation, error_rate / generations, **shape)
        if params.bytes * generations <= budget.bytes or per_generation == 1:
            return per_generation, params, budget
        per_generation = max(1, int(per_generation * 0.98))


class AgingBloomFilter:
    """The filter every role uses: ``add_many``, ``contains_many``, ``remove_many``
    over the live generations, and ``upkeep`` (masters) to turn them over."""

    def __init__(self, client: RedisClient, keys: Keys, name: str, params: BloomParams,
                 capacity: int, generations: int, error_rate: float,
                 budget: BloomParams | None = None, max_age: float = 0.0,
                 refresh: float = 1.0, clock: Clock = time.time,
                 scripts: LuaScripts | None = None, **filter_options: Any) -> None:
        self.client = client
        self.keys = keys
        self.name = name
        self.params = params            # of the generations started from now on
        self.capacity = capacity        # URLs per generation
        self.generations = generations
        self.error_rate = error_rate
        self.budget = budget            # the memory all generations share
        self.max_age = max_age
        self.refresh = refresh
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)
        self.filter_options = filter_options      # hash_in, chunk
        self._filters: dict[str, BloomFilter] = {}
        self._live: list[BloomFilter] = []
        # the live generations as last read: (name, created) each, oldest first
        self.lineup: tuple[tuple[str, float], ...] = ()
        self._read_at = -math.inf
        self.live()                               # creates the list, or checks it

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings, name: str = "seen",
                      **kwargs: Any) -> "AgingBloomFilter":
        generations = settings.getint("CRAWLCLUSTER_BLOOM_GENERATIONS")
        error_rate = settings.getfloat("CRAWLCLUSTER_BLOOM_ERROR_RATE")
        capacity, params, budget = generation_shape(
            settings.getint("CRAWLCLUSTER_BLOOM_CAPACITY"), error_rate, generations,
            groups=settings.getint("CRAWLCLUSTER_BLOOM_GROUPS"),
            counting=settings.getbool("CRAWLCLUSTER_BLOOM_COUNTING"),
            block_bits=settings.getint("CRAWLCLUSTER_BLOOM_BLOCK_BITS"))
        kwargs.setdefault("max_age", settings.getfloat("CRAWLCLUSTER_BLOOM_GENERATION_MAX_AGE"))
        return cls(client, Keys.from_settings(settings), name, params, capacity, generations,
                   error_rate, budget=budget, **kwargs)

    @property
    def counting(self) -> bool:
        return self.params.counting

    # --- the filter ------------------------------------------------------------------

    def add_many(self, urls: Sequence[str], scope: Scope = "") -> list[bool]:
        """Check-and-add: True for each URL no live generation held (each is now in
        the newest)."""
        if not urls:
            return []
        *older, newest = self.live()
        if self._scripted(newest):
            added = np.array(newest.add_many(urls, scope))
            for bloom in older:
                added &= ~np.array(bloom.contains_many(urls, scope))
            return flags(added)
        targets = [(bloom, bloom.read_op) for bloom in older] + [(newest, newest.write_op)]
        return flags(np.all(missing_from(targets, urls, scope, newest.chunk), axis=0))

    def contains_many(self, urls: Sequence[str], scope: Scope = "") -> list[bool]:
        """True for each URL a live generation holds (or a false positive). One held
        only by the oldest generation, the next to be dropped, is added to the newest
        too: a link found again and again is remembered however long ago it was first
        seen, at the cost of one write per URL every ``generations - 1`` turnovers."""
        if not urls:
            return []
        live = self.live()
        if self._scripted(live[-1]):
            missing = np.array([[not found for found in bloom.contains_many(urls, scope)]
                                for bloom in live], dtype=bool)
        else:
            missing = missing_from([(bloom, bloom.read_op) for bloom in live],
                                   urls, scope, live[-1].chunk)
        found: NDArray[np.bool_] = np.logical_not(missing.all(axis=0))
        if len(live) >= self.generations:
            self._refresh(urls, scope, live[-1], found & missing[1:].all(axis=0))
        return flags(found)

    @staticmethod
    def _refresh(urls: Sequence[str], scope: Scope, newest: BloomFilter,
                 which: NDArray[np.bool_]) -> None:
        indexes = np.flatnonzero(which).tolist()
        if indexes:
            newest.add_many([urls[index] for index in indexes],
                            [scope_of(scope, index) for index in indexes])

    def remove_many(self, urls: Sequence[str], scope: Scope = "") -> list[bool]:
        """Counting mode: take URLs out of every live generation holding them (a URL
        found again was added to the newest too). True for each removed somewhere."""
        removed = np.zeros(len(urls), dtype=bool)
        for bloom in self.live():
            removed |= np.array(bloom.remove_many(urls, scope))
        return flags(removed)

    def add(self, url: str) -> bool:
        return self.add_many([url])[0]

    def contains(self, url: str) -> bool:
        return self.contains_many([url])[0]

    def _scripted(self, bloom: BloomFilter) -> bool:
        return bloom.params.counting or bloom.hash_in == "lua"

    # --- the generations -----------------------------------------------------------

    def live(self) -> list[BloomFilter]:
        """The live generations, oldest first (the list re-read every ``refresh`` s)."""
        if time.monotonic() - self._read_at >= self.refresh or not self._live:
            state = self._read_state()
            self._live = [self._filter(generation) for generation in state["live"]]
            self.lineup = tuple((generation["name"], generation["created"])
                                for generation in state["live"])
            self._filters = {bloom.name: bloom for bloom in self._live}
            self._read_at = time.monotonic()
        return self._live

    def _filter(self, generation: dict[str, Any]) -> BloomFilter:
        bloom = self._filters.get(generation["name"])
        if bloom is None:
            params = BloomParams.from_stored(generation["params"])
            bloom = BloomFilter(self.client, self.keys, generation["name"], params,
                                scripts=self.scripts, **self.filter_options)
            self._filters[generation["name"]] = bloom
        return bloom

    def _read_state(self) -> State:
        """The stored generation list; made (with one generation) if there is none."""
        raw = self.client.get(self.keys.bloom_generations(self.name))
        while raw is None:
            self._replace("", self._first_state())
            raw = self.client.get(self.keys.bloom_generations(self.name))
        state: State = json.loads(raw)
        return state

    def _first_state(self) -> State:
        """One new generation; a filter of this name from before generations (its meta
        key) is kept as the oldest, so upgrading forgets nothing."""
        live = []
        legacy = self.client.get(self.keys.bloom_meta(self.name))
        if legacy is not None:
            live.append({"name": self.name, "params": json.loads(legacy),
                         "created": self.clock(), "capacity": self.capacity})
        state: State = {"next": 1, "live": live, "retired": []}
        return self._started(state)

    def _started(self, state: State) -> State:
        """``state`` with a new newest generation."""
        number = state["next"]
        generation = {"name": f"{self.name}.{number}", "params": self.params.stored(),
                      "created": self.clock(), "capacity": self.capacity}
        return dict(state, next=number + 1, live=[*state["live"], generation])

    def _replace(self, old: str, new: State) -> bool:
        return bool(self.scripts.run("bloom_rotate", [self.keys.bloom_generations(self.name)],
                                     [old, json.dumps(new, sort_keys=True)]))

    def upkeep(self) -> bool:
        """Start a new generation if the newest is full (or old enough), dropping the
        oldest past ``generations``; delete retired ones again. True if it turned over.
        Several masters may call it at once: one of them turns the list over."""
        raw = self.client.get(self.keys.bloom_generations(self.name))
        if raw is None:
            self.live()
            return False
        state: State = json.loads(raw)
        now = self.clock()
        self._delete_retired(state, now)
        if not self._newest_done(state["live"][-1], now):
            return False
        turned = self._started(state)
        while len(turned["live"]) > self.generations:
            oldest = turned["live"].pop(0)
            turned["retired"] = [*turned["retired"], {"name": oldest["name"], "at": now,
                                                      "blocks": oldest["params"]["blocks"]}]
        if not self._replace(raw, turned):
            return False
        for retired in turned["retired"]:
            if retired["at"] == now:
                self._delete_generation(retired)
        logger.info("Bloom filter %s: generation %s started (%d live)", self.name,
                    turned["live"][-1]["name"], len(turned["live"]))
        self._read_at = -math.inf
        return True

    def _newest_done(self, newest: dict[str, Any], now: float) -> bool:
        age = now - newest["created"]
        if age < MIN_GAP * self.refresh:
            return False
        if self.max_age and age >= self.max_age:
            return True
        _, urls = self._filter(newest).fill(FILL_SAMPLE)
        return bool(urls >= newest["capacity"])

    def _delete_retired(self, state: State, now: float) -> None:
        """Delete again the keys of generations retired lately; forget older ones."""
        kept = [retired for retired in state["retired"] if now - retired["at"] < RETIRED_KEEP]
        for retired in kept:
            self._delete_generation(retired)
        if len(kept) < len(state["retired"]):
            self._replace(json.dumps(state, sort_keys=True), dict(state, retired=kept))

    def _delete_generation(self, retired: dict[str, Any]) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.delete(self.keys.bloom_meta(retired["name"]))
        for block in range(retired["blocks"]):
            pipe.delete(self.keys.bloom_block(retired["name"], block))
        pipe.execute()
        self._filters.pop(retired["name"], None)

    # --- figures -------------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        """Live generations, the newest's fill, URLs estimated in each, the age of the
        oldest, the error a new URL meets now (summed over generations) beside the
        configured rate, and the memory they take against the budget."""
        state = self._read_state()
        estimates = []
        for generation in state["live"]:
            fill, urls = self._filter(generation).fill()
            estimates.append((generation, fill, urls))
        passes = math.prod(1 - self._filter(generation).params.false_positive_rate(urls)
                           for generation, _, urls in estimates)
        newest = estimates[-1]
        return {"generations": len(estimates), "fill": newest[1],
                "newest_share": min(1.0, newest[2] / max(1, newest[0]["capacity"])),
                "urls": sum(urls for _, _, urls in estimates),
                "oldest_age": self.clock() - estimates[0][0]["created"],
                "error_now": 1 - passes, "error_rate": self.error_rate,
                "bytes": sum(self._filter(generation).params.bytes
                             for generation, _, _ in estimates),
                "budget_bytes": self.budget.bytes if self.budget else None}


class KnownLinks:
    """Links one process learnt the filter holds, so that a link met again (a menu, a
    related-articles box, a hub listing) is not looked up in Redis again: most links a
    page yields were seen before, and each lookup costs Redis a few bit reads a URL.

    While the live generations stay the same, a URL the filter held still holds (bits
    are only set). When they turn over, or the list is made anew, everything is
    forgotten: a URL only the oldest generation holds must be looked up to be kept in
    the newest. A URL taken out of the filter (counting mode) is forgotten with it. At
    most ``size`` links are kept (a 64-bit hash of crawl id and URL each); past that the
    memory starts over. ``size`` 0 keeps none.
    """

    def __init__(self, bloom: AgingBloomFilter, size: int) -> None:
        self.bloom = bloom
        self.size = size
        self._known: set[int] = set()
        self._lineup: tuple[tuple[str, float], ...] = ()

    def known(self, urls: Sequence[str], scopes: Sequence[str]) -> list[bool]:
        """True for each URL (of the crawl in ``scopes``) known to be in the filter."""
        self.bloom.live()
        self._follow_lineup()
        return [hash((scope, url)) in self._known
                for url, scope in zip(urls, scopes, strict=True)]

    def remember(self, urls: Sequence[str], scopes: Sequence[str]) -> None:
        """The filter holds these now (found, or added, by the generations last read)."""
        if not self.size:
            return
        self._follow_lineup()
        if len(self._known) + len(urls) > self.size:
            self._known.clear()
        self._known.update(hash((scope, url)) for url, scope in zip(urls, scopes, strict=True))

    def _follow_lineup(self) -> None:
        if self.bloom.lineup != self._lineup:
            self._known.clear()
            self._lineup = self.bloom.lineup

    def forget(self, urls: Sequence[str], scopes: Sequence[str]) -> None:
        self._known.difference_update(hash((scope, url))
                                      for url, scope in zip(urls, scopes, strict=True))
