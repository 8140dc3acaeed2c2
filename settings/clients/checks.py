"""Is each server up? ``crawlcluster ping`` asks every one; each role, at start-up,
the ones it needs."""

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from settings.clients.kafka_clients import kafka_admin, kafka_version
from settings.clients.mongodb_clients import mongo_client, mongo_version
from settings.clients.redis_clients import redis_client, redis_version
from settings.clients.zookeeper_clients import (
    stop_zookeeper,
    zookeeper_client,
    zookeeper_version,
)
from settings.errors import ServerUnreachable

if TYPE_CHECKING:
    from settings.loader import Settings


_VERSION_PROBES: dict[str, Callable[["Settings"], str]] = {
    "redis": redis_version,
    "kafka": kafka_version,
    "zookeeper": zookeeper_version,
    "mongodb": mongo_version,
}

def check_server(settings: "Settings", kind: str) -> tuple[bool, str]:
    """Return ``(ok, detail)`` for one server kind; never raises for a dead server."""
    started = time.monotonic()
    try:
        version = _VERSION_PROBES[kind](settings)
    except ServerUnreachable as exc:
        return False, f"unreachable: {exc.reason} ({exc.hint})"
    elapsed_ms = (time.monotonic() - started) * 1000
    return True, f"reachable ({version}, {elapsed_ms:.0f} ms)"

def check_role_servers(settings: "Settings", role: str, kinds: Iterable[str]) -> None:
    """Raise ``ServerUnreachable`` for the first of ``kinds`` that is down.

    Every role calls this at start-up for the servers it needs, so a bad
    address fails fast with one clear line.
    """
    for kind in kinds:
        _BUILDERS[kind](settings, role)

_BUILDERS: dict[str, Callable[["Settings", str], object]] = {
    "redis": lambda s, role: redis_client(s, role).close(),
    "kafka": lambda s, role: kafka_admin(s, role).close(),
    "zookeeper": lambda s, role: stop_zookeeper(zookeeper_client(s, role)),
    "mongodb": lambda s, role: mongo_client(s, role).close(),
}
