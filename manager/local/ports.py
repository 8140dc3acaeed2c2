"""Addresses and ports of the local servers and test sites: where a server listens, whether
something is ``listening`` on a port or it is ``bindable``, and free ports to give out.
"""

import ipaddress
import random
import socket
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from manager.local.serverspec import REDIS_CLUSTER_BUS_OFFSET, REDIS_CLUSTER_NODES
from settings.clients import (
    cluster_nodes,
)
from settings.errors import ServiceError
from settings.loader import Settings

# free_port() picks from [FREE_PORTS_FROM, first ephemeral port - MANAGER_PORTS_AHEAD):
# a local cluster's managers take consecutive ports from the one it is given.
FREE_PORTS_FROM = 10000


MANAGER_PORTS_AHEAD = 16


def listen_address(settings: Settings, kind: str) -> tuple[str, int]:
    """``(host, port)`` a server of ``kind`` listens on, from the settings."""
    if kind == "redis":
        parts = urlsplit(cluster_nodes(settings["CRAWLCLUSTER_REDIS_URL"])[0])
        return parts.hostname or "127.0.0.1", parts.port or 6379
    if kind == "mongodb":
        parts = urlsplit(settings["CRAWLCLUSTER_MONGODB_URL"])
        return parts.hostname or "127.0.0.1", parts.port or 27017
    setting = {"kafka": "CRAWLCLUSTER_KAFKA_BOOTSTRAP",
               "zookeeper": "CRAWLCLUSTER_ZOOKEEPER_HOSTS"}[kind]
    first = settings.getlist(setting)[0].split("/", 1)[0]
    host, _, port = first.rpartition(":")
    return host or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listening(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port(hosts: Iterable[str] = ("127.0.0.1",)) -> int:
    """A TCP port free on every one of ``hosts`` right now, below the kernel's ephemeral
    range: a port in that range can be taken by any client connection's local end
    between this check and the listener's bind ("Address already in use")."""
    first_ephemeral = _first_ephemeral_port()
    for _ in range(200):
        port = random.randrange(FREE_PORTS_FROM, first_ephemeral - MANAGER_PORTS_AHEAD)
        if all(bindable(host, port) for host in hosts):
            return port
    raise ServiceError(f"no port free on all of {hosts}")


def free_redis_cluster_port(host: str = "127.0.0.1") -> int:
    """A first port for a local Redis Cluster: its six nodes' ports and their cluster bus
    ports (each node's port + 10000) all free and below the ephemeral range."""
    top = _first_ephemeral_port() - REDIS_CLUSTER_BUS_OFFSET - REDIS_CLUSTER_NODES
    for _ in range(200):
        port = random.randrange(FREE_PORTS_FROM, top)
        wanted = [port + n + bus for n in range(REDIS_CLUSTER_NODES)
                  for bus in (0, REDIS_CLUSTER_BUS_OFFSET)]
        if all(bindable(host, p) for p in wanted):
            return port
    raise ServiceError("no six consecutive ports free, with their cluster bus ports, for a "
                       "local Redis Cluster")


def _first_ephemeral_port() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return max(low, FREE_PORTS_FROM + 2 * MANAGER_PORTS_AHEAD)


def bindable(host: str, port: int) -> bool:
    """True if a listener could bind ``host:port`` now: no listener and no client
    connection holds it (a connection's local port blocks a bind too)."""
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
            return True
        except OSError:
            return False
