"""Every Redis key the cluster uses, as functions of one ``Keys`` object.

No other module spells a key. All keys start with the configured prefix
(``CRAWLCLUSTER_KEY_PREFIX``), so several clusters, or several tests, share
one Redis without meeting.

The frontier is sharded by site: a domain belongs to one of
``CRAWLCLUSTER_FRONTIER_SHARDS`` shards (``shard_of``: CRC-32 of the registered
domain), and every key of that domain's life (the shard's pool, the job queues
and throttle windows of its domains, the leases of its tasks, its crawls'
pending counts) carries the shard's hash tag ``{<prefix>:<shard>}`` (or
``{<prefix>:<shard>.<n>}``: master/hashtags.py). A Lua script touches the keys of one
shard only, so a Redis Cluster spreads the frontier over its masters. State
that spans shards (the job registry, the crawl index, the indexes of which
shards hold work) carries the cluster-wide tag ``{<prefix>}`` and is never
changed in the same script as a shard.

docs/architecture.md ("Redis data model") lists each key, its type, and who
writes and reads it.
"""

from master.keys.cluster import ClusterKeys
from master.keys.crawl import CrawlKeys
from master.keys.events import EventKeys
from master.keys.series import SeriesKeys
from master.keys.services import ServiceKeys
from master.keys.shard import ShardKeys


class Keys(ShardKeys, CrawlKeys, SeriesKeys, ClusterKeys, ServiceKeys, EventKeys):
    """Every key, one family of them to a module of this package."""


__all__ = ["Keys"]
