"""Soak: a local cluster crawling a large generated site to the end, every role's memory
sampled on the way.

  python bench/soak.py [--pages 1000000] [--hosts 50] [--large-share 0.02] [--nodes 2]
  python bench/soak.py --shape docs [--pages 60000] [--large-share 0.3]

The site (``manager/local/sitegen.py``): ``--pages`` detail pages over ``--hosts``
loopback hosts, served by nginx, each detail linking 5 others on any host, and a
``--large-share`` of them 50-500 KB long (their comments), as real pages can be. A
local cluster (``crawlcluster up``: master, preprocess, monitor, exporter, ``--nodes``
nodes of one universal spider each, unthrottled) crawls it from the first host's start
page through Kafka. Every 100,000 pages done (``--every``) it samples the resident
memory (``VmRSS``) of every process: each role, each manager, each spider, Redis. At
the end it checks MongoDB against the site's ground truth: every detail page stored,
once.

``--shape docs`` crawls real pages' shape instead (``manager/local/docsite.py``): a
documentation site of ``--pages`` pages on one host, each with ~340 links (a toctree of
250 pages, the indexes, cross-references by many ``#fragments``), ``--large-share`` of
the reference pages 100-300 KB, with the documentation rule; RSS is sampled every
``--every`` pages (5,000 by default for this shape, whose crawl takes about ten
minutes). At the end nginx's log shows every page fetched exactly once.

Per role: ``rss_max_mb`` (the most at any sample) and ``rss_growth_mb_per_100k`` (the
growth from the first sample to the last, per 100,000 pages: what a month-long crawl
adds). Targets: growth at most 10 MB per 100,000 pages, no spider above 250 MB. The
last line is one JSON object with ``pages``, ``missing``, ``duplicates``, those per
role, ``rss_max_mb`` (the most any spider held) and ``recycles`` (spider processes that
ended and were started again during the crawl, for their memory bound or any other
reason: 0 is the target).

Run it with the local servers stopped (``crawlcluster services down``): it starts them,
the MongoDB-wire server with an 8G storage cache (``CRAWLCLUSTER_MONGODB_LOCAL_CACHE``),
where 1G stalled every write in a run whose database already held a million items.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cluster import cluster_settings  # noqa: E402
from bench.common import (  # noqa: E402
    bench_settings,
    drop_bench_database,
    finish,
    machine,
    served_pages,
)
from bench.crawl import COMMON  # noqa: E402
from manager.local.cluster import LocalCluster  # noqa: E402
from manager.local.demo import UNIVERSAL_RULE  # noqa: E402
from manager.local.docsite import DOCS_RULE, DocsSpec, generate_docs_site  # noqa: E402
from manager.local.ports import free_port  # noqa: E402
from manager.local.sitegen import SiteSpec, generate_site  # noqa: E402
from manager.local.statedir import StateDir  # noqa: E402
from manager.local.staticsite import StaticSite  # noqa: E402
from message_processing.client import RequestClient  # noqa: E402
from settings.clients import mongo_client  # noqa: E402
from settings.procfs import resident_mb  # noqa: E402

CRAWLID = "soak"


def children(pid):
    try:
        return [int(child) for child in
                Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def processes(cluster, servers):
    """``{name: pid}``: the cluster's roles and managers, each manager's spiders, Redis
    (``servers``: the StateDir of the local servers)."""
    found = {}
    redis = servers.recorded("redis")
    if redis:
        found["redis"] = redis["pid"]
    for kind in cluster.state.recorded_kinds():
        record = cluster.state.recorded(kind)
        if record and kind.startswith("cluster-"):
            name = kind.removeprefix("cluster-")
            found[name] = record["pid"]
            if name.startswith("manager-"):
                for number, child in enumerate(children(record["pid"]), start=1):
                    found[f"spider-{name.removeprefix('manager-')}-{number}"] = child
    return found


def sample(cluster, servers):
    return {name: resident_mb(pid) for name, pid in processes(cluster, servers).items()}


def make_site(work, pages, hosts, large_share):
    host_names = tuple(f"127.0.{1 + n // 250}.{1 + n % 250}" for n in range(hosts))
    spec = SiteSpec(port=free_port(host_names[:1]), hosts=host_names,
                    details_per_host=max(1, pages // hosts), related_links=5, seed=5,
                    gbk_page=False, large_share=large_share)
    started = time.monotonic()
    manifest = generate_site(work / "site", spec, lean=True)
    print(f"  site: {len(manifest['pages']):,} pages over {hosts} hosts generated in "
          f"{time.monotonic() - started:.0f} s", flush=True)
    return spec, manifest


def make_docs_site(work, pages, large_share):
    sections = DocsSpec(port=0).sections
    spec = DocsSpec(port=free_port(["127.0.0.1"]), pages_per_section=max(1, pages // len(sections)),
                    large_share=large_share, toc_window=250)
    started = time.monotonic()
    manifest = generate_docs_site(work / "site", spec)
    print(f"  site: {len(manifest['pages']):,} documentation pages, {manifest['links']:,} "
          f"links, generated in {time.monotonic() - started:.0f} s", flush=True)
    return spec, manifest


def crawl(cluster, servers, settings, manifest, every, rule):
    """Submit the crawl, wait for it to drain; RSS samples at every ``every`` pages.
    Also ``{spider: pids}``: a spider started again on the way has two."""
    client = RequestClient.from_settings(settings, timeout=60)
    samples = []
    pids = {}
    try:
        reply = client.ask({"type": "crawl", "userid": "bench", "crawlid": CRAWLID,
                            "spider_type": "universal", "url": manifest["start_url"],
                            "rule": rule, "maxdepth": 1000})
        if reply.get("status") != "accepted":
            raise SystemExit(f"crawl refused: {reply}")
        started, next_sample = time.monotonic(), every
        while True:
            for name, pid in processes(cluster, servers).items():
                if name.startswith("spider-"):
                    pids.setdefault(name, set()).add(pid)
            info = client.ask({"type": "info", "userid": "bench", "crawlid": CRAWLID})
            done = info.get("done", 0)
            if done >= next_sample:
                samples.append((done, sample(cluster, servers)))
                print(f"\n  RSS at {done:,} pages: " + ", ".join(
                    f"{name} {rss:.0f} MB" for name, rss in sorted(samples[-1][1].items())
                    if rss is not None), flush=True)
                next_sample += every
            rate = done / max(1e-9, time.monotonic() - started)
            print(f"\r  {done:,} pages done, {info['total_pending']:,} pending, "
                  f"{rate:.0f} pages/s", end="", flush=True)
            if info["total_pending"] == 0 and done:
                samples.append((done, sample(cluster, servers)))
                print(flush=True)
                return info, samples, time.monotonic() - started, pids
            time.sleep(2.0)
    finally:
        client.close()


def check_items(settings, manifest):
    """``(missing, duplicates)``: detail pages not stored, and stored more than once.
    Read host by host through the items' (crawlid, url) index: the local MongoDB-wire
    server holds a whole answer in memory, and a million items' did not fit in 21 GB."""
    mongo = mongo_client(settings.copy_with(CRAWLCLUSTER_SOCKET_TIMEOUT=600.0), "bench")
    stored: dict[str, int] = {}
    try:
        items = mongo[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]["items_universal"]
        for host in sorted({urlsplit(page["url"]).hostname for page in manifest["pages"]}):
            prefix = f"http://{host}:"
            query = {"crawlid": CRAWLID, "url": {"$gte": prefix, "$lt": prefix[:-1] + ";"}}
            for item in items.find(query, {"url": 1, "_id": 0}).batch_size(2000):
                stored[item["url"]] = stored.get(item["url"], 0) + 1
    finally:
        mongo.close()
    details = {page["url"] for page in manifest["pages"] if page["kind"] == "detail"}
    return (len(details - set(stored)),
            sum(count - 1 for count in stored.values() if count > 1))


