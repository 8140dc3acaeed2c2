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
A redirect is not followed: a failure, counted, given up after ``REDIRECT_ATTEMPTS``.
At most ``max_per_host`` deliveries wait for one receiver host (the rest are dropped,
logged and counted); logs show a URL's scheme and host only (a token may be in the rest).

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
from urllib.parse import urlsplit

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
# Attempts at a delivery the receiver answers with a redirect: it is not followed (a
# signed POST carried elsewhere), and waiting seldom changes it; a few tries cover a
# receiver briefly redirecting while it is deployed.
REDIRECT_ATTEMPTS = 3


class FetchGuard(Protocol):
    """What delivers a webhook: crawler/urlguard.py's ``UrlGuard`` (built by the role that
    runs the monitor: this package sits below ``crawler``). ``fetch`` raises a
    CrawlClusterError: with a ``reason`` when the guard refused the URL."""

    def fetch(self, url: str, headers: dict[str, str] | None = None, *, method: str = ...,
              body: bytes | None = ..., max_redirects: int = ..., max_bytes: int = ...,
              timeout: float = ...) -> Any: ...


def url_origin(url: str) -> str:
    """``url``'s scheme and host (and port): what logs show of a webhook URL, whose path
    or query may carry a token."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an invalid URL)"
    return f"{parts.scheme}://{parts.hostname or ''}{port}"


def receiver_host(url: str) -> str:
    """The host a delivery goes to (its queue per host is capped)."""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def delivery_digest(member: str) -> str:
    """What a receiver host's queue holds of a delivery (its count is all it is read
    for): a digest, not a second copy of an event that may list hundreds of sites."""
    return hashlib.sha256(member.encode("utf-8")).hexdigest()


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
                 clock: Clock = time.time, scripts: LuaScripts | None = None,
                 max_per_host: int = 10_000, max_queued: int = 100_000) -> None:
        self.client = client
        self.keys = keys
        self.guard = guard
        self.secret = secret
        self.policy = policy
        self.timeout = timeout
        self.log_size = log_size
        self.clock = clock
        self.scripts = scripts or LuaScripts(client)
        self.max_per_host = max_per_host
        self.max_queued = max_queued
        self.given_up, self.redirected, self.dropped = (
            WindowCounts(client, keys.window_counts(f"monitor:webhooks:{name}"),
                         scripts=self.scripts) for name in ("given_up", "redirected", "dropped"))

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
                   log_size=settings.getint("CRAWLCLUSTER_WEBHOOK_LOG_SIZE"),
                   max_per_host=settings.getint("CRAWLCLUSTER_WEBHOOK_MAX_QUEUED_PER_HOST"),
                   max_queued=settings.getint("CRAWLCLUSTER_WEBHOOK_MAX_QUEUED"),
                   **kwargs)

    def add(self, url: str, event: Event, attempts: int = 0, due: float | None = None,
            pipe: Any = None) -> None:
        """Queue a delivery of ``event`` to ``url`` (due now unless ``due``)."""
        member = json.dumps({"url": url, "event": event, "attempts": attempts},
                            sort_keys=True, ensure_ascii=False)
        target = pipe if pipe is not None else self.client
        when = self.clock() if due is None else due
        target.zadd(self.keys.webhook_queue(), {member: when})
        target.zadd(self.keys.webhook_host_queue(receiver_host(url)),
                    {delivery_digest(member): when})

    def add_new(self, deliveries: list[tuple[str, Event]], pipe: Any) -> int:
        """Queue first deliveries (``(url, event)``) on ``pipe``, but none to a receiver
        host with ``max_per_host`` waiting already (a receiver down for long, or crawls
        naming one host many times), nor past ``max_queued`` waiting in all (crawls
        naming many hosts): those are dropped, logged and counted. Returns how many were
        queued."""
        hosts = sorted({receiver_host(url) for url, _ in deliveries})
        sizes = self.client.pipeline(transaction=False)
        sizes.zcard(self.keys.webhook_queue())
        for host in hosts:
            sizes.zcard(self.keys.webhook_host_queue(host))
        total, *per_host = (int(n) for n in sizes.execute())
        waiting = dict(zip(hosts, per_host, strict=True))
        queued = 0
        for url, event in deliveries:
            host = receiver_host(url)
            if waiting[host] >= self.max_per_host:
                self._drop(pipe, url, event, f"{waiting[host]} deliveries to its host wait "
                           f"already (at most {self.max_per_host})")
            elif total >= self.max_queued:
                self._drop(pipe, url, event, f"{total} deliveries wait already (at most "
                           f"{self.max_queued} in all)")
            else:
                self.add(url, event, pipe=pipe)
                waiting[host] += 1
                total += 1
                queued += 1
        return queued

    def _drop(self, pipe: Any, url: str, event: Event, error: str) -> None:
        self.dropped.increment(1, pipe=pipe)
        self._log(pipe, {"url": url, "event": event}, 0, "dropped", None, error)
        logger.warning("webhook %s of event %s dropped: %s", url_origin(url), event["id"],
                       error)

    def _remove(self, pipe: Any, member: str, url: str) -> None:
        pipe.zrem(self.keys.webhook_queue(), member)
        pipe.zrem(self.keys.webhook_host_queue(receiver_host(url)), delivery_digest(member))

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
        redirected = status is not None and 300 <= status < 400
        pipe = self.client.pipeline(transaction=True)
        self._remove(pipe, member, delivery["url"])
        outcome = "delivered"
        if not delivered:
            last = (refused or attempts >= self.policy.max_attempts
                    or (redirected and attempts >= REDIRECT_ATTEMPTS))
            outcome = "given_up" if last else "retry"
            if last:
                self.given_up.increment(1, pipe=pipe)
            if redirected:
                self.redirected.increment(1, pipe=pipe)
            if outcome == "retry":
                self.add(delivery["url"], delivery["event"], attempts,
                         due=self.clock() + self.policy.wait(attempts), pipe=pipe)
        self._log(pipe, delivery, attempts, outcome, status, error)
        pipe.execute()
        log = logger.info if delivered else logger.warning
        log("webhook %s of event %s, attempt %d: %s%s", url_origin(delivery["url"]),
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
            return None, str(exc).replace(url, url_origin(url)), reason not in (
                None, "unresolvable")
        if 200 <= reply.status < 300:
            return reply.status, None, False
        if 300 <= reply.status < 400:
            location = {k.lower(): v for k, v in reply.headers}.get("location", "")
            return reply.status, (f"HTTP {reply.status}: a redirect (to "
                                  f"{url_origin(location) if location else 'nowhere'}) is not "
                                  f"followed: name the URL it leads to in notify"), False
        return reply.status, f"HTTP {reply.status}", False

    def _log(self, pipe: Any, delivery: Delivery, attempts: int, outcome: str,
             status: int | None, error: str | None) -> None:
        event = delivery["event"]
        entry = {"time": self.clock(), "event": event["id"], "type": event["type"],
                 "crawlid": event["crawlid"], "url": url_origin(delivery["url"]),
                 "attempt": attempts,
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
