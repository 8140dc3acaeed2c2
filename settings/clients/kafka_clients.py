"""Kafka clients (kafka-python; librdkafka for the items firehose): producers, consumers
and the admin client, with timeouts and a start-up check; the topics the cluster needs."""

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from settings.clients.common import tcp_refusal, timeouts, unreachable

if TYPE_CHECKING:
    from settings.loader import Settings

Built = TypeVar("Built")
logger = logging.getLogger(__name__)


def _kafka_common(settings: "Settings", role: str) -> dict[str, Any]:
    connect_timeout, socket_timeout = timeouts(settings)
    return {
        "bootstrap_servers": settings.getlist("CRAWLCLUSTER_KAFKA_BOOTSTRAP"),
        "client_id": f"crawlcluster-{role}",
        "request_timeout_ms": int(socket_timeout * 1000) + 1000,
        "bootstrap_timeout_ms": int(connect_timeout * 1000),
        "reconnect_backoff_max_ms": 2000,
    }

def _build_kafka(settings: "Settings", role: str, make: Callable[[], Built]) -> Built:
    from kafka.errors import KafkaConfigurationError, KafkaError

    refused = tcp_refusal(settings.getlist("CRAWLCLUSTER_KAFKA_BOOTSTRAP"), settings)
    if refused:
        raise unreachable(role, settings, "kafka", refused)
    try:
        return make()
    except KafkaConfigurationError:
        raise
    except (KafkaError, OSError) as exc:
        raise unreachable(role, settings, "kafka", exc) from None

def kafka_producer(settings: "Settings", role: str, **overrides: Any) -> Any:
    """A KafkaProducer that waits for every broker ack (no silent loss)."""
    from kafka import KafkaProducer

    config = _kafka_common(settings, role)
    config.update(acks="all", retries=5, linger_ms=5, max_block_ms=int(
        settings.getfloat("CRAWLCLUSTER_SOCKET_TIMEOUT") * 1000))
    config.update(overrides)
    return _build_kafka(settings, role, lambda: KafkaProducer(**config))

def native_producer(settings: "Settings", role: str, **overrides: Any) -> Any:
    """A librdkafka producer (confluent-kafka) that waits for every broker ack, for the
    items firehose: its batching and sending run in librdkafka's own threads, outside a
    spider's GIL (a message costs the spider ~7 us of CPU, against ~75 with kafka-python).
    A key goes to the partition Java's and kafka-python's producers pick (murmur2)."""
    from confluent_kafka import Producer

    refused = tcp_refusal(settings.getlist("CRAWLCLUSTER_KAFKA_BOOTSTRAP"), settings)
    if refused:
        raise unreachable(role, settings, "kafka", refused)
    connect_timeout, socket_timeout = timeouts(settings)
    config: dict[str, Any] = {
        "bootstrap.servers": ",".join(settings.getlist("CRAWLCLUSTER_KAFKA_BOOTSTRAP")),
        "client.id": f"crawlcluster-{role}",
        "acks": "all",
        "partitioner": "murmur2_random",
        "linger.ms": 20,
        "message.timeout.ms": int(socket_timeout * 1000),
        "socket.connection.setup.timeout.ms": int(connect_timeout * 1000),
        "reconnect.backoff.max.ms": 2000,
        "message.max.bytes": 8 << 20,
        "logger": logging.getLogger("crawlcluster.kafka"),
    }
    config.update(overrides)
    return Producer(config)

def kafka_consumer(settings: "Settings", role: str, *topics: str, **overrides: Any) -> Any:
    """A KafkaConsumer in the role's group, committing offsets by hand."""
    from kafka import KafkaConsumer

    session_ms = settings.getint("CRAWLCLUSTER_KAFKA_SESSION_TIMEOUT_MS")
    config = _kafka_common(settings, role)
    config.update(
        group_id=settings["CRAWLCLUSTER_KAFKA_GROUP_ID"],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=max(session_ms // 6, 100),
    )
    if "default_api_timeout_ms" in KafkaConsumer.DEFAULT_CONFIG:
        # kafka-python 3.1 bounds the waits of a poll that 3.0.x may never end
        # (dpkp/kafka-python#3121; the role's watchdog covers 3.0.x).
        config["default_api_timeout_ms"] = int(settings.getfloat("CRAWLCLUSTER_SOCKET_TIMEOUT")
                                               * 1000)
    config.update(overrides)
    return _build_kafka(settings, role, lambda: KafkaConsumer(*topics, **config))

def kafka_admin(settings: "Settings", role: str) -> Any:
    """A KafkaAdminClient (create/delete topics, list groups)."""
    from kafka.admin import KafkaAdminClient

    config = _kafka_common(settings, role)
    return _build_kafka(settings, role, lambda: KafkaAdminClient(**config))

def ensure_topics(settings: "Settings", role: str, topics: dict[str, int] | None = None) -> None:
    """Create ``topics`` ({name: partitions}; by default the requests and replies topics)
    if the broker does not have them."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    wanted = topics or {settings["CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC"]:
                        settings.getint("CRAWLCLUSTER_KAFKA_PARTITIONS"),
                        settings["CRAWLCLUSTER_KAFKA_REPLIES_TOPIC"]: 1}
    admin = kafka_admin(settings, role)
    try:
        missing = set(wanted) - set(admin.list_topics())
        for name in sorted(missing):
            try:
                admin.create_topics([NewTopic(name, num_partitions=wanted[name],
                                              replication_factor=1)])
                logger.info("created Kafka topic %s (%d partitions)", name, wanted[name])
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()

def kafka_version(settings: "Settings") -> str:
    admin = kafka_admin(settings, "ping")
    try:
        admin.list_topics()
        return "broker answers"
    finally:
        admin.close()
