"""Every Redis key the cluster uses, as functions of one ``Keys`` object.

No other module spells a key. All keys start with the configured prefix
(``CRAWLCLUSTER_KEY_PREFIX``), so several clusters, or several tests, share
one Redis without meeting. A Lua script that touches several keys gets keys
sharing one ``{hash tag}`` so it also runs on Redis Cluster.

The README's "Redis data model" section lists each key, its type, and who
writes and reads it.
"""


class Keys:
    """Key templates under one prefix."""

    def __init__(self, prefix):
        if not prefix or any(ch in prefix for ch in " {}"):
            raise ValueError(f"key prefix must be non-empty without spaces or braces: {prefix!r}")
        self.prefix = prefix

    @classmethod
    def from_settings(cls, settings):
        return cls(settings["CRAWLCLUSTER_KEY_PREFIX"])

    def pattern(self):
        """SCAN pattern matching every key under this prefix (tests, cleanup)."""
        return f"{self.prefix}:*"

    # --- counters (master/counters.py) -------------------------------------------
    def rolling_counter(self, name):
        """zset of event times in a rolling window; member is a unique event id."""
        return f"{self.prefix}:counter:rolling:{name}"

    def step_counter(self, name, window_start):
        """zset of event times in the fixed window starting at ``window_start``."""
        return f"{self.prefix}:counter:step:{name}:{int(window_start)}"

    # --- Bloom filter (master/bloom.py) ---------------------------------------------
    def bloom_block(self, name, block):
        """string (bitmap, or 4-bit counters in counting mode): one block of a filter."""
        return f"{self.prefix}:bloom:{name}:{block}"

    def bloom_meta(self, name):
        """string (JSON): the filter's parameters, so every process uses the same."""
        return f"{self.prefix}:bloom:{name}:meta"

    # --- liveness --------------------------------------------------------------------
    def heartbeat(self, role, host):
        """string with a TTL: the role on that host is alive while it exists."""
        return f"{self.prefix}:heartbeat:{role}:{host}"
