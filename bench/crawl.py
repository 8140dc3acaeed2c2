"""Crawl benchmark: crawlcluster's spiders against vanilla Scrapy and scrapy-redis.

  python bench/crawl.py [--pages-per-host N]

One generated 4-host site served by nginx; the same universal rule, spider
logic, pipelines and MongoDB inserts in every run:
  1. vanilla Scrapy: one process, Scrapy's in-memory scheduler and dupefilter;
  2. scrapy-redis: one process, its Redis scheduler and SADD dupefilter;
  3. crawlcluster: the dispatcher and one spider process;
  4. crawlcluster: the dispatcher and two spider processes.
Pages/s is pages fetched over the time from the first to the last fetch in
nginx's log (start-up and idle shut-down are not counted). The four runs are
repeated ``--rounds`` times (default 5), interleaved (this kind of VM drifts in speed from
minute to minute); each ratio is the median of the rounds' ratios. The last
line is one JSON object. Redis's work is read from the server's INFO around each whole
run (start-up and idle shut-down included, every process's calls: the dispatcher's too)
and divided by the pages fetched: ``redis_cpu_us_per_page`` (user + system CPU) and
``redis_cmds_per_page`` (a script's commands counted), for one spider process and for
scrapy-redis, and ``redis_cpu_vs_scrapy_redis`` (median of the rounds' ratios); the
bench's Redis serves nothing else meanwhile. Each round first measures what the machine gives two
CPU-bound processes at once (``machine_two_proc_scaling``: 2.0 on two idle
cores; a shared VM often gives less), the ceiling of ``two_proc_scaling``.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    RedisWork,
    bench_redis,
    bench_settings,
    drop_bench_database,
    drop_zookeeper_root,
    finish,
    machine,
    parallel_scaling,
    require_peers,
)
from manager.local.crawl import Crawl, cluster_env, submit  # noqa: E402
from manager.local.services import StaticSite, free_port  # noqa: E402
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site  # noqa: E402

RULE = {"rules": [
    {"allow": [r"/$", r"/list/\d+\.html$"], "follow": True},
    {"allow": [r"/news/\d+\.html$"], "follow": False,
     "fields": {"title": "//h1/text()", "date": "//span[@class='date']/text()",
                "content": "//div[@class='content']/p/text()"}},
]}
COMMON = {"LOG_LEVEL": "INFO", "CONCURRENT_REQUESTS": "16", "CONCURRENT_ITEMS": "4"}
PEER_COMPONENTS = {
    "DOWNLOADER_MIDDLEWARES": {"crawler.middlewares.TaskStatusMiddleware": None,
                               "crawler.middlewares.StatusCounterMiddleware": None},
    "SPIDER_MIDDLEWARES": {"crawler.middlewares.TaskOutputMiddleware": None},
    "EXTENSIONS": {"crawler.extensions.GarbageCollectorTuning": None},
    "ITEM_PIPELINES": {"crawler.pipelines.EncodingPipeline": 100,
                       "crawler.pipelines.MainTextPipeline": 300,
                       "bench.crawl_peers.PeerMongoPipeline": 800},
}


def measure(site, since, label, pages_expected, redis_work):
    """``(pages/s, Redis CPU us per page, Redis commands per page)`` of one run."""
    entries = [e for e in site.access_log()[since:] if not e["path"].endswith("robots.txt")]
    span = entries[-1]["time"] - entries[0]["time"]
    rate = len(entries) / span
    cpu, commands = redis_work.per(len(entries))
    print(f"  {label:<34} {len(entries):>6} pages in {span:6.1f} s: {rate:7.1f} pages/s"
          + (f", Redis {cpu:6.1f} CPU us and {commands:5.1f} commands a page" if commands >= 1
             else "")
          + ("" if len(entries) == pages_expected else f"  (expected {pages_expected})"))
    return rate, cpu, commands


def run_peer(settings, site, manifest, rule_file, scheduler, log, crawlid):
    """One peer crawl; ``crawlid`` keeps its items apart from other runs' (a page stored
    twice under one crawl id would be a duplicate-key error, not an insert)."""
    scrapy_settings = dict(COMMON, **{k: json.dumps(v) for k, v in PEER_COMPONENTS.items()})
    scrapy_settings.update(scheduler)
    args = [sys.executable, "-m", "scrapy", "runspider", str(ROOT / "bench" / "crawl_peers.py"),
            "-a", f"start={manifest['start_url']}", "-a", f"rule={rule_file}",
            "-a", f"crawlid={crawlid}"]
    for name, value in scrapy_settings.items():
        args += ["-s", f"{name}={value}"]
    env = cluster_env(settings, fast=False)
    with open(log, "w") as out:
        subprocess.run(args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                       stderr=subprocess.STDOUT, check=True, timeout=1800)


def run_ours(settings, manifest, processes, log_dir):
    settings = settings.copy_with(  # a fresh frontier for each run
        CRAWLCLUSTER_KEY_PREFIX=f"{settings['CRAWLCLUSTER_KEY_PREFIX']}:{uuid.uuid4().hex[:6]}")
    crawlid = f"bench-{uuid.uuid4().hex[:6]}"
    submit(settings, {"crawlid": crawlid, "spider_type": "universal",
                      "url": manifest["start_url"], "rule": RULE})
    crawl = Crawl(settings, "universal", log_dir, spiders=processes,
                  CRAWLCLUSTER_IDLE_TIMEOUT=3, LOG_LEVEL="INFO")
    codes = crawl.wait(timeout=1800)
    if any(codes):
        raise SystemExit(f"a spider failed ({codes}); see {log_dir}")


def round_runs(settings, site, manifest, rule, work, number):
    """``(key, label, run)`` for each crawl of one round."""
    vanilla = {"SCHEDULER": "scrapy.core.scheduler.Scheduler"}
    scrapy_redis = {"SCHEDULER": "scrapy_redis.scheduler.Scheduler",
                    "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
                    "REDIS_URL": settings["CRAWLCLUSTER_REDIS_URL"],
                    "SCHEDULER_FLUSH_ON_START": "True"}
    return [
        ("vanilla", "vanilla Scrapy (in-memory scheduler)",
         partial(run_peer, settings, site, manifest, rule, vanilla, work / "v.log",
                 f"vanilla-{number}")),
        ("scrapy_redis", "scrapy-redis (Redis scheduler)",
         partial(run_peer, settings, site, manifest, rule, scrapy_redis, work / "r.log",
                 f"redis-{number}")),
        ("ours_1", "crawlcluster, 1 spider process",
         partial(run_ours, settings, manifest, 1, work)),
        ("ours_2", "crawlcluster, 2 spider processes",
         partial(run_ours, settings, manifest, 2, work)),
    ]


def median_ratio(rounds, top, bottom):
    return statistics.median(r[top] / r[bottom] for r in rounds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages-per-host", type=int, default=1000,
                        help="detail pages per host (4 hosts)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args()
    require_peers("scrapy_redis")
    settings = bench_settings(("redis", "zookeeper", "mongodb"))
    settings = settings.copy_with(CRAWLCLUSTER_MONGODB_DATABASE="bench_"
                                  + settings["CRAWLCLUSTER_KEY_PREFIX"].split(":")[1])
    work = Path(tempfile.mkdtemp(prefix="crawlbench-"))
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=args.pages_per_host,
                    related_links=20)
    manifest = generate_site(work / "site", spec)
    pages = sum(1 for p in manifest["pages"] if p["kind"] in ("index", "list", "detail"))
    rule = work / "rule.json"
    rule.write_text(json.dumps(RULE))
    print(f"bench/crawl.py on {machine()}: {pages} pages on {len(spec.hosts)} hosts, "
          f"20 related links per detail page, {args.rounds} rounds")
    rounds = []
    with bench_redis(settings) as client, \
            StaticSite(work / "site" / "www", spec.hosts, spec.port, work / "run") as site:
        for number in range(1, args.rounds + 1):
            runs = round_runs(settings, site, manifest, rule, work, number)
            results = {"machine_scaling": parallel_scaling()}
            print(f"round {number} (this machine runs two CPU-bound processes at "
                  f"{results['machine_scaling']:.2f}x one)")
            for key, label, run in runs:
                since = len(site.access_log())
                started = time.monotonic()
                redis_work = RedisWork(client).start()
                run()
                results[key], results[f"{key}_redis_cpu"], results[f"{key}_redis_cmds"] = (
                    measure(site, since, label, pages, redis_work))
                print(f"    (whole run {time.monotonic() - started:.0f} s)")
            rounds.append(results)
            drop_bench_database(settings)
    drop_zookeeper_root(settings)
    summary = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    ratios = {"vs_scrapy": median_ratio(rounds, "ours_1", "vanilla"),
              "vs_scrapy_redis": median_ratio(rounds, "ours_1", "scrapy_redis"),
              "two_proc_scaling": median_ratio(rounds, "ours_2", "ours_1"),
              "redis_cpu_vs_scrapy_redis": median_ratio(rounds, "ours_1_redis_cpu",
                                                        "scrapy_redis_redis_cpu")}
    print("medians: " + ", ".join(f"{name} {value:.2f}" for name, value in ratios.items())
          + " (rounds: " + "; ".join(
              ", ".join(f"{r['ours_1'] / r[b]:.2f}" for b in ("vanilla", "scrapy_redis"))
              + f", {r['ours_2'] / r['ours_1']:.2f}" for r in rounds) + ")")
    finish({
        "pages_per_s": summary["ours_1"],
        "pages_per_s_two_procs": summary["ours_2"],
        "vanilla_scrapy_pages_per_s": summary["vanilla"],
        "scrapy_redis_pages_per_s": summary["scrapy_redis"],
        "redis_cpu_us_per_page": summary["ours_1_redis_cpu"],
        "scrapy_redis_redis_cpu_us_per_page": summary["scrapy_redis_redis_cpu"],
        "redis_cmds_per_page": summary["ours_1_redis_cmds"],
        "scrapy_redis_redis_cmds_per_page": summary["scrapy_redis_redis_cmds"],
        "redis_cpu_us_per_page_two_procs": summary["ours_2_redis_cpu"],
        **ratios,
        "machine_two_proc_scaling": summary["machine_scaling"],
        "rounds": args.rounds,
        "pages": pages,
        "machine": machine(),
    })


if __name__ == "__main__":
    main()
