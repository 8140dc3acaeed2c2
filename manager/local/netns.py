"""Slave nodes on their own addresses: each node in a Linux network namespace of its own.

``NodeNetwork(nodes)`` makes, on one host:

- a bridge holding ``198.18.<k>.1/24`` (198.18.0.0/15 is the benchmarking range, so no
  real address is shadowed), plus any site addresses asked for (``198.18.<k>.2``, ...),
  where a test site's nginx listens;
- per node ``n``: a namespace with a veth pair to the bridge and the address
  ``198.18.<k>.<10 + n>/24``, so every request the node's spiders make reaches the site
  from that source address (nginx's ``$remote_addr``);
- one relay process that gives every namespace the host's servers on its own loopback:
  it listens on ``127.0.0.1:<port>`` inside each namespace and connects to
  ``127.0.0.1:<port>`` of the host, so a node's settings name the same servers as on
  the host (and a Redis Cluster's advertised ``127.0.0.1`` addresses still hold).

Nothing is routed past the bridge: no default route in the namespaces, no forwarding.
``close()`` removes everything it made. Making namespaces needs CAP_NET_ADMIN (root);
without it ``NodeNetwork`` raises ``ServiceError`` saying so.
"""

import argparse
import asyncio
import ctypes
import functools
import os
import random
import select
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, Self

from settings.errors import ServiceError
from settings.loader import Settings

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/var/run/netns")


def ip(*args: str, check: bool = True) -> str:
    """Run ``ip ARGS``; ServiceError with its message on failure."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise ServiceError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def free_subnet() -> str:
    """A /24 of 198.18.0.0/15 no interface on this host has an address in."""
    used = ip("-4", "-o", "addr", "show")
    choices = [f"198.{18 + a}.{b}" for a in (0, 1) for b in range(256)]
    random.shuffle(choices)
    for net in choices:
        if f" {net}." not in used:
            return net
    raise ServiceError("no free /24 left in 198.18.0.0/15")


def server_ports(settings: Settings) -> list[int]:
    """The ports of the servers the settings name (every node of a local Redis Cluster)."""
    from manager.local.ports import listen_address
    from manager.local.serverspec import REDIS_CLUSTER_NODES

    redis = listen_address(settings, "redis")[1]
    ports = [redis]
    if settings.getbool("CRAWLCLUSTER_REDIS_CLUSTER"):
        ports = list(range(redis, redis + REDIS_CLUSTER_NODES))
    ports.append(listen_address(settings, "mongodb")[1])
    for name in ("CRAWLCLUSTER_ZOOKEEPER_HOSTS", "CRAWLCLUSTER_KAFKA_BOOTSTRAP"):
        ports += [int(address.rpartition(":")[2]) for address in settings[name].split(",")]
    return ports


class NodeNetwork:
    def __init__(self, nodes: int, site_addresses: int = 1, server_ports: Iterable[int] = (),
                 log_path: Path | str | None = None) -> None:
        self.token = uuid.uuid4().hex[:6]
        self.net = free_subnet()
        self.bridge = f"cc{self.token}br"
        self.namespaces = [f"cc{self.token}n{n}" for n in range(1, nodes + 1)]
        self.site_hosts = [f"{self.net}.{2 + n}" for n in range(site_addresses)]
        self.server_ports = sorted(set(server_ports))
        self.log_path = log_path
        self.relay: subprocess.Popen[str] | None = None
        try:
            self._make()
        except BaseException:
            self.close()
            raise

    # --- addresses -----------------------------------------------------------------------

    @property
    def gateway(self) -> str:
        return f"{self.net}.1"

    def address(self, number: int) -> str:
        """The source address of node ``number`` (1-based)."""
        return f"{self.net}.{10 + number}"

    def namespace(self, number: int) -> str:
        return self.namespaces[number - 1]

    def command(self, number: int, command: list[str]) -> list[str]:
        """``command`` run inside node ``number``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(number), *command]

    # --- making and removing ---------------------------------------------------------------

    def _make(self) -> None:
        if os.geteuid() != 0:
            raise ServiceError("network namespaces need CAP_NET_ADMIN: run as root")
        ip("link", "add", self.bridge, "type", "bridge")
        for address in [self.gateway, *self.site_hosts]:
            ip("addr", "add", f"{address}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for number, name in enumerate(self.namespaces, start=1):
            outside, inside = f"cc{self.token}v{number}", f"cc{self.token}p{number}"
            ip("netns", "add", name)
            ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            ip("link", "set", outside, "master", self.bridge, "up")
            ip("link", "set", inside, "netns", name)
            ip("-n", name, "link", "set", "lo", "up")
            ip("-n", name, "addr", "add", f"{self.address(number)}/24", "dev", inside)
            ip("-n", name, "link", "set", inside, "up")
        if self.server_ports:
            self._start_relay()

    def _start_relay(self, timeout: float = 15.0) -> None:
        """Start the relay and wait for its line saying every listener is bound."""
        command = [sys.executable, "-m", "manager.local.netns", "relay",
                   "--ports", *map(str, self.server_ports), "--namespaces", *self.namespaces]
        log = open(self.log_path or os.devnull, "ab")  # noqa: SIM115 - the child holds it
        with log:
            self.relay = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=log, text=True,
                                          start_new_session=True,
                                          cwd=str(Path(__file__).resolve().parents[2]))
        stdout = self.relay.stdout
        assert stdout is not None           # Popen(stdout=PIPE)
        ready, _, _ = select.select([stdout], [], [], timeout)
        if not ready or not stdout.readline().startswith("relaying"):
            raise ServiceError(f"the server relay did not come up (log: {self.log_path})")

    def close(self) -> None:
        if self.relay is not None:
            if self.relay.poll() is None:
                self.relay.terminate()
                self.relay.wait(timeout=10)
            if self.relay.stdout is not None:
                self.relay.stdout.close()
        for name in self.namespaces:
            if (NETNS_DIR / name).exists():
                ip("netns", "del", name, check=False)     # takes its veth ends along
        ip("link", "del", self.bridge, check=False)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


# --- the relay (a process of its own: ``python -m manager.local.netns relay``) -----------------

def _setns(handle: IO[Any]) -> None:
    """Move this thread into the network namespace of the open file ``handle``."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"setns {handle.name}")


def listeners_in(namespace: str, ports: list[int]) -> list[tuple[int, socket.socket]]:
    """Listening sockets on 127.0.0.1:<port> inside ``namespace`` (this thread returns to
    the namespace it was in)."""
    with open("/proc/thread-self/ns/net") as home, open(NETNS_DIR / namespace) as target:
        _setns(target)
        try:
            made = []
            for port in ports:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen(128)
                sock.setblocking(False)
                made.append((port, sock))
            return made
        finally:
            _setns(home)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _relay(namespaces: list[str], ports: list[int]) -> None:
    async def forward(port: int, client_reader: asyncio.StreamReader,
                      client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, server_writer),
                             _pipe(server_reader, client_writer))

    servers = []
    for namespace in namespaces:
        for port, sock in listeners_in(namespace, ports):
            servers.append(await asyncio.start_server(
                functools.partial(forward, port), sock=sock))
    print(f"relaying ports {ports} into {namespaces}", flush=True)
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m manager.local.netns")
    commands = parser.add_subparsers(dest="command", required=True)
    relay = commands.add_parser("relay", help="the host's servers on each namespace's loopback")
    relay.add_argument("--ports", type=int, nargs="+", required=True)
    relay.add_argument("--namespaces", nargs="+", required=True)
    args = parser.parse_args(argv)
    asyncio.run(_relay(args.namespaces, args.ports))


if __name__ == "__main__":
    main()
