"""Pages built by JavaScript: a rule's ``render: auto`` against ``always``, and Crawlee's
``AdaptivePlaywrightCrawler`` as the peer, on the same system Chromium.

  python bench/render.py [--details-per-host N] [--rounds N]

The site: five hosts of bench/crawl.py's generated news site, one of which writes its
list and article pages with a script from a JSON endpoint (``SiteSpec.scripted_hosts``):
one page pattern in five needs a browser. nginx serves it gzipped, as most sites serve
pages. Each round crawls it four ways, one spider
process each: ours with ``render: never`` (what a crawl misses without a browser),
``always`` and ``auto``, and Crawlee's adaptive crawler (bench/render_crawlee.py, 16
at once, its own default predictor). Per
run: items stored, distinct pages fetched per second (from nginx's log, first fetch to
last), CPU ms a page (spider, browser and dispatcher; Crawlee's process and browser),
pages rendered. A run of ours that fetched a page, or a script's JSON, twice, or missed
one, stops the benchmark.

Ends with a JSON line: ``never_items_vs_always``, ``auto_items_vs_always``,
``auto_pages_per_s_vs_always``, ``auto_cpu_per_page_vs_always``,
``auto_pages_per_s_vs_crawlee_adaptive``, ``auto_cpu_per_page_vs_crawlee_adaptive``,
``auto_items_vs_crawlee_adaptive`` (medians over rounds), and each run's figures.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    bench_redis,
    bench_settings,
    drop_bench_database,
    finish,
    machine,
    require_peers,
    site_pages,
)
from bench.crawl import RULE_FOLLOWING, children_cpu_seconds, run_ours
from crawler.render import browser_path
from manager.local.services import StaticSite, free_port, require_program
from manager.local.sitegen import SiteSpec, generate_site
from manager.local.sitelog import RepeatedFetches, check_fetched_once, page_fetches
from master.crawls import RENDERED
from master.keys import Keys
from settings.clients import mongo_client

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
SCRIPTED = ("127.0.0.5",)


def measure(site, since, expected, label, ours):
    """``(distinct pages of the site fetched, seconds first fetch to last)`` of a run;
    for ours, ``expected`` (pages and the scripts' JSON) each fetched once, or if empty
    no page twice, or it stops."""
    entries = [e for e in site.access_log()[since:] if not e["path"].endswith("/robots.txt")]
    fetched = page_fetches(entries, site.port)
    try:
        check_fetched_once(fetched, expected or list(fetched), what=label)
    except RepeatedFetches as exc:
        if ours:
            raise
        print(f"    (the peer, not us: {exc})", flush=True)
    pages = sum(1 for url in fetched if not url.endswith(".json"))
    return pages, entries[-1]["time"] - entries[0]["time"]


def run_render(settings, manifest, mode, work):
    """Our crawl with ``render: mode``: ``{cpu, items, rendered}``. Its rule extracts
    the fields Crawlee's handler does, without main text."""
    crawlid = f"render-{mode}-{uuid.uuid4().hex[:6]}"
    rule = dict(RULE_FOLLOWING, render=mode, main_text=False)
    cpu = run_ours(settings, manifest, rule, 1, work, crawlid=crawlid)
    keys = Keys.from_settings(settings.copy_with(
        CRAWLCLUSTER_KEY_PREFIX=f"{settings['CRAWLCLUSTER_KEY_PREFIX']}:{crawlid}"))
    with bench_redis(settings) as client:
        rendered = int(client.hget(keys.crawl_render(crawlid), RENDERED) or 0)
    client = mongo_client(settings, "bench")
    try:
        items = client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]["items_universal"] \
            .count_documents({"crawlid": crawlid})
    finally:
        client.close()
    return {"cpu": cpu["cpu"] + cpu["master_cpu"], "items": items, "rendered": rendered}


def run_crawlee(manifest, browser, work):
    """Crawlee's adaptive crawler on the site: ``{cpu, items, rendered}``."""
    out, storage = work / f"crawlee-{uuid.uuid4().hex[:6]}.json", tempfile.mkdtemp()
    before = children_cpu_seconds()
    with open(work / "crawlee.log", "a") as log:
        subprocess.run([sys.executable, str(ROOT / "bench" / "render_crawlee.py"),
                        manifest["start_url"], browser, str(out)], cwd=storage,
                       env=dict(os.environ, CRAWLEE_STORAGE_DIR=storage),
                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                       check=True, timeout=3600)
    result = json.loads(out.read_text())
    return {"cpu": children_cpu_seconds() - before, "items": result["items"],
            "rendered": result["rendered"]}


