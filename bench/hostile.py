"""Hostile site beside a normal one: what a hostile site costs a crawl of a normal one.

  python bench/hostile.py [--pages-per-host 350] [--rounds 3] [--limit 10]

Two sites served by nginx: bench/crawl.py's generated news site (4 hosts on loopback)
and a hostile site (manager/local/sitegen.py's: lying charsets, binary, huge and
malformed pages, a decompression bomb, redirect loops, redirects to a file and to no
URL, a page of thousands of links and one of invalid links, an endless calendar), to
which this adds a page that drips out slowly (on a host of its own: it holds a
connection for ~20 s), one whose script never goes quiet, and links, redirects,
scripts, images and frames aimed at private addresses: a listener on a loopback address
none of the sites uses, spelled six ways (dotted, decimal, octal, hex, short, IPv4 in
IPv6), and listeners on port 80 of the cloud metadata address, of 100.100.100.200 (the
shared address space) and of fd00::1, each added to loopback for the run where this
machine lacks it and the run is root's (``private_unlistened``: those that could not
be listened on, so unmeasured). The listeners count every connection and every request.

One spider process crawls the normal site alone (to its end), and beside the hostile
one, ``render: auto``; alone first in even rounds, beside first in odd ones; three
rounds by default, the ratio the median round's (this machine's speed drifts by a third
between runs a minute apart). Beside it, the hostile site's start page and each of its
kinds (the calendar too) is the seed of a crawl of its own: they are fetched (and, as
the first page of their crawl, sampled for rendering) from the start, while the normal
site is crawled, not after thousands of the hostile site's cheap pages; the beside run
ends once every normal page is fetched. Pages/s are the normal site's pages over the
time from the run's first request to any site to the normal site's last page. Every host
is throttled alike, 10 requests a second by default, as a crawl of real sites is (the
cluster's own default is one a second), so that the normal crawl (1,544 pages on 4
hosts) lasts longer than a render's timeout (30 s): the question is what the hostile
site's pages cost the normal site's, not how one spider process shares its CPU between
two crawls that each could use all of it. ``--limit 0`` asks that too: unthrottled, the
normal site alone keeps the process busy, and beside the hostile crawl it gets a share
of it (docs/performance.md).

The address guard allows only the sites' own addresses among private networks
(``CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS``). It allows by address, every port: 127.0.0.1
is one of the normal site's hosts, so the cluster's own servers there could be reached
as from any site on loopback; nothing here aims at them (tests/security does, from a
site that is not private).

Ends with a JSON line: ``private_requests`` and ``private_connections`` (what reached
the listeners), ``spider_alive`` (both runs' spiders stopped with exit code 0, the
beside one still running when the run ended it, in every round), ``normal_pages_done``
(the least of any run, of ``normal_pages``), ``normal_fetched_once`` (nginx's log: each
normal page once, in both runs of every round), ``hostile_seeds_fetched_meanwhile`` (in
every round each hostile seed was fetched before the normal crawl ended),
``busy_page_rendered_meanwhile`` (in every round the never-quiet page's script polled
while the normal site was crawled: it was rendered then), ``private_page_rendered`` (in
every round the browser's requests aimed at private addresses were refused: the page
aimed at them was rendered), ``browser_replacements`` by reason (``worn``: its planned
share of pages), ``browsers_started``, and by reason ``hostile_pages_refused``,
``hostile_links_refused`` and ``guard_refused`` (the spiders' stats, summed over the
rounds), and ``normal_pages_per_s_vs_alone``: the normal site's pages/s beside the
hostile site over its pages/s alone; ``rounds``: each round's pages/s alone and beside,
its ratio, the hostile site's requests while the normal one was crawled, pages
rendered, quiet waits capped, render timeouts, the browser's requests refused. The run
exits 1, naming them, when anything reached a listener, a spider died, or a normal page
was missed or fetched twice; what was left unmeasured is named too.
"""

