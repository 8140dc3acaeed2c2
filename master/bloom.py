"""Multi-group Bloom filter on Redis bitmaps (thesis 4.2.3).

A URL is canonicalized (as Scrapy fingerprints it) and hashed once with BLAKE2b.
Each of the ``h`` groups of ``k`` positions comes from its own 10 bytes of that
digest, by enhanced double hashing (``h1 + i h2 + (i³ - i) / 6``); the URL is seen
only if every position of every group is set. Filters made before this used one
SHA-1 digest and plain double hashing (``h1 + i h2``) for every group: two URLs
whose ``h1, h2`` agree modulo a group's cells then agree in every group, a
false-positive floor near ``n / cells²`` per group that a small filter at a low
rate sits far above. A filter keeps the hashing it was made with (``hashing``).
Plain mode keeps a bit per position; counting mode a 4-bit counter, so URLs can
be removed again (recrawl, expiry), at four times the memory.

The bits are split into blocks, each its own Redis string, so no string nears
Redis's 512 MB limit and blocks spread over a Redis Cluster. All of a URL's
positions live in one block (chosen from the digest), and one command (a
BITFIELD, or a Lua call in counting mode) handles every URL of a batch that
falls in a block, atomically: check-and-add never lets two processes both see
a URL as new. A batch is one round trip: one command per block touched,
pipelined; positions are computed for a whole batch at once with numpy.
There are no false negatives: bits are only set (plain) and counters only
decremented for URLs found present, never below the count of URLs still
added, and never once saturated.
"""

import hashlib
import json
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import Any, cast

import numpy as np
import redis
from numpy.typing import NDArray

from master.keys import Keys
from master.lua import LuaScripts
from master.urls import url_key
from settings.clients import RedisClient, is_cluster, reread_slot_map
from settings.errors import ConfigError
from settings.loader import Settings

Scope = str | list[str]     # one crawl id for every URL of a call, or one per URL
Cells = NDArray[np.uint64]

_POWERS_OF_TEN = np.array([10 ** n for n in range(1, 20)], dtype=np.uint64)
_DIGIT_WEIGHTS = {n: np.array([10 ** (n - 1 - i) for i in range(n)], dtype=np.uint64)
                  for n in range(1, 20)}
_BIG_ENDIAN = {n: np.array([256 ** (n - 1 - i) for i in range(n)], dtype=np.uint64)
               for n in (4, 5)}
