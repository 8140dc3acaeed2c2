"""Crawl benchmark: crawlcluster's spiders against vanilla Scrapy and scrapy-redis.

  python bench/crawl.py [--pages-per-host N] [--rounds N] [--shapes small real]
                        [--runs scrapy_redis ours_1 ...]

Two generated 4-host sites served by nginx: ``small`` (4,404 small pages, 20 related
links a detail page, detail pages not followed) and ``real`` (1,104 pages whose detail
pages are 20-100 KB with 150 links each, and followed, as a crawl that finds articles
through articles does). On each, every round runs in turn:
  1. vanilla Scrapy as a Scrapy user runs it (bench/crawl_vanilla.py): a ``CrawlSpider``
     with the rule's ``Rule``s and ``LinkExtractor``s, Scrapy's default settings and
     components (outside the project; the same concurrency, log level INFO), items
     inserted into MongoDB one by one as Scrapy's documentation shows; then the same with
     ``trafilatura.extract`` for each item's main text;
  2. crawlcluster's spider logic and pipelines (main text on) under Scrapy's own
     scheduler, and under scrapy-redis's scheduler and dupefilter (bench/crawl_peers.py);
  3. crawlcluster: the dispatcher and one spider process (main text on; then the same with
     the Kafka firehose on; then main text off; then off with
     ``CRAWLCLUSTER_LEAN_LINKS=false``), and with two spider processes;
  4. a plain user spider (bench/crawl_user.py: Python callbacks, ``response.follow``)
     under plain Scrapy, under scrapy-redis and on crawlcluster through the add-on, one
     process each (``user_spider_vs_scrapy_redis``, ``user_spider_redis_cpu_vs_scrapy_redis``;
     ``user_spider_vs_scrapy`` and ``user_scrapy_vs_scrapy_redis`` put them beside the
     same spider under Scrapy's own scheduler, the ceiling of a CPU-bound spider).
Pages/s is pages fetched over the time from the first to the last fetch in nginx's log
(start-up and idle shut-down are not counted). CPU per page fetched is every thread's
user + system time over the whole run: the spider processes' (``cpu_ms``; a run of ours
adds its dispatcher's as ``master_cpu_ms``), the MongoDB server's (/proc) and the Redis
server's (INFO cpu: ``redis_cpu``, in us, with ``redis_cmds``, a script's commands
counted). Runs are repeated ``--rounds`` times, interleaved (this kind of VM drifts in
speed from minute to minute); each ratio is the median of the rounds' ratios. Each round
first measures what the machine gives two CPU-bound processes at once
(``machine_two_proc_scaling``: 2.0 on two idle cores), the ceiling of
``two_proc_scaling``. The last line is one JSON object: the CPU figures of the real
shape (``cpu_ms_per_page`` ours without main text, ``vanilla_cpu_ms_per_page``,
``cpu_vs_vanilla``, ``cpu_vs_vanilla_trafilatura`` ours with main text over the
CrawlSpider with trafilatura, ``lean_cpu_vs_not_lean``), the pages/s and Redis figures
of the small shape as before (``vs_scrapy`` over the same-logic peer, ``vs_scrapy_redis``,
``two_proc_scaling``, ``redis_cpu_vs_scrapy_redis``, ``firehose_cost``: pages/s with the
firehose on over off, and ``firehose_cpu_cost``, the same for CPU per page), and every
figure of both shapes under ``shapes``. ``--runs`` keeps only the runs named (e.g.
``--runs scrapy_redis ours_1`` for the Redis figures alone); a ratio whose two runs did
not both run is null. Every run is judged by nginx's log: a page fetched twice, or not at
all, stops the benchmark with an error naming the pages (``bench.common.served_pages``);
``fetches_per_page`` is the largest, over every run of ours, of fetches over distinct
pages (1.0: each page once). Every figure per page is per distinct page.
"""

import argparse
import json
import os
import resource
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
    served_pages,
    site_pages,
)
from manager.local.crawl import Crawl, cluster_env, submit  # noqa: E402
from manager.local.ports import free_port  # noqa: E402
from manager.local.services import LocalServers  # noqa: E402
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site  # noqa: E402
from manager.local.sitelog import RepeatedFetches  # noqa: E402
from manager.local.staticsite import StaticSite  # noqa: E402
from settings.loader import default_scrapy_settings  # noqa: E402

