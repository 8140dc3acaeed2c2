"""Scrapy's downloads through the URL guard (crawler/downloadguard.py): the middleware
refuses a URL before anything is sent and names the resolver's refusals; the resolver
hands a connection only allowed addresses, IP literals included (Twisted resolves every
host through it), checked with a real listener that nothing reaches."""

import asyncio
import json
import socket
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest
from scrapy import Request
from scrapy.exceptions import CannotResolveHostError, IgnoreRequest
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler

from crawler.downloadguard import (
    REFUSAL_META,
    ProxiedTargetGuardMiddleware,
    UrlGuardMiddleware,
)
from crawler.urlguard import RefusedUrl, UrlGuard


def middleware(cls=UrlGuardMiddleware, allowed=(), refusals=None):
    stats = MemoryStatsCollector(get_crawler())
    return cls(UrlGuard(allowed), SimpleNamespace(refusals=refusals or {}), stats)


@pytest.mark.parametrize(("url", "reason"), [
    ("http://127.0.0.1/", "private_address"), ("http://2130706433/", "private_address"),
    ("http://10.1.2.3/admin", "private_address"), ("http://[::1]/", "private_address"),
    ("http://169.254.169.254/latest/meta-data/", "metadata_address"),
    ("http://100.64.0.1/", "private_address"), ("file:///etc/passwd", "scheme"),
    ("ftp://example.com/", "scheme"), ("http://example.com:0/", "bad_port")])
def test_a_refused_url_is_ignored_with_its_reason_and_counted(url, reason):
    guard = middleware()
    request = Request(url)
    with pytest.raises(IgnoreRequest, match=rf"refused .*\({reason}\)"):
        guard.process_request(request)
    assert request.meta[REFUSAL_META].endswith(f"({reason})")
    assert guard.stats.get_value(f"urlguard/refused/{reason}") == 1


@pytest.mark.parametrize("url", ["http://93.184.216.34/", "https://[2606:4700::1111]/",
                                 "http://example.com/", "http://127.0.0.1/"])
def test_public_urls_and_allowed_networks_pass(url):
    assert middleware(allowed=["127.0.0.0/8"]).process_request(Request(url)) is None


def test_a_resolver_refusal_is_named_with_the_requests_url():
    refused = RefusedUrl("intranet.example", "private_address", "10.0.0.7 is private")
    guard = middleware(refusals={"intranet.example": refused})
    request = Request("http://intranet.example/x")
    guard.process_exception(request, CannotResolveHostError("no results"))
    assert request.meta[REFUSAL_META] == (
        "refused http://intranet.example/x: 10.0.0.7 is private (private_address)")
    other = Request("http://unknown.example/")
    guard.process_exception(other, CannotResolveHostError("no results"))
    assert REFUSAL_META not in other.meta                  # a name that does not resolve


def test_a_proxied_targets_name_and_the_proxy_itself_are_checked():
    guard = middleware(ProxiedTargetGuardMiddleware)
    proxied = Request("http://localhost/", meta={"proxy": "http://93.184.216.34:3128"})
    with pytest.raises(IgnoreRequest, match=r"127\.0\.0\.1.*private_address"):
        asyncio.run(guard.process_request(proxied))
    private_proxy = Request("http://example.com/", meta={"proxy": "http://10.0.0.5:3128"})
    with pytest.raises(IgnoreRequest, match="private_address"):
        asyncio.run(guard.process_request(private_proxy))
    assert asyncio.run(guard.process_request(Request("http://localhost/"))) is None  # no proxy


# Connects through Twisted's Agent (HostnameEndpoint, as Scrapy's HTTP/1.1 handler does)
# to each URL, with the guarded resolver installed or not; prints each outcome.
AGENT_SCRIPT = """
import json, sys
from twisted.internet import asyncioreactor
asyncioreactor.install()
from twisted.internet import reactor, defer
from twisted.web.client import Agent
from crawler.downloadguard import GuardedHostnameResolver
from crawler.urlguard import UrlGuard

guarded, urls = sys.argv[1] == "guarded", sys.argv[2:]
if guarded:
    GuardedHostnameResolver(reactor, 0, UrlGuard()).install_on_reactor()
outcomes = {}

@defer.inlineCallbacks
def main():
    for url in urls:
        try:
            response = yield Agent(reactor, connectTimeout=5).request(b"GET", url.encode())
            outcomes[url] = response.code
        except Exception as exc:
            outcomes[url] = type(exc).__name__
    print(json.dumps(outcomes))
    reactor.stop()

reactor.callWhenRunning(main)
reactor.run()
"""


@pytest.fixture
def listener():
    """A loopback listener counting connections (IPv4 and IPv6 on one port)."""
    sock = socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    hits = []

    def serve():
        while True:
            try:
                connection, peer = sock.accept()
            except OSError:
                return
            hits.append(peer[0])
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")

    threading.Thread(target=serve, daemon=True).start()
    yield sock.getsockname()[1], hits
    sock.close()


def agent_outcomes(mode, urls):
    done = subprocess.run([sys.executable, "-c", AGENT_SCRIPT, mode, *urls],
                          capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_twisted_resolves_ip_literals_through_the_guarded_resolver(listener):
    port, hits = listener
    urls = [f"http://{host}:{port}/" for host in (
        "127.0.0.1", "127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "[::1]",
        "[::ffff:127.0.0.1]", "localhost")]
    unguarded = agent_outcomes("plain", urls)
    assert set(unguarded.values()) == {200} and len(hits) == len(urls)   # all reachable
    hits.clear()
    guarded = agent_outcomes("guarded", urls)
    assert set(guarded.values()) == {"DNSLookupError"}, guarded
    assert hits == []                                                    # nothing arrived
