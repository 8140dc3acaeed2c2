"""Webhook deliveries of crawl events: at least once, retried with exponential backoff,
signed, logged.

A delivery is one event for one URL, a member of a Redis sorted set scored by when it is
due (``Keys.webhook_queue``). A monitor leases the due ones (``worklist_claim.lua``),
POSTs each body through the URL guard (a private address is refused unless
``CRAWLCLUSTER_WEBHOOK_ALLOWED_NETWORKS`` has it) and, in one transaction, takes it out
(a 2xx answer) or puts it back with its attempt count up, due after ``backoff * 2 **
(attempts - 1)`` seconds (at most ``backoff_max``). A monitor that dies mid-delivery
leaves it leased; once the lease runs out another takes it, so a receiver may see an
event twice, with the same ``id`` (the ``X-Crawlcluster-Delivery`` header). After
``max_attempts`` (or at once, if the guard refuses the URL) a delivery is given up,
logged and counted (``monitor:webhooks:given_up``, in ``stats``). Each attempt goes into a
bounded log (``Keys.webhook_log``; ``crawlcluster webhooks``).

The body is the event's JSON; ``X-Crawlcluster-Signature: sha256=<hex>`` is its
HMAC-SHA256 under ``CRAWLCLUSTER_WEBHOOK_SECRET``, which a receiver computes again
(``signature``) and compares in constant time.
"""

import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from master.counters import Clock, WindowCounts
from master.keys import Keys
from master.lua import LuaScripts
from message_processing.events import Event
from settings.clients import RedisClient
from settings.errors import CrawlClusterError
from settings.loader import Settings

logger = logging.getLogger(__name__)
SIGNATURE_HEADER = "X-Crawlcluster-Signature"
Delivery = dict[str, Any]       # {"url", "event", "attempts"} as queued


class FetchGuard(Protocol):
    """What delivers a webhook: crawler/urlguard.py's ``UrlGuard`` (built by the role that
    runs the monitor: this package sits below ``crawler``). ``fetch`` raises a
    CrawlClusterError: with a ``reason`` when the guard refused the URL."""

    def fetch(self, url: str, headers: dict[str, str] | None = None, *, method: str = ...,
              body: bytes | None = ..., max_redirects: int = ..., max_bytes: int = ...,
              timeout: float = ...) -> Any: ...


