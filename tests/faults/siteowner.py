"""What a site owner sees of a crawl that went through a fault: nginx's access log.

MongoDB's unique index hides pages fetched again, so every fault test counts the fetches
of each page in the log of the site it crawled (its requests carry the crawl's own user
agent), and checks the bounds docs/reliability.md states: every page fetched, none more
than twice, the extra fetches in all at most the tasks in flight at the fault plus 1% of
the pages, the crawl drained within the fault's bound, ``info``'s done equal to the
pages, and no start page stored as an item.

The timings are the defaults divided by ``SCALE``: every ratio between them (lease over
job heartbeat, heartbeat over dispatcher lease) is the default's, and a stall that waits
out a lease shows as one.
"""

import math
import time
from collections import Counter
from dataclasses import dataclass, field

from manager.local.demo import UNIVERSAL_RULE
from master.frontier import Frontier
from master.urls import canonical_url
from message_processing.client import RequestClient
from settings.clients import redis_client
from settings.loader import default_settings

SCALE = 5
DEFAULTS = default_settings()
SCALED = {name: DEFAULTS[name] / SCALE for name in (
    "CRAWLCLUSTER_LEASE_SECONDS", "CRAWLCLUSTER_JOB_HEARTBEAT_TTL",
    "CRAWLCLUSTER_HEARTBEAT_TTL", "CRAWLCLUSTER_DISPATCH_LEASE_SECONDS")}
JOB_TTL = SCALED["CRAWLCLUSTER_JOB_HEARTBEAT_TTL"]
LEASE = SCALED["CRAWLCLUSTER_LEASE_SECONDS"]


# The demo's rule, with detail pages followed too: each yields its related links, so a
# page crawled again whose links got past the Bloom filter shows in nginx's log at once.
LINKED_RULE = {"rules": [UNIVERSAL_RULE["rules"][0], dict(UNIVERSAL_RULE["rules"][1], follow=True)]}


def agent_of(crawlid):
    return f"crawlcluster-faults/{crawlid}"


@dataclass
class Fault:
    """One fault in a crawl: when it struck, what was in flight, how long it may take."""

    name: str
    drain_bound: float            # seconds from the fault to the crawl drained, at most
    in_flight: int = 0            # tasks leased when it struck
    at: float = 0.0
    drained_after: float = 0.0
    notes: list[str] = field(default_factory=list)


class CrawlWatch:
    def __init__(self, settings, crawlid):
        self.settings = settings
        self.client = RequestClient.from_settings(settings, timeout=60)
        self.crawlid = crawlid

    def submit(self, manifest, **fields):
        request = {"type": "crawl", "userid": "faults", "crawlid": self.crawlid,
                   "spider_type": "universal", "url": manifest["start_url"],
                   "rule": LINKED_RULE, "maxdepth": 20, "useragent": agent_of(self.crawlid)}
        reply = self.client.ask(request | fields)
        assert reply["status"] == "accepted", reply

    def info(self):
        return self.client.ask({"type": "info", "userid": "faults", "crawlid": self.crawlid})

    def wait_done_at_least(self, count, timeout=120):
        deadline = time.monotonic() + timeout
        while (info := self.info()).get("done", 0) < count:
            assert time.monotonic() < deadline, f"crawl stalled: {info}"
            time.sleep(0.3)

    def wait_drained(self, timeout=240):
        deadline = time.monotonic() + timeout
        while True:
            info = self.info()
            if info["total_pending"] == 0 and info.get("done"):
                return info
            assert time.monotonic() < deadline, f"crawl did not finish: {info}"
            time.sleep(0.5)

    def close(self):
        self.client.close()


def leased_now(settings):
    """Tasks leased across the frontier: what is in flight."""
    client = redis_client(settings, "test")
    try:
        return Frontier.from_settings(client, settings).leased_count()
    finally:
        client.close()


