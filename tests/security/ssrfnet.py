"""A network namespace where SSRF attempts meet real listeners.

Inside one namespace (a ``NodeNetwork`` node: the host's servers relayed onto its
loopback) the test makes:

- a site on a globally routable address (``SITE``, port 80):
  ``/r/<name>`` redirects to the target ``name``, ``/`` and ``/index.html`` are pages;
- a listener on every target address (127.0.0.1, ::1, 169.254.169.254,
  100.100.100.200, 100.64.0.1 on port 80; 127.0.0.1:21 and :70 for ftp: and gopher:)
  counting every connection that reaches it (the addresses are the namespace's own, on
  its loopback interface, so nothing outside it is shadowed);
- a DNS server on the namespace's 127.0.0.1:53, named by ``/etc/netns/<ns>/resolv.conf``
  (``ip netns exec`` mounts it as the process's /etc/resolv.conf): ``private.ssrf.test``
  is 127.0.0.1; ``rebind.ssrf.test`` is ``SITE`` for its first A query and 127.0.0.1 for
  every later one (TTL 0).

What runs in the namespace (a spider, a preview) resolves and connects exactly as it
would anywhere; nothing outside the namespace is touched.
"""

import contextlib
import http.server
import os
import shutil
import socket
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dnslib import AAAA, QTYPE, RR, A, DNSRecord

from manager.local.netns import NETNS_DIR, NodeNetwork, _setns, ip, server_ports

SITE = "93.184.215.14"
PORT = 80


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    reason: str               # the guard's RefusedUrl reason
    listener: tuple[str, int]


LOOPBACK = ("127.0.0.1", PORT)
TARGETS = [
    Target("dotted", "http://127.0.0.1/secret", "private_address", LOOPBACK),
    Target("short", "http://127.1/secret", "private_address", LOOPBACK),
    Target("decimal", "http://2130706433/secret", "private_address", LOOPBACK),
    Target("hex", "http://0x7f.0.0.1/secret", "private_address", LOOPBACK),
    Target("octal", "http://0177.0.0.1/secret", "private_address", LOOPBACK),
    Target("ipv6", "http://[::1]/secret", "private_address", ("::1", PORT)),
    Target("mapped", "http://[::ffff:127.0.0.1]/secret", "private_address", LOOPBACK),
    Target("metadata", "http://169.254.169.254/latest/meta-data/", "metadata_address",
           ("169.254.169.254", PORT)),
    Target("alibaba", "http://100.100.100.200/latest/meta-data/", "metadata_address",
           ("100.100.100.200", PORT)),
    Target("shared", "http://100.64.0.1/secret", "private_address", ("100.64.0.1", PORT)),
    Target("name", "http://private.ssrf.test/secret", "private_address", LOOPBACK),
    Target("rebind", "http://rebind.ssrf.test/secret", "private_address", LOOPBACK),
    Target("file", "file:///etc/passwd", "scheme", LOOPBACK),
    Target("ftp", "ftp://127.0.0.1/secret", "scheme", ("127.0.0.1", 21)),
    Target("gopher", "gopher://127.0.0.1:70/_secret", "scheme", ("127.0.0.1", 70)),
]
LOCAL_ADDRESSES = (SITE, "169.254.169.254", "100.100.100.200", "100.64.0.1")


def sockets_in(namespace: str,
               specs: list[tuple[int, int, tuple[str, int]]]) -> list[socket.socket]:
    """Bound sockets ``(family, type, address)`` made inside ``namespace`` (TCP ones
    listening); this thread returns to its own namespace."""
    with open("/proc/thread-self/ns/net") as home, open(NETNS_DIR / namespace) as target:
        _setns(target)
        try:
            made = []
            for family, kind, address in specs:
                sock = socket.socket(family, kind)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                if kind == socket.SOCK_STREAM:
                    sock.listen(64)
                made.append(sock)
            return made
        finally:
            _setns(home)


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class Listeners:
    """Every target's listener: counts the connections that reach each, answers a secret."""

    def __init__(self, namespace: str) -> None:
        addresses = sorted({target.listener for target in TARGETS})
        self.hits: Counter[tuple[str, int]] = Counter()
        socks = sockets_in(namespace, [(_family(h), socket.SOCK_STREAM, (h, p))
                                       for h, p in addresses])
        for address, sock in zip(addresses, socks, strict=True):
            threading.Thread(target=self._serve, args=(address, sock), daemon=True).start()

    def _serve(self, address: tuple[str, int], sock: socket.socket) -> None:
        while True:
            try:
                connection, _ = sock.accept()
            except OSError:
                return
            self.hits[address] += 1
            with connection:
                connection.settimeout(2)
                with contextlib.suppress(OSError):
                    connection.recv(65536)           # the request, read before the answer
                connection.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n"
                                   b"<html><body><h1>SECRET</h1></body></html>")

    def reached(self) -> dict[tuple[str, int], int]:
        return dict(self.hits)


