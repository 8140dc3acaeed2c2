"""The one guard every URL leaving the cluster passes (docs/security.md).

A URL from a crawl request, a page, a sitemap, a feed, a redirect or a page's script is
hostile: it may aim at the cluster's own network (its Redis, its managers, a cloud's
metadata service). ``UrlGuard`` allows only http and https, and only hosts whose
addresses are globally routable, or inside ``CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS``.
Link-local and cloud metadata addresses are refused always, whatever that setting says.

The address judged is the address connected to: Scrapy's downloads resolve through
``crawler.downloadguard.GuardedHostnameResolver``, and ``UrlGuard.fetch`` (for callers
outside Scrapy: the preview, a rendering browser's requests) connects to the address it
checked and checks the socket's peer again before it sends a byte, so a name that
answers a public address first and a private one next (DNS rebinding) cannot pass.
"""

import contextlib
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple
from urllib.parse import urljoin, urlsplit

from settings.errors import ConfigError, CrawlClusterError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}

# Refused always, even inside an allowed private network.
METADATA_NETWORKS: tuple[IPNetwork, ...] = tuple(ipaddress.ip_network(n) for n in (
    "169.254.0.0/16",        # IPv4 link-local: AWS/GCP/Azure/OpenStack metadata, ECS tasks
    "fe80::/10",             # IPv6 link-local
    "100.100.100.200/32",    # Alibaba Cloud metadata
    "168.63.129.16/32",      # Azure wire server (a public address, reachable from VMs only)
    "192.0.0.192/32",        # Oracle Cloud metadata
    "fd00:ec2::/32",         # AWS metadata and time sync over IPv6 (fd00:ec2::254)
    "fd20:ce::254/128",      # GCP metadata over IPv6
))
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
MAX_BYTES = 10 * 1024 * 1024
TIMEOUT = 20.0


class RefusedUrl(CrawlClusterError):
    """A URL the guard will not let leave the cluster. ``reason`` is short and
    machine-readable: ``scheme``, ``no_host``, ``bad_port``, ``private_address``,
    ``metadata_address``, ``unresolvable``, ``redirect``."""

    def __init__(self, url: str, reason: str, why: str) -> None:
        self.url, self.reason, self.why = url, reason, why
        super().__init__(f"refused {url}: {why} ({reason})")


class FetchFailed(CrawlClusterError):
    """A guarded fetch that could not be made or read: connection, timeout, size."""


class GuardedReply(NamedTuple):
    """What a guarded fetch got: the last hop's status, headers (in order, repeated names
    kept), body, and the URL it came from."""
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    url: str


