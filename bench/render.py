"""Pages built by JavaScript: a rule's ``render: auto`` against ``always``, and Crawlee's
``AdaptivePlaywrightCrawler`` as the peer, on the same system Chromium, on two sites.

  python bench/render.py [--shapes numeric,real] [--scale F] [--rounds N]

The sites, both served gzipped by nginx, as most sites serve pages:
- ``numeric``: five hosts of bench/crawl.py's generated news site with numbered URLs
  (``/news/17.html``), one of which writes its list and article pages with a script from
  a JSON endpoint (``SiteSpec.scripted_hosts``).
- ``real``: a magazine shaped like a real site (manager/local/blogsite.py): slugs of
  titles, authors and tags in its URLs, pages of seven templates, two stylesheets and a
  script every page loads, and a live section a script writes.

Each round crawls each site four ways, one spider process each: ours with
``render: never`` (what a crawl misses without a browser), ``always`` and ``auto``, and
Crawlee's adaptive crawler (bench/render_crawlee.py, 16 at once as ours renders 4 pages
at once of 16 requests, its own default predictor). Per run: items stored, distinct
pages fetched per second (from nginx's log, first fetch to last), CPU ms a page (ours:
spider, browser, dispatcher, and the Redis and MongoDB servers it stores in; Crawlee's
process, browser and its in-process storage), pages rendered, and the most any shared
asset was fetched per browser started; for ours, where a rendered page's wall time
went (waiting for its template's verdict, for a render slot, in the browser: the quiet
period and the throttle). A run of ours that fetched a page, or a script's JSON, twice,
or missed one, is reported with its cause (the spider's failed-render log lines, the
browsers it replaced and why) under ``repeats`` in the JSON, and the benchmark goes on;
every run of every round is printed.

Ends with a JSON line: per shape, ``never_items_vs_always``, ``auto_items_vs_always``,
``auto_pages_per_s_vs_always``, ``auto_cpu_per_page_vs_always``,
``auto_pages_per_s_vs_crawlee_adaptive``, ``auto_cpu_per_page_vs_crawlee_adaptive``,
``auto_items_vs_crawlee_adaptive``, ``auto_rendered_vs_needed`` and
``asset_fetches_max`` (medians over rounds), ``repeats`` (each run of ours that
fetched a page twice or missed one, with its cause), and each run's figures.
"""

import argparse
import json
import os
import re
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
    storage_cpu_seconds,
)
from bench.crawl import RULE_FOLLOWING, children_cpu_seconds, run_ours
from crawler.render.browser import browser_path
from manager.local.blogsite import BLOG_RULE, BlogSpec, generate_blog_site
from manager.local.installs import require_program
from manager.local.ports import free_port
from manager.local.sitegen import SiteSpec, generate_site
from manager.local.sitelog import RepeatedFetches, check_fetched_once, page_fetches
from manager.local.staticsite import StaticSite
from master.crawls import RENDERED
from master.keys import Keys
from master.urls import canonical_url
from settings.clients import mongo_client

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
SCRIPTED = ("127.0.0.5",)


def numeric_site(work, scale):
    """bench/crawl.py's news site, one host of five scripted."""
    spec = SiteSpec(port=free_port(HOSTS), hosts=HOSTS, scripted_hosts=SCRIPTED,
                    details_per_host=max(int(200 * scale), 10), related_links=5,
                    gbk_page=False)
    manifest = generate_site(work / "site-numeric", spec)
    scripted = {p["url"] for p in manifest["pages"]
                if p["host"] in SCRIPTED and p["kind"] in ("list", "detail")}
    return {"manifest": manifest, "pages": site_pages(manifest), "rule": RULE_FOLLOWING,
            "needed": len(scripted), "assets": [], "hosts": HOSTS, "port": spec.port,
            "www": work / "site-numeric" / "www", "crawlee_shape": "numeric"}


def real_site(work, scale):
    """The magazine: words in its URLs, shared assets, a scripted live section."""
    spec = BlogSpec(port=free_port(["127.0.0.1"]), articles=max(int(1000 * scale), 20),
                    live_articles=max(int(300 * scale), 15))
    manifest = generate_blog_site(work / "site-real", spec)
    return {"manifest": manifest, "pages": [p["url"] for p in manifest["pages"]],
            "rule": BLOG_RULE, "needed": sum(p["needs_browser"] for p in manifest["pages"]),
            "assets": manifest["assets"], "hosts": (spec.host,), "port": spec.port,
            "www": work / "site-real" / "www", "crawlee_shape": "real"}


SHAPES = {"numeric": numeric_site, "real": real_site}


