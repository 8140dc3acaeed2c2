"""Cluster benchmark: a whole local cluster against one vanilla Scrapy process.

  python bench/cluster.py [--pages-per-host N] [--procs P]

One generated 4-host site served by nginx, the same universal rule, spider
logic and MongoDB inserts:
  1. vanilla Scrapy: one process, Scrapy's in-memory scheduler;
  2. crawlcluster: ``crawlcluster up`` with P nodes of one universal spider each
     (managers, master, preprocess, monitor, servers), the crawl submitted
     through Kafka and followed with ``info`` until it drains.
Pages/s is pages fetched over the time from the first to the last fetch in
nginx's log; a page fetched twice, or not at all, stops the benchmark with an error
naming the pages. Both runs are repeated ``--rounds`` times, interleaved, each
cluster brought up afresh (this kind of VM drifts in speed from minute to
minute); the ratio is the median of the rounds' ratios. The last line is one
JSON object with ``pages_per_s``, ``pages_per_s_per_proc``,
``vs_scrapy_single`` and ``procs``.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    bench_redis,
    bench_settings,
    drop_bench_database,
    finish,
    machine,
    parallel_scaling,
    served_pages,
    site_pages,
)
from bench.crawl import COMMON, RULE, run_peer  # noqa: E402
from manager.local.cluster import LocalCluster  # noqa: E402
from manager.local.ports import free_port  # noqa: E402
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site  # noqa: E402
from manager.local.sitelog import RepeatedFetches  # noqa: E402
from manager.local.staticsite import StaticSite  # noqa: E402
from message_processing.client import RequestClient  # noqa: E402

UNTHROTTLED = {"CRAWLCLUSTER_THROTTLE_HITS": 100000, "CRAWLCLUSTER_THROTTLE_WINDOW": 1.0,
               "CRAWLCLUSTER_DISPATCH_WINDOW": 1.0, "CRAWLCLUSTER_DISPATCH_HEADROOM": 100.0,
               "CRAWLCLUSTER_DISPATCH_DEFAULT_WEIGHT": 600000}


def cluster_settings(settings, work):
    token = uuid.uuid4().hex[:6]
    return settings.copy_with(
        CRAWLCLUSTER_STATE_DIR=str(work / "state"),
        CRAWLCLUSTER_KEY_PREFIX=f"bench:{token}",
        CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC=f"bench.{token}.requests",
        CRAWLCLUSTER_KAFKA_REPLIES_TOPIC=f"bench.{token}.replies",
        CRAWLCLUSTER_KAFKA_GROUP_ID=f"bench-{token}",
        CRAWLCLUSTER_ZOOKEEPER_ROOT=f"/crawlcluster-bench/{token}",
        CRAWLCLUSTER_MANAGER_ADDRESS=f"127.0.0.1:{free_port()}",
        **UNTHROTTLED)


def run_cluster(settings, manifest, procs, crawlid):
    cluster = LocalCluster(settings, nodes=procs, procs=1, spider_types=("universal",),
                           out=lambda *_: None,
                           spider_settings=dict.fromkeys(range(1, procs + 1), COMMON))
    cluster.up()
    client = RequestClient.from_settings(settings, timeout=60)
    try:
        reply = client.ask({"type": "crawl", "userid": "bench", "crawlid": crawlid,
                            "spider_type": "universal", "url": manifest["start_url"],
                            "rule": RULE, "maxdepth": 50})
        if reply.get("status") != "accepted":
            raise SystemExit(f"crawl refused: {reply}")
        while True:
            info = client.ask({"type": "info", "userid": "bench", "crawlid": crawlid})
            print(f"\r  crawlcluster: {info.get('done', 0)} done, {info['total_pending']} "
                  "pending", end="", flush=True)
            if info["total_pending"] == 0 and info.get("done"):
                print()
                return
            time.sleep(1.0)
    finally:
        client.close()
        cluster.down(servers=False)


def pages_per_s(site, since, label, expected, ours=True):
    """Distinct pages a second of one run (a run of ours stops the benchmark if it
    fetched a page twice)."""
    pages, fetches, span = served_pages(site, since, expected, label, ours)
    print(f"  {label:<36} {pages:>6} pages in {span:6.1f} s: {pages / span:7.1f} pages/s "
          f"({fetches} fetches)", flush=True)
    return pages / span


def run_clean(settings, manifest, procs, crawlid):
    with bench_redis(settings):            # the cluster's keys go with it
        run_cluster(settings, manifest, procs, crawlid)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages-per-host", type=int, default=1000,
                        help="detail pages per host (4 hosts)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--procs", type=int, default=2, help="spider processes (one per node)")
    args = parser.parse_args()
    settings = bench_settings(("redis", "kafka", "zookeeper", "mongodb"))
    settings = settings.copy_with(CRAWLCLUSTER_MONGODB_DATABASE="bench_"
                                  + settings["CRAWLCLUSTER_KEY_PREFIX"].split(":")[1])
    work = Path(tempfile.mkdtemp(prefix="clusterbench-"))
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=args.pages_per_host,
                    related_links=20)
    manifest = generate_site(work / "site", spec)
    expected = site_pages(manifest)
    pages = len(expected)
    (work / "rule.json").write_text(json.dumps(RULE))
    print(f"bench/cluster.py on {machine()}: {pages} pages on {len(spec.hosts)} hosts; "
          f"crawlcluster with {args.procs} spider processes; {args.rounds} rounds")
    rounds = []
    with StaticSite(work / "site" / "www", spec.hosts, spec.port, work / "run") as site:
        for number in range(1, args.rounds + 1):
            scaling = parallel_scaling()
            print(f"round {number} (this machine runs two CPU-bound processes at "
                  f"{scaling:.2f}x one)")
            since = len(site.access_log())
            run_peer(settings, manifest, work / "rule.json",
                     {"SCHEDULER": "scrapy.core.scheduler.Scheduler"}, work / "vanilla.log",
                     f"vanilla-{number}")
            vanilla = pages_per_s(site, since, "vanilla Scrapy, 1 process", expected,
                                  ours=False)
            since = len(site.access_log())
            run_clean(cluster_settings(settings, work), manifest, args.procs, f"cluster-{number}")
            cluster = pages_per_s(site, since, f"crawlcluster, {args.procs} processes",
                                  expected)
            rounds.append({"vanilla": vanilla, "cluster": cluster, "machine_scaling": scaling})
            drop_bench_database(settings)
    ratios = [r["cluster"] / r["vanilla"] for r in rounds]
    print(f"median vs_scrapy_single {statistics.median(ratios):.2f} (rounds: "
          + ", ".join(f"{ratio:.2f}" for ratio in ratios) + ")")
    cluster = statistics.median(r["cluster"] for r in rounds)
    finish({"pages_per_s": cluster,
            "pages_per_s_per_proc": cluster / args.procs,
            "vanilla_scrapy_pages_per_s": statistics.median(r["vanilla"] for r in rounds),
            "vs_scrapy_single": statistics.median(ratios),
            "machine_two_proc_scaling": statistics.median(r["machine_scaling"] for r in rounds),
            "procs": args.procs, "rounds": args.rounds, "pages": pages, "machine": machine()})


if __name__ == "__main__":
    try:
        main()
    except RepeatedFetches as exc:      # a run without a fault fetched a page twice
        sys.exit(f"bench/cluster.py: {exc}")
