"""The proxy pool (thesis 4.3.1.2): proxies in MongoDB, validated, handed out.

``ProxyPool`` stores proxies (one document each: ip, port, type, anonymity,
location, speed, alive time as listed, when checked) in the ``proxies``
collection. ``validate`` fetches the configured test URLs through each proxy
with a 4 s limit (settings) and removes those that fail; ``crawlcluster
proxy validate --every N`` repeats that. ``get_random`` and ``report_bad`` are
the API; ``crawlcluster proxy serve`` offers them over HTTP for other tools.
The ``ProxyMiddleware`` keeps the live list in memory (refreshed every
``CRAWLCLUSTER_PROXY_REFRESH`` seconds), gives each request a random proxy,
and on a connection failure reports it, drops it and retries the request
through another proxy.
"""

import logging
import random
import time
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scrapy import Request
from scrapy.crawler import Crawler

from settings.loader import Settings

logger = logging.getLogger(__name__)

FIELDS = ("ip", "port", "type", "anonymity", "location", "speed", "alive_time")


Proxy = dict[str, Any]       # ip, port, type, anonymity, location, speed, alive_time, ...


def proxy_address(proxy: Proxy) -> str:
    return f"{proxy['ip']}:{proxy['port']}"


def proxy_url(proxy: Proxy) -> str:
    return f"http://{proxy_address(proxy)}"


class ProxyPool:
    def __init__(self, collection: Any, test_urls: Iterable[str], timeout: float = 4.0,
                 max_failures: int = 3) -> None:
        self.collection = collection
        self.test_urls = list(test_urls)
        self.timeout = timeout
        self.max_failures = max_failures

    @classmethod
    def from_settings(cls, mongo: Any, settings: Settings) -> "ProxyPool":
        database = mongo[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]
        return cls(database["proxies"], settings.getlist("CRAWLCLUSTER_PROXY_TEST_URLS"),
                   timeout=settings.getfloat("CRAWLCLUSTER_PROXY_TIMEOUT"))

    def add_many(self, proxies: list[Proxy]) -> int:
        """Store proxies (validated or not); return how many were new."""
        from pymongo import UpdateOne

        if not proxies:
            return 0
        operations = [UpdateOne({"_id": proxy_address(p)},
                                {"$set": {k: p[k] for k in FIELDS if k in p},
                                 "$setOnInsert": {"failures": 0, "added_at": time.time()}},
                                upsert=True) for p in proxies]
        return int(self.collection.bulk_write(operations, ordered=False).upserted_count)

    def all(self) -> list[Proxy]:
        return list(self.collection.find())

    def get_random(self) -> Proxy | None:
        """A random proxy from the pool, or None when it is empty."""
        sample = list(self.collection.aggregate([{"$sample": {"size": 1}}]))
        return sample[0] if sample else None

    def report_bad(self, address: str) -> None:
        """Count a failure; a proxy failing ``max_failures`` times is removed."""
        doc = self.collection.find_one_and_update({"_id": address}, {"$inc": {"failures": 1}},
                                                  return_document=True)
        if doc and doc["failures"] >= self.max_failures:
            self.collection.delete_one({"_id": address})
            logger.info("proxy %s removed after %d failures", address, doc["failures"])

    def check(self, proxy: Proxy) -> bool:
        """True if every test URL answers through the proxy within the time limit."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(
            {"http": proxy_url(proxy), "https": proxy_url(proxy)}))
        started = time.monotonic()
        try:
            for url in self.test_urls:
                with opener.open(url, timeout=self.timeout) as response:
                    response.read(1024)
        except OSError:
            return False
        return time.monotonic() - started <= self.timeout * max(1, len(self.test_urls))

    def validate(self, workers: int = 16) -> tuple[int, int]:
        """Check every stored proxy; remove the dead ones; return (alive, removed)."""
        proxies = self.all()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(self.check, proxies))
        dead = [proxy["_id"] for proxy, ok in zip(proxies, results, strict=True) if not ok]
        if dead:
            self.collection.delete_many({"_id": {"$in": dead}})
        self.collection.update_many({"_id": {"$nin": dead}},
                                    {"$set": {"checked_at": time.time(), "failures": 0}})
        logger.info("proxies validated: %d alive, %d removed", len(proxies) - len(dead),
                    len(dead))
        return len(proxies) - len(dead), len(dead)


class ProxyMiddleware:
    """A random pooled proxy per request; a failing proxy is reported and skipped."""

    # Twisted's and Scrapy's (2.19 wraps Twisted's) connection-level failures.
    CONNECTION_WORDS = ("Connect", "Timeout", "TimedOut", "Tunnel")

    def __init__(self, pool: ProxyPool, refresh: float) -> None:
        self.pool = pool
        self.refresh = refresh
        self.proxies: list[str] = []
        self.loaded_at = 0.0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "ProxyMiddleware":
        from scrapy.exceptions import NotConfigured

        from crawler.context import JobContext
        from crawler.pushback import pushback_received

        context = JobContext.of(crawler)
        if not context.settings.getbool("CRAWLCLUSTER_PROXY_ENABLED"):
            raise NotConfigured("CRAWLCLUSTER_PROXY_ENABLED is off")
        middleware = cls(ProxyPool.from_settings(context.mongo, context.settings),
                         context.settings.getfloat("CRAWLCLUSTER_PROXY_REFRESH"))
        crawler.signals.connect(middleware.pushed_back, signal=pushback_received)
        return middleware

    def _live(self) -> list[str]:
        if time.monotonic() - self.loaded_at > self.refresh:
            self.proxies = [proxy_url(p) for p in self.pool.all()]
            self.loaded_at = time.monotonic()
        return self.proxies

    def _drop(self, proxy: str) -> str:
        """Report a pooled proxy bad and stop using it here; return its address."""
        address = proxy.split("://", 1)[1]
        self.pool.report_bad(address)
        if proxy in self.proxies:
            self.proxies.remove(proxy)
        return address

    def pushed_back(self, request: Request, domain: str, reason: str, **_: Any) -> None:
        """A site pushed back at a request through a pooled proxy: the next requests go
        through others (the proxy's address may be the one the site blocks)."""
        proxy = request.meta.get("proxy")
        if proxy and request.meta.get("pooled_proxy"):
            logger.info("pushback from %s (%s) through proxy %s: switching proxy", domain,
                        reason, self._drop(proxy))

    def process_request(self, request: Request) -> None:
        if "proxy" not in request.meta and self._live():
            request.meta["proxy"] = random.choice(self.proxies)
            request.meta["pooled_proxy"] = True

    def process_exception(self, request: Request, exception: Exception) -> Request | None:
        proxy = request.meta.get("proxy")
        name = type(exception).__name__
        if not proxy or not request.meta.get("pooled_proxy") or \
                not any(word in name for word in self.CONNECTION_WORDS):
            return None
        address = self._drop(proxy)
        logger.info("proxy %s failed (%s); retrying %s without it", address,
                    type(exception).__name__, request.url)
        retry = request.replace(dont_filter=True)
        del retry.meta["proxy"]
        return retry