def measure(site, since, expected, label):
    """``(nginx's fetches of the run, distinct pages, seconds first fetch to last, what
    went wrong)``: ``expected`` (pages and the scripts' JSON) each fetched once, or if
    empty no page twice; else what was not, as ``check_fetched_once`` says it."""
    entries = [e for e in site.access_log()[since:] if not e["path"].endswith("/robots.txt")]
    fetched = page_fetches(entries, site.port)
    pages_and_data = {url: count for url, count in fetched.items()
                      if "/static/" not in url}
    try:
        check_fetched_once(type(fetched)(pages_and_data), expected or None, what=label)
        problem = None
    except RepeatedFetches as exc:
        problem = str(exc)
    pages = sum(1 for url in pages_and_data if not url.endswith(".json"))
    return fetched, pages, entries[-1]["time"] - entries[0]["time"], problem


# a spider's log lines that say why a page was fetched again: a failed render (its task
# tried again), a browser replaced, a download retried
CAUSES = re.compile(r".*(rendering failed|replacing the browser|Retrying|"
                    r"crawlcluster/render/(failed|timeouts|quiet_capped|browsers_replaced)).*")


def repeat_causes(log_dir):
    """The lines of the run's spider log that say why a page was fetched again."""
    text = (log_dir / "spider0.log").read_text(errors="replace")
    return [match.group(0).strip()[:400] for match in CAUSES.finditer(text)][:50]


def closing_stats(log_dir):
    """The render figures of the run's spider, from its closing stats: browsers started,
    and the seconds its rendered pages spent (``BrowserRender._spent``)."""
    text = (log_dir / "spider0.log").read_text(errors="replace")
    browsers = re.findall(r"'crawlcluster/render/browsers': (\d+)", text)
    spent = dict(re.findall(r"'crawlcluster/render/seconds/(\w+)': ([\d.e-]+)", text))
    return int(browsers[-1]) if browsers else 0, {k: float(v) for k, v in spent.items()}


def run_render(settings, shape, mode, work):
    """Our crawl with ``render: mode``: ``{cpu, items, rendered, browsers}``. Its rule
    extracts the fields Crawlee's handler does, without main text."""
    crawlid = f"render-{mode}-{uuid.uuid4().hex[:6]}"
    rule = dict(shape["rule"], render=mode, main_text=False)
    log_dir = work / crawlid
    log_dir.mkdir()
    storage_before = storage_cpu_seconds(settings)
    cpu = run_ours(settings, shape["manifest"], rule, 1, log_dir, crawlid=crawlid)
    storage = storage_cpu_seconds(settings) - storage_before
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
    browsers, spent = closing_stats(log_dir)
    return {"cpu": cpu["cpu"] + cpu["master_cpu"] + storage, "items": items,
            "rendered": rendered, "browsers": browsers, "log_dir": log_dir,
            "seconds_per_rendered_page": {what: round(seconds / max(rendered, 1), 4)
                                          for what, seconds in spent.items()}}


def run_crawlee(shape, browser, work):
    """Crawlee's adaptive crawler on the site: ``{cpu, items, rendered, browsers}``."""
    out, storage = work / f"crawlee-{uuid.uuid4().hex[:6]}.json", tempfile.mkdtemp()
    before = children_cpu_seconds()
    with open(work / "crawlee.log", "a") as log:
        subprocess.run([sys.executable, str(ROOT / "bench" / "render_crawlee.py"),
                        shape["manifest"]["start_url"], browser, str(out),
                        shape["crawlee_shape"]], cwd=storage,
                       env=dict(os.environ, CRAWLEE_STORAGE_DIR=storage),
                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                       check=True, timeout=3600)
    result = json.loads(out.read_text())
    return {"cpu": children_cpu_seconds() - before, "items": result["items"],
            "rendered": result["rendered"], "browsers": 1, "seconds_per_rendered_page": {}}


RUNS = (("never", "ours, render never", True),
        ("always", "ours, render always", True),
        ("auto", "ours, render auto", True),
        ("crawlee_adaptive", "Crawlee AdaptivePlaywrightCrawler", False))


def asset_fetches_per_browser(fetched, assets, browsers):
    """The most any of the site's shared assets was fetched, per browser started."""
    if not assets or not browsers:
        return 0.0
    return max(fetched.get(canonical_url(url), 0) for url in assets) / browsers


