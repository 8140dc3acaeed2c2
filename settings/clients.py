"""The one factory for every server client: Redis, Kafka, ZooKeeper, MongoDB.

Each ``*_client`` function builds a client from settings with connect and
socket timeouts, checks the server answers, and on failure raises
``ServerUnreachable`` naming the role, the address and what to check.
Components receive these clients; they never build their own.
"""

import atexit
import logging
import socket
import time
from collections.abc import Callable, Collection, Iterable
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias, TypeVar
from urllib.parse import urlsplit, urlunsplit

from settings.errors import CrawlClusterError, ServerUnreachable

if TYPE_CHECKING:
    from kazoo.client import KazooClient
    from pymongo import MongoClient

    from settings.loader import Settings

# redis.Redis or redis.cluster.RedisCluster. redis-py types every command's reply as
# "a value or an awaitable of one" (its sync and asyncio clients share the signatures),
# which no caller could use without a cast, so the clients are typed loosely.
RedisClient: TypeAlias = Any
Built = TypeVar("Built")

logger = logging.getLogger(__name__)

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


def _unreachable(role: str, settings: "Settings", kind: str,
                 exc: BaseException | str) -> ServerUnreachable:
    setting = ADDRESS_SETTING[kind]
    hint = f"is the server running? check {setting}, or run `crawlcluster services up`"
    reason = str(exc).strip() or type(exc).__name__
    return ServerUnreachable(role, kind, server_address(settings, kind), reason, hint)


def _timeouts(settings: "Settings") -> tuple[float, float]:
    return settings.getfloat("CRAWLCLUSTER_CONNECT_TIMEOUT"), settings.getfloat(
        "CRAWLCLUSTER_SOCKET_TIMEOUT"
    )


# --- Redis -------------------------------------------------------------------

def redis_client(settings: "Settings", role: str, check: bool = True) -> RedisClient:
    """A redis-py client with timeouts and retries on connection errors: a Redis Cluster
    client when ``CRAWLCLUSTER_REDIS_CLUSTER`` is on."""
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.cluster import ClusterNode
    from redis.exceptions import RedisClusterException
    from redis.retry import Retry

    connect_timeout, socket_timeout = _timeouts(settings)
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
        raise _unreachable(role, settings, "redis", exc) from None
    if check:
        try:
            client.ping()
        except (redis.RedisError, RedisClusterException) as exc:
            client.close()
            raise _unreachable(role, settings, "redis", exc) from None
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


def _redis_version(settings: "Settings") -> str:
    client = redis_client(settings, "ping")
    try:
        version = str(client.info("server")["redis_version"])
        if is_cluster(client):
            return f"redis {version} cluster, {len(client.get_nodes())} nodes"
        return "redis " + version
    finally:
        client.close()


# --- Kafka -------------------------------------------------------------------

def _kafka_common(settings: "Settings", role: str) -> dict[str, Any]:
    connect_timeout, socket_timeout = _timeouts(settings)
    return {
        "bootstrap_servers": settings.getlist("CRAWLCLUSTER_KAFKA_BOOTSTRAP"),
        "client_id": f"crawlcluster-{role}",
        "request_timeout_ms": int(socket_timeout * 1000) + 1000,
        "bootstrap_timeout_ms": int(connect_timeout * 1000),
        "reconnect_backoff_max_ms": 2000,
    }


def _build_kafka(settings: "Settings", role: str, make: Callable[[], Built]) -> Built:
    from kafka.errors import KafkaConfigurationError, KafkaError

    refused = _tcp_refusal(settings.getlist("CRAWLCLUSTER_KAFKA_BOOTSTRAP"), settings)
    if refused:
        raise _unreachable(role, settings, "kafka", refused)
    try:
        return make()
    except KafkaConfigurationError:
        raise
    except (KafkaError, OSError) as exc:
        raise _unreachable(role, settings, "kafka", exc) from None


def kafka_producer(settings: "Settings", role: str, **overrides: Any) -> Any:
    """A KafkaProducer that waits for every broker ack (no silent loss)."""
    from kafka import KafkaProducer

    config = _kafka_common(settings, role)
    config.update(acks="all", retries=5, linger_ms=5, max_block_ms=int(
        settings.getfloat("CRAWLCLUSTER_SOCKET_TIMEOUT") * 1000))
    config.update(overrides)
    return _build_kafka(settings, role, lambda: KafkaProducer(**config))


class Delivered(NamedTuple):
    """Where a message is on its topic, when it was found there rather than confirmed."""

    topic: str
    partition: int
    offset: int


