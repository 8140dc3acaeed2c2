"""Redis clients: one Redis, or a Redis Cluster (``CRAWLCLUSTER_REDIS_CLUSTER``), with
timeouts, retries and a start-up check; the cluster's masters and slot map."""

import logging
from functools import cache
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlsplit, urlunsplit

from settings.clients.common import timeouts, unreachable

if TYPE_CHECKING:
    from settings.loader import Settings

# redis.Redis or redis.cluster.RedisCluster. redis-py types every command's reply as
# "a value or an awaitable of one" (its sync and asyncio clients share the signatures),
# which no caller could use without a cast, so the clients are typed loosely.
RedisClient: TypeAlias = Any
logger = logging.getLogger(__name__)


def redis_client(settings: "Settings", role: str, check: bool = True) -> RedisClient:
    """A redis-py client with timeouts and retries on connection errors: a Redis Cluster
    client when ``CRAWLCLUSTER_REDIS_CLUSTER`` is on."""
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.cluster import ClusterNode
    from redis.exceptions import RedisClusterException
    from redis.retry import Retry

    connect_timeout, socket_timeout = timeouts(settings)
    options = {"socket_connect_timeout": connect_timeout, "socket_timeout": socket_timeout,
               "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), 3),
               "decode_responses": True}
    try:
        if settings.getbool("CRAWLCLUSTER_REDIS_CLUSTER"):
            # Reconnects and re-reads the slots itself when a master fails over.
            # reinitialize_steps=1: a transaction's pipeline counts its own errors from
            # zero and gives up after 3, so with the default (re-read the slots every 5th
            # error) it would keep asking a dead master for good.
            url, others = cluster_nodes(settings["CRAWLCLUSTER_REDIS_URL"])
            client = _cluster_class().from_url(
                url, startup_nodes=[ClusterNode(host, port)
                                    for host, port in others],
                policy_resolver=_scripts_by_key(), reinitialize_steps=1, **options)
        else:
            client = redis.Redis.from_url(
                settings["CRAWLCLUSTER_REDIS_URL"], health_check_interval=30,
                retry_on_error=[redis.ConnectionError, redis.TimeoutError], **options)
    except (redis.RedisError, RedisClusterException) as exc:   # it asks for the slots at once
        raise unreachable(role, settings, "redis", exc) from None
    if check:
        try:
            client.ping()
        except (redis.RedisError, RedisClusterException) as exc:
            client.close()
            raise unreachable(role, settings, "redis", exc) from None
    return client

def cluster_nodes(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A Redis Cluster URL may name several nodes, ``redis://[auth@]h1:p1,h2:p2/0``, so a
    role can start while one of them is down: ``(the URL with the first node only,
    [(host, port) of the others]``."""
    parts = urlsplit(url)
    auth, _, hosts = parts.netloc.rpartition("@")
    first, *others = hosts.split(",")
    netloc = f"{auth}@{first}" if auth else first
    nodes = []
    for other in others:
        host, colon, port = other.rpartition(":")
        nodes.append((host, int(port)) if colon else (other, 6379))
    return urlunsplit(parts._replace(netloc=netloc)), nodes

def masters_url(settings: "Settings") -> str:
    """``CRAWLCLUSTER_REDIS_URL`` naming every master of the Redis Cluster it points at
    (``redis://[auth@]h1:p1,h2:p2,h3:p3/db``): a role given it starts while any of them
    answers."""
    client = redis_client(settings, "services")
    try:
        masters = sorted(f"{node.host}:{node.port}" for node in client.get_primaries())
    finally:
        client.close()
    parts = urlsplit(settings["CRAWLCLUSTER_REDIS_URL"])
    auth, _, _ = parts.netloc.rpartition("@")
    netloc = ",".join(masters)
    return str(urlunsplit(parts._replace(netloc=f"{auth}@{netloc}" if auth else netloc)))

@cache
def _cluster_class() -> Any:
    """RedisCluster whose pipelines resolve commands as the client does (redis-py 8.1
    gives a pipeline the default resolver, not the client's)."""
    from redis.cluster import RedisCluster

    class Cluster(RedisCluster):
        def pipeline(self, *args: Any, **kwargs: Any) -> Any:
            pipe = super().pipeline(*args, **kwargs)  # type: ignore[no-untyped-call]
            pipe._policy_resolver = self._policy_resolver
            return pipe

    return Cluster

@cache
def _scripts_by_key() -> Any:
    """redis-py's cluster pipeline asks the server (COMMAND GETKEYS, a round trip) for
    the keys of every EVALSHA it has no policy for, only to learn that it is keyed;
    every frontier script is. Saying so up front saves a round trip per script call."""
    from redis.commands.policies import (
        CommandPolicies,
        RequestPolicy,
        ResponsePolicy,
        StaticPolicyResolver,
    )

    class ScriptsByKey(StaticPolicyResolver):
        KEYED = CommandPolicies(request_policy=RequestPolicy.DEFAULT_KEYED,
                                response_policy=ResponsePolicy.DEFAULT_KEYED)

        def resolve(self, command_name: str) -> CommandPolicies | None:
            if command_name in ("evalsha", "eval"):
                return self.KEYED
            return super().resolve(command_name)

    return ScriptsByKey()

def is_cluster(client: RedisClient) -> bool:
    """Is this a Redis Cluster client?"""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)

def reread_slot_map(client: RedisClient) -> None:
    """After an error on a connection taken by hand from a Redis Cluster client (one
    redis-py does not see fail), ask a live node who serves which slots now, so the
    next try goes to a promoted replica, not the dead master. No-op on a single Redis."""
    import redis

    if not is_cluster(client):
        return
    try:
        client.nodes_manager.initialize()
    except redis.RedisError as exc:        # no node answers yet; the next error tries again
        logger.debug("could not re-read the Redis Cluster slot map: %s", exc)

def redis_version(settings: "Settings") -> str:
    client = redis_client(settings, "ping")
    try:
        version = str(client.info("server")["redis_version"])
        if is_cluster(client):
            return f"redis {version} cluster, {len(client.get_nodes())} nodes"
        return "redis " + version
    finally:
        client.close()
