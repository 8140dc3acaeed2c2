"""The URL guard (crawler/urlguard.py): which URLs and addresses it refuses and why, in
every spelling; resolving once; a fetch that connects only where the guard allowed."""

import http.server
import threading
import time
from typing import ClassVar
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from crawler.urlguard import FetchFailed, RefusedUrl, UrlGuard, literal_address
from settings.errors import ConfigError

LOOPBACK = ["127.0.0.0/8", "::1/128"]


def reason(guard, url):
    try:
        guard.check_url(url)
    except RefusedUrl as refused:
        assert refused.url == url and refused.reason in str(refused)
        return refused.reason
    return ""


@pytest.mark.parametrize(("url", "default", "loopback_allowed"), [
    # loopback, five spellings and IPv6 ones
    ("http://127.0.0.1/", "private_address", ""),
    ("http://127.1/", "private_address", ""),
    ("http://2130706433/", "private_address", ""),
    ("http://0x7f.0.0.1/", "private_address", ""),
    ("http://0177.0.0.1/", "private_address", ""),
    ("http://127.0.0.1./", "private_address", ""),
    ("http://[::1]/", "private_address", ""),
    ("http://[::ffff:127.0.0.1]/", "private_address", ""),
    ("http://[::ffff:7f00:1]/", "private_address", ""),
    ("http://[2002:7f00:1::]/", "private_address", ""),           # 6to4
    ("http://[64:ff9b::7f00:1]/", "private_address", ""),         # NAT64
    ("http://[64:ff9b:1::a00:5]/", "private_address", "private_address"),   # local-use NAT64
    ("http://[::ffff:0:a9fe:a9fe]/", "metadata_address", "metadata_address"),  # IPv4-translated
    ("http://[::127.0.0.1]/", "private_address", ""),             # IPv4-compatible
    # private, shared, unspecified, multicast
    ("http://10.1.2.3/admin", "private_address", "private_address"),
    ("http://192.168.0.1:8080/", "private_address", "private_address"),
    ("http://172.16.5.5/", "private_address", "private_address"),
    ("http://100.64.0.1/", "private_address", "private_address"),
    ("http://0.0.0.0/", "private_address", "private_address"),
    ("http://224.0.0.1/", "private_address", "private_address"),
    ("http://[fc00::1]/", "private_address", "private_address"),
    # link-local and metadata: always
    ("http://169.254.169.254/latest/meta-data/", "metadata_address", "metadata_address"),
    ("http://2852039166/", "metadata_address", "metadata_address"),  # 169.254.169.254
    ("http://[::ffff:169.254.169.254]/", "metadata_address", "metadata_address"),
    ("http://100.100.100.200/", "metadata_address", "metadata_address"),
    ("http://168.63.129.16/", "metadata_address", "metadata_address"),
    ("http://192.0.0.192/", "metadata_address", "metadata_address"),
    ("http://[fd00:ec2::254]/", "metadata_address", "metadata_address"),
    ("http://[fe80::1%25eth0]/", "metadata_address", "metadata_address"),
    # schemes, hosts, ports
    ("file:///etc/passwd", "scheme", "scheme"),
    ("ftp://example.com/", "scheme", "scheme"),
    ("gopher://127.0.0.1:70/_x", "scheme", "scheme"),
    ("javascript:alert(1)", "scheme", "scheme"),
    ("http:///path", "no_host", "no_host"),
    ("http://example.com:99999/", "bad_port", "bad_port"),
    ("http://example.com:0/", "bad_port", "bad_port"),
    # public: allowed (a name is judged when resolved)
    ("http://93.184.216.34/", "", ""),
    ("https://[2606:4700::1111]/", "", ""),
    ("HTTPS://example.com/x", "", ""),
    ("http://[64:ff9b::5db8:d822]/", "", ""),                      # NAT64 of a public one
])
def test_the_address_table(url, default, loopback_allowed):
    assert reason(UrlGuard(), url) == default
    assert reason(UrlGuard(LOOPBACK), url) == loopback_allowed


def test_allowed_networks_allow_their_private_range_and_never_metadata():
    guard = UrlGuard(["10.0.0.0/8", "169.254.0.0/16", "100.64.0.0/10"])
    assert reason(guard, "http://10.9.9.9/") == ""
    assert reason(guard, "http://100.64.0.1/") == ""
    assert reason(guard, "http://169.254.169.254/") == "metadata_address"
    assert reason(guard, "http://100.100.100.200/") == "metadata_address"
    assert reason(guard, "http://192.168.1.1/") == "private_address"