import argparse
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    bench_redis,
    bench_settings,
    drop_bench_database,
    drop_zookeeper_root,
    finish,
    machine,
    site_pages,
)
from bench.crawl import RULE
from manager.local.crawl import Crawl, submit
from manager.local.ports import free_port
from manager.local.privatetargets import (
    PRIVATE_ADDRESSES,
    listeners,
    private_addresses,
    private_targets,
)
from manager.local.sitegen import (
    DEFAULT_HOSTS,
    HOSTILE_PAGES,
    SiteSpec,
    generate_hostile_site,
    generate_site,
)
from manager.local.sitelog import RepeatedFetches, check_fetched_once, page_fetches
from manager.local.staticsite import StaticSite
from master.urls import canonical_url
from settings.loader import default_settings

HOSTILE_HOST = "127.0.0.5"
DRIP_HOST = "127.0.0.6"              # the slow-drip page's own host: it holds a connection
RENDERED_RULE = dict(RULE, render="auto")
HOSTILE_RULE = {"rules": [{"allow": ["/hostile/"], "follow": True,
                           "fields": {"title": "//h1/text()"}}], "render": "auto"}


def add_hostile_extras(root: Path, targets: list[str]) -> tuple[list[str], list[str]]:
    """Pages aimed at private ``targets`` (base URLs), a slow-drip page and one that never
    goes quiet, in the hostile site; the paths to link from its index and their nginx
    locations."""
    folder = root / "www" / HOSTILE_HOST / "hostile"
    reach = "".join(f'<a href="{t}/hostile/link">x</a><img src="{t}/hostile/img">'
                    f'<iframe src="{t}/hostile/frame"></iframe><script>fetch('
                    f"'{t}/hostile/script',{{method:'POST'}}).catch(()=>0)</script>"
                    for t in targets)
    (folder / "private.html").write_text(f"<html><body><h1>private</h1>{reach}"
                                         "<div id='x'></div></body></html>")
    drip = root / "www" / DRIP_HOST / "hostile"
    drip.mkdir(parents=True)
    (drip / "drip.html").write_text("<html><body><h1>drip</h1>" + "x" * 40_000
                                    + "</body></html>")
    (folder / "busy.html").write_text(
        "<html><body><h1>busy</h1><div id='x'></div><script>setInterval(()=>fetch("
        "'/hostile/busy.html?poll').then(r=>r.text()).then(t=>{document.getElementById"
        "('x').textContent=t.length}),200)</script></body></html>")
    redirects = [f"to-private-{n}.html" for n in range(len(targets))]
    locations = [f'location = /hostile/{path} {{ return 302 "{target}/hostile/redirected"; }}'
                 for path, target in zip(redirects, targets, strict=True)]
    return ["private.html", "busy.html", *redirects], locations