MAX_HASHES = 64           # positions per URL stay exact in Lua's doubles below this
INDEPENDENT, DOUBLE = "independent", "double"   # hashing of filters made since / before it
MAX_GROUPS = 6            # 10 digest bytes a group and 4 for the block: BLAKE2b's 64
_CUBIC = tuple((i ** 3 - i) // 6 for i in range(MAX_HASHES))



@dataclass(frozen=True)
class BloomParams:
    """A filter's shape: ``groups`` x ``hashes`` positions per URL over ``cells`` cells."""

    groups: int
    hashes: int
    group_cells: int          # cells per group per block
    blocks: int
    counting: bool = False
    hashing: str = INDEPENDENT

    def stored(self) -> dict[str, Any]:
        """The shape as stored in Redis; a filter made with double hashing is stored
        as it was before ``hashing`` existed, so it reads back the same."""
        shape = asdict(self)
        if self.hashing == DOUBLE:
            del shape["hashing"]
        return shape

    @classmethod
    def from_stored(cls, shape: dict[str, Any]) -> "BloomParams":
        """A stored shape; one without ``hashing`` was made with double hashing."""
        return cls(**{"hashing": DOUBLE, **shape})

    @classmethod
    def for_capacity(cls, capacity: int, error_rate: float, groups: int = 1,
                     counting: bool = False, block_bits: int = 1 << 30,
                     memory_slack: float = 1.1) -> "BloomParams":
        """Size for ``capacity`` URLs at ``error_rate``.

        Takes the fewest positions per URL whose memory stays within
        ``memory_slack`` of the optimal filter's (-n ln p / ln² 2 bits): each
        position costs a Redis operation, and at 0.1% six positions need only
        10% more memory than the optimal ten. The positions are spread over
        ``groups`` groups (h groups of k hashes over M/h cells give the same
        rate as one filter of M cells and h*k hashes: (1 - e^(-khn/M))^(kh)).
        """
        if capacity <= 0 or not 0 < error_rate < 1 or not 0 < groups <= MAX_GROUPS:
            raise ConfigError(f"bad Bloom sizing: capacity={capacity}, error_rate="
                              f"{error_rate}, groups={groups} (1 to {MAX_GROUPS})")
        optimal = -math.log(error_rate) / math.log(2) ** 2          # cells per URL
        for hashes in range(1, MAX_HASHES // groups + 1):
            per_url = _cells_per_url(error_rate, groups * hashes)
            if per_url <= optimal * memory_slack:
                break
        else:
            raise ConfigError(f"no Bloom shape within {memory_slack}x of optimal memory")
        total_cells = math.ceil(capacity * per_url)
        blocks = max(1, math.ceil(total_cells * (4 if counting else 1) / block_bits))
        group_cells = math.ceil(total_cells / groups / blocks)
        return cls(groups, hashes, group_cells, blocks, counting)

    @property
    def positions_per_url(self) -> int:
        return self.groups * self.hashes

    @property
    def digest_size(self) -> int:
        """Bytes of a URL's digest: SHA-1's 20 (double hashing), else 10 a group + 4."""
        return 20 if self.hashing == DOUBLE else 10 * self.groups + 4

    @property
    def block_bytes(self) -> slice:
        """Where in a digest the URL's block number is."""
        start = 10 if self.hashing == DOUBLE else 10 * self.groups
        return slice(start, start + 4)

    def digests(self, keys: Sequence[bytes]) -> bytes:
        """The digests of URL keys (``url_key``), concatenated."""
        if self.hashing == DOUBLE:
            return b"".join([hashlib.sha1(key).digest() for key in keys])
        size = self.digest_size
        return b"".join([hashlib.blake2b(key, digest_size=size).digest() for key in keys])

    @cached_property
    def layout(self) -> tuple[tuple[int, int, int, int], ...]:
        """``((group, step, added, first cell of the group), ...)`` for each position
        of a URL: its cell is ``first + (h1 + step h2 + added) % group_cells``, with
        the group's own ``h1, h2`` (double hashing: the first group's, steps counted
        over all groups, nothing added)."""
        double = self.hashing == DOUBLE
        return tuple((0 if double else i // self.hashes,
                      i if double else i % self.hashes,
                      0 if double else _CUBIC[i % self.hashes],
                      (i // self.hashes) * self.group_cells)
                     for i in range(self.positions_per_url))

    @cached_property
    def layout_arrays(self) -> tuple[NDArray[np.int64], Cells, Cells, Cells]:
        """``layout`` as four arrays, one per column."""
        group, step, added, first = zip(*self.layout, strict=True)
        return (np.array(group, dtype=np.int64), np.array(step, dtype=np.uint64),
                np.array(added, dtype=np.uint64), np.array(first, dtype=np.uint64))

    @property
    def cells(self) -> int:
        return self.groups * self.group_cells * self.blocks

    @property
    def bytes(self) -> float:
        return self.cells * (4 if self.counting else 1) / 8

    def false_positive_rate(self, urls: float) -> float:
        """Expected rate for ``urls`` stored: (1 - e^(-k n / g))^(k h)."""
        per_group_cells = self.group_cells * self.blocks
        per_group = (1 - math.exp(-self.hashes * urls / per_group_cells)) ** self.hashes
        return per_group ** self.groups

    def describe(self) -> str:
        mode = "counting (4-bit counters)" if self.counting else "plain (bits)"
        return (f"m={self.cells} cells ({self.bytes / 2**20:.1f} MiB), k={self.hashes} per group, "
                f"h={self.groups} groups, {self.blocks} block(s), {mode}")


def _cells_per_url(error_rate: float, positions: int) -> float:
    """Cells per URL a filter with this many positions per URL needs for the rate."""
    return -positions / math.log(1 - error_rate ** (1 / positions))


def positions(digest: bytes, params: BloomParams) -> tuple[int, list[int]]:
    """``(block, [cell positions])`` of a URL's digest (raw bytes, ``params.digests``).

    Group j's h1 and h2 are digest bytes 10j to 10j + 5 and 10j + 5 to 10j + 10 (double
    hashing: the first group's for all), read big-endian; the block follows them.
    bloom.lua derives the same from the hex digest.
    """
    def number(start: int) -> int:
        return int.from_bytes(digest[start:start + 5], "big")
    g = params.group_cells
    return (int.from_bytes(digest[params.block_bytes], "big") % params.blocks,
            [first + (number(10 * group) + step * number(10 * group + 5) + added) % g
             for group, step, added, first in params.layout])


def cell_arrays(digests: bytes, params: BloomParams) -> tuple[Cells, Cells]:
    """``positions`` for many digests at once (concatenated).

    Returns the block of each URL and a (URLs x positions) array of its cells.
    """
    raw = np.frombuffer(digests, dtype=np.uint8).reshape(-1, params.digest_size)
    raw = raw.astype(np.uint64)
    pairs = raw[:, :10 * (1 if params.hashing == DOUBLE else params.groups)]
    pairs = pairs.reshape(len(raw), -1, 2, 5) @ _BIG_ENDIAN[5]     # URL, group, (h1, h2)
    block = raw[:, params.block_bytes] @ _BIG_ENDIAN[4]
    group, step, added, first = params.layout_arrays
    offsets = pairs[:, group, 0] + step * pairs[:, group, 1] + added
    return block % np.uint64(params.blocks), first + offsets % np.uint64(params.group_cells)


class BloomFilter:
    """A named filter in Redis; ``add_many`` is the batched check-and-add.

    ``hash_in="client"`` (default) computes the positions here and sends plain
    BITFIELD commands; ``"lua"`` sends digests and lets bloom.lua derive them.
    ``bench/bloom.py`` measures both: the client way is several times faster,
    because Redis's Lua spends ~1 µs per position building command arguments.
    """

    def __init__(self, client: RedisClient, keys: Keys, name: str, params: BloomParams,
                 scripts: LuaScripts | None = None, hash_in: str = "client",
                 chunk: int = 200) -> None:
        if hash_in not in ("client", "lua"):
            raise ConfigError(f"hash_in must be 'client' or 'lua', got {hash_in!r}")
        self.client = client
        self.keys = keys
        self.name = name
        self.params = params
        self.scripts = scripts or LuaScripts(client)
        self.hash_in = hash_in
        self.chunk = chunk
        self._check_params()

    @classmethod
    def from_settings(cls, client: RedisClient, settings: Settings, name: str = "seen",
                      **kwargs: Any) -> "BloomFilter":
        params = BloomParams.for_capacity(
            settings.getint("CRAWLCLUSTER_BLOOM_CAPACITY"),
            settings.getfloat("CRAWLCLUSTER_BLOOM_ERROR_RATE"),
            groups=settings.getint("CRAWLCLUSTER_BLOOM_GROUPS"),
            counting=settings.getbool("CRAWLCLUSTER_BLOOM_COUNTING"),
            block_bits=settings.getint("CRAWLCLUSTER_BLOOM_BLOCK_BITS"))
        return cls(client, Keys.from_settings(settings), name, params, **kwargs)

    def _check_params(self) -> None:
        """Record the shape in Redis; refuse to open a filter made with another shape
        (but open one made with older hashing with that hashing)."""
        meta = json.dumps(self.params.stored(), sort_keys=True)
        key = self.keys.bloom_meta(self.name)
        if not self.client.set(key, meta, nx=True):
            stored = self.client.get(key)
            made = BloomParams.from_stored(json.loads(stored))
            if stored != meta and made == replace(self.params, hashing=made.hashing):
                self.params = made          # made before its hashing changed: kept
            elif stored != meta:
                raise ConfigError(f"Bloom filter {self.name!r} exists with {stored}; "
                                  f"these settings give {meta}. Clear it or match its settings.")

    def add_many(self, urls: Sequence[str], scope: Scope = "") -> list[bool]:
        """Check-and-add: for each URL, True if it was not in the filter (now it is).

        ``scope`` (a crawl id) keeps one crawl's URLs apart from another's; a
        list gives each URL its own (several crawls in one call).
        """
        if self.params.counting or self.hash_in == "lua":
            return self._run_script("add", urls, scope)
        return self._run_bitfield(urls, scope, write=True)

    def contains_many(self, urls: Sequence[str], scope: Scope = "") -> list[bool]:
        """For each URL, True if the filter holds it (or a false positive)."""
        if self.hash_in == "lua":
            return self._run_script("check", urls, scope)
        return self._run_bitfield(urls, scope, write=False)

    def remove_many(self, urls: Sequence[str], scope: Scope = "") -> list[bool]:
        """Counting mode only: remove URLs that were added; True for each removed.

        Remove only URLs you added: removing a false positive would take counts
        from the URLs sharing its cells.
        """
        if not self.params.counting:
            raise ConfigError(f"Bloom filter {self.name!r} is plain; removing needs counting mode")
        return self._run_script("remove", urls, scope)

    def add(self, url: str) -> bool:
        return self.add_many([url])[0]

    def contains(self, url: str) -> bool:
        return self.contains_many([url])[0]

    def fill(self, words_per_block: int = 256) -> tuple[float, float]:
        """``(fill ratio, URLs estimated)`` from a random sample of each block's 64-bit
        words, one BITFIELD GET per block: the share of cells set, and the URL count
        that sets that share, -(g/k) ln(1 - fill) for g cells per group and k hashes per
        group. 256 words per block estimate the fill to about ±1%."""
        cell_bits = 4 if self.params.counting else 1
        words = self.params.groups * self.params.group_cells * cell_bits // 64
        if words < 1:
            return 0.0, 0.0
        pipe = self.client.pipeline(transaction=False)
        sampled = 0
        for block in range(self.params.blocks):
            picks = random.sample(range(words), min(words, words_per_block))
            sampled += len(picks)
            args: list[Any] = []
            for word in picks:
                args += ["GET", "i64", f"#{word}"]
            pipe.execute_command("BITFIELD_RO", self.keys.bloom_block(self.name, block), *args)
        values = np.array([value for reply in pipe.execute() for value in reply],
                          dtype=np.int64).view(np.uint64)
        set_cells = _set_cells(values, cell_bits)
        ratio = set_cells / (sampled * 64 // cell_bits)
        per_group = self.params.group_cells * self.params.blocks
        urls = max(0.0, -per_group / self.params.hashes * math.log(max(1e-12, 1 - ratio)))
        return ratio, urls

    def clear(self) -> None:
        blocks = (self.keys.bloom_block(self.name, b) for b in range(self.params.blocks))
        self.client.delete(self.keys.bloom_meta(self.name), *blocks)

    # --- client hashing: one BITFIELD per block ------------------------------------

    def _run_bitfield(self, urls: Sequence[str], scope: Scope, write: bool) -> list[bool]:
        op = self.write_op if write else self.read_op
        missing = missing_from([(self, op)], urls, scope, self.chunk)[0]
        return flags(missing if write else ~missing)

    @property
    def write_op(self) -> "_Op":
        """The BITFIELD SET of one of this filter's cells (plain mode)."""
        return _SET_U1

    @property
    def read_op(self) -> "_Op":
        """The BITFIELD GET of one of this filter's cells."""
        return _GET_U4 if self.params.counting else _GET_U1

    def bitfield_commands(self, digests: bytes, start: int, op: "_Op") -> list["BlockCommand"]:
        """``[(block key, BITFIELD command in RESP, URL index of each cell it reads)]``,
        one per block, for URLs ``start``, ``start + 1``, ... whose digests (20 bytes
        each) are concatenated in ``digests``.

        The positions of a whole chunk are computed as arrays, and commands are
        packed here (see ``_Op.resp``): redis-py's generic packing costs more
        than Redis spends running them.
        """
        blocks, cells = cell_arrays(digests, self.params)
        owners = np.repeat(np.arange(start, start + len(digests) // self.params.digest_size),
                           self.params.positions_per_url)
        if self.params.blocks == 1:
            return [self._bitfield_command(0, cells.ravel(), owners, op)]
        by_block = np.repeat(blocks, self.params.positions_per_url)
        cells = cells.ravel()
        return [self._bitfield_command(block, cells[by_block == block],
                                       owners[by_block == block], op)
                for block in np.unique(blocks).tolist()]

    def _bitfield_command(self, block: int, offsets: Cells, owners: NDArray[np.int64],
                          op: "_Op") -> "BlockCommand":
        """Cells ordered by the number of digits of their offset, so each run of
        equal-length offsets is packed at once. That keeps the semantics: a
        URL's answer does not depend on the order of its own cells, and a
        repeated URL's cells still come after the first one's.
        """
        digits = np.searchsorted(_POWERS_OF_TEN, offsets, side="right") + 1
        order = np.argsort(digits, kind="stable")
        offsets, owners = offsets[order], owners[order]
        key = self.keys.bloom_block(self.name, block).encode()
        command = [b"*%d\r\n$8\r\nBITFIELD\r\n$%d\r\n%b\r\n" % (
            2 + op.args * len(offsets), len(key), key)]
        run_start = 0
        for run_digits, count in enumerate(np.bincount(digits).tolist()):
            if count:
                command.append(op.resp(offsets[run_start:run_start + count], run_digits))
                run_start += count
        return key.decode(), b"".join(command), owners

    # --- Lua: counting mode, removal, hashing in Lua ---------------------------------

    def _run_script(self, op: str, urls: Sequence[str], scope: Scope) -> list[bool]:
        by_block = self._group_by_block(urls, scope)
        pipe = self.client.pipeline(transaction=False)
        for block, (_, data) in by_block.items():
            args = self._script_args(op, data)
            self.scripts.run("bloom", [self.keys.bloom_block(self.name, block)], args, pipe=pipe)
        results = [False] * len(urls)
        for (indexes, _), flags in zip(by_block.values(), pipe.execute(), strict=True):
            for index, flag in zip(indexes, flags, strict=True):
                results[index] = bool(flag)
        return results

    def _script_args(self, op: str, data: list[Any]) -> list[Any]:
        p = self.params
        cell = "u4" if p.counting else "u1"
        input_kind = "offsets"
        if self.hash_in == "lua":
            input_kind = "digests" if p.hashing == DOUBLE else "digests-independent"
        return [op, cell, p.positions_per_url, p.hashes, p.group_cells, input_kind, *data]

    def _group_by_block(self, urls: Sequence[str],
                        scope: Scope) -> dict[int, tuple[list[int], list[Any]]]:
        """``{block: ([url indexes], [positions or digests])}``, URL order kept per block."""
        by_block: dict[int, tuple[list[int], list[Any]]] = {}
        for index, url in enumerate(urls):
            digest = self.params.digests([url_key(url, scope_of(scope, index))])
            data: list[Any]
            if self.hash_in == "lua":
                block = int.from_bytes(digest[self.params.block_bytes], "big") % self.params.blocks
                data = [digest.hex()]
            else:
                block, data = positions(digest, self.params)
            indexes, block_data = by_block.setdefault(block, ([], []))
            indexes.append(index)
            block_data.extend(data)
        return by_block


BlockCommand = tuple[str, bytes, NDArray[np.int64]]   # key, BITFIELD in RESP, URL of each cell
Sent = list[tuple[Any, NDArray[np.int64]]]             # (connection, URL of each cell read)


def flags(array: NDArray[np.bool_]) -> list[bool]:
    """A boolean array as a list (what the filters return)."""
    return cast(list[bool], array.tolist())


def _set_cells(words: NDArray[np.uint64], cell_bits: int) -> int:
    """Cells not zero in ``words``: set bits, or 4-bit counters above zero."""
    as_bytes = words.view(np.uint8)
    if cell_bits == 4:
        return int(np.count_nonzero(as_bytes & 0x0F) + np.count_nonzero(as_bytes >> 4))
    return int(np.unpackbits(as_bytes).sum())


def scope_of(scope: Scope, index: int) -> str:
    return scope[index] if isinstance(scope, list) else scope


Target = tuple["BloomFilter", "_Op"]     # a filter, and what to do with each URL's cells


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
    connections = _Connections(client)
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


class _Connections:
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


class _Op:
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


_SET_U1 = _Op(b"SET", b"u1", b"", b"\r\n$1\r\n1\r\n", args=4)
_GET_U1 = _Op(b"GET", b"u1", b"", b"\r\n", args=3)
_GET_U4 = _Op(b"GET", b"u4", b"#", b"\r\n", args=3)
