"""Shutdown whatever the servers are doing: every role and spider exits within
``CRAWLCLUSTER_SHUTDOWN_TIMEOUT`` of SIGTERM while ZooKeeper, Redis or Kafka is down, and
``down`` during a busy crawl leaves no process of the cluster behind (read from /proc)."""

import os
import signal
import time
from pathlib import Path

import pytest

from manager.local.cluster import manager_call
from manager.local.ports import free_port
from manager.local.processes import cluster_processes
from tests.faults.siteowner import CrawlWatch
from tests.faults.test_faults_processes import make_cluster
from tests.faults.test_faults_servers import private_server

pytestmark = pytest.mark.faults
BOUND = 8.0          # CRAWLCLUSTER_SHUTDOWN_TIMEOUT in these tests
ROLES = ("master", "preprocess", "monitor", "exporter", "manager-node1", "manager-node2")
ADDRESSES = {
    "redis": lambda: {"CRAWLCLUSTER_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"},
    "zookeeper": lambda: {"CRAWLCLUSTER_ZOOKEEPER_HOSTS": f"127.0.0.1:{free_port()}"},
    "kafka": lambda: {"CRAWLCLUSTER_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}"},
}


def gone(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def busy_cluster(settings, tmp_path, site, crawlid):
    """A two-node cluster crawling the fault site, some pages done already."""
    cluster = make_cluster(settings.copy_with(CRAWLCLUSTER_SHUTDOWN_TIMEOUT=BOUND), tmp_path)
    watch = CrawlWatch(cluster.settings, crawlid)
    try:
        watch.submit(site[0])
        watch.wait_done_at_least(40)
    except BaseException:
        cluster.down(servers=False)
        raise
    finally:
        watch.close()
    return cluster


def spider_pids(cluster):
    return [job["pid"] for node in (1, 2) for job in manager_call(
        cluster.node_settings(node), "listjobs.json?project=crawlcluster")["running"]]


@pytest.mark.parametrize("kind", sorted(ADDRESSES))
def test_shutdown_of_every_role_and_spider_while_a_server_is_down(
        test_settings, kafka_topics, zookeeper, redis, mongo_db, site, tmp_path, kind):
    server_settings, servers = private_server(test_settings, tmp_path, kind,
                                              **ADDRESSES[kind]())
    settings = test_settings.copy_with(**{name: server_settings[name]
                                          for name in ADDRESSES[kind]()})
    cluster = busy_cluster(settings, tmp_path, site, f"shutdown-{kind}")
    try:
        spiders = spider_pids(cluster)
        roles = {role: cluster.state.recorded(f"cluster-{role}")["pid"] for role in ROLES}
        servers.down([kind])
        time.sleep(3)                          # every client is retrying by now
        processes = {f"spider {pid}": pid for pid in spiders} | roles
        started = time.monotonic()
        exited = {}
        for name, pid in processes.items():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                # A spider may end on its own while its server is down (its manager
                # starts it again); a role never does.
                assert name.startswith("spider"), f"{name} exited while {kind} was down"
                exited[name] = 0.0
        while len(exited) < len(processes) and time.monotonic() - started < BOUND + 30:
            for name, pid in processes.items():
                if name not in exited and gone(pid):
                    exited[name] = time.monotonic() - started
            time.sleep(0.1)
        print(f"\n{kind} down: exited after SIGTERM in " + ", ".join(
            f"{name} {seconds:.1f} s" for name, seconds in sorted(exited.items())))
        assert set(exited) == set(processes), f"still running: {set(processes) - set(exited)}"
        # Spiders and roles within the bound; a manager waits for its spiders first.
        assert max(exited.values()) <= BOUND + 8
        assert cluster_processes(cluster.state) == []
    finally:
        cluster.down(servers=False)
        servers.down([kind])


def test_down_during_a_busy_crawl_leaves_no_leftover_process(
        test_settings, kafka_topics, zookeeper, redis, mongo_db, site, tmp_path):
    cluster = busy_cluster(test_settings, tmp_path, site, "shutdown-down")
    lines = []
    try:
        marked = cluster_processes(cluster.state)
        spiders = spider_pids(cluster)
        assert len(spiders) == 2 and {pid for pid, _ in marked} >= set(spiders)
    finally:
        cluster.out = lines.append
        started = time.monotonic()
        cluster.down(servers=False)
        took = time.monotonic() - started
    print(f"\ndown took {took:.1f} s for {len(marked)} processes; it said: {lines}")
    assert all(gone(pid) for pid, _ in marked)
    assert cluster_processes(cluster.state) == []
    assert not any("killed" in line or "leftover" in line for line in lines), lines


def test_services_status_lists_a_leftover_process(test_settings, tmp_path):
    """A process of the cluster that nothing recorded runs (a spider whose manager died
    and that has not noticed yet): status names it, down stops it before the servers."""
    import subprocess
    import sys

    from manager.local.cluster import LocalCluster
    from manager.local.processes import CLUSTER_MARK
    from manager.local.services import LocalServers

    settings = test_settings.copy_with(CRAWLCLUSTER_STATE_DIR=str(tmp_path / "state"))
    cluster = LocalCluster(settings, nodes=0)
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             env={**os.environ, CLUSTER_MARK: str(cluster.state.root)})
    try:
        lines = []
        LocalServers(settings, out=lines.append).status([])
        assert any(line.startswith("leftover") and f"pid {stray.pid}" in line
                   for line in lines), lines
        said = []
        cluster.out = said.append
        cluster.down(servers=False)
        assert stray.wait(timeout=15) is not None
        assert any(f"leftover process of this cluster (pid {stray.pid}" in line
                   for line in said), said
    finally:
        stray.kill()
        stray.wait()