class UrlGuard:
    """Judges URLs and addresses; resolves and fetches only what it allowed."""

    def __init__(self, allowed_networks: Iterable[str | IPNetwork] = (),
                 networks_setting: str = "CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS") -> None:
        self.allowed_networks: tuple[IPNetwork, ...] = tuple(
            ipaddress.ip_network(n, strict=False) for n in allowed_networks)
        self.networks_setting = networks_setting     # named when a private address is refused

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> "UrlGuard":
        """From our settings (a Scrapy crawler's: ``crawler.context.cluster_settings``)."""
        networks = settings.get("CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS") or []
        try:
            return cls(networks)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS: {exc}") from exc

    @classmethod
    def for_webhooks(cls, settings: Mapping[str, Any]) -> "UrlGuard":
        """The guard of webhook deliveries: ``CRAWLCLUSTER_WEBHOOK_ALLOWED_NETWORKS``'s
        private networks allowed, and named when a private address is refused."""
        name = "CRAWLCLUSTER_WEBHOOK_ALLOWED_NETWORKS"
        try:
            return cls(settings.get(name) or [], networks_setting=name)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{name}: {exc}") from exc

    # --- judging ----------------------------------------------------------------
    def check_url(self, url: str) -> None:
        """RefusedUrl unless ``url`` is http(s), names a host and a valid port, and its
        host, if an address in any spelling, is one the guard allows. A name is judged
        when it is resolved (``resolve``, or the crawl's resolver)."""
        host, _ = split_target(url)
        address = literal_address(host)
        if address is not None:
            self.check_address(address, url)

    def check_address(self, address: str | IPAddress, url: str = "") -> None:
        """RefusedUrl if a connection to ``address`` must not be made."""
        ip = ipaddress.ip_address(address.split("%")[0] if isinstance(address, str)
                                  else address)
        for judged in addresses_judged(ip):
            reason = self.refusal(judged)
            if reason:
                why = _WHY[reason].format(setting=self.networks_setting)
                raise RefusedUrl(url or str(ip), reason, f"{ip} is {why}")

    def refusal(self, ip: IPAddress) -> str:
        """Why ``ip`` is refused (a RefusedUrl reason), or "" if it is allowed."""
        if any(ip in net for net in METADATA_NETWORKS if net.version == ip.version):
            return "metadata_address"
        if ip.is_global or any(ip in net for net in self.allowed_networks
                               if net.version == ip.version):
            return "" if not ip.is_multicast else "private_address"
        return "private_address"

    def is_allowed(self, address: str) -> bool:
        try:
            self.check_address(address)
        except (RefusedUrl, ValueError):
            return False
        return True

    # --- resolving ----------------------------------------------------------------
    def resolve(self, host: str, port: int, url: str = "") -> list[str]:
        """The addresses of ``host``, resolved once; RefusedUrl if any of them is refused
        (a name that answers one private address is not trusted for its others)."""
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise RefusedUrl(url or host, "unresolvable",
                             f"{host} does not resolve: {exc}") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:
            self.check_address(address, url or host)
        return addresses

    # --- fetching -----------------------------------------------------------------
    def fetch(self, url: str, headers: Mapping[str, str] | None = None, *,
              method: str = "GET", body: bytes | None = None, max_redirects: int = 0,
              max_bytes: int = MAX_BYTES, timeout: float = TIMEOUT) -> GuardedReply:
        """Fetch ``url`` (blocking: run it in a thread), connecting only to an address
        the guard checked. A redirect is returned as it is unless ``max_redirects`` > 0;
        each hop followed is checked as the first was. A body over ``max_bytes`` is
        FetchFailed; a refused hop is RefusedUrl."""
        for _ in range(max_redirects + 1):
            reply = self._fetch_one(url, headers or {}, method, body, max_bytes, timeout)
            location = {k.lower(): v for k, v in reply.headers}.get("location")
            if reply.status not in REDIRECT_STATUSES or not location or max_redirects == 0:
                return reply
            url = urljoin(url, location)
            if reply.status == 303 or (reply.status in (301, 302) and method == "POST"):
                method, body = "GET", None
        raise FetchFailed(f"{url}: more than {max_redirects} redirects")

    def _fetch_one(self, url: str, headers: Mapping[str, str], method: str,
                   body: bytes | None, max_bytes: int, timeout: float) -> GuardedReply:
        host, port = split_target(url)
        self.check_url(url)
        address = self.resolve(host, port, url)[0]
        parts = urlsplit(url)
        opened: list[socket.socket] = []
        connection = _pinned_connection(parts.scheme, host, port, address, timeout,
                                        lambda peer: self.check_address(peer, url), opened)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        # ``timeout`` bounds each socket operation; the watchdog bounds the whole fetch, so
        # a server that drips a byte at a time cannot hold the fetching thread for long.
        watchdog = threading.Timer(timeout, _cut, (opened,))
        watchdog.daemon = True
        started = time.monotonic()
        watchdog.start()
        try:
            connection.request(method, target, body=body, headers={
                "Accept-Encoding": "identity", **headers})
            response = connection.getresponse()
            data = response.read(max_bytes + 1)
        except (OSError, http.client.HTTPException) as exc:
            if time.monotonic() - started >= timeout:
                raise FetchFailed(f"could not fetch {url}: not done in {timeout:.0f} s") from None
            raise FetchFailed(f"could not fetch {url}: {exc}") from None
        finally:
            watchdog.cancel()
            connection.close()
        if time.monotonic() - started >= timeout:
            raise FetchFailed(f"could not fetch {url}: not done in {timeout:.0f} s")
        if len(data) > max_bytes:
            raise FetchFailed(f"{url} is over {max_bytes} bytes")
        return GuardedReply(response.status, list(response.getheaders()), data, url)