RULE = {"rules": [
    {"allow": [r"/$", r"/list/\d+\.html$"], "follow": True},
    {"allow": [r"/news/\d+\.html$"], "follow": False,
     "fields": {"title": "//h1/text()", "date": "//span[@class='date']/text()",
                "content": "//div[@class='content']/p/text()"}},
]}
# The real-page shape: detail pages of 20-100 KB with 150 links each, and followed (a
# crawl that finds articles through articles' links, as a news crawl does).
RULE_FOLLOWING = {"rules": [RULE["rules"][0], dict(RULE["rules"][1], follow=True)]}
SHAPES = {
    "small": (lambda port, per_host: SiteSpec(port=port, details_per_host=per_host,
                                              related_links=20), RULE),
    "real": (lambda port, per_host: SiteSpec(port=port, details_per_host=per_host // 4,
                                             related_links=150, large_share=1.0,
                                             large_kb=(20, 100)), RULE_FOLLOWING),
}
# Our spider without main text (cpu_vs_vanilla compares it with a CrawlSpider without).
NO_MAIN_TEXT = {"ITEM_PIPELINES": {**default_scrapy_settings()["ITEM_PIPELINES"],
                                    "crawler.pipelines.MainTextPipeline": None}}
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


def measure(site, since, label, expected, redis_work, cpu, ours):
    """``{pages_per_s, redis_cpu, redis_cmds, cpu_ms, master_cpu_ms, mongodb_cpu_ms,
    fetches_per_page}`` of one run (Redis in us and commands, the others in CPU ms, per
    distinct page fetched). A run of ours stops the benchmark if a page of ``expected``
    (URLs) was fetched twice or not at all."""
    pages, fetches, span = served_pages(site, since, expected, label, ours)
    redis_cpu, commands = redis_work.per(pages)
    row = {"pages_per_s": pages / span, "redis_cpu": redis_cpu, "redis_cmds": commands,
           "fetches_per_page": fetches / pages,
           **{f"{name}_ms": seconds * 1e3 / pages for name, seconds in cpu.items()}}
    print(f"  {label:<44} {pages:>6} pages in {span:6.1f} s: {row['pages_per_s']:7.1f} pages/s"
          f", spiders {row['cpu_ms']:5.2f} CPU ms a page"
          + (f" (+ dispatcher {row['master_cpu_ms']:.2f})" if row.get("master_cpu_ms") else "")
          + f", MongoDB {row['mongodb_cpu_ms']:.2f}"
          + (f", Redis {redis_cpu:6.1f} CPU us and {commands:5.1f} commands" if commands >= 1
             else ""), flush=True)
    return row


def children_cpu_seconds():
    """CPU seconds (user + system) of this process's children that have exited."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu_seconds(pid):
    """CPU seconds (user + system, every thread) of a running process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_peer(settings, manifest, rule_file, scheduler, log, crawlid,
             spider_args=(), vanilla=False, python=(sys.executable,)):
    """One peer crawl; ``crawlid`` keeps its items apart from other runs' (a page stored
    twice under one crawl id would be a duplicate-key error, not an insert). ``vanilla``:
    the CrawlSpider with Scrapy's own settings (run outside the project, so none of its
    settings apply) and ``scheduler`` as the only ones given. ``python``: the command
    that runs Python (e.g. under cProfile). Returns its CPU seconds (``cpu``)."""
    if vanilla:
        scrapy_settings = dict(scheduler)
        spider, cwd = "crawl_vanilla.py", Path(tempfile.mkdtemp(prefix="vanilla-"))
    else:
        scrapy_settings = dict(COMMON, **{k: json.dumps(v) for k, v in PEER_COMPONENTS.items()})
        scrapy_settings.update(scheduler)
        spider, cwd = "crawl_peers.py", ROOT
    args = [*python, "-m", "scrapy", "runspider", str(ROOT / "bench" / spider),
            "-a", f"start={manifest['start_url']}", "-a", f"rule={rule_file}",
            "-a", f"crawlid={crawlid}", *spider_args]
    for name, value in scrapy_settings.items():
        args += ["-s", f"{name}={value}"]
    env = cluster_env(settings, fast=False, PYTHONPATH=str(ROOT))
    before = children_cpu_seconds()
    with open(log, "w") as out:
        subprocess.run(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                       stderr=subprocess.STDOUT, check=True, timeout=1800)
    return {"cpu": children_cpu_seconds() - before}


