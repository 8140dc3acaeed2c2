"""Pushback: when a site says "too many requests", the whole cluster slows down for it.

A domain's pushback state lives in its shard (``Keys.pushback``), beside its throttle
windows, so every spider on every node reads it in the take it already makes
(``throttle_take.lua``): while the domain is paused no task of it is taken, and its
rate factor scales its configured limit. A 429 or 503 (or a burst of 403s, or a block
page: crawler/pushback.py) is reported at once (``report``: one round trip) and
multiplies the factor down and pauses the domain (``Retry-After``, or the default
pause); pages fetched without pushback raise the factor again, counted in the
process and sent with its next take (``credit``, ``queue_credits``: no round trip of
their own).
"""

import json
import math
import time
from collections import Counter, defaultdict
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

    decrease: float = 0.7       # the factor is multiplied by this at a pushback
    floor: float = 0.02         # the least factor
    increase: float = 0.01      # per page fetched, times the factor the last decrease left
    pause: float = 5.0          # seconds paused after a pushback without Retry-After
    max_pause: float = 600.0    # the longest pause a Retry-After may ask for
    ttl: float = 3600.0         # seconds a state is kept after its last change

    @classmethod
    def from_settings(cls, settings: Settings) -> "PushbackPolicy":
        return cls(decrease=settings.getfloat("CRAWLCLUSTER_PUSHBACK_DECREASE"),
                   floor=settings.getfloat("CRAWLCLUSTER_PUSHBACK_FLOOR"),
                   increase=settings.getfloat("CRAWLCLUSTER_PUSHBACK_INCREASE"),
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


def retry_after_seconds(value: str | bytes | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (RFC 9110: delay seconds or an
    HTTP date), or None if there is none or it reads as neither."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:       # an HTTP date is GMT
        return None
    return max(when.timestamp() - now, 0.0)


class PushbackStore:
    """The pushback states of the cluster's domains: reports, credits, reads."""

    def __init__(self, client: RedisClient, keys: Keys, policy: PushbackPolicy,
                 clock: Clock = time.time, scripts: LuaScripts | None = None) -> None:
        self.client = client
        self.keys = keys
        self.policy = policy
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)
        self.credits: Counter[str] = Counter()    # domain -> pages not yet credited
        # domain -> its factor below 1, as the last take of it read it (the take spaces
        # its tasks by the rate the script allows)
        self.factors: LRUCache[str, float] = LRUCache(FACTORS_KEPT)

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings,
                      **kwargs: Any) -> "PushbackStore":
        return cls(client, Keys.from_settings(settings), PushbackPolicy.from_settings(settings),
                   **kwargs)

    def report(self, domain: str, reason: str, retry_after: float | None,
               window: float) -> DomainPushback:
        """Record a pushback of ``domain`` for the whole cluster now: its factor
        multiplied down (once per ``window`` seconds at most) and a pause of
        ``retry_after`` seconds (None: the default), capped. One round trip."""
        now, policy = self.clock(), self.policy
        self.credits.pop(domain, None)        # pages fetched before it do not count
        pipe = self.client.pipeline(transaction=False)
        self.scripts.run(
            "pushback_report", [self.keys.pushback(self.keys.shard_of(domain))],
            [repr(now), domain, repr(policy.pause_for(retry_after)), repr(policy.decrease),
             repr(policy.floor), repr(window), repr(policy.ttl), reason], pipe=pipe)
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

    def credit(self, domain: str, pages: int = 1) -> None:
        """Count pages of ``domain`` fetched without pushback (sent with the next take),
        if its factor is below 1 as last read: a domain not pushing back costs nothing."""
        if domain in self.factors:
            self.credits[domain] += pages

    def queue_credits(self, pipe: Any) -> None:
        """Queue the pages counted so far on ``pipe`` (one script call per shard) and
        forget them: they raise their domains' factors, where one is below 1."""
        if not self.credits:
            return
        by_shard: defaultdict[int, list[Any]] = defaultdict(list)
        for domain, pages in self.credits.items():
            by_shard[self.keys.shard_of(domain)] += [domain, pages]
        self.credits = Counter()
        now, policy = self.clock(), self.policy
        for shard, pairs in by_shard.items():
            self.scripts.run("pushback_credit", [self.keys.pushback(shard)],
                             [repr(now), repr(policy.increase), repr(policy.ttl), *pairs],
                             pipe=pipe)

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
                    found[domain] = domain_pushback(domain, state)
        return found

    def states(self) -> list[DomainPushback]:
        """Every domain's live pushback state (one round trip over all shards), the
        most pushed back first."""
        pipe = self.client.pipeline(transaction=False)
        for shard in self.keys.all_shards():
            pipe.hgetall(self.keys.pushback(shard))
        now, found = self.clock(), []
        for fields in pipe.execute():
            for domain, value in fields.items():
                state = json.loads(value)
                if float(state.get("expires_at") or 0) > now:
                    found.append(domain_pushback(domain, state))
        return sorted(found, key=lambda state: (-state.pushbacks, state.domain))


def domain_pushback(domain: str, state: dict[str, Any]) -> DomainPushback:
    """A stored state (JSON decoded) as a ``DomainPushback``."""
    factor = float(state.get("factor", 1.0))
    return DomainPushback(domain, factor if math.isfinite(factor) else 1.0,
                          float(state.get("until") or 0.0), int(state.get("pushbacks") or 0),
                          str(state.get("reason") or ""), float(state.get("updated_at") or 0.0))
