"""Crawl events: what happened to a crawl, sent once on a Kafka topic of their own and to
the webhooks its request names (``notify``).

Kinds: ``started``, ``finished`` (with the crawl's summary), ``failed`` (every request
failed, or no items), ``stalled`` (no progress for a while with work pending) and
``site_broken`` (a site's items or a field's coverage fell below a threshold, or below the
same schedule's previous run). Monitors look at the crawls (``watch.CrawlEvents``); each
event is claimed once in Redis (``outbox.EventOutbox``) before it is sent, so however many
monitors run it is sent once (again only if a monitor dies between sending and noting it
sent: with the same ``id``). Webhook deliveries (``webhooks.Webhooks``) are retried with
exponential backoff from Redis, so a restart or another monitor carries them on.
``schemas/event.json`` is the payload's JSON Schema; docs/observability.md describes it.
"""

import time
from typing import Any

from master.schedules import schedule_of
from settings.loader import Settings

Event = dict[str, Any]        # one event as sent (schemas/event.json)
KINDS = ("started", "finished", "failed", "stalled", "site_broken")


def claim_ttl(settings: Settings) -> float:
    """Seconds an event's claim lives: the crawl's retention and a margin, so a crawl is
    out of the crawl index before its claims expire (a claim gone while the crawl is
    still looked at would send its events again)."""
    return (settings.getfloat("CRAWLCLUSTER_CRAWL_RETENTION")
            + settings.getfloat("CRAWLCLUSTER_EVENTS_CLAIM_MARGIN"))


def make_event(kind: str, config: dict[str, Any], data: dict[str, Any],
               site: str | None = None, field: str | None = None,
               now: float | None = None, reason: str | None = None) -> Event:
    """An event about the crawl whose stored config is ``config``; its ``id`` is the same
    whichever monitor makes it (crawl id, kind, a site_broken's reason, site, field), so
    a receiver drops repeats by it, and a site's items falling and its field's coverage
    falling are two events."""
    crawlid = config["crawlid"]
    parts = [crawlid, kind] + [part for part in (reason, site, field) if part]
    event: Event = {"id": ":".join(parts), "type": kind, "crawlid": crawlid,
                    "userid": config.get("userid"), "spider_type": config.get("spider_type"),
                    "schedule": schedule_of(crawlid),
                    "time": time.time() if now is None else now, "data": data}
    if site:
        event["site"] = site
    if field:
        event["field"] = field
    return event