def scrapy_redis_settings(settings):
    """The Scrapy settings that make a peer scrapy-redis: its scheduler and dupefilter on
    the benchmark's Redis."""
    return {"SCHEDULER": "scrapy_redis.scheduler.Scheduler",
            "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
            "REDIS_URL": settings["CRAWLCLUSTER_REDIS_URL"],
            "SCHEDULER_FLUSH_ON_START": "True"}


def submit_own(settings, crawlid, manifest, rule, firehose):
    """Submit a crawl of the site in a frontier of its own (the key prefix and the crawl
    id) with the firehose on or off (a topic of its own); the settings of its processes."""
    settings = settings.copy_with(
        CRAWLCLUSTER_KEY_PREFIX=f"{settings['CRAWLCLUSTER_KEY_PREFIX']}:{crawlid}",
        CRAWLCLUSTER_FIREHOSE=firehose, CRAWLCLUSTER_KAFKA_ITEMS_TOPIC=f"bench.{crawlid}.items")
    submit(settings, {"crawlid": crawlid, "spider_type": "universal",
                      "url": manifest["start_url"], "rule": rule})
    return settings


def run_ours(settings, manifest, rule, processes, log_dir, firehose=False, crawlid=None,
             **extra):
    """One crawl of ours (``firehose``: every item to a Kafka topic of its own as well),
    in a frontier of its own (``settings``' key prefix and the crawl id, random unless
    given: ``…:<crawlid>``); its spiders' and its dispatcher's CPU seconds (``cpu``,
    ``master_cpu``)."""
    crawlid = crawlid or f"bench-{uuid.uuid4().hex[:6]}"
    settings = submit_own(settings, crawlid, manifest, rule, firehose)
    before = children_cpu_seconds()
    crawl = Crawl(settings, "universal", log_dir, spiders=processes,
                  CRAWLCLUSTER_IDLE_TIMEOUT=3, LOG_LEVEL="INFO", **extra)
    try:
        for worker in crawl.workers:
            worker.wait(1800)
        master = process_cpu_seconds(crawl.master.pid)
    finally:
        crawl.stop()
    codes = [worker.returncode for worker in crawl.workers]
    if any(codes):
        raise SystemExit(f"a spider failed ({codes}); see {log_dir}")
    if firehose:
        delete_topic(settings, settings["CRAWLCLUSTER_KAFKA_ITEMS_TOPIC"])
    return {"cpu": children_cpu_seconds() - before - master, "master_cpu": master}


def run_user_spider(settings, manifest, log_dir, scrapy_settings, crawlid, ours):
    """bench/crawl_user.py, a plain spider, run from outside the project (none of its
    settings apply): under scrapy-redis (``scrapy_settings`` name its scheduler), or on
    the cluster (``ours``: the add-on, a dispatcher beside it, a frontier of its own).
    Its CPU seconds (``cpu``; ours: and the dispatcher's, ``master_cpu``)."""
    if ours:
        prefix = f"{settings['CRAWLCLUSTER_KEY_PREFIX']}:{uuid.uuid4().hex[:6]}"
        settings = settings.copy_with(CRAWLCLUSTER_KEY_PREFIX=prefix)
    env = cluster_env(settings, fast=ours, PYTHONPATH=str(ROOT), CRAWLCLUSTER_IDLE_TIMEOUT=3)
    args = [sys.executable, "-m", "scrapy", "runspider", str(ROOT / "bench" / "crawl_user.py"),
            "-a", f"start={manifest['start_url']}", "-a", f"crawlid={crawlid}"]
    pipelines = {"bench.crawl_user.UserMongoPipeline": 300}
    for name, value in {**COMMON, "ITEM_PIPELINES": json.dumps(pipelines),
                        **scrapy_settings}.items():
        args += ["-s", f"{name}={value}"]
    master = None
    if ours:
        with open(Path(log_dir) / "user-master.log", "w") as log:
            master = subprocess.Popen([sys.executable, "-m", "manager.cli", "master"],
                                      cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=log)
    before = children_cpu_seconds()
    try:
        with open(Path(log_dir) / f"user-{crawlid}.log", "w") as out:
            subprocess.run(args, cwd=tempfile.mkdtemp(prefix="user-spider-"), env=env,
                           stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                           check=True, timeout=1800)
        spent = children_cpu_seconds() - before
        master_cpu = process_cpu_seconds(master.pid) if master else 0.0
    finally:
        if master is not None:
            master.terminate()
            master.wait(10)
    return {"cpu": spent, "master_cpu": master_cpu} if ours else {"cpu": spent}


