"""The arithmetic of the frontier's shards and Redis Cluster's hash slots: which shard a
domain belongs to, the slot a hash tag hashes to, and hash tags chosen so that a
cluster's masters hold equal shares of the shards. ``Keys`` (keys.py) spells the keys
with them."""

import binascii
import zlib
from functools import lru_cache

# Shards of a frontier unless configured otherwise (settings/defaults.py says why).
DEFAULT_SHARDS = 64
# Redis Cluster's hash slots.
CLUSTER_SLOTS = 16384
# The largest shard count whose tags are chosen to spread evenly over the slots. Above it
# chance spreads them well enough, and 1024 (the default until 2026-11-26) keeps the
# tags frontiers were made with before tags were chosen.
SPREAD_TAGS_UP_TO = 512


def cluster_slot(tag: str) -> int:
    """Redis Cluster's hash slot of a hash tag (CRC-16/XMODEM, modulo the slots)."""
    return binascii.crc_hqx(tag.encode("utf-8"), 0) % CLUSTER_SLOTS


@lru_cache(maxsize=256)
def shard_tags(prefix: str, shards: int) -> tuple[str, ...]:
    """Each shard's hash tag: ``<prefix>:<shard>``, or ``<prefix>:<shard>.<n>`` with the
    first ``n`` that puts shard i's slot in the i-th of ``shards`` equal ranges of the
    slots. Masters holding equal ranges of slots (as ``redis-cli --cluster create``
    makes them) then hold equal numbers of shards; by chance alone, the busiest of 3
    masters would hold over 40% of 64 shards four times in ten. About ``shards`` tries
    a shard: 2 ms for 64 shards, 0.1 s for 512, once per process."""
    tags = []
    for shard in range(shards):
        low, high = shard * CLUSTER_SLOTS // shards, (shard + 1) * CLUSTER_SLOTS // shards
        tag, n = f"{prefix}:{shard}", 0
        while not low <= cluster_slot(tag) < high:
            n += 1
            tag = f"{prefix}:{shard}.{n}"
        tags.append(tag)
    return tuple(tags)


def shard_of(domain: str, shards: int) -> int:
    """The shard a (registered) domain belongs to: stable across processes and
    Python versions (CRC-32, not ``hash``)."""
    return zlib.crc32(domain.encode("utf-8")) % shards
