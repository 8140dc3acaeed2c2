"""The sharded frontier on a real local Redis Cluster (3 masters, each with a replica)."""

from collections import Counter

from master.frontier import Frontier
from master.keys import Keys
from master.lua import LuaScripts, script_sources
from master.tasks import make_task
from tests.master.test_master_shards import exercise_every_script


class RecordingScripts(LuaScripts):
    def __init__(self, client):
        super().__init__(client)
        self.ran = set()

    def run(self, name, keys=(), args=(), pipe=None):
        self.ran.add(name)
        return super().run(name, keys, args, pipe=pipe)


def test_every_frontier_script_runs_on_a_redis_cluster(cluster_redis, cluster_settings):
    keys = Keys.from_settings(cluster_settings)
    scripts = RecordingScripts(cluster_redis)
    progress = exercise_every_script(cluster_redis, keys, scripts)
    assert scripts.ran == set(script_sources())
    assert progress["counts"]["done"] == 1 and progress["total_pending"] == 40 - 1 - 2


def test_a_thousand_domains_spread_over_the_masters(cluster_redis, cluster_settings):
    """64 shards, their tags chosen to spread evenly: 21 or 22 on each of 3 masters."""
    frontier = Frontier.from_settings(
        cluster_redis, cluster_settings.copy_with(CRAWLCLUSTER_FRONTIER_SHARDS=64))
    tasks = [make_task(f"http://www.site{n}.com/", "spread", "universal") for n in range(1000)]
    assert frontier.push(tasks) == [1000, 0]
    masters = {node.name: node for node in cluster_redis.get_primaries()}
    per_master = Counter()
    for name, node in masters.items():
        client = cluster_redis.get_redis_connection(node)
        shard_keys = f"{frontier.keys.prefix}:{{{frontier.keys.prefix}:*"
        per_master[name] = sum(1 for _ in client.scan_iter(match=shard_keys))
    total = sum(per_master.values())
    assert len(masters) == 3 and total >= 3 * frontier.keys.shards   # pool, pending, counts
    assert max(per_master.values()) / total <= 22 / 64, per_master