def delete_topic(settings, topic):
    from settings.clients import kafka_admin

    admin = kafka_admin(settings, "bench")
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()


# Every run of a round, in order (--runs picks some).
RUNS = ("vanilla_crawl", "vanilla_crawl_trafilatura", "vanilla", "scrapy_redis", "ours_1",
        "ours_1_firehose", "ours_1_plain", "ours_1_plain_not_lean", "ours_2",
        "user_vanilla", "user_scrapy_redis", "user_ours")


def round_runs(settings, manifest, rule, work, number):
    """``(key, label, run)`` for each crawl of one round."""
    rule_file = work / f"rule-{number}.json"
    rule_file.write_text(json.dumps(rule))
    plain = work / "no-main-text.json"
    plain.write_text(json.dumps(NO_MAIN_TEXT))
    vanilla_settings = {"CONCURRENT_REQUESTS": "16", "LOG_LEVEL": "INFO", "ITEM_PIPELINES":
                        json.dumps({"bench.crawl_vanilla.VanillaMongoPipeline": 300})}
    same_logic = {"SCHEDULER": "scrapy.core.scheduler.Scheduler"}
    scrapy_redis = scrapy_redis_settings(settings)
    peer = partial(run_peer, settings, manifest, rule_file)
    ours = partial(run_ours, settings, manifest, rule)
    return [
        ("vanilla_crawl", "vanilla Scrapy: CrawlSpider, insert_one",
         partial(peer, vanilla_settings, work / "vc.log", f"vc-{number}", vanilla=True)),
        ("vanilla_crawl_trafilatura", "  the same with trafilatura.extract",
         partial(peer, vanilla_settings, work / "vt.log", f"vt-{number}",
                 ["-a", "maintext=trafilatura"], vanilla=True)),
        ("vanilla", "same spider logic, Scrapy's scheduler",
         partial(peer, same_logic, work / "v.log", f"vanilla-{number}")),
        ("scrapy_redis", "scrapy-redis (same spider logic)",
         partial(peer, scrapy_redis, work / "r.log", f"redis-{number}")),
        ("ours_1", "crawlcluster, 1 spider process",
         partial(ours, 1, work)),
        ("ours_1_firehose", "  the same with the Kafka firehose on",
         partial(ours, 1, work, firehose=True)),
        ("ours_1_plain", "  the same without main text",
         partial(ours, 1, work, CRAWLCLUSTER_SETTINGS_FILE=str(plain))),
        ("ours_1_plain_not_lean", "  the same, LinkExtractor's links",
         partial(ours, 1, work, CRAWLCLUSTER_SETTINGS_FILE=str(plain),
                 CRAWLCLUSTER_LEAN_LINKS="false")),
        ("ours_2", "crawlcluster, 2 spider processes",
         partial(ours, 2, work)),
        ("user_vanilla", "a plain user spider under plain Scrapy",
         partial(run_user_spider, settings, manifest, work, {}, f"uv-{number}",
                 ours=False)),
        ("user_scrapy_redis", "a plain user spider under scrapy-redis",
         partial(run_user_spider, settings, manifest, work, scrapy_redis, f"ur-{number}",
                 ours=False)),
        ("user_ours", "  the same spider on crawlcluster (the add-on)",
         partial(run_user_spider, settings, manifest, work,
                 {"ADDONS": json.dumps({"crawler.addon.ClusterAddon": 0})}, f"uo-{number}",
                 ours=True)),
    ]


def is_ours(run):
    """Whether a run is crawlcluster's (judged strictly by nginx's log)."""
    return run.startswith(("ours", "user_ours"))


def median_ratio(rounds, top, bottom, figure="pages_per_s"):
    """The median over the rounds of ``top``'s figure over ``bottom``'s; None unless both
    ran (``--runs``)."""
    if top not in rounds[0] or bottom not in rounds[0]:
        return None
    return statistics.median(r[top][figure] / r[bottom][figure] for r in rounds)