def one_round(settings, shape, site, browser, work):
    """Each run of a round: ``{run: {items, pages_per_s, cpu_ms_per_page, rendered,
    asset_fetches}}``."""
    expected_all = shape["pages"] + shape["manifest"]["script_data"]
    results = {}
    for key, label, ours in RUNS:
        since, started = len(site.access_log()), time.monotonic()
        run = (run_render(settings, shape, key, work) if ours
               else run_crawlee(shape, browser, work))
        # never: the scripted pages it reaches depend on links; none twice
        expected = [] if key == "never" else expected_all
        fetched, pages, span, problem = measure(site, since, expected, label)
        results[key] = row = {
            "items": run["items"], "pages_per_s": pages / span,
            "cpu_ms_per_page": run["cpu"] * 1e3 / pages, "rendered": run["rendered"],
            "asset_fetches": asset_fetches_per_browser(fetched, shape["assets"],
                                                       run["browsers"]),
            "seconds_per_rendered_page": run["seconds_per_rendered_page"]}
        if problem and ours:
            row["repeat"] = {"fetches": problem, "causes": repeat_causes(run["log_dir"])}
            print(f"    REPEAT: {problem}\n    its cause, in the spider's log:\n      "
                  + "\n      ".join(row["repeat"]["causes"] or ["(nothing logged)"]),
                  flush=True)
        elif problem:
            print(f"    (the peer, not us: {problem})", flush=True)
        print(f"  {label:<36} {pages:>5} pages in {span:6.1f} s: {row['pages_per_s']:6.1f} "
              f"pages/s, {row['cpu_ms_per_page']:6.1f} CPU ms a page, {run['items']} items, "
              f"{run['rendered']} rendered ({shape['needed']} need it), asset fetches a "
              f"browser {row['asset_fetches']:.1f} (whole run "
              f"{time.monotonic() - started:.0f} s)", flush=True)
        if row["seconds_per_rendered_page"]:
            print("    a rendered page's wall time, s: " + ", ".join(
                f"{what} {seconds:.3f}" for what, seconds
                in sorted(row["seconds_per_rendered_page"].items())), flush=True)
    drop_bench_database(settings)
    return results


def ratio(rounds, ours, peer, figure):
    values = [r[ours][figure] / r[peer][figure] for r in rounds if r[peer][figure]]
    return statistics.median(values) if values else None


def figures(rounds, needed):
    return {
        "never_items_vs_always": ratio(rounds, "never", "always", "items"),
        "auto_items_vs_always": ratio(rounds, "auto", "always", "items"),
        "auto_pages_per_s_vs_always": ratio(rounds, "auto", "always", "pages_per_s"),
        "auto_cpu_per_page_vs_always": ratio(rounds, "auto", "always", "cpu_ms_per_page"),
        "auto_pages_per_s_vs_crawlee_adaptive": ratio(rounds, "auto", "crawlee_adaptive",
                                                      "pages_per_s"),
        "auto_cpu_per_page_vs_crawlee_adaptive": ratio(rounds, "auto", "crawlee_adaptive",
                                                       "cpu_ms_per_page"),
        "auto_items_vs_crawlee_adaptive": ratio(rounds, "auto", "crawlee_adaptive", "items"),
        "auto_rendered_vs_needed": statistics.median(
            r["auto"]["rendered"] / needed for r in rounds),
        "asset_fetches_max": max(r["auto"]["asset_fetches"] for r in rounds),
        "repeats": [dict(r[run]["repeat"], round=number, run=run)
                    for number, r in enumerate(rounds, 1) for run in r if "repeat" in r[run]],
        "rounds": rounds,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="numeric,real",
                        help="sites to crawl, of: " + ", ".join(SHAPES))
    parser.add_argument("--scale", type=float, default=1.0,
                        help="site size (1: 1,105 pages numeric, about 1,800 real, a fifth of "
                             "each written by a script)")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    require_peers("crawlee", "playwright")
    require_program("chromium-headless-shell", "chromium-headless-shell")
    browser = browser_path("")
    settings = bench_settings(("redis", "zookeeper", "mongodb"))
    settings = settings.copy_with(CRAWLCLUSTER_MONGODB_DATABASE="bench_"
                                  + settings["CRAWLCLUSTER_KEY_PREFIX"].split(":")[1],
                                  # the generated sites are on loopback
                                  CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS=["127.0.0.0/8"])
    work = Path(tempfile.mkdtemp(prefix="renderbench-"))
    summary = {"machine": machine(), "browser": browser}
    for name in args.shapes.split(","):
        shape = SHAPES[name](work, args.scale)
        print(f"bench/render.py, {name} site, on {machine()}, {browser}: {len(shape['pages'])}"
              f" pages, {shape['needed']} of them written by a script", flush=True)
        rounds = []
        with StaticSite(shape["www"], shape["hosts"], shape["port"], work / f"run-{name}",
                        compress=True) as site:
            for number in range(1, args.rounds + 1):
                print(f"round {number}", flush=True)
                rounds.append(one_round(settings, shape, site, browser, work))
        summary[name] = figures(rounds, shape["needed"])
    finish(summary)


if __name__ == "__main__":
    main()