def write_hostile_site(root: Path, port: int,
                       targets: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """The hostile site with its extras; its start URL and the URL of each of its kinds
    (the seeds of the beside run's hostile crawls), and its hosts' nginx locations."""
    manifest, locations = generate_hostile_site(root, port, HOSTILE_HOST)
    extras, more = add_hostile_extras(root, targets)
    drip = f"http://{DRIP_HOST}:{port}/hostile/drip.html"
    index = root / "www" / HOSTILE_HOST / "hostile" / "index.html"
    links = "".join(f'<a href="{path}">{path}</a>' for path in [*extras, drip])
    index.write_bytes(index.read_bytes().replace(b"</body>", links.encode() + b"</body>"))
    seeds = [manifest["start_url"], drip,
             *(manifest["base"] + path for path in [*HOSTILE_PAGES, "calendar/", *extras])]
    return seeds, {HOSTILE_HOST: locations[HOSTILE_HOST] + more,
                   DRIP_HOST: ["location = /hostile/drip.html { limit_rate 2k; }"]}


def guarded(settings, hosts):
    """``settings`` with only the sites' own addresses allowed among private networks
    (the local cluster allows all of loopback), where the address guard takes that
    setting; and whether it does."""
    if "CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS" not in default_settings():
        return settings, False
    return settings.copy_with(CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS=[
        f"{host}/32" for host in hosts]), True


def crawl_once(settings, crawls, log_dir, limit=0, until=None):
    """Submit ``crawls`` ({crawlid: (start URL, rule)}) in a frontier of their own and
    run one spider process until it is idle, or, given ``until`` (a callable), until
    that says the crawl measured is done: the rest of a hostile crawl is no figure's.
    Returns the spider's exit code, its log, and whether it was still running (not
    dead, not stopped by itself) when the run ended."""
    prefix = f"{settings['CRAWLCLUSTER_KEY_PREFIX']}:{uuid.uuid4().hex[:6]}"
    settings = settings.copy_with(CRAWLCLUSTER_KEY_PREFIX=prefix)
    for crawlid, (url, rule) in crawls.items():
        submit(settings, {"crawlid": crawlid, "spider_type": "universal", "url": url,
                          "rule": rule})
    log_dir.mkdir(parents=True)
    throttle = ({"CRAWLCLUSTER_THROTTLE_HITS": limit, "CRAWLCLUSTER_THROTTLE_WINDOW": 1}
                if limit else {})
    crawl = Crawl(settings, "universal", log_dir, CRAWLCLUSTER_IDLE_TIMEOUT=5,
                  LOG_LEVEL="INFO", **throttle)
    [spider] = crawl.workers
    alive = True
    try:
        if until is None:
            codes = crawl.wait(1800)
        else:
            deadline = time.monotonic() + 1800
            while not until() and spider.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            alive = spider.poll() is None
            codes = [stop_gracefully(spider, settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT"))]
    finally:
        crawl.stop()
        drop_bench_database(settings)     # each crawl inserts into an empty database
    return codes[0], (log_dir / "spider0.log").read_text(errors="replace"), alive


def stop_gracefully(process, bound):
    """SIGTERM, and the exit code once the process has ended: it may finish what is in
    flight (a dripping page, a render) for ``bound`` seconds; killed 15 s after that."""
    process.terminate()
    try:
        return process.wait(bound + 15)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def normal_run(site, since, pages, hostile_entries=()):
    """The normal site's figures of one run: ``(pages fetched of pages, pages/s, each
    fetched once?)``; pages/s from the run's first request to any site (robots.txt and
    the hostile site's too: hostile seeds taken first are a cost measured) to the
    normal site's last page."""
    entries = site.access_log()[since:]
    fetched = page_fetches(entries, site.port)
    try:
        check_fetched_once(fetched, pages, what="normal site")
        once = True
    except RepeatedFetches as exc:
        print(f"  {exc}", flush=True)
        once = False
    page_times = [e["time"] for e in entries if not e["path"].endswith("/robots.txt")]
    first = min([*(e["time"] for e in entries), *(e["time"] for e in hostile_entries)],
                default=0.0)
    span = max(page_times) - first if page_times else 0.0
    done = len(set(fetched) & {canonical_url(url) for url in pages})
    return done, (len(page_times) / span if span else 0.0), once


class AllFetched:
    """Whether every page of ``pages`` has been fetched from ``site`` since this was
    made, reading each new line of its log once."""

    def __init__(self, site, pages):
        self.site, self.missing = site, {canonical_url(url) for url in pages}
        log = site.run_dir / "access.log"
        self.offset = log.stat().st_size if log.exists() else 0

    def __call__(self):
        entries, self.offset = self.site.access_log_from(self.offset)
        self.missing -= set(page_fetches(entries, self.site.port))
        return not self.missing


def stat_counts(log, prefix):
    return {reason: int(count) for reason, count in
            re.findall(rf"'{re.escape(prefix)}(\w+)': (\d+)", log)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages-per-host", type=int, default=350)
    parser.add_argument("--limit", type=int, default=10,
                        help="requests a second a host, every host alike (0: unthrottled)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alone/beside pairs; the ratio is the median pair's")
    args = parser.parse_args()
    if args.rounds < 1 or args.pages_per_host < 1:
        parser.error("--rounds and --pages-per-host must be at least 1")
    print(machine(), flush=True)
    settings = bench_settings(("redis", "zookeeper", "mongodb"))
    with private_addresses() as addresses:
        private = listeners(addresses)
        try:
            figures = run(args, settings, private)
        finally:
            for listener in private.values():
                listener.close()
    failed, unmeasured = failed_checks(figures)
    for line in [*unmeasured, *failed]:
        print(line, file=sys.stderr)
    finish(figures)
    sys.exit(1 if failed else 0)


def run(args, settings, private):
    """``args.rounds`` rounds of both crawls of the normal site: the JSON line's figures;
    ``private``: the listeners."""
    targets = private_targets(private)
    settings, guard = guarded(settings, [*DEFAULT_HOSTS, HOSTILE_HOST, DRIP_HOST])
    try:
        with tempfile.TemporaryDirectory() as folder, bench_redis(settings):
            work = Path(folder)
            spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=args.pages_per_host)
            manifest = generate_site(work / "normal", spec)
            hostile_port = free_port([HOSTILE_HOST, DRIP_HOST])
            hostile_starts, locations = write_hostile_site(work / "hostile", hostile_port,
                                                          targets)
            with StaticSite(work / "normal" / "www", spec.hosts, spec.port,
                            work / "normal" / "run") as normal, \
                    StaticSite(work / "hostile" / "www", [HOSTILE_HOST, DRIP_HOST],
                               hostile_port, work / "hostile" / "run",
                               locations=locations) as hostile:
                rounds = [one_round(settings, (normal, hostile), manifest, hostile_starts,
                                    work / f"round{n}", args.limit, n)
                          for n in range(args.rounds)]
    finally:
        drop_bench_database(settings)
        drop_zookeeper_root(settings)
    return {"guard": guard, "limit_per_host": args.limit or None,
            "private_listeners": sorted(private),
            "private_unlistened": sorted(set(PRIVATE_ADDRESSES) - set(private)),
            "private_requests": sum(len(listener.hits) for listener in private.values()),
            "private_connections": sum(len(listener.connections)
                                       for listener in private.values()),
            **summary(rounds)}


def one_round(settings, sites, manifest, hostile_starts, work, limit, number):
    """The normal site crawled alone and beside the hostile one, alone first in even
    rounds and beside first in odd ones (this machine's speed drifts): pages/s of each,
    the checks of both, the beside run's figures."""
    runs = (alone_run, beside_run) if number % 2 == 0 else (beside_run, alone_run)
    figures = {}
    for run_one in runs:
        figures.update(run_one(settings, sites, manifest, hostile_starts, work, limit))
    return figures


def alone_run(settings, sites, manifest, hostile_starts, work, limit):
    """The normal site alone, to its end (the spider idle): its pages/s and checks."""
    normal, _ = sites
    pages = site_pages(manifest)
    since = len(normal.access_log())
    code, log, _ = crawl_once(settings, {"alone": (manifest["start_url"], RENDERED_RULE)},
                              work / "logs-alone", limit)
    done, rate, once = normal_run(normal, since, pages)
    return {"alone": rate, "alone_code": code, "alone_done": done, "alone_once": once,
            "alone_log": log}


def beside_run(settings, sites, manifest, hostile_starts, work, limit):
    """The normal site beside the hostile one (its start page, and each of the pages
    aimed at the browser and the guard as a seed of a crawl of its own, so that they
    are fetched, and rendered, while the normal site is crawled): its pages/s and the
    run's figures. It ends once every normal page is fetched: the hostile site's long
    tail (an endless calendar, a page of thousands of links) measures nothing after."""
    normal, hostile = sites
    pages = site_pages(manifest)
    since, hostile_since = len(normal.access_log()), len(hostile.access_log())
    crawls = {"beside": (manifest["start_url"], RENDERED_RULE),
              **{f"hostile-{n}": (url, HOSTILE_RULE) for n, url in enumerate(hostile_starts)}}
    code, log, alive = crawl_once(settings, crawls, work / "logs-beside", limit,
                                  until=AllFetched(normal, pages))
    hostile_log = hostile.access_log()[hostile_since:]
    done, beside_rate, once = normal_run(normal, since, pages, hostile_log)
    window = fetch_window(normal.access_log()[since:])
    during = [entry for entry in hostile_log if window[0] <= entry["time"] <= window[1]]
    seeds = {urlsplit(url).path for url in hostile_starts}
    missed = sorted(seeds - {entry["path"] for entry in hostile_log
                             if entry["time"] <= window[1]})
    polls = sum(entry["path"] == "/hostile/busy.html?poll" for entry in during)
    render = stat_counts(log, "crawlcluster/render/")
    print(f"  beside the hostile site: {beside_rate:.1f} pages/s; the hostile site answered "
          f"{len(during)} requests while the normal one was crawled (the never-quiet "
          f"page's script {polls} of them); the browser's requests refused: "
          f"{render.get('requests_refused', 0)}"
          + (f"; not fetched before it ended: {missed}" if missed else ""), flush=True)
    return {"code": code, "alive": alive, "log": log, "pages": len(pages), "done": done,
            "once": once, "beside": beside_rate,
            "hostile_requests_during": len(during), "hostile_seeds_missed": missed,
            "busy_polls_during": polls,
            "renders": render.get("pages", 0), "quiet_capped": render.get("quiet_capped", 0),
            "render_timeouts": render.get("timeouts", 0),
            "render_requests_refused": render.get("requests_refused", 0)}


def fetch_window(entries):
    """First and last request time of a site's log entries (robots.txt left out)."""
    times = [entry["time"] for entry in entries if not entry["path"].endswith("/robots.txt")]
    return (min(times), max(times)) if times else (0.0, 0.0)


def summary(rounds):
    """The JSON line's figures over the rounds: the ratio is the median round's (this
    machine's speed drifts by a third between runs a minute apart), each round's figures
    listed; counts are summed over the rounds, the checks hold in every round."""
    for r in rounds:
        r["ratio"] = r["beside"] / r["alone"] if r["alone"] else 0.0
    median = sorted(rounds, key=lambda r: r["ratio"])[len(rounds) // 2]

    def summed(prefix):
        total = Counter()
        for r in rounds:
            total.update(stat_counts(r["log"], prefix))
        return dict(total)

    shown = ("alone", "beside", "ratio", "hostile_requests_during", "busy_polls_during",
             "renders", "quiet_capped",
             "render_timeouts", "render_requests_refused", "hostile_seeds_missed")
    return {
        "spider_alive": all(r["code"] == 0 and r["alive"] and r["alone_code"] == 0
                            for r in rounds),
        "normal_pages": median["pages"],
        "normal_pages_done": min(min(r["done"], r["alone_done"]) for r in rounds),
        "normal_fetched_once": all(r["once"] and r["alone_once"] for r in rounds),
        "hostile_seeds_fetched_meanwhile": not any(r["hostile_seeds_missed"] for r in rounds),
        "browser_replacements": summed("crawlcluster/render/browsers_replaced/"),
        "browsers_started": sum(stat_counts(r["log"], "crawlcluster/render/").get(
            "browsers", 0) for r in rounds),
        "busy_page_rendered_meanwhile": all(r["busy_polls_during"] for r in rounds),
        "private_page_rendered": all(r["render_requests_refused"] for r in rounds),
        "hostile_pages_refused": summed("crawlcluster/pages/refused/"),
        "guard_refused": summed("urlguard/refused/"),
        "hostile_links_refused": summed("crawlcluster/links/refused/"),
        "rounds": [{key: (round(r[key], 3) if isinstance(r[key], float) else r[key])
                    for key in shown} for r in rounds],
        "normal_pages_per_s_alone": median["alone"],
        "normal_pages_per_s_beside": median["beside"],
        "normal_pages_per_s_vs_alone": median["ratio"],
    }


def failed_checks(figures):
    """What the run shows that it must not (the benchmark exits 1 on any), then what
    leaves part of it unmeasured (told, not failed): each as a line."""
    must = {"private_requests": figures["private_requests"] == 0,
            "private_connections": figures["private_connections"] == 0,
            "spider_alive": figures["spider_alive"],
            "normal_pages_done": figures["normal_pages_done"] == figures["normal_pages"],
            "normal_fetched_once": figures["normal_fetched_once"]}
    told = {"private_unlistened": not figures["private_unlistened"],
            "hostile_seeds_fetched_meanwhile": figures["hostile_seeds_fetched_meanwhile"],
            "busy_page_rendered_meanwhile": figures["busy_page_rendered_meanwhile"],
            "private_page_rendered": figures["private_page_rendered"]}
    return ([f"failed: {name} ({figures[name]})" for name, held in must.items() if not held],
            [f"unmeasured: {name} ({figures[name]})" for name, held in told.items()
             if not held])


if __name__ == "__main__":
    main()
