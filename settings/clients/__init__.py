"""The one factory for every server client: Redis, Kafka, ZooKeeper, MongoDB.

Each ``*_client`` function builds a client from settings with connect and socket
timeouts, checks the server answers, and on failure raises ``ServerUnreachable`` naming
the role, the address and what to check. Components receive these clients; they never
build their own. One module a server (``redis_clients``, ``kafka_clients``,
``zookeeper_clients``, ``mongodb_clients``), what they share (``common``), and the
checks of ``crawlcluster ping`` and of each role's start (``checks``); the names every
role uses are importable from here.
"""

from settings.clients.checks import check_role_servers, check_server
from settings.clients.common import ADDRESS_SETTING, SERVER_KINDS, redact, server_address
from settings.clients.kafka_clients import (
    ensure_topics,
    kafka_admin,
    kafka_consumer,
    kafka_producer,
    native_producer,
)
from settings.clients.mongodb_clients import mongo_client
from settings.clients.redis_clients import (
    RedisClient,
    cluster_nodes,
    is_cluster,
    masters_url,
    redis_client,
    reread_slot_map,
)
from settings.clients.zookeeper_clients import stop_zookeeper, zookeeper_client

__all__ = [
    "ADDRESS_SETTING", "SERVER_KINDS", "RedisClient", "check_role_servers", "check_server",
    "cluster_nodes", "ensure_topics", "is_cluster", "kafka_admin", "kafka_consumer",
    "kafka_producer", "masters_url", "mongo_client", "native_producer", "redact", "redis_client",
    "reread_slot_map", "server_address", "stop_zookeeper", "zookeeper_client",
]
