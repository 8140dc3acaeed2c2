"""Slave nodes on their own addresses: two nodes, each in a network namespace of its own
with an address of 198.18.0.0/15, crawl a site whose nginx logs every request's source
address. A per-IP limit on one domain holds for each address, and the two addresses
together fetch more than one may. Runs with the frontier on a single Redis and on the
local Redis Cluster (reached from the namespaces through the relay, as every server is).

Making namespaces needs root (CAP_NET_ADMIN): without it this fails, in CI and out."""

import time
from collections import Counter

import pytest

from manager.local.cluster import LocalCluster
from manager.local.demo import UNIVERSAL_RULE
from manager.local.netns import NodeNetwork, server_ports
from manager.local.ports import free_port
from manager.local.sitegen import SiteSpec, generate_site
from manager.local.staticsite import StaticSite
from master.siteconfig import SiteConfig, domain_of
from message_processing.client import RequestClient

WINDOW = 2.0           # seconds
IP_HITS = 6            # requests per window one address may make to the limited domain
HITS = 40              # requests per window the whole cluster may make to it
# The throttle counts a request when a spider takes it; nginx logs it when it arrives, a
# few milliseconds later. The log is checked over windows this much shorter.
FETCH_LATENCY = 0.1


@pytest.fixture
def network(frontier_settings, tmp_path):
    net = NodeNetwork(2, site_addresses=2, server_ports=server_ports(frontier_settings),
                      log_path=tmp_path / "relay.log")
    yield net
    net.close()


@pytest.fixture
def site(network, tmp_path):
    root = tmp_path / "site"
    hosts = tuple(network.site_hosts)
    spec = SiteSpec(port=free_port(hosts), hosts=hosts, details_per_host=60, seed=5,
                    gbk_page=False)
    manifest = generate_site(root, spec)
    with StaticSite(root / "www", spec.hosts, spec.port, root / "run") as served:
        yield manifest, served


@pytest.fixture
def nodes(frontier_settings, network, kafka_topics, zookeeper, mongo_db, tmp_path):
    settings = frontier_settings.copy_with(
        CRAWLCLUSTER_STATE_DIR=str(tmp_path / "state"),
        CRAWLCLUSTER_MANAGER_ADDRESS=f"127.0.0.1:{free_port()}",
        CRAWLCLUSTER_THROTTLE_HITS=100000, CRAWLCLUSTER_THROTTLE_WINDOW=1.0,
        CRAWLCLUSTER_DISPATCH_WINDOW=1.0, CRAWLCLUSTER_IDLE_TIMEOUT=0.0)
    local = LocalCluster(settings, nodes=2, procs=1, spider_types=("universal",),
                         out=lambda *_: None, network=network)
    try:
        local.up()
        yield local
    finally:
        local.down(servers=False)


def busiest_window(times, window=WINDOW - FETCH_LATENCY):
    """The most requests within any ``window`` seconds."""
    times, most, first = sorted(times), 0, 0
    for last, when in enumerate(times):
        while when - times[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


@pytest.mark.parametrize("frontier_settings", ["redis", "redis-cluster"], indirect=True)
def test_two_namespaced_nodes_each_within_a_per_ip_limit(nodes, network, site, mongo_db,
                                                         zookeeper):
    manifest, served = site
    limited = network.site_hosts[0]
    SiteConfig.from_settings(nodes.settings, zookeeper).set_limit(
        domain_of(f"http://{limited}/"), HITS, WINDOW, ip_hits=IP_HITS)
    time.sleep(1.0)                                   # the watchers see the change
    client = RequestClient.from_settings(nodes.settings, timeout=60)
    try:
        ack = client.ask({"type": "crawl", "userid": "netns", "crawlid": "netns",
                          "spider_type": "universal", "url": manifest["start_url"],
                          "rule": UNIVERSAL_RULE, "maxdepth": 20})
        assert ack["status"] == "accepted", ack
        deadline = time.monotonic() + 240
        while not ((info := client.ask({"type": "info", "userid": "netns", "crawlid": "netns"}))
                   ["total_pending"] == 0 and info.get("done")):
            assert time.monotonic() < deadline, info
            time.sleep(1.0)
    finally:
        client.close()

    details = {p["url"] for p in manifest["pages"] if p["kind"] == "detail"}
    items = list(mongo_db["items_universal"].find({"crawlid": "netns"}, {"url": 1}))
    assert sorted(item["url"] for item in items) == sorted(details)

    log = [entry for entry in served.access_log() if entry["path"] != "/robots.txt"]
    sources = {network.address(1), network.address(2)}
    assert {entry["client"] for entry in log} == sources        # the nodes' own addresses
    on_limited = [entry for entry in log if entry["host"] == limited]
    per_source = {source: busiest_window([e["time"] for e in on_limited
                                          if e["client"] == source]) for source in sources}
    together = busiest_window([entry["time"] for entry in on_limited])
    print(f"busiest {WINDOW} s on {limited}: {per_source}, both {together}; "
          f"requests per source {Counter(e['client'] for e in on_limited)}")
    assert all(most <= IP_HITS for most in per_source.values()), per_source
    assert together > IP_HITS, together
