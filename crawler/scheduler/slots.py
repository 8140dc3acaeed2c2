"""Download slots of throttled domains: a slow domain's fetches leave this process one at
a time, spaced as the cluster throttle spreads its takes."""

from typing import Any

from scrapy import Request
from scrapy.crawler import Crawler

SLOT_PREFIX = "crawlcluster-throttled:"
# Slot settings kept for at most this many slow domains whose slots Scrapy has dropped.
SLOT_SETTINGS_KEPT = 10_000


def space_fetches(crawler: Crawler, request: Request, domain: str, spacing: float) -> None:
    """Send ``request`` through a download slot of its throttled domain's own, that lets
    one request at a time out ``spacing`` seconds after the last (no jitter). Scrapy's
    downloader makes the slot from its ``DOWNLOAD_SLOTS`` entry, as it makes any slot,
    so its idle-slot cleanup runs and drops it once idle."""
    downloader: Any = crawler.engine.downloader if crawler.engine else None
    if downloader is None:
        return
    key = _throttled_slot_key(domain)
    slot = downloader.slots.get(key)
    if slot is not None:
        slot.delay, slot.jitter = spacing, 0.0
    wanted = {"concurrency": 1, "delay": spacing, "jitter": 0.0}
    per_slot = downloader.per_slot_settings
    if per_slot.get(key) != wanted:
        if len(per_slot) >= SLOT_SETTINGS_KEPT:
            _forget_dropped_slots(downloader)
        per_slot[key] = wanted
    request.meta["download_slot"] = key


def throttled_slot(crawler: Crawler, domain: str) -> Any:
    """The download slot of a throttled domain's fetches (``space_fetches``), or None."""
    downloader: Any = crawler.engine.downloader if crawler.engine else None
    return downloader.slots.get(_throttled_slot_key(domain)) if downloader else None


def _forget_dropped_slots(downloader: Any) -> None:
    """Drop the settings of throttled slots Scrapy's cleanup has dropped."""
    per_slot = downloader.per_slot_settings
    for key in [key for key in per_slot
                if key.startswith(SLOT_PREFIX) and key not in downloader.slots]:
        del per_slot[key]


def _throttled_slot_key(domain: str) -> str:
    return SLOT_PREFIX + domain
