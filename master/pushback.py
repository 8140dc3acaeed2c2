"""Pushback: when a site says "too many requests", the whole cluster slows down for it.

A domain's pushback state lives in its shard (``Keys.pushback``), beside its throttle
windows, so every spider on every node reads it in the take it already makes
(``throttle_take.lua``): while the domain is paused no task of it is taken, and its
rate factor scales its configured limit; its hits are spaced over the window for the
whole cluster, never taken in a burst. A domain met for the first time starts slowly
(at ``start_factor`` of its limit, doubling every second), so a site's hidden rate is
found without a burst at it. A 429 or 503 (or a burst of 403s, or a block page:
crawler/pushback.py) is reported at once (``report``: one round trip): it ends the
slow start, multiplies the factor in force down and pauses the domain (``Retry-After``,
or the default pause). Once the pause is over the factor rises again by ``increase``
of its lowered value a second (additive increase) for as long as no pushback comes.
"""

import json
import math
import time
from collections import defaultdict
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from cachetools import LRUCache

from master.counters import TOTAL, Clock
from master.keys import Keys
from master.lua import LuaScripts
from settings.clients import RedisClient
from settings.loader import Settings

FACTORS_KEPT = 10_000     # domains whose factor below 1 a process remembers (LRU)
PUSHBACK_DOMAINS_COUNTED = 10_000    # domains whose pushbacks are counted (the most)


@dataclass(frozen=True)
class PushbackPolicy:
    """How the cluster answers pushback (``CRAWLCLUSTER_PUSHBACK_*``)."""

    decrease: float = 0.8       # the factor is multiplied by this at a pushback
    floor: float = 0.02         # the least factor
    increase: float = 0.012     # a second, times the factor the last decrease left
    start_factor: float = 0.0   # share of its limit a new domain starts at (0: all of it)
    pause: float = 2.0          # seconds paused after a pushback without Retry-After
    max_pause: float = 600.0    # the longest pause a Retry-After may ask for
    ttl: float = 3600.0         # seconds a state is kept after its last change

    @classmethod
    def from_settings(cls, settings: Settings) -> "PushbackPolicy":
        return cls(decrease=settings.getfloat("CRAWLCLUSTER_PUSHBACK_DECREASE"),
                   floor=settings.getfloat("CRAWLCLUSTER_PUSHBACK_FLOOR"),
                   increase=settings.getfloat("CRAWLCLUSTER_PUSHBACK_INCREASE"),
                   start_factor=settings.getfloat("CRAWLCLUSTER_PUSHBACK_START_FACTOR"),
                   pause=settings.getfloat("CRAWLCLUSTER_PUSHBACK_PAUSE"),
                   max_pause=settings.getfloat("CRAWLCLUSTER_PUSHBACK_MAX_PAUSE"),
                   ttl=settings.getfloat("CRAWLCLUSTER_PUSHBACK_TTL"))

    def pause_for(self, retry_after: float | None) -> float:
        """Seconds to pause for a ``Retry-After`` of ``retry_after`` seconds (None: none
        given, the default pause), at most ``max_pause``."""
        wanted = self.pause if retry_after is None else retry_after
        return min(max(wanted, 0.0), self.max_pause)


@dataclass(frozen=True)
class DomainPushback:
    """One domain's pushback state, as ``info``, ``watch``, the UI and metrics show it."""

    domain: str
    factor: float          # share of the configured limit allowed now
    paused_until: float    # epoch seconds; in the past when not paused
    pushbacks: int         # pushbacks since the state began
    reason: str            # of the last pushback
    updated_at: float

    def as_json(self, now: float) -> dict[str, Any]:
        return {"domain": self.domain, "factor": round(self.factor, 4),
                "paused_until": self.paused_until,
                "paused_for": round(max(self.paused_until - now, 0.0), 3),
                "pushbacks": self.pushbacks, "reason": self.reason,
                "updated_at": self.updated_at}


MAX_RETRY_AFTER = 1e9      # seconds: a longer delay is read as this (the pause is capped anyway)