_WHY = {"private_address": "not a globally routable address, nor in {setting}",
        "metadata_address": "a link-local or cloud metadata address (refused always)"}


def split_target(url: str) -> tuple[str, int]:
    """The host and port ``url`` connects to; RefusedUrl if it is not http(s), names
    no host, or its port is invalid."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise RefusedUrl(url, "bad_port", f"invalid port or host: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise RefusedUrl(url, "scheme", f"scheme {scheme or '(none)'!r} is not http or https")
    host = parts.hostname or ""
    if not host:
        raise RefusedUrl(url, "no_host", "no host")
    if port == 0:
        raise RefusedUrl(url, "bad_port", "port 0")
    return host, port or DEFAULT_PORTS[scheme]


def literal_address(host: str) -> IPAddress | None:
    """``host`` as an address if it spells one in any way a resolver or browser would
    take: 127.0.0.1, 127.1, 2130706433, 0x7f.0.0.1, 0177.0.0.1, ::1, ::ffff:127.0.0.1."""
    host = host.strip("[]").split("%")[0]
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return None
    candidate = host.removesuffix(".")
    try:
        return ipaddress.IPv4Address(socket.inet_aton(candidate))
    except (OSError, ValueError, UnicodeError):
        return None


def addresses_judged(ip: IPAddress) -> list[IPAddress]:
    """The addresses a connection to ``ip`` reaches: an IPv4-mapped address is its IPv4
    one; 6to4, Teredo, NAT64 (local-use too), IPv4-translated and IPv4-compatible forms
    are judged with the IPv4 address they carry as well."""
    if isinstance(ip, ipaddress.IPv4Address):
        return [ip]
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    embedded: list[IPAddress] = [ip]
    if ip.sixtofour is not None:
        embedded.append(ip.sixtofour)
    if ip.teredo is not None:
        embedded.extend(ip.teredo)
    if any(ip in net for net in _CARRY_IPV4_LAST) or (ip in _IPV4_COMPATIBLE
                                                      and int(ip) > 0xFFFF):
        embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return embedded


# NAT64 (well-known and local-use, RFC 8215) and IPv4-translated (RFC 2765) addresses
# reach the IPv4 address in their last 32 bits.
_CARRY_IPV4_LAST = tuple(ipaddress.IPv6Network(net) for net in (
    "64:ff9b::/96", "64:ff9b:1::/48", "::ffff:0:0:0/96"))
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _cut(opened: list[socket.socket]) -> None:
    """End a fetch past its deadline: shutting its socket down wakes a read blocked on it
    (the connection may have handed the socket to its response already)."""
    for sock in opened:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _pinned_connection(scheme: str, host: str, port: int, address: str, timeout: float,
                       check_peer: Any, opened: list[socket.socket]) -> http.client.HTTPConnection:
    """A connection to ``host`` (its Host header, its TLS name) made to ``address`` only,
    whose peer is checked once connected, before anything is sent."""
    def connect_pinned(target: tuple[str, int], *args: Any) -> socket.socket:
        sock = socket.create_connection((address, target[1]), *args)
        opened.append(sock)
        try:
            check_peer(sock.getpeername()[0])
        except BaseException:
            sock.close()
            raise
        return sock

    connection: http.client.HTTPConnection
    if scheme == "https":
        connection = http.client.HTTPSConnection(host, port, timeout=timeout,
                                                 context=ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
    connection._create_connection = connect_pinned  # type: ignore[attr-defined]
    return connection