def served_to(manifest, served, crawlid, since=0):
    """``Counter(canonical URL -> times nginx served it to the crawl)`` from log entry
    ``since`` (robots.txt included)."""
    port = manifest["spec"]["port"]
    return Counter(canonical_url(f"http://{entry['host']}:{port}{entry['path']}")
                   for entry in served.access_log()[since:]
                   if entry["agent"] == agent_of(crawlid))


def fetch_counts(manifest, served, crawlid, since=0):
    """``served_to`` for the site's pages only (robots.txt, sitemaps and feeds are
    revisited by design)."""
    pages = {page["url"] for page in manifest["pages"]}
    return Counter({url: n for url, n in served_to(manifest, served, crawlid, since).items()
                    if url in pages})


def assert_what_the_site_owner_sees(manifest, served, mongo_db, crawlid, info, fault,
                                    since=0):
    """The bounds of docs/reliability.md, from nginx's log; prints the fetch counts."""
    everything = served_to(manifest, served, crawlid, since)
    fetched = fetch_counts(manifest, served, crawlid, since)
    pages = {page["url"] for page in manifest["pages"]}
    sources = sum(n for url, n in everything.items()
                  if url not in pages and not url.endswith("/robots.txt"))
    extra = sum(fetched.values()) - len(fetched)
    allowed = fault.in_flight + math.ceil(0.01 * len(pages))
    print(f"\n{fault.name}: nginx served {sum(fetched.values())} requests for "
          f"{len(fetched)} of {len(pages)} pages; {extra} fetched again (bound {allowed}: "
          f"{fault.in_flight} in flight + 1%); most fetched {fetched.most_common(3)}; "
          f"drained {fault.drained_after:.1f} s after the fault (bound "
          f"{fault.drain_bound:.0f} s); done {info.get('done')}" + "".join(
              f"; {note}" for note in fault.notes))
    assert set(fetched) == pages, f"pages never fetched: {sorted(pages - set(fetched))[:5]}"
    assert max(fetched.values()) <= 2, fetched.most_common(5)
    assert extra <= allowed, fetched.most_common(10)
    assert fault.drained_after <= fault.drain_bound
    assert fetched[manifest["start_url"]] == 1, "the start page was crawled again as a link"
    # Done counts each visit of a sitemap too (a crawl's sources are tasks).
    assert len(pages) <= info["done"] <= len(pages) + sources, info
    assert info["failed"] == 0, info
    start_items = mongo_db["items_universal"].count_documents(
        {"crawlid": crawlid, "url": manifest["start_url"]})
    assert start_items == 0, "the start page was crawled again as a link and stored"
    assert_ground_truth(manifest, mongo_db, crawlid)


def assert_ground_truth(manifest, mongo_db, crawlid):
    """Every detail page stored exactly once, with the site's fields."""
    details = {p["url"]: p for p in manifest["pages"] if p["kind"] == "detail"}
    items = list(mongo_db["items_universal"].find({"crawlid": crawlid}))
    urls = [canonical_url(item["url"]) for item in items]
    assert len(items) == len(set(urls))                                 # nothing twice
    assert set(urls) == set(details)                                    # nothing missing
    for url, item in zip(urls, items, strict=True):
        assert item["title"] == details[url]["title"]


def crawl_through(cluster, site, mongo_db, crawlid, fault, strike, done_before=100,
                  **fields):
    """Crawl the site, strike once ``done_before`` pages are done, wait for the crawl to
    drain, and check what nginx served against the fault's bounds. Returns ``info``."""
    manifest, served = site
    watch = CrawlWatch(cluster.settings, crawlid)
    since = len(served.access_log())
    try:
        watch.submit(manifest, **fields)
        watch.wait_done_at_least(done_before)
        fault.in_flight = leased_now(cluster.settings)
        fault.at = time.monotonic()
        strike()
        info = watch.wait_drained(timeout=fault.drain_bound + 120)
        fault.drained_after = time.monotonic() - fault.at
    finally:
        watch.close()
    assert_what_the_site_owner_sees(manifest, served, mongo_db, crawlid, info, fault, since)
    return info
