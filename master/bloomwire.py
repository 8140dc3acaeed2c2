"""A Bloom filter batch on the wire: one BITFIELD per block, packed here as RESP,
pipelined per Redis node, one chunk of URLs in flight while the next is hashed."""

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import redis
from numpy.typing import NDArray

from master.bloomparams import BloomParams, Cells, Scope, cell_arrays, scope_of
from master.urls import url_key
from settings.clients import RedisClient, is_cluster, reread_slot_map

if TYPE_CHECKING:
    from master.bloom import BloomFilter

_POWERS_OF_TEN = np.array([10 ** n for n in range(1, 20)], dtype=np.uint64)
_DIGIT_WEIGHTS = {n: np.array([10 ** (n - 1 - i) for i in range(n)], dtype=np.uint64)
                  for n in range(1, 20)}

BlockCommand = tuple[str, bytes, NDArray[np.int64]]   # key, BITFIELD in RESP, URL of each cell
Sent = list[tuple[Any, NDArray[np.int64]]]             # (connection, URL of each cell read)
Target = tuple["BloomFilter", "Op"]     # a filter, and what to do with each URL's cells


def flags(array: NDArray[np.bool_]) -> list[bool]:
    """A boolean array as a list (what the filters return)."""
    return cast(list[bool], array.tolist())