RUNS = (("never", "ours, render never", True),
        ("always", "ours, render always", True),
        ("auto", "ours, render auto", True),
        ("crawlee_adaptive", "Crawlee AdaptivePlaywrightCrawler", False))


def one_round(settings, manifest, site, browser, work):
    """Each run of a round: ``{run: {items, pages_per_s, cpu_ms_per_page, rendered}}``."""
    pages_and_data = site_pages(manifest) + manifest["script_data"]
    results = {}
    for key, label, ours in RUNS:
        since, started = len(site.access_log()), time.monotonic()
        run = (run_render(settings, manifest, key, work) if ours
               else run_crawlee(manifest, browser, work))
        # never: the scripted host's pages it reaches depend on related links; none twice
        expected = [] if key == "never" else pages_and_data
        pages, span = measure(site, since, expected, label, ours)
        results[key] = row = {"items": run["items"], "pages_per_s": pages / span,
                              "cpu_ms_per_page": run["cpu"] * 1e3 / pages,
                              "rendered": run["rendered"]}
        print(f"  {label:<36} {pages:>5} pages in {span:6.1f} s: {row['pages_per_s']:6.1f} "
              f"pages/s, {row['cpu_ms_per_page']:6.1f} CPU ms a page, {run['items']} items, "
              f"{run['rendered']} rendered (whole run {time.monotonic() - started:.0f} s)",
              flush=True)
    drop_bench_database(settings)
    return results


def ratio(rounds, ours, peer, figure):
    values = [r[ours][figure] / r[peer][figure] for r in rounds if r[peer][figure]]
    return statistics.median(values) if values else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--details-per-host", type=int, default=200,
                        help="article pages per host (5 hosts, one scripted)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    require_peers("crawlee", "playwright")
    require_program("chromium-headless-shell", "chromium-headless-shell")
    browser = browser_path("")
    settings = bench_settings(("redis", "zookeeper", "mongodb"))
    settings = settings.copy_with(CRAWLCLUSTER_MONGODB_DATABASE="bench_"
                                  + settings["CRAWLCLUSTER_KEY_PREFIX"].split(":")[1])
    work = Path(tempfile.mkdtemp(prefix="renderbench-"))
    spec = SiteSpec(port=free_port(HOSTS), hosts=HOSTS, scripted_hosts=SCRIPTED,
                    details_per_host=args.details_per_host, related_links=5, gbk_page=False)
    manifest = generate_site(work / "site", spec)
    print(f"bench/render.py on {machine()}, {browser}: {len(site_pages(manifest))} pages on "
          f"{len(HOSTS)} hosts, {len(manifest['script_data'])} of them written by a script",
          flush=True)
    rounds = []
    with StaticSite(work / "site" / "www", HOSTS, spec.port, work / "run",
                    compress=True) as site:
        for number in range(1, args.rounds + 1):
            print(f"round {number}", flush=True)
            rounds.append(one_round(settings, manifest, site, browser, work))
    finish({
        "never_items_vs_always": ratio(rounds, "never", "always", "items"),
        "auto_items_vs_always": ratio(rounds, "auto", "always", "items"),
        "auto_pages_per_s_vs_always": ratio(rounds, "auto", "always", "pages_per_s"),
        "auto_cpu_per_page_vs_always": ratio(rounds, "auto", "always", "cpu_ms_per_page"),
        "auto_pages_per_s_vs_crawlee_adaptive": ratio(rounds, "auto", "crawlee_adaptive",
                                                      "pages_per_s"),
        "auto_cpu_per_page_vs_crawlee_adaptive": ratio(rounds, "auto", "crawlee_adaptive",
                                                       "cpu_ms_per_page"),
        "auto_items_vs_crawlee_adaptive": ratio(rounds, "auto", "crawlee_adaptive", "items"),
        "machine": machine(), "browser": browser, "rounds": rounds,
    })


if __name__ == "__main__":
    main()
