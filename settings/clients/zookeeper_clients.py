"""ZooKeeper clients (kazoo), with timeouts and a start-up check, and a stop that does
not hang on a dead server."""

import atexit
import logging
from typing import TYPE_CHECKING

from settings.clients.common import tcp_refusal, timeouts, unreachable

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from settings.loader import Settings

logger = logging.getLogger(__name__)


def zookeeper_client(settings: "Settings", role: str) -> "KazooClient":
    """A started KazooClient; on failure it is stopped before raising."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    refused = tcp_refusal(settings.getlist("CRAWLCLUSTER_ZOOKEEPER_HOSTS"), settings)
    if refused:
        raise unreachable(role, settings, "zookeeper", refused)
    connect_timeout, socket_timeout = timeouts(settings)
    client = KazooClient(
        hosts=settings["CRAWLCLUSTER_ZOOKEEPER_HOSTS"],
        timeout=max(socket_timeout, 4.0),
        connection_retry={"max_tries": -1, "delay": 0.2, "max_delay": 2.0},
    )
    try:
        client.start(timeout=connect_timeout)
    except (KazooTimeoutError, OSError) as exc:
        client.stop()
        client.close()
        reason = str(exc) or "no answer within the connect timeout"
        raise unreachable(role, settings, "zookeeper", reason) from None
    # kazoo joins its worker threads at exit; one waiting on a server that is down would
    # hold the process for good after its work has stopped. They are daemon threads: let
    # them end with the process (``stop_zookeeper`` stops them in an orderly close).
    atexit.unregister(client.handler.stop)
    return client

def zookeeper_version(settings: "Settings") -> str:
    client = zookeeper_client(settings, "ping")
    try:
        client.get("/")
        return "session established"
    finally:
        client.stop()
        client.close()

def stop_zookeeper(client: "KazooClient", wait: float = 2.0) -> bool:
    """Stop and close a ZooKeeper client, waiting ``wait`` seconds at most: with the server
    down, kazoo's ``stop`` can wait on its connection thread's retries far longer, and a
    role or spider shutting down must not. Returns whether it stopped in time (if not,
    its threads go with the process)."""
    import threading

    def stop() -> None:
        client.stop()
        client.close()

    stopping = threading.Thread(target=stop, name="zookeeper-stop", daemon=True)
    stopping.start()
    stopping.join(wait)
    if stopping.is_alive():
        logger.warning("the ZooKeeper client did not stop within %.0f s (server down?); "
                       "leaving it", wait)
    return not stopping.is_alive()
