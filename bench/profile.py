"""Where a page's time goes: one spider process of ours against scrapy-redis, by component.

  python bench/profile.py [--pages-per-host N] [--firehose]

On bench/crawl.py's small shape (4 hosts, 20 related links a detail page), runs the
scrapy-redis peer (the same spider logic, scrapy-redis's scheduler and dupefilter) and
then crawlcluster (a dispatcher and one spider process; ``--firehose`` adds a third run
with the Kafka items firehose on), each spider under cProfile. Each function's own time
is put to a component by the file it is in (a built-in's, such as lxml's parser or
``json.dumps``, to its callers' components, shared as they called it); the servers'
CPU is read as bench/crawl.py reads it. Prints a table of microseconds a page
(distinct pages, from nginx's log) and ends with its JSON line. cProfile's time is wall
time, so ``waiting (epoll)`` is the time the reactor had nothing to do; the profiler
slows Python code by about half, so read the columns against each other rather than as
absolute costs (bench/crawl.py gives those).
"""

import argparse
import json
import pstats
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    RedisWork,
    bench_redis,
    bench_settings,
    drop_bench_database,
    finish,
    machine,
    require_peers,
    served_pages,
    site_pages,
)
from bench.crawl import (  # noqa: E402
    RULE,
    SHAPES,
    delete_topic,
    process_cpu_seconds,
    run_peer,
    scrapy_redis_settings,
    submit_own,
)
from manager.local.crawl import cluster_env  # noqa: E402
from manager.local.ports import free_port  # noqa: E402
from manager.local.services import LocalServers  # noqa: E402
from manager.local.sitegen import DEFAULT_HOSTS, generate_site  # noqa: E402
from manager.local.staticsite import StaticSite  # noqa: E402

# (component, path fragments of its files), first match wins; a file matching none is
# "other (standard library)".
COMPONENTS = (
    ("scheduler: scrapy-redis", ("/scrapy_redis/",)),
    ("scheduler: ours (crawler.scheduler, master client)",
     ("/crawler/scheduler/", "/master/", "/crawler/context", "/crawler/tasks",
      "/settings/clients")),
    ("redis-py", ("/redis/",)),
    ("main text", ("/crawler/maintext",)),
    ("pipelines and MongoDB (pymongo, bson)", ("/crawler/pipelines", "/bench/crawl_peers",
                                               "/pymongo/", "/bson/")),
    ("Kafka firehose (kafka-python)", ("/crawler/firehose", "/message_processing/",
                                       "/kafka/")),
    ("spider logic: rules, links, fields", ("/crawler/",)),
    ("HTML parsing (lxml, parsel, w3lib)", ("/lxml/", "/parsel/", "/w3lib/", "/cssselect/")),
    ("Scrapy", ("/scrapy/",)),
    ("Twisted", ("/twisted/",)),
    ("asyncio", ("/asyncio/", "/selectors.py")),
    ("start-up (imports)", ("<frozen importlib", "/importlib/")),
)
WAITING = "waiting (epoll)"
OTHER = "other (standard library, ...)"


def component_of(filename):
    for name, fragments in COMPONENTS:
        if any(fragment in filename for fragment in fragments):
            return name
    return OTHER


def components(profile_path):
    """Seconds of own time per component in a cProfile file. A built-in (file ``~``)
    goes to its callers' components in proportion to the time each call edge took;
    epoll's wait is ``waiting``."""
    stats = pstats.Stats(str(profile_path)).stats
    totals = {}
    for (filename, _, function), (_, _, own, _, callers) in stats.items():
        if "select.epoll" in function:
            totals[WAITING] = totals.get(WAITING, 0.0) + own
        elif filename == "~" and callers:
            edges = {caller: edge[2] for caller, edge in callers.items()}
            shared = sum(edges.values()) or 1.0
            for caller, spent in edges.items():
                name = component_of(caller[0])
                totals[name] = totals.get(name, 0.0) + own * spent / shared
        else:
            name = component_of(filename)
            totals[name] = totals.get(name, 0.0) + own
    return totals


def run_scrapy_redis(settings, manifest, work):
    """The scrapy-redis peer under cProfile: the profile's file (no servers of its own)."""
    rule_file = work / "rule.json"
    rule_file.write_text(json.dumps(RULE))
    profile = work / "scrapy_redis.prof"
    run_peer(settings, manifest, rule_file, scrapy_redis_settings(settings),
             work / "scrapy_redis.log",
             f"redis-{uuid.uuid4().hex[:6]}",
             python=(sys.executable, "-m", "cProfile", "-o", str(profile)))
    return profile, {}