class DeliveryFailed(CrawlClusterError):
    """Some messages of a delivery are not known to be stored. ``results`` holds, for each
    message, where it is (stored) or None (not stored, or not known to be: the broker
    could not be read to tell)."""

    def __init__(self, message: str, results: list[Any]) -> None:
        super().__init__(message)
        self.results = results

    def stored(self) -> list[int]:
        """The indexes of the messages known to be stored."""
        return [n for n, result in enumerate(self.results) if result is not None]

    def unsure(self) -> list[int]:
        """The indexes of the others: to be looked for before they are sent again."""
        return [n for n, result in enumerate(self.results) if result is None]


class DeliveringProducer:
    """A Kafka producer for messages that must arrive: ``deliver`` returns only once the
    broker has every one of them, or raises ``DeliveryFailed`` saying which it has.

    A producer whose delivery failed is dropped with what it still buffered and made
    again on the next call: a broker that restarted without its state (Tansu's memory
    storage) no longer knows the old producer's id and would refuse it for good.

    A message the broker did not confirm may be stored all the same: a broker that is
    stopping acknowledges some without an offset (-1), a delivery that timed out or
    failed may have reached it, and one message of a batch can fail while the rest
    are stored. Every message not confirmed is looked for once the broker answers again,
    and only those not there are sent again. A plain resend would answer a request
    twice; trusting the acknowledgment loses one now and then. The look reads each
    partition from the offset after the last message this producer had confirmed there
    before the unsure ones were sent (they can only be later), or, not knowing that (a
    process that left them), its last ``LOOK_BACK`` records: a broker that serves a
    fetch slowly (Tansu on S3 reads a few hundred records in 10 s) cannot be read back
    that far in time, and the messages were sent again, some twice.
    """

    LOOK_BACK = 2_000
    # Read on this long before saying a message is not there: just after acknowledging
    # without an offset, or restarting, Tansu's end offsets may leave out a message it
    # stored and serves a moment later (sent again at once: 7 of 1,471 answered twice).
    SETTLE = 3.0
    KEEP_FLOORS = 10_000        # unsure messages whose floors are kept, at most

    def __init__(self, settings: "Settings", role: str, **overrides: Any):
        self.settings, self.role = settings, role
        self._make: Callable[[], Any] = lambda: kafka_producer(settings, role, **overrides)
        self.timeout = settings.getfloat("CRAWLCLUSTER_SOCKET_TIMEOUT")
        self.producer = self._make()
        # topic -> {partition: the offset after the last message confirmed there}
        self._confirmed_next: dict[str, dict[int, int]] = {}
        # (topic, message left unsure) -> those offsets when it was sent
        self._sent_after: dict[tuple[str, bytes], dict[int, int]] = {}

    def deliver(self, topic: str, values: list[bytes], timeout: float | None = None,
                give_up_after: float | None = None,
                unsure: Collection[int] = ()) -> list[Any]:
        """Send ``values`` (bytes) to ``topic``; return where each is (RecordMetadata or
        ``Delivered``: ``topic``, ``partition``, ``offset``).

        ``timeout`` bounds each send and each look; messages not confirmed are looked
        for and sent again (a broker that restarts) until ``give_up_after`` seconds have
        passed (four times ``timeout`` unless given), then ``DeliveryFailed`` is raised
        naming the messages stored. The messages ``unsure`` names (indexes: of an
        earlier delivery that failed so) are looked for before anything is sent, and
        sent again if the topic cannot be read that long."""
        floor = self._floor(topic, values, unsure)
        try:
            results = self._deliver(topic, values, timeout or self.timeout, give_up_after,
                                    unsure, floor)
        except DeliveryFailed as exc:
            self._note(topic, values, exc.results, floor)
            raise
        self._note(topic, values, results, floor)
        return results

    def _floor(self, topic: str, values: list[bytes], unsure: Collection[int]
               ) -> dict[int, int]:
        """``{partition: offset}`` below which none of ``values`` can be: where this
        producer's confirmed messages ended before they were sent (for those ``unsure``,
        when they were first sent); a partition left out is not known."""
        if not unsure:
            return dict(self._confirmed_next.get(topic, {}))
        floors = [self._sent_after.get((topic, values[n])) for n in unsure]
        known = [floor for floor in floors if floor is not None]
        if len(known) < len(floors):
            return {}
        return {partition: min(floor.get(partition, 0) for floor in known)
                for partition in known[0]}

    def _note(self, topic: str, values: list[bytes], results: list[Any],
              floor: dict[int, int]) -> None:
        """Keep where the confirmed messages end, and the floor of those left unsure.
        The ends are this call's, not the highest ever: a topic made again on the broker
        numbers from 0."""
        ends: dict[int, int] = {}
        for value, result in zip(values, results, strict=True):
            if result is None:
                if len(self._sent_after) >= self.KEEP_FLOORS:
                    self._sent_after.clear()        # looked for further back, no more
                self._sent_after[(topic, value)] = floor
                continue
            self._sent_after.pop((topic, value), None)
            if result.offset >= 0:
                ends[result.partition] = max(ends.get(result.partition, 0), result.offset + 1)
        self._confirmed_next.setdefault(topic, {}).update(ends)

    def _deliver(self, topic: str, values: list[bytes], timeout: float,
                 give_up_after: float | None, unsure: Collection[int],
                 floor: dict[int, int]) -> list[Any]:
        budget = give_up_after or 4 * timeout
        results: list[Any] = [None] * len(values)
        if unsure:
            try:
                self._look(topic, values, sorted(unsure), results, timeout,
                           time.monotonic() + budget, floor)
            except DeliveryFailed as exc:
                # Never stall for good on a topic too slow to read back: a message sent
                # twice is answered twice, one never sent is lost.
                logger.warning("%s: sending them again (some may be there twice)", exc)
        deadline = time.monotonic() + budget
        pending = [n for n in range(len(values)) if results[n] is None]
        while pending:
            sent, error = self._send(topic, [values[n] for n in pending], timeout)
            for n, metadata in zip(pending, sent, strict=True):
                if metadata is not None and metadata.offset >= 0:
                    results[n] = metadata
            unsure = [n for n in pending if results[n] is None]
            if not unsure:
                break
            if not getattr(error, "retriable", True):       # e.g. a message too large
                raise DeliveryFailed(f"{len(unsure)} of {len(values)} messages to {topic} "
                                     f"refused: {error}", results)
            logger.warning("%d of %d messages to %s not confirmed (%s): looking for them on "
                           "the topic", len(unsure), len(values), topic,
                           error or "acknowledged without an offset")
            self._look(topic, values, unsure, results, timeout, deadline, floor)
            pending = [n for n in unsure if results[n] is None]
            if pending:
                logger.warning("%d of %d messages to %s not confirmed and not on the topic: "
                               "sending them again", len(pending), len(values), topic)
                if time.monotonic() > deadline:
                    raise DeliveryFailed(f"{len(pending)} of {len(values)} messages to "
                                         f"{topic} not stored", results)
        return results

    def _look(self, topic: str, values: list[bytes], unsure: list[int], results: list[Any],
              timeout: float, deadline: float, floor: dict[int, int]) -> None:
        """Fill ``results`` for those of ``unsure`` found on the topic; raise
        ``DeliveryFailed`` if it cannot be read by ``deadline`` (sending them again
        could store them twice)."""
        from kafka.errors import KafkaError

        try:
            found = self._find_by(topic, {values[n] for n in unsure}, timeout, deadline,
                                  floor)
        except (KafkaError, ServerUnreachable) as exc:
            raise DeliveryFailed(f"{len(unsure)} of {len(values)} messages to {topic} not "
                                 f"known to be stored, and the topic could not be read: "
                                 f"{exc}", results) from None
        for n in unsure:
            if values[n] in found:
                results[n] = Delivered(topic, *found[values[n]])

    def _send(self, topic: str, values: list[bytes], timeout: float) -> tuple[list[Any], Any]:
        """``([RecordMetadata or None for each value], the first error or None)``: None
        for a message whose send failed or did not finish in time."""
        from kafka.errors import KafkaError, KafkaTimeoutError

        futures: list[Any] = [None] * len(values)
        errors: list[Exception] = []
        try:
            if self.producer is None:
                self.producer = self._make()
            for n, value in enumerate(values):
                try:
                    futures[n] = self.producer.send(topic, value)
                except KafkaError as exc:      # this one only (e.g. too large)
                    errors.append(exc)
            self.producer.flush(timeout=timeout)
        except (KafkaError, ServerUnreachable) as exc:
            errors.append(exc)
        sent: list[Any] = [None] * len(values)
        for n, future in enumerate(futures):
            if future is None:
                continue
            if not future.is_done:
                errors.append(KafkaTimeoutError(f"no answer within {timeout} s"))
            elif future.failed():
                errors.append(future.exception)
            else:
                sent[n] = future.value
        if errors and self.producer is not None:
            self.producer.close(timeout=0)
            self.producer = None
        return sent, errors[0] if errors else None

    def _find_by(self, topic: str, wanted: set[bytes], timeout: float,
                 deadline: float, floor: dict[int, int]) -> dict[bytes, tuple[int, int]]:
        """``_find``, tried again until ``deadline`` while the topic cannot be read:
        giving up would send the whole batch again, answering some requests twice."""
        from kafka.errors import KafkaError

        while True:
            try:
                return self._find(topic, wanted, timeout, floor)
            except (KafkaError, ServerUnreachable) as exc:
                if time.monotonic() > deadline:
                    raise
                logger.warning("could not look for messages not confirmed (trying again): "
                               "%s", exc)
                time.sleep(1.0)

    def _find(self, topic: str, wanted: set[bytes], timeout: float,
              floor: dict[int, int]) -> dict[bytes, tuple[int, int]]:
        """``{value: (partition, offset)}`` of the ``wanted`` values among the records of
        the topic's partitions from ``floor`` on (or their last ``LOOK_BACK``), read for
        ``SETTLE`` seconds at least. Raises a KafkaError if it cannot read them in time."""
        from kafka import TopicPartition
        from kafka.errors import KafkaTimeoutError

        consumer = kafka_consumer(self.settings, self.role, group_id=None)
        try:
            partitions = [TopicPartition(topic, number)
                          for number in sorted(consumer.partitions_for_topic(topic) or ())]
            if not partitions:
                raise KafkaTimeoutError(f"the partitions of {topic} are not known yet")
            consumer.assign(partitions)
            # A partition's end is where its last batch starts, plus one, on Tansu (past
            # its last record on Kafka): read while below it, the last batch comes whole.
            # One that ends at or before the floor has no batch sent after it.
            ends = consumer.end_offsets(partitions)
            for partition in partitions:
                consumer.seek(partition, max(0, ends[partition] - self.LOOK_BACK,
                                             floor.get(partition.partition, 0)))
            found: dict[bytes, tuple[int, int]] = {}
            started = time.monotonic()
            settled, stop = started + min(self.SETTLE, timeout), started + timeout
            while len(found) < len(wanted):
                behind = {partition.partition: (consumer.position(partition), ends[partition])
                          for partition in partitions
                          if consumer.position(partition) < ends[partition]}
                if not behind and time.monotonic() >= settled:
                    break
                if time.monotonic() > stop:
                    raise KafkaTimeoutError(f"could not read {topic} back in {timeout} s "
                                            f"(partition: (position, end) {behind})")
                for partition, records in consumer.poll(timeout_ms=200).items():
                    for record in records:
                        if record.value in wanted:
                            found.setdefault(record.value, (partition.partition, record.offset))
            return found
        finally:
            consumer.close()

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()


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