class DnsServer:
    """The namespace's resolver: fixed answers, and a name that rebinds."""

    def __init__(self, namespace: str) -> None:
        (self.sock,) = sockets_in(namespace, [(socket.AF_INET, socket.SOCK_DGRAM,
                                               ("127.0.0.1", 53))])
        self.asked: Counter[str] = Counter()
        threading.Thread(target=self._serve, daemon=True).start()

    def answer(self, name: str, qtype: str) -> str | None:
        if qtype != "A":
            return None
        self.asked[name] += 1
        if name == "private.ssrf.test":
            return "127.0.0.1"
        if name == "rebind.ssrf.test":
            return SITE if self.asked[name] == 1 else "127.0.0.1"
        return None

    def _serve(self) -> None:
        while True:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            query = DNSRecord.parse(data)
            reply = query.reply()
            name = str(query.q.qname).rstrip(".")
            address = self.answer(name, QTYPE[query.q.qtype])
            if address:
                rdata = AAAA(address) if ":" in address else A(address)
                reply.add_answer(RR(query.q.qname, query.q.qtype, rdata=rdata, ttl=0))
            self.sock.sendto(reply.pack(), peer)


class Site(http.server.BaseHTTPRequestHandler):
    """The public site: pages, and a redirect to each target."""
    paths: list[str]

    def do_GET(self) -> None:
        self.paths.append(self.path)
        target = next((t for t in TARGETS if self.path == f"/r/{t.name}"), None)
        if target is not None:
            self.send_response(302)
            self.send_header("Location", target.url)
            self.end_headers()
            return
        if self.path == "/robots.txt":
            self.send_error(404)
            return
        body = b"<html><body><h1>public</h1></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class SsrfNetwork:
    """The namespace, its site, listeners and DNS server; ``close()`` removes them."""

    def __init__(self, settings: Any, log_dir: Path) -> None:
        self.net = NodeNetwork(1, site_addresses=0, server_ports=server_ports(settings),
                               log_path=log_dir / "relay.log")
        self.namespace = self.net.namespace(1)
        self.etc = Path("/etc/netns") / self.namespace
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    def _make(self) -> None:
        for address in LOCAL_ADDRESSES:        # the namespace's loopback takes any address
            ip("-n", self.namespace, "addr", "add", f"{address}/32", "dev", "lo")
        self.etc.mkdir(parents=True, exist_ok=True)
        (self.etc / "resolv.conf").write_text(
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        self.listeners = Listeners(self.namespace)
        self.dns = DnsServer(self.namespace)
        self.site_paths: list[str] = []
        handler = type("SiteHandler", (Site,), {"paths": self.site_paths})
        server = http.server.ThreadingHTTPServer((SITE, PORT), handler,
                                                 bind_and_activate=False)
        server.socket.close()
        (server.socket,) = sockets_in(self.namespace, [(socket.AF_INET, socket.SOCK_STREAM,
                                                         (SITE, PORT))])
        self.site = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def command(self, command: list[str]) -> list[str]:
        """``command`` run inside the namespace."""
        return self.net.command(1, command)

    def close(self) -> None:
        site = getattr(self, "site", None)
        if site is not None:
            site.shutdown()
            site.server_close()
        self.net.close()
        shutil.rmtree(self.etc, ignore_errors=True)


def can_make_namespaces() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None