def run_ours(settings, manifest, work, firehose):
    """A dispatcher and one spider under cProfile, in a frontier of their own: the
    profile's file, and the dispatcher's CPU seconds."""
    settings = submit_own(settings, f"prof-{uuid.uuid4().hex[:6]}", manifest, RULE, firehose)
    env = cluster_env(settings, CRAWLCLUSTER_IDLE_TIMEOUT=3, LOG_LEVEL="INFO")
    label = "ours_firehose" if firehose else "ours"
    profile = work / f"{label}.prof"
    with open(work / f"{label}-master.log", "w") as log:
        master = subprocess.Popen([sys.executable, "-m", "manager.cli", "master"], cwd=ROOT,
                                  env=env, stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT)
    try:
        with open(work / f"{label}.log", "w") as out:
            subprocess.run([sys.executable, "-m", "cProfile", "-o", str(profile), "-m",
                            "scrapy", "crawl", "universal", "-s", "LOG_LEVEL=INFO",
                            "-a", "_job=job0"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                           stdout=out, stderr=subprocess.STDOUT, check=True, timeout=1800)
        dispatcher = process_cpu_seconds(master.pid)
    finally:
        master.terminate()
        master.wait(10)
    if firehose:
        delete_topic(settings, settings["CRAWLCLUSTER_KAFKA_ITEMS_TOPIC"])
    return profile, {"dispatcher (CPU)": dispatcher}


def profiled_run(label, run, site, expected, client, mongodb_pid):
    """``{component: us a page}`` of one profiled run, servers included."""
    since, mongodb = len(site.access_log()), process_cpu_seconds(mongodb_pid)
    redis_work = RedisWork(client).start()
    profile, servers = run()
    pages, _, span = served_pages(site, since, expected, label, ours=label != "scrapy_redis")
    servers["Redis server (CPU)"] = redis_work.per(pages)[0] * pages / 1e6
    servers["MongoDB server (CPU)"] = process_cpu_seconds(mongodb_pid) - mongodb
    spent = {**components(profile), **servers}
    print(f"  {label}: {pages} pages in {span:.1f} s under the profiler", flush=True)
    return {"pages": pages, "pages_per_s": pages / span,
            "us_per_page": {name: seconds * 1e6 / pages for name, seconds in spent.items()}}


def print_table(runs):
    labels = list(runs)
    names = sorted({name for run in runs.values() for name in run["us_per_page"]},
                   key=lambda name: -max(run["us_per_page"].get(name, 0.0)
                                         for run in runs.values()))
    print(f"\n{'component (us a page)':<52}" + "".join(f"{label:>15}" for label in labels))
    for name in names:
        print(f"{name:<52}" + "".join(f"{runs[label]['us_per_page'].get(name, 0.0):15.0f}"
                                      for label in labels))
    print(f"{'pages/s under the profiler':<52}"
          + "".join(f"{runs[label]['pages_per_s']:15.1f}" for label in labels), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages-per-host", type=int, default=1000,
                        help="detail pages per host (4 hosts)")
    parser.add_argument("--firehose", action="store_true",
                        help="profile a third run, ours with the Kafka items firehose on")
    args = parser.parse_args()
    require_peers("scrapy_redis")
    settings = bench_settings(("redis", "zookeeper", "mongodb", "kafka"))
    settings = settings.copy_with(CRAWLCLUSTER_MONGODB_DATABASE="bench_"
                                  + settings["CRAWLCLUSTER_KEY_PREFIX"].split(":")[1])
    mongodb_pid = LocalServers(settings).state.recorded("mongodb")["pid"]
    work = Path(tempfile.mkdtemp(prefix="profilebench-"))
    spec = SHAPES["small"][0](free_port(DEFAULT_HOSTS), args.pages_per_host)
    manifest = generate_site(work / "site", spec)
    expected = site_pages(manifest)
    print(f"bench/profile.py on {machine()}: {len(expected)} pages; profiles in {work}",
          flush=True)
    plan = {"scrapy_redis": lambda: run_scrapy_redis(settings, manifest, work),
            "ours": lambda: run_ours(settings, manifest, work, firehose=False)}
    if args.firehose:
        plan["ours_firehose"] = lambda: run_ours(settings, manifest, work, firehose=True)
    runs = {}
    started = time.monotonic()
    with bench_redis(settings) as client, \
            StaticSite(work / "site" / "www", spec.hosts, spec.port, work / "run") as site:
        for label, run in plan.items():
            runs[label] = profiled_run(label, run, site, expected, client, mongodb_pid)
    drop_bench_database(settings)
    print_table(runs)
    finish({"runs": runs, "seconds": time.monotonic() - started, "machine": machine()})


if __name__ == "__main__":
    main()