def signature(secret: str, body: bytes) -> str:
    """The ``X-Crawlcluster-Signature`` value of ``body``: ``sha256=`` and the hex HMAC."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class RetryPolicy:
    backoff: float = 5.0
    backoff_max: float = 3600.0
    max_attempts: int = 60

    def wait(self, attempts: int) -> float:
        """Seconds before the next try of a delivery tried ``attempts`` times."""
        return float(min(self.backoff * 2 ** max(attempts - 1, 0), self.backoff_max))


class Webhooks:
    def __init__(self, client: RedisClient, keys: Keys, guard: FetchGuard, secret: str,
                 policy: RetryPolicy, timeout: float = 10.0, log_size: int = 1000,
                 clock: Clock = time.time, scripts: LuaScripts | None = None) -> None:
        self.client = client
        self.keys = keys
        self.guard = guard
        self.secret = secret
        self.policy = policy
        self.timeout = timeout
        self.log_size = log_size
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)
        self.given_up = WindowCounts(client, keys.window_counts("monitor:webhooks:given_up"),
                                     scripts=self.scripts)

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings, guard: FetchGuard,
                      **kwargs: Any) -> "Webhooks":
        """``guard``: a UrlGuard allowing ``CRAWLCLUSTER_WEBHOOK_ALLOWED_NETWORKS``."""
        secret = settings["CRAWLCLUSTER_WEBHOOK_SECRET"] or ""
        if not secret:
            logger.warning("CRAWLCLUSTER_WEBHOOK_SECRET is empty: webhook deliveries go "
                           "unsigned")
        policy = RetryPolicy(settings.getfloat("CRAWLCLUSTER_WEBHOOK_BACKOFF"),
                             settings.getfloat("CRAWLCLUSTER_WEBHOOK_BACKOFF_MAX"),
                             settings.getint("CRAWLCLUSTER_WEBHOOK_MAX_ATTEMPTS"))
        return cls(client, Keys.from_settings(settings), guard, secret, policy,
                   timeout=settings.getfloat("CRAWLCLUSTER_WEBHOOK_TIMEOUT"),
                   log_size=settings.getint("CRAWLCLUSTER_WEBHOOK_LOG_SIZE"), **kwargs)

    def add(self, url: str, event: Event, attempts: int = 0, due: float | None = None,
            pipe: Any = None) -> None:
        """Queue a delivery of ``event`` to ``url`` (due now unless ``due``)."""
        member = json.dumps({"url": url, "event": event, "attempts": attempts},
                            sort_keys=True, ensure_ascii=False)
        target = pipe if pipe is not None else self.client
        target.zadd(self.keys.webhook_queue(), {member: self.clock() if due is None else due})

    def pending(self) -> int:
        return int(self.client.zcard(self.keys.webhook_queue()))

    def deliver_due(self, limit: int = 5) -> int:
        """Try the due deliveries once each; returns how many were tried. The lease
        outlasts every one of them timing out, so no other monitor takes one meanwhile."""
        now = self.clock()
        lease = now + limit * self.timeout * 2 + 30
        members = self.scripts.run("worklist_claim", [self.keys.webhook_queue()],
                                   [repr(now), repr(lease), limit])
        for member in members:
            self._attempt(member, json.loads(member))
        return len(members)

    def _attempt(self, member: str, delivery: Delivery) -> None:
        status, error, refused = self._post(delivery["url"], delivery["event"])
        attempts = delivery["attempts"] + 1
        delivered = error is None
        pipe = self.client.pipeline(transaction=True)
        pipe.zrem(self.keys.webhook_queue(), member)
        outcome = "delivered"
        if not delivered:
            last = refused or attempts >= self.policy.max_attempts
            outcome = "given_up" if last else "retry"
            if last:
                self.given_up.increment(1, pipe=pipe)
            if outcome == "retry":
                self.add(delivery["url"], delivery["event"], attempts,
                         due=self.clock() + self.policy.wait(attempts), pipe=pipe)
        self._log(pipe, delivery, attempts, outcome, status, error)
        pipe.execute()
        log = logger.info if delivered else logger.warning
        log("webhook %s of event %s, attempt %d: %s%s", delivery["url"],
            delivery["event"]["id"], attempts, outcome, f" ({error})" if error else "")

    def _post(self, url: str, event: Event) -> tuple[int | None, str | None, bool]:
        """POST the event: ``(status, None, False)`` on a 2xx answer, else the status
        (None if there was no answer), why it failed, and whether the guard refused the
        URL (tried no more)."""
        body = json.dumps(event, sort_keys=True, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "User-Agent": "crawlcluster-webhook",
                   "X-Crawlcluster-Event": event["type"],
                   "X-Crawlcluster-Delivery": event["id"]}
        if self.secret:
            headers[SIGNATURE_HEADER] = signature(self.secret, body)
        try:
            reply = self.guard.fetch(url, headers, method="POST", body=body,
                                     max_bytes=64 * 1024, timeout=self.timeout)
        except CrawlClusterError as exc:       # RefusedUrl (with a reason) or FetchFailed
            # a name that does not resolve may resolve later: tried again, as a failed
            # connection is; any other refusal stands
            reason = getattr(exc, "reason", None)
            return None, str(exc), reason not in (None, "unresolvable")
        if 200 <= reply.status < 300:
            return reply.status, None, False
        return reply.status, f"HTTP {reply.status}", False

    def _log(self, pipe: Any, delivery: Delivery, attempts: int, outcome: str,
             status: int | None, error: str | None) -> None:
        event = delivery["event"]
        entry = {"time": self.clock(), "event": event["id"], "type": event["type"],
                 "crawlid": event["crawlid"], "url": delivery["url"], "attempt": attempts,
                 "outcome": outcome, "status": status, "error": error}
        pipe.lpush(self.keys.webhook_log(), json.dumps(entry, sort_keys=True,
                                                       ensure_ascii=False))
        pipe.ltrim(self.keys.webhook_log(), 0, self.log_size - 1)

    def log(self, limit: int = 100, crawlid: str | None = None) -> list[dict[str, Any]]:
        return delivery_log(self.client, self.keys, limit, crawlid)


def delivery_log(client: RedisClient, keys: Keys, limit: int = 100,
                 crawlid: str | None = None) -> list[dict[str, Any]]:
    """The newest delivery attempts (of one crawl if ``crawlid``), newest first."""
    entries = (json.loads(raw) for raw in client.lrange(keys.webhook_log(), 0, -1))
    return [entry for entry in entries
            if crawlid is None or entry["crawlid"] == crawlid][:limit]