def figure_of(summary, run, figure):
    """A run's median figure in a shape's summary; None if it did not run."""
    return summary["runs"].get(run, {}).get(figure)


def run_shape(settings, shape, per_host, rounds_wanted, work, mongodb_pid, runs_wanted=RUNS):
    """Every round of one site shape: ``(pages, [{run key: figures}])``."""
    make_spec, rule = SHAPES[shape]
    spec = make_spec(free_port(DEFAULT_HOSTS), per_host)
    manifest = generate_site(work / f"site-{shape}", spec)
    expected = site_pages(manifest)
    pages = len(expected)
    print(f"{shape} pages: {pages} on {len(spec.hosts)} hosts, {spec.related_links} related "
          f"links a detail page" + (", 20-100 KB each, followed" if shape == "real" else ""),
          flush=True)
    rounds = []
    with bench_redis(settings) as client, \
            StaticSite(work / f"site-{shape}" / "www", spec.hosts, spec.port,
                       work / f"run-{shape}") as site:
        for number in range(1, rounds_wanted + 1):
            results = {"machine_scaling": parallel_scaling()}
            print(f"round {number} (this machine runs two CPU-bound processes at "
                  f"{results['machine_scaling']:.2f}x one)", flush=True)
            for key, label, run in round_runs(settings, manifest, rule, work, number):
                if key not in runs_wanted:
                    continue
                since = len(site.access_log())
                started, mongodb = time.monotonic(), process_cpu_seconds(mongodb_pid)
                redis_work = RedisWork(client).start()
                cpu = run()
                cpu["mongodb_cpu"] = process_cpu_seconds(mongodb_pid) - mongodb
                results[key] = measure(site, since, label, expected, redis_work, cpu,
                                       ours=is_ours(key))
                print(f"    (whole run {time.monotonic() - started:.0f} s)", flush=True)
            rounds.append(results)
            drop_bench_database(settings)
    return pages, rounds


