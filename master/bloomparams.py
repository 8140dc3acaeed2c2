"""A Bloom filter's shape and hashing: how many cells, groups and positions a URL has,
and where they are (see master/bloom.py for the filter itself)."""

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

from settings.errors import ConfigError

Scope = str | list[str]     # one crawl id for every URL of a call, or one per URL
Cells = NDArray[np.uint64]

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


def scope_of(scope: Scope, index: int) -> str:
    return scope[index] if isinstance(scope, list) else scope