@pytest.mark.parametrize(("host", "address"), [
    ("127.1", "127.0.0.1"), ("2130706433", "127.0.0.1"), ("0x7f.0.0.1", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"), ("0x7f000001", "127.0.0.1"), ("[::1]", "::1"),
    ("example.com", None), ("1.2.3.4.5", None), ("127.0.0.1.example", None)])
def test_literal_addresses_in_every_spelling(host, address):
    found = literal_address(host)
    assert (str(found) if found else None) == address


def test_from_settings_reads_the_allowed_networks_and_names_a_bad_one():
    guard = UrlGuard.from_settings({"CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS": ["10.0.0.0/8"]})
    assert guard.is_allowed("10.0.0.1") and not guard.is_allowed("127.0.0.1")
    with pytest.raises(ConfigError, match="CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS"):
        UrlGuard.from_settings({"CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS": ["10.0.0.0/33"]})


def test_resolve_refuses_a_name_with_a_refused_address_and_returns_allowed_ones():
    with pytest.raises(RefusedUrl, match=r"127\.0\.0\.1 .*\(private_address\)"):
        UrlGuard().resolve("localhost", 80)
    assert "127.0.0.1" in UrlGuard(LOOPBACK).resolve("localhost", 80)
    with pytest.raises(RefusedUrl) as refused:
        UrlGuard().resolve("no-such-host.invalid", 80)
    assert refused.value.reason == "unresolvable"


class Site(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self):
        self.hits.append(self.path)
        if self.path.startswith("/to?"):
            self.send_response(302)
            self.send_header("Location", parse_qs(urlsplit(self.path).query)["url"][0])
            self.end_headers()
            return
        if self.path == "/drip":        # a byte every 0.2 s, each read well within timeout
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)
            return
        body = b"x" * (2000 if self.path == "/big" else 10)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Set-Cookie", "a=1")
        self.send_header("Set-Cookie", "b=2")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def site():
    Site.hits = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://localhost:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_fetch_gets_a_page_from_an_allowed_address(site):
    reply = UrlGuard(LOOPBACK).fetch(f"{site}/page", {"User-Agent": "t"})
    assert (reply.status, reply.body, reply.url) == (200, b"x" * 10, f"{site}/page")
    assert [v for k, v in reply.headers if k == "Set-Cookie"] == ["a=1", "b=2"]


def test_fetch_refuses_before_connecting(site):
    with pytest.raises(RefusedUrl, match="private_address"):
        UrlGuard().fetch(f"{site}/page")
    assert Site.hits == []


def test_fetch_caps_the_body(site):
    with pytest.raises(FetchFailed, match="over 1000 bytes"):
        UrlGuard(LOOPBACK).fetch(f"{site}/big", max_bytes=1000)


def test_a_dripping_answer_is_cut_at_the_fetchs_timeout(site):
    started = time.monotonic()
    with pytest.raises(FetchFailed, match="not done in 1 s"):
        UrlGuard(LOOPBACK).fetch(f"{site}/drip", timeout=1.0)
    assert time.monotonic() - started < 3


def test_a_redirect_is_returned_unless_asked_and_each_hop_is_checked(site):
    guard = UrlGuard(LOOPBACK)
    to_page = f"{site}/to?url={quote(site + '/page')}"
    reply = guard.fetch(to_page)
    assert reply.status == 302 and len(Site.hits) == 1
    followed = guard.fetch(to_page, max_redirects=2)
    assert followed.status == 200 and followed.url == f"{site}/page"
    with pytest.raises(RefusedUrl, match="metadata_address"):
        guard.fetch(f"{site}/to?url=http://169.254.169.254/latest", max_redirects=2)
    with pytest.raises(RefusedUrl, match="scheme"):
        guard.fetch(f"{site}/to?url=file:///etc/passwd", max_redirects=2)


def test_fetch_checks_the_peer_it_connected_to_before_sending(site, monkeypatch):
    """Were resolving fooled (here: it answers loopback without judging it), the socket's
    peer is judged once connected, before a byte is sent."""
    guard = UrlGuard()
    monkeypatch.setattr(guard, "resolve", lambda host, port, url="": ["127.0.0.1"])
    monkeypatch.setattr(guard, "check_url", lambda url: None)
    with pytest.raises(RefusedUrl, match=r"127\.0\.0\.1 .*private_address"):
        guard.fetch(f"{site}/page")
    assert Site.hits == []
