"""The key space the ``Keys`` families share: the prefix, the shards and their hash tags."""

from typing import TYPE_CHECKING, Self

from master.hashtags import DEFAULT_SHARDS, SPREAD_TAGS_UP_TO, shard_of, shard_tags

if TYPE_CHECKING:
    from settings.loader import Settings


class KeySpace:
    """Key templates under one prefix, for a frontier of ``shards`` shards."""

    def __init__(self, prefix: str, shards: int = DEFAULT_SHARDS):
        if not prefix or any(ch in prefix for ch in " {}"):
            raise ValueError(f"key prefix must be non-empty without spaces or braces: {prefix!r}")
        if not isinstance(shards, int) or shards < 1:
            raise ValueError(f"frontier shards must be a whole number >= 1, got {shards!r}")
        self.prefix = prefix
        self.shards = shards

    @classmethod
    def from_settings(cls, settings: "Settings") -> Self:
        return cls(settings["CRAWLCLUSTER_KEY_PREFIX"],
                   settings.getint("CRAWLCLUSTER_FRONTIER_SHARDS"))

    def pattern(self) -> str:
        """SCAN pattern matching every key under this prefix (tests, cleanup)."""
        return f"{self.prefix}:*"

    def shard_of(self, domain: str) -> int:
        return shard_of(domain, self.shards)

    def all_shards(self) -> range:
        return range(self.shards)

    # --- hash tags ---------------------------------------------------------------------

    @property
    def tag(self) -> str:
        """Start of the cluster-wide keys (registry, indexes, intake): one hash tag."""
        return f"{self.prefix}:{{{self.prefix}}}"

    @property
    def spread_tags(self) -> bool:
        """Are the shards' hash tags chosen to spread evenly (``shard_tags``)?"""
        return self.shards <= SPREAD_TAGS_UP_TO

    def shard_tag(self, shard: int) -> str:
        """Start of every key of one frontier shard: the shard's own hash tag."""
        if self.spread_tags and 0 <= shard < self.shards:
            return f"{self.prefix}:{{{shard_tags(self.prefix, self.shards)[shard]}}}"
        return f"{self.prefix}:{{{self.prefix}:{shard}}}"

    def hash_tag(self, key: str) -> str:
        """The hash tag of one of these keys (what Redis Cluster hashes to a slot)."""
        start = key.index("{") + 1
        return key[start:key.index("}", start)]