def block_commands(params: BloomParams, block_key: Callable[[int], str], digests: bytes,
                   start: int, op: "Op") -> list[BlockCommand]:
    """``[(block key, BITFIELD command in RESP, URL index of each cell it reads)]``,
    one per block, for URLs ``start``, ``start + 1``, ... whose digests are
    concatenated in ``digests``.

    The positions of a whole chunk are computed as arrays, and commands are
    packed here (see ``Op.resp``): redis-py's generic packing costs more
    than Redis spends running them.
    """
    blocks, cells = cell_arrays(digests, params)
    owners = np.repeat(np.arange(start, start + len(digests) // params.digest_size),
                       params.positions_per_url)
    if params.blocks == 1:
        return [_block_command(block_key(0), cells.ravel(), owners, op)]
    by_block = np.repeat(blocks, params.positions_per_url)
    cells = cells.ravel()
    return [_block_command(block_key(block), cells[by_block == block],
                           owners[by_block == block], op)
            for block in np.unique(blocks).tolist()]


def _block_command(block_key: str, offsets: Cells, owners: NDArray[np.int64],
                   op: "Op") -> BlockCommand:
    """Cells ordered by the number of digits of their offset, so each run of
    equal-length offsets is packed at once. That keeps the semantics: a
    URL's answer does not depend on the order of its own cells, and a
    repeated URL's cells still come after the first one's.
    """
    digits = np.searchsorted(_POWERS_OF_TEN, offsets, side="right") + 1
    order = np.argsort(digits, kind="stable")
    offsets, owners = offsets[order], owners[order]
    key = block_key.encode()
    command = [b"*%d\r\n$8\r\nBITFIELD\r\n$%d\r\n%b\r\n" % (
        2 + op.args * len(offsets), len(key), key)]
    run_start = 0
    for run_digits, count in enumerate(np.bincount(digits).tolist()):
        if count:
            command.append(op.resp(offsets[run_start:run_start + count], run_digits))
            run_start += count
    return block_key, b"".join(command), owners


def missing_from(targets: Sequence[Target], urls: Sequence[str], scope: Scope,
                 chunk: int) -> NDArray[np.bool_]:
    """A row per target, a column per URL: True where the target filter lacks the URL
    (one of its cells was 0 there).

    One BITFIELD per target, block and chunk, keeping one chunk in flight: the next
    chunk is hashed while Redis runs the last one. BITFIELD SET returns each bit's old
    value, so a SET target is an atomic check-and-add; a URL repeated in a command is
    missing only the first time. Every target shares the client of the first.
    """
    client = targets[0][0].client
    missing = np.zeros((len(targets), len(urls)), dtype=bool)
    connections = Connections(client)
    try:
        in_flight: deque[tuple[int, int, list[Sent]]] = deque()
        for start in range(0, len(urls), chunk):
            stop = min(start + chunk, len(urls))
            keys = [url_key(urls[index], scope_of(scope, index)) for index in range(start, stop)]
            digests: dict[tuple[str, int], bytes] = {}     # one hashing for most targets
            for bloom, _ in targets:
                shape = bloom.params.hashing, bloom.params.groups
                if shape not in digests:
                    digests[shape] = bloom.params.digests(keys)
            in_flight.append((start, stop, [
                connections.send(bloom.bitfield_commands(
                    digests[bloom.params.hashing, bloom.params.groups], start, op))
                for bloom, op in targets]))
            if len(in_flight) > 1:
                _collect(*in_flight.popleft(), missing)
        while in_flight:
            _collect(*in_flight.popleft(), missing)
    except BaseException as exc:
        connections.disconnect()   # replies may be left unread on them
        if isinstance(exc, redis.RedisError):
            reread_slot_map(client)   # a master may have moved (failover)
        raise
    finally:
        connections.release()
    return missing


def _collect(start: int, stop: int, sent: list[Sent], missing: NDArray[np.bool_]) -> None:
    """Read a chunk's replies, target by target: a URL is missing from a target if
    one of its cells there was 0."""
    for row, target in enumerate(sent):
        for conn, owners in target:
            missing[row, owners[np.asarray(conn.read_response()) == 0]] = True


class Connections:
    """Connections checked out for one batch: one for a single Redis, one per node a
    block lives on for a Redis Cluster (the client's slot map says which)."""

    def __init__(self, client: RedisClient) -> None:
        self.client = client
        self.cluster = is_cluster(client)
        self.held: dict[Any, Any] = {}             # pool -> connection

    def send(self, commands: list[BlockCommand]) -> Sent:
        """Send each ``(key, command, owners)`` on its node's connection, a node's
        commands together; ``[(connection, owners)]`` in the order sent."""
        by_conn: dict[Any, Any] = {}      # connection -> (commands, their owners)
        for key, command, owners in commands:
            packed, owners_of = by_conn.setdefault(self._connection(key), ([], []))
            packed.append(command)
            owners_of.append(owners)
        for conn, (packed, _) in by_conn.items():
            conn.send_packed_command(packed)
        return [(conn, owners) for conn, (_, owners_of) in by_conn.items()
                for owners in owners_of]

    def _connection(self, key: str) -> Any:
        if self.cluster:
            node = self.client.get_node_from_key(key)
            pool = self.client.get_redis_connection(node).connection_pool
        else:
            pool = self.client.connection_pool
        if pool not in self.held:
            self.held[pool] = pool.get_connection()
        return self.held[pool]

    def disconnect(self) -> None:
        for conn in self.held.values():
            conn.disconnect()

    def release(self) -> None:
        for pool, conn in self.held.items():
            pool.release(conn)


class Op:
    """One BITFIELD operation on a cell, as RESP around the cell's offset."""

    def __init__(self, verb: bytes, cell_type: bytes, offset_prefix: bytes, tail: bytes,
                 args: int) -> None:
        self.verb, self.cell_type, self.args = verb, cell_type, args
        self.offset_prefix = offset_prefix  # "#": the offset counts cells of the type, not bits
        self.tail = np.frombuffer(tail, dtype=np.uint8)    # RESP after the offset
        self.heads = [self._head(digits) for digits in range(len(_POWERS_OF_TEN) + 2)]

    def _head(self, digits: int) -> NDArray[np.uint8]:
        """RESP before an offset of ``digits`` digits."""
        return np.frombuffer(
            b"$%d\r\n%b\r\n$2\r\n%b\r\n$%d\r\n%b" % (
                len(self.verb), self.verb, self.cell_type,
                digits + len(self.offset_prefix), self.offset_prefix),
            dtype=np.uint8)

    def resp(self, offsets: Cells, digits: int) -> bytes:
        """The operation on each of ``offsets`` (all ``digits`` long), in RESP.

        Built as a byte matrix, a row per offset (head, decimal digits, tail):
        formatting thousands of numbers one by one in Python would cost more
        than Redis spends running the command.
        """
        head = self.heads[digits]
        rows = np.empty((len(offsets), len(head) + digits + len(self.tail)), dtype=np.uint8)
        rows[:, :len(head)] = head
        rows[:, len(head):-len(self.tail)] = offsets[:, None] // _DIGIT_WEIGHTS[digits] % 10 + 48
        rows[:, -len(self.tail):] = self.tail
        return rows.tobytes()


SET_U1 = Op(b"SET", b"u1", b"", b"\r\n$1\r\n1\r\n", args=4)
GET_U1 = Op(b"GET", b"u1", b"", b"\r\n", args=3)
GET_U4 = Op(b"GET", b"u4", b"#", b"\r\n", args=3)
