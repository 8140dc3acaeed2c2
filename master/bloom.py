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

import json
import math
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from master.bloomparams import (
    DOUBLE,
    BloomParams,
    Scope,
    positions,
    scope_of,
)
from master.bloomwire import (
    GET_U1,
    GET_U4,
    SET_U1,
    BlockCommand,
    Op,
    block_commands,
    flags,
    missing_from,
)
from master.keys import Keys
from master.lua import LuaScripts
from master.urls import url_key
from settings.clients import RedisClient
from settings.errors import ConfigError
from settings.loader import Settings


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
    def write_op(self) -> Op:
        """The BITFIELD SET of one of this filter's cells (plain mode)."""
        return SET_U1

    @property
    def read_op(self) -> Op:
        """The BITFIELD GET of one of this filter's cells."""
        return GET_U4 if self.params.counting else GET_U1
    def bitfield_commands(self, digests: bytes, start: int, op: Op) -> list[BlockCommand]:
        """This filter's BITFIELD commands for a chunk of URLs (``block_commands``)."""
        return block_commands(self.params, lambda block: self.keys.bloom_block(self.name, block),
                              digests, start, op)

    # --- Lua: counting mode, removal, hashing in Lua ---------------------------------

    def _run_script(self, op: str, urls: Sequence[str], scope: Scope) -> list[bool]:
        by_block = self._group_by_block(urls, scope)
        pipe = self.client.pipeline(transaction=False)
        for block, (_, data) in by_block.items():
            args = self._script_args(op, data)
            self.scripts.run("bloom", [self.keys.bloom_block(self.name, block)], args, pipe=pipe)
        results = [False] * len(urls)
        for (indexes, _), answers in zip(by_block.values(), pipe.execute(), strict=True):
            for index, flag in zip(indexes, answers, strict=True):
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


def _set_cells(words: NDArray[np.uint64], cell_bits: int) -> int:
    """Cells not zero in ``words``: set bits, or 4-bit counters above zero."""
    as_bytes = words.view(np.uint8)
    if cell_bits == 4:
        return int(np.count_nonzero(as_bytes & 0x0F) + np.count_nonzero(as_bytes >> 4))
    return int(np.unpackbits(as_bytes).sum())
