"""Scrapy's downloads through the URL guard (crawler/urlguard.py).

``GuardedHostnameResolver`` is the reactor's name resolver: every address a download
connects to, an IP literal's too (Twisted's ``HostnameEndpoint`` resolves every host,
literal or not, through the reactor's resolver), passes the guard, on a cache hit as on
a miss, so the address checked is the address connected to. A name with any refused
address resolves to nothing: the download fails with Twisted's DNSLookupError and
``UrlGuardMiddleware`` turns that into the refusal's reason.

``UrlGuardMiddleware`` is the URL-level check of every request (redirects, robots.txt,
sitemaps and feeds are requests like any other): only http and https, a host, a valid
port, no literal address the guard refuses. ``ProxiedTargetGuardMiddleware`` resolves
and judges the target's name when a proxy will connect to it instead of us.
"""

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from cachetools import TTLCache
from scrapy import Request
from scrapy.crawler import Crawler
from scrapy.exceptions import CannotResolveHostError, IgnoreRequest
from scrapy.resolver import CachingHostnameResolver
from scrapy.statscollectors import StatsCollector
from scrapy.utils.httpobj import urlparse_cached
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import (
    IAddress,
    IHostnameResolver,
    IHostResolution,
    IResolutionReceiver,
)
from zope.interface import implementer, provider  # type: ignore[import-untyped]

from crawler.context import cluster_settings
from crawler.urlguard import RefusedUrl, UrlGuard

logger = logging.getLogger(__name__)

REFUSALS_KEPT = 4096        # hosts whose last refusal the resolver keeps, to report it
REFUSALS_FOR = 300.0        # seconds it keeps one
REFUSAL_META = "urlguard_refusal"   # request.meta key: why the guard refused the request


@implementer(IHostnameResolver)
class GuardedHostnameResolver(CachingHostnameResolver):
    """Scrapy's caching resolver (IPv4 and IPv6) that hands a connection only addresses
    the guard allows (Scrapy setting ``TWISTED_DNS_RESOLVER``)."""

    def __init__(self, reactor: Any, cache_size: int, guard: UrlGuard) -> None:
        super().__init__(reactor, cache_size)
        self.guard = guard
        self.refusals: TTLCache[str, RefusedUrl] = TTLCache(REFUSALS_KEPT, REFUSALS_FOR)

    @classmethod
    def from_crawler(cls, crawler: Crawler, reactor: Any) -> "GuardedHostnameResolver":
        settings = crawler.settings
        cache_size = settings.getint("DNSCACHE_SIZE") if settings.getbool("DNSCACHE_ENABLED") \
            else 0
        return cls(reactor, cache_size, UrlGuard.from_settings(cluster_settings(settings)))

    def resolveHostName(self, resolutionReceiver: IResolutionReceiver, hostName: str,
                        portNumber: int = 0,
                        addressTypes: Sequence[type[IAddress]] | None = None,
                        transportSemantics: str = "TCP") -> IHostResolution:
        checked: Any = _CheckedReceiver(resolutionReceiver, hostName, self)
        return super().resolveHostName(checked, hostName, portNumber, addressTypes,
                                       transportSemantics)

    def refusal(self, addresses: list[IAddress], host: str) -> RefusedUrl | None:
        """Why a connection to ``host`` at ``addresses`` is refused, if it is."""
        for address in addresses:
            if isinstance(address, (IPv4Address, IPv6Address)):
                try:
                    self.guard.check_address(address.host, host)
                except RefusedUrl as refused:
                    self.refusals[host] = refused
                    logger.warning("%s", refused)
                    return refused
        return None


@provider(IResolutionReceiver)
class _CheckedReceiver:
    """Passes a resolution on once it is complete, with no address if any is refused."""

    def __init__(self, receiver: Any, host: str, resolver: GuardedHostnameResolver) -> None:
        self.receiver, self.host, self.resolver = receiver, host, resolver
        self.addresses: list[IAddress] = []

    def resolutionBegan(self, resolution: IHostResolution) -> None:
        self.receiver.resolutionBegan(resolution)

    def addressResolved(self, address: IAddress) -> None:
        self.addresses.append(address)

    def resolutionComplete(self) -> None:
        if self.resolver.refusal(self.addresses, self.host) is None:
            for address in self.addresses:
                self.receiver.addressResolved(address)
        self.receiver.resolutionComplete()


def installed_resolver(crawler: Crawler) -> GuardedHostnameResolver:
    """The reactor's guarded resolver, installed now if the process did not (a crawler
    run by a CrawlerRunner, or a user's project)."""
    from twisted.internet import reactor

    resolver = getattr(reactor, "nameResolver", None)
    if not isinstance(resolver, GuardedHostnameResolver):
        resolver = GuardedHostnameResolver.from_crawler(crawler, reactor)
        resolver.install_on_reactor()
    return resolver


class UrlGuardMiddleware:
    """Refuses a request whose URL the guard refuses, before anything is sent (its task
    fails for good, with the reason), and names the reason when the resolver refused
    the addresses of a request's host."""

    def __init__(self, guard: UrlGuard, resolver: GuardedHostnameResolver,
                 stats: StatsCollector) -> None:
        self.guard, self.resolver, self.stats = guard, resolver, stats

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> "UrlGuardMiddleware":
        assert crawler.stats is not None
        return cls(UrlGuard.from_settings(cluster_settings(crawler.settings)),
                   installed_resolver(crawler), crawler.stats)

    def process_request(self, request: Request) -> None:
        try:
            self.guard.check_url(request.url)
        except RefusedUrl as refused:
            self.refuse(request, refused)

    def process_exception(self, request: Request, exception: Exception) -> None:
        if isinstance(exception, (DNSLookupError, CannotResolveHostError)):
            by_host = self.resolver.refusals.get(urlparse_cached(request).hostname or "")
            if by_host is not None:
                refused = RefusedUrl(request.url, by_host.reason, by_host.why)
                request.meta[REFUSAL_META] = str(refused)
                self.count(refused)

    def refuse(self, request: Request, refused: RefusedUrl) -> None:
        request.meta[REFUSAL_META] = str(refused)
        self.count(refused)
        logger.warning("%s", refused)
        raise IgnoreRequest(str(refused))

    def count(self, refused: RefusedUrl) -> None:
        self.stats.inc_value(f"urlguard/refused/{refused.reason}")


class ProxiedTargetGuardMiddleware(UrlGuardMiddleware):
    """When a proxy connects to a request's host, the resolver sees only the proxy's
    address: the target's name is resolved here (off the reactor thread) and refused if
    any of its addresses is. The proxy's own address is checked too (Twisted connects to
    a proxy given as an IP address without asking the resolver). Runs after the proxy
    middleware has chosen the proxy."""

    async def process_request(self, request: Request) -> None:  # type: ignore[override]
        proxy = request.meta.get("proxy")
        if not proxy:
            return
        try:         # a proxy given as an address is connected to with no lookup at all
            self.guard.check_url(proxy if "://" in proxy else f"http://{proxy}")
        except RefusedUrl as refused:
            self.refuse(request, refused)
        parts = urlparse_cached(request)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, self.guard.resolve, parts.hostname or "", port, request.url)
        except RefusedUrl as refused:
            if refused.reason != "unresolvable":     # the proxy reports that one itself
                self.refuse(request, refused)

    def process_exception(self, request: Request, exception: Exception) -> None:
        return None