def shape_summary(pages, rounds):
    """The medians of one shape's rounds: per run its figures, and the ratios."""
    runs = [key for key in rounds[0] if key != "machine_scaling"]
    medians = {key: {figure: statistics.median(r[key][figure] for r in rounds)
                     for figure in rounds[0][key]} for key in runs}
    return {
        "pages": pages,
        "runs": medians,
        "cpu_ms_per_page": medians.get("ours_1_plain", {}).get("cpu_ms"),
        "vanilla_cpu_ms_per_page": medians.get("vanilla_crawl", {}).get("cpu_ms"),
        "cpu_vs_vanilla": median_ratio(rounds, "ours_1_plain", "vanilla_crawl", "cpu_ms"),
        "cpu_vs_vanilla_trafilatura": median_ratio(rounds, "ours_1", "vanilla_crawl_trafilatura",
                                                   "cpu_ms"),
        "lean_cpu_vs_not_lean": median_ratio(rounds, "ours_1_plain", "ours_1_plain_not_lean",
                                             "cpu_ms"),
        "vs_vanilla_crawl": median_ratio(rounds, "ours_1_plain", "vanilla_crawl"),
        "vs_scrapy": median_ratio(rounds, "ours_1", "vanilla"),
        "vs_scrapy_redis": median_ratio(rounds, "ours_1", "scrapy_redis"),
        "two_proc_scaling": median_ratio(rounds, "ours_2", "ours_1"),
        "firehose_cost": median_ratio(rounds, "ours_1_firehose", "ours_1"),
        "firehose_cpu_cost": median_ratio(rounds, "ours_1_firehose", "ours_1", "cpu_ms"),
        "redis_cpu_vs_scrapy_redis": median_ratio(rounds, "ours_1", "scrapy_redis",
                                                  "redis_cpu"),
        "user_spider_vs_scrapy_redis": median_ratio(rounds, "user_ours", "user_scrapy_redis"),
        "user_spider_redis_cpu_vs_scrapy_redis": median_ratio(
            rounds, "user_ours", "user_scrapy_redis", "redis_cpu"),
        "user_spider_vs_scrapy": median_ratio(rounds, "user_ours", "user_vanilla"),
        "user_scrapy_vs_scrapy_redis": median_ratio(rounds, "user_vanilla", "user_scrapy_redis"),
        "fetches_per_page": max((r[key]["fetches_per_page"] for r in rounds for key in runs
                                 if is_ours(key)), default=None),
        "machine_two_proc_scaling": statistics.median(r["machine_scaling"] for r in rounds),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages-per-host", type=int, default=1000,
                        help="detail pages per host (4 hosts; a quarter of it for the real "
                             "shape)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["small", "real"])
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS),
                        help="only these runs (a ratio whose runs did not both run is null)")
    args = parser.parse_args()
    require_peers("scrapy_redis", "trafilatura")
    settings = bench_settings(("redis", "zookeeper", "mongodb", "kafka"))
    settings = settings.copy_with(CRAWLCLUSTER_MONGODB_DATABASE="bench_"
                                  + settings["CRAWLCLUSTER_KEY_PREFIX"].split(":")[1])
    mongodb_pid = LocalServers(settings).state.recorded("mongodb")["pid"]
    work = Path(tempfile.mkdtemp(prefix="crawlbench-"))
    print(f"bench/crawl.py on {machine()}: shapes {', '.join(args.shapes)}, "
          f"{args.rounds} rounds", flush=True)
    shapes = {}
    for shape in args.shapes:
        shapes[shape] = shape_summary(*run_shape(settings, shape, args.pages_per_host,
                                                 args.rounds, work, mongodb_pid, args.runs))
        print(f"{shape}: " + ", ".join(f"{name} {value:.2f}" for name, value
                                      in shapes[shape].items()
                                      if isinstance(value, float)), flush=True)
    drop_zookeeper_root(settings)
    headline = shapes.get("real") or shapes[args.shapes[0]]
    pages_shape = shapes.get("small") or headline
    finish({
        "cpu_ms_per_page": headline["cpu_ms_per_page"],
        "vanilla_cpu_ms_per_page": headline["vanilla_cpu_ms_per_page"],
        "cpu_vs_vanilla": headline["cpu_vs_vanilla"],
        "cpu_vs_vanilla_trafilatura": headline["cpu_vs_vanilla_trafilatura"],
        "lean_cpu_vs_not_lean": headline["lean_cpu_vs_not_lean"],
        "pages_per_s": figure_of(pages_shape, "ours_1", "pages_per_s"),
        "pages_per_s_two_procs": figure_of(pages_shape, "ours_2", "pages_per_s"),
        "vs_scrapy": pages_shape["vs_scrapy"],
        "vs_scrapy_redis": pages_shape["vs_scrapy_redis"],
        "two_proc_scaling": pages_shape["two_proc_scaling"],
        "firehose_cost": pages_shape["firehose_cost"],
        "firehose_cpu_cost": pages_shape["firehose_cpu_cost"],
        "redis_cpu_us_per_page": figure_of(pages_shape, "ours_1", "redis_cpu"),
        "scrapy_redis_redis_cpu_us_per_page": figure_of(pages_shape, "scrapy_redis",
                                                        "redis_cpu"),
        "redis_cmds_per_page": figure_of(pages_shape, "ours_1", "redis_cmds"),
        "scrapy_redis_redis_cmds_per_page": figure_of(pages_shape, "scrapy_redis",
                                                      "redis_cmds"),
        "redis_cpu_vs_scrapy_redis": pages_shape["redis_cpu_vs_scrapy_redis"],
        "user_spider_vs_scrapy_redis": pages_shape["user_spider_vs_scrapy_redis"],
        "user_spider_redis_cpu_vs_scrapy_redis":
            pages_shape["user_spider_redis_cpu_vs_scrapy_redis"],
        "user_spider_vs_scrapy": pages_shape["user_spider_vs_scrapy"],
        "user_scrapy_vs_scrapy_redis": pages_shape["user_scrapy_vs_scrapy_redis"],
        "machine_two_proc_scaling": pages_shape["machine_two_proc_scaling"],
        "fetches_per_page": max((shape["fetches_per_page"] for shape in shapes.values()
                                 if shape["fetches_per_page"] is not None), default=None),
        "rounds": args.rounds,
        "shapes": shapes,
        "machine": machine(),
    })


if __name__ == "__main__":
    try:
        main()
    except RepeatedFetches as exc:      # a run without a fault fetched a page twice
        sys.exit(f"bench/crawl.py: {exc}")