def per_role(samples, every):
    """``{role: {"rss_max_mb", "rss_growth_mb_per_100k"}}`` (spiders of a node as one
    role each; a process restarted on the way counts from its new start)."""
    roles = {}
    names = {name for _, values in samples for name in values}
    for name in sorted(names):
        points = [(done, values[name]) for done, values in samples
                  if values.get(name) is not None]
        if not points:
            continue
        (first_done, first), (last_done, last) = points[0], points[-1]
        growth = (last - first) * 100_000 / max(1, last_done - first_done)
        roles[name] = {"rss_max_mb": round(max(rss for _, rss in points), 1),
                       "rss_growth_mb_per_100k": round(growth, 2)}
    return roles


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("generated", "docs"), default="generated")
    parser.add_argument("--pages", type=int)
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--large-share", type=float)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--every", type=int)
    args = parser.parse_args()
    docs = args.shape == "docs"
    pages = args.pages or (60_000 if docs else 1_000_000)
    large_share = args.large_share if args.large_share is not None else (0.3 if docs else 0.02)
    every = args.every or (5_000 if docs else 100_000)
    print(f"soak: {args.shape} site of {pages:,} pages "
          f"({large_share:.0%} of {'reference pages 100-300' if docs else 'details 50-500'} KB), "
          f"{args.nodes} nodes; {machine()}", flush=True)
    os.environ.setdefault("CRAWLCLUSTER_MONGODB_LOCAL_CACHE", "8G")
    settings = bench_settings(("redis", "kafka", "zookeeper", "mongodb"))
    # A database of its own: a run that did not finish leaves its items behind.
    settings = settings.copy_with(
        CRAWLCLUSTER_MONGODB_DATABASE=f"soak_{settings['CRAWLCLUSTER_KEY_PREFIX'][-8:]}")
    servers = StateDir(settings.getpath("CRAWLCLUSTER_STATE_DIR"))
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        if docs:
            spec, manifest = make_docs_site(work, pages, large_share)
        else:
            spec, manifest = make_site(work, pages, args.hosts, large_share)
        settings = cluster_settings(settings, work)
        cluster = LocalCluster(settings, nodes=args.nodes, procs=1,
                               spider_types=("universal",), out=lambda *_: None,
                               spider_settings=dict.fromkeys(range(1, args.nodes + 1), COMMON))
        hosts = [spec.host] if docs else spec.hosts
        with StaticSite(work / "site" / "www", hosts, spec.port, work / "run") as site:
            cluster.up()
            try:
                info, samples, took, pids = crawl(cluster, servers, settings, manifest, every,
                                                  DOCS_RULE if docs else UNIVERSAL_RULE)
            finally:
                cluster.down(servers=False)
            if docs:
                fetched, _, _ = served_pages(site, 0, [p["url"] for p in manifest["pages"]],
                                             "soak")
                print(f"  nginx: {fetched:,} pages, each fetched once", flush=True)
        missing, duplicates = check_items(settings, manifest)
        drop_bench_database(settings)
    roles = per_role(samples, every)
    recycles = sum(len(started) - 1 for started in pids.values())
    for name, figures in roles.items():
        print(f"  {name:<22} max {figures['rss_max_mb']:7.1f} MB, growth "
              f"{figures['rss_growth_mb_per_100k']:6.2f} MB per 100,000 pages")
    details = sum(1 for page in manifest["pages"] if page["kind"] == "detail")
    print(f"  {info['done']:,} pages in {took:.0f} s; {details - missing:,} of {details:,} "
          f"detail pages stored, {missing} missing, {duplicates} twice; spiders started "
          f"again {recycles} times", flush=True)
    finish({"shape": args.shape, "pages": info["done"], "seconds": took, "missing": missing,
            "duplicates": duplicates, "roles": roles, "recycles": recycles,
            "rss_max_mb": max((f["rss_max_mb"] for name, f in roles.items()
                               if name.startswith("spider-")), default=None)})


if __name__ == "__main__":
    main()
