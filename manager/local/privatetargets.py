"""Listeners on private addresses, and the URLs a hostile page aims at them: what a
benchmark counts to show that nothing it crawls reaches the cluster's own network.

A listener on a loopback address no site uses, reached by six spellings of it, and
listeners on port 80 of the cloud metadata address, of 100.100.100.200 (the shared
address space, one cloud's metadata service) and of fd00::1 (unique local IPv6), each
added to loopback for the run where this machine lacks it and the run is root's. Each
listener counts every connection (a bare connect too) and every request, whatever its
method. (tests/security does the same inside a network namespace of its own.)
"""

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from manager.local.ports import free_port

PRIVATE_HOST = "127.0.0.66"          # the loopback listener: no site there
LOOPBACK_SPELLINGS = ("127.0.0.66", "2130706498", "0177.0.0.66", "0x7f000042", "127.66",
                      "[::ffff:127.0.0.66]")
# Listened on at port 80 where this machine has the address, or the run (as root) may
# add it to loopback for its duration: the metadata services of most clouds and of one
# that uses the shared address space, and a unique local IPv6 address.
PRIVATE_ADDRESSES = {"metadata": "169.254.169.254", "shared-space": "100.100.100.200",
                     "ula": "fd00::1"}


class Listener:
    """An HTTP server counting every connection that reaches it (a bare connect too) and
    every request, whatever its method."""

    def __init__(self, host: str, port: int) -> None:
        hits: list[str] = []
        connections: list[object] = []
        self.hits, self.connections = hits, connections

        class Handler(BaseHTTPRequestHandler):
            def parse_request(self) -> bool:     # every request line read, any method
                parsed = super().parse_request()
                if self.command:
                    hits.append(f"{self.command} {self.path}")
                return parsed

            def do_GET(self) -> None:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"secret")

            do_POST = do_PUT = do_HEAD = do_OPTIONS = do_DELETE = do_GET

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

            def verify_request(self, request: object, client_address: object) -> bool:
                connections.append(client_address)
                return True

        self.server = Server((host, port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def private_addresses() -> Iterator[list[str]]:
    """The private addresses this machine lacks, on loopback for the run where it may add
    them (as root): removed again after. Yields those that are there."""
    present = subprocess.run(["ip", "addr", "show", "dev", "lo"], capture_output=True,
                             text=True, check=False).stdout
    there, added = [], []
    for address in PRIVATE_ADDRESSES.values():
        prefix = f"{address}/{128 if ':' in address else 32}"
        if f" {address}/" in present:
            there.append(address)
        elif os.geteuid() == 0 and subprocess.run(
                ["ip", "addr", "add", prefix, "dev", "lo"], capture_output=True,
                check=False).returncode == 0:
            there.append(address)
            added.append(prefix)
    try:
        yield there
    finally:
        for prefix in added:
            subprocess.run(["ip", "addr", "del", prefix, "dev", "lo"], capture_output=True,
                           check=False)


def listeners(addresses: list[str]) -> dict[str, Listener]:
    """The loopback listener, and one on port 80 of each private address that is there
    and can be bound."""
    found = {"loopback": Listener(PRIVATE_HOST, free_port([PRIVATE_HOST]))}
    for name, address in PRIVATE_ADDRESSES.items():
        if address in addresses:
            with contextlib.suppress(OSError):
                found[name] = Listener(address, 80)
    return found


def private_targets(private: dict[str, Listener]) -> list[str]:
    """The base URLs the hostile pages aim at: the loopback listener spelled every way,
    and each private address (listened on or not)."""
    port = private["loopback"].port
    return [*(f"http://{spelling}:{port}" for spelling in LOOPBACK_SPELLINGS),
            *(f"http://{address}" if ":" not in address else f"http://[{address}]"
              for address in PRIVATE_ADDRESSES.values()),
            f"http://{PRIVATE_ADDRESSES['metadata']}/latest/meta-data"]
