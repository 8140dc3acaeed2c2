"""What every server's client factory shares: the server kinds and their address
settings, redacted addresses, timeouts, and the one way an unreachable server is told."""

import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from settings.errors import ServerUnreachable

if TYPE_CHECKING:
    from settings.loader import Settings


SERVER_KINDS = ("redis", "kafka", "zookeeper", "mongodb")

ADDRESS_SETTING = {
    "redis": "CRAWLCLUSTER_REDIS_URL",
    "kafka": "CRAWLCLUSTER_KAFKA_BOOTSTRAP",
    "zookeeper": "CRAWLCLUSTER_ZOOKEEPER_HOSTS",
    "mongodb": "CRAWLCLUSTER_MONGODB_URL",
}

def redact(url: str) -> str:
    """Return a URL with any password replaced by ``***`` (for logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))

def server_address(settings: "Settings", kind: str) -> str:
    """The configured address of a server kind, safe to print."""
    return redact(settings[ADDRESS_SETTING[kind]])

def unreachable(role: str, settings: "Settings", kind: str,
                 exc: BaseException | str) -> ServerUnreachable:
    setting = ADDRESS_SETTING[kind]
    hint = f"is the server running? check {setting}, or run `crawlcluster services up`"
    reason = str(exc).strip() or type(exc).__name__
    return ServerUnreachable(role, kind, server_address(settings, kind), reason, hint)

def timeouts(settings: "Settings") -> tuple[float, float]:
    return settings.getfloat("CRAWLCLUSTER_CONNECT_TIMEOUT"), settings.getfloat(
        "CRAWLCLUSTER_SOCKET_TIMEOUT"
    )

def first_line(exc: BaseException) -> str:
    # pymongo's server-selection errors carry a long topology description.
    return str(exc).split(" (configured timeouts", 1)[0].split("\n", 1)[0]

def tcp_refusal(hosts: list[str], settings: "Settings") -> str | None:
    """None if any ``host:port`` accepts a TCP connection, else why none did.

    Kafka and ZooKeeper clients retry a dead address until their timeout and
    then report only "timed out"; this names the real reason up front.
    """
    timeout = settings.getfloat("CRAWLCLUSTER_CONNECT_TIMEOUT")
    reasons = []
    for entry in hosts:
        host, _, port = entry.split("/", 1)[0].rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
            return None
        except (OSError, ValueError) as exc:
            reasons.append(f"{entry}: {getattr(exc, 'strerror', None) or exc}")
    return "; ".join(reasons)