def retry_after_seconds(value: str | bytes | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (RFC 9110: delay seconds or an
    HTTP date), or None if there is none or it reads as neither."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if text.isascii() and text.isdigit():      # "²" is a digit to str.isdigit
        return min(float(text), MAX_RETRY_AFTER)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:       # an HTTP date is GMT
        return None
    return max(when.timestamp() - now, 0.0)


class PushbackStore:
    """The pushback states of the cluster's domains: reports and reads."""

    def __init__(self, client: RedisClient, keys: Keys, policy: PushbackPolicy,
                 clock: Clock = time.time, scripts: LuaScripts | None = None) -> None:
        self.client = client
        self.keys = keys
        self.policy = policy
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)
        # domain -> its factor below 1, as the last take of it read it (the take spaces
        # its tasks by the rate the script allows)
        self.factors: LRUCache[str, float] = LRUCache(FACTORS_KEPT)

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings,
                      **kwargs: Any) -> "PushbackStore":
        return cls(client, Keys.from_settings(settings), PushbackPolicy.from_settings(settings),
                   **kwargs)

    def take_args(self) -> list[str]:
        """The policy's arguments to ``throttle_take.lua`` (ARGV[7..9])."""
        policy = self.policy
        return [repr(policy.start_factor), repr(policy.increase), repr(policy.ttl)]

    def report(self, domain: str, reason: str, retry_after: float | None,
               window: float) -> DomainPushback:
        """Record a pushback of ``domain`` for the whole cluster now: its factor
        multiplied down (once per ``window`` seconds at most, and at the end of a slow
        start) and a pause of ``retry_after`` seconds (None: the default), capped. One
        round trip."""
        now, policy = self.clock(), self.policy
        pipe = self.client.pipeline(transaction=False)
        self.scripts.run(
            "pushback_report", [self.keys.pushback(self.keys.shard_of(domain))],
            [repr(now), domain, repr(policy.pause_for(retry_after)), repr(policy.decrease),
             repr(policy.floor), repr(window), repr(policy.ttl), reason,
             repr(policy.increase)], pipe=pipe)
        counts = self.keys.pushback_counts()
        pipe.zincrby(counts, 1, domain)
        pipe.zincrby(counts, 1, TOTAL)
        pipe.zremrangebyrank(counts, 0, -PUSHBACK_DOMAINS_COUNTED - 2)   # the total stays
        factor, until, count = pipe.execute()[0]
        self.factors[domain] = float(factor)
        return DomainPushback(domain, float(factor), float(until), int(count), reason, now)

    def factors_read(self, domains: list[str], factors: list[str]) -> None:
        """Note the factors a take read of ``domains`` (``[domain, factor, ...]`` of
        those below 1; the others are at 1)."""
        for domain in domains:
            self.factors.pop(domain, None)
        for domain, factor in zip(factors[::2], factors[1::2], strict=True):
            self.factors[domain] = float(factor)

    def scaled(self, domain: str, hits: int, window: float) -> tuple[int, float]:
        """``(hits, window)`` of a limit at the domain's factor, as the take's script
        scales it: fewer hits while at least 2 are left, else one in a longer window."""
        factor = self.factors.get(domain, 1.0)
        if factor >= 1 or hits <= 0:
            return hits, window
        rate = hits * factor
        if rate >= 2:
            return math.floor(rate), window
        return 1, window / rate

    def states_of(self, domains: list[str]) -> dict[str, DomainPushback]:
        """The live pushback states of ``domains`` that have one (one round trip)."""
        by_shard: defaultdict[int, list[str]] = defaultdict(list)
        for domain in domains:
            by_shard[self.keys.shard_of(domain)].append(domain)
        pipe = self.client.pipeline(transaction=False)
        for shard, names in by_shard.items():
            pipe.hmget(self.keys.pushback(shard), names)
        now, found = self.clock(), {}
        for names, values in zip(by_shard.values(), pipe.execute() if by_shard else [],
                                 strict=True):
            for domain, value in zip(names, values, strict=True):
                state = json.loads(value) if value else None
                if state and float(state.get("expires_at") or 0) > now:
                    found[domain] = domain_pushback(domain, state, now, self.policy.increase)
        return found

    def states(self) -> list[DomainPushback]:
        """The live pushback state of every domain pushed back (one round trip over all
        shards; those only in slow start left out), the most pushed back first."""
        pipe = self.client.pipeline(transaction=False)
        for shard in self.keys.all_shards():
            pipe.hgetall(self.keys.pushback(shard))
        now, found = self.clock(), []
        for fields in pipe.execute():
            for domain, value in fields.items():
                if domain.startswith("~"):       # the report's sweep cursor
                    continue
                state = json.loads(value)
                if float(state.get("expires_at") or 0) > now and state.get("pushbacks"):
                    found.append(domain_pushback(domain, state, now, self.policy.increase))
        return sorted(found, key=lambda state: (-state.pushbacks, state.domain))


def factor_now(state: dict[str, Any], now: float, increase: float) -> float:
    """A stored state's factor at ``now``, as throttle_take.lua computes it: the factor
    its last decrease left, regained once its pause is over (doubling a second in slow
    start, else ``increase`` of it a second), up to 1."""
    base = float(state.get("base", state.get("factor", 1.0)))
    since = now - max(float(state.get("decreased_at") or 0), float(state.get("until") or 0))
    if since <= 0:
        return base
    if state.get("start"):
        return min(1.0, base * 2 ** min(since, 64.0))
    return min(1.0, base * (1 + increase * since))


def domain_pushback(domain: str, state: dict[str, Any], now: float,
                    increase: float) -> DomainPushback:
    """A stored state (JSON decoded) as a ``DomainPushback``, its factor as of ``now``."""
    factor = factor_now(state, now, increase)
    return DomainPushback(domain, factor if math.isfinite(factor) else 1.0,
                          float(state.get("until") or 0.0), int(state.get("pushbacks") or 0),
                          str(state.get("reason") or ""), float(state.get("updated_at") or 0.0))