def _kafka_version(settings: "Settings") -> str:
    admin = kafka_admin(settings, "ping")
    try:
        admin.list_topics()
        return "broker answers"
    finally:
        admin.close()


# --- ZooKeeper -----------------------------------------------------------------

def zookeeper_client(settings: "Settings", role: str) -> "KazooClient":
    """A started KazooClient; on failure it is stopped before raising."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    refused = _tcp_refusal(settings.getlist("CRAWLCLUSTER_ZOOKEEPER_HOSTS"), settings)
    if refused:
        raise _unreachable(role, settings, "zookeeper", refused)
    connect_timeout, socket_timeout = _timeouts(settings)
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
        raise _unreachable(role, settings, "zookeeper", reason) from None
    # kazoo joins its worker threads at exit; one waiting on a server that is down would
    # hold the process for good after its work has stopped. They are daemon threads: let
    # them end with the process (``stop_zookeeper`` stops them in an orderly close).
    atexit.unregister(client.handler.stop)
    return client


def _zookeeper_version(settings: "Settings") -> str:
    client = zookeeper_client(settings, "ping")
    try:
        client.get("/")
        return "session established"
    finally:
        client.stop()
        client.close()


# --- MongoDB -------------------------------------------------------------------

def mongo_client(settings: "Settings", role: str, check: bool = True,
                 **options: Any) -> "MongoClient[Any]":
    """A pymongo MongoClient with timeouts (``options`` override them), checked with a
    ``ping``."""
    from pymongo import MongoClient
    from pymongo.errors import PyMongoError

    connect_timeout, socket_timeout = _timeouts(settings)
    client: MongoClient[Any] = MongoClient(
        settings["CRAWLCLUSTER_MONGODB_URL"],
        **{"connectTimeoutMS": int(connect_timeout * 1000),
           "serverSelectionTimeoutMS": int(connect_timeout * 1000),
           "socketTimeoutMS": int(socket_timeout * 1000),
           "appname": f"crawlcluster-{role}", **options},
    )
    if check:
        try:
            client.admin.command("ping")
        except PyMongoError as exc:
            client.close()
            raise _unreachable(role, settings, "mongodb", _first_line(exc)) from None
    return client


def _mongo_version(settings: "Settings") -> str:
    client = mongo_client(settings, "ping")
    try:
        return "mongodb " + str(client.server_info().get("version", "?"))
    finally:
        client.close()


def _first_line(exc: BaseException) -> str:
    # pymongo's server-selection errors carry a long topology description.
    return str(exc).split(" (configured timeouts", 1)[0].split("\n", 1)[0]


def _tcp_refusal(hosts: list[str], settings: "Settings") -> str | None:
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


# --- checks ----------------------------------------------------------------------

_VERSION_PROBES: dict[str, Callable[["Settings"], str]] = {
    "redis": _redis_version,
    "kafka": _kafka_version,
    "zookeeper": _zookeeper_version,
    "mongodb": _mongo_version,
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
