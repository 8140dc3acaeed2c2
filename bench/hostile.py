"""Hostile site beside a normal one: what a hostile site costs a crawl of a normal one.

  python bench/hostile.py [--pages-per-host 350] [--rounds 3] [--limit 10]

Two sites served by nginx: bench/crawl.py's generated news site (4 hosts on loopback)
and a hostile site (manager/local/sitegen.py's: lying charsets, binary, huge and
malformed pages, a decompression bomb, redirect loops, redirects to a file and to no
URL, a page of thousands of links and one of invalid links, an endless calendar), to
which this adds a page that drips out slowly, one whose script never goes quiet, and
links, redirects, scripts, images and frames aimed at private addresses: a listener on
a loopback address none of the sites uses, and the cloud metadata address (added to
loopback for the run where this machine lacks it and the run is root's). One spider
process crawls the normal site alone, then beside the hostile one, ``render: auto``;
three such rounds by default, the ratio the median round's (this machine's speed drifts
by a third between runs a minute apart). Beside it, the hostile site's start page and
each of its kinds (the calendar too) is the seed of a crawl of its own: they are
fetched (and, as the first page of their crawl, sampled for rendering) from the start,
while the normal site is crawled, not after thousands of the hostile site's cheap
pages; the beside run ends once every normal page is fetched. Every host is throttled
alike, 10 requests a second by default, as a crawl of real sites is (the cluster's own
default is one a second), so that the normal crawl (1,544 pages on 4 hosts) lasts
longer than a render's timeout (30 s): the question is what the hostile site's pages
cost the normal site's, not how one spider process shares its CPU between two crawls
that each could use all of it.
``--limit 0`` asks that too: unthrottled, the normal site alone keeps the process busy,
and beside the hostile crawl it gets a share of it (docs/performance.md).

The address guard allows only the sites' own addresses among private networks
(``CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS``); where the guard takes no such setting, the
run says so (``guard``: false) and the loopback listener is reachable as in any local
cluster.

Ends with a JSON line: ``private_requests`` (requests that reached the listeners),
``spider_alive`` (the spider was running when the run ended and stopped with exit code
0, in every round), ``hostile_seeds_fetched_meanwhile`` (in every round each hostile
seed was fetched before the normal crawl ended), ``busy_page_rendered_meanwhile`` (in
every round the never-quiet page's script polled while the normal site was crawled:
it was rendered then), ``normal_pages_done`` (of
``normal_pages``), ``normal_fetched_once`` (nginx's log: each normal page once),
``browser_replacements`` by reason (``worn``: its planned share of pages),
``browsers_started``, and by reason
``hostile_pages_refused``, ``hostile_links_refused`` and ``guard_refused`` (the
spider's stats), and ``normal_pages_per_s_vs_alone``: the normal site's pages/s beside
the hostile site over its pages/s alone (first to last fetch); ``rounds``: each round's
pages/s alone and beside, its ratio, the hostile site's requests while the normal one was
crawled, pages rendered, quiet waits capped, render timeouts, the browser's requests
refused. Counts are the median round's.
"""

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
PRIVATE_HOST = "127.0.0.66"          # the loopback listener (2130706498): no site there
METADATA_HOST = "169.254.169.254"    # listened on only where this machine has the address
HOSTILE_RULE = {"rules": [{"allow": ["/hostile/"], "follow": True,
                           "fields": {"title": "//h1/text()"}}], "render": "auto"}


class Listener:
    """An HTTP server counting every request that reaches it."""

    def __init__(self, host: str) -> None:
        hits = self.hits = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                hits.append(self.path)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"secret")

            do_POST = do_GET

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((host, free_port([host]) if host != METADATA_HOST
                                           else 80), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def metadata_address():
    """The metadata address on loopback for the run, where this machine lacks it and the
    run may add it (as root): removed again after. Yields whether it was added."""
    present = subprocess.run(["ip", "-4", "addr", "show", "dev", "lo"], capture_output=True,
                             text=True, check=False).stdout
    added = (f"{METADATA_HOST}/" not in present and os.geteuid() == 0
             and subprocess.run(["ip", "addr", "add", f"{METADATA_HOST}/32", "dev", "lo"],
                                capture_output=True, check=False).returncode == 0)
    try:
        yield added
    finally:
        if added:
            subprocess.run(["ip", "addr", "del", f"{METADATA_HOST}/32", "dev", "lo"],
                           capture_output=True, check=False)


def listeners():
    """The loopback listener, and the metadata one where the address can be bound."""
    found = {"loopback": Listener(PRIVATE_HOST)}
    with contextlib.suppress(OSError):
        found["metadata"] = Listener(METADATA_HOST)
    return found


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
    (folder / "drip.html").write_text("<html><body><h1>drip</h1>" + "x" * 40_000
                                      + "</body></html>")
    (folder / "busy.html").write_text(
        "<html><body><h1>busy</h1><div id='x'></div><script>setInterval(()=>fetch("
        "'/hostile/busy.html?poll').then(r=>r.text()).then(t=>{document.getElementById"
        "('x').textContent=t.length}),200)</script></body></html>")
    redirects = [f"to-private-{n}.html" for n in range(len(targets))]
    locations = [f'location = /hostile/{path} {{ return 302 "{target}/hostile/redirected"; }}'
                 for path, target in zip(redirects, targets, strict=True)]
    locations.append("location = /hostile/drip.html { limit_rate 2k; }")
    return ["private.html", "drip.html", "busy.html", *redirects], locations


def write_hostile_site(root: Path, port: int,
                       targets: list[str]) -> tuple[list[str], list[str]]:
    """The hostile site with its extras; its start URL and the URL of each of its kinds
    (the seeds of the beside run's hostile crawls), and its nginx locations."""
    manifest, locations = generate_hostile_site(root, port, HOSTILE_HOST)
    extras, more = add_hostile_extras(root, targets)
    index = root / "www" / HOSTILE_HOST / "hostile" / "index.html"
    links = "".join(f'<a href="{path}">{path}</a>' for path in extras)
    index.write_bytes(index.read_bytes().replace(b"</body>", links.encode() + b"</body>"))
    seeds = [manifest["start_url"], *(manifest["base"] + path
                                      for path in [*HOSTILE_PAGES, "calendar/", *extras])]
    return seeds, locations[HOSTILE_HOST] + more


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


def normal_run(site, since, pages):
    """``(pages fetched, pages/s first fetch to last, each fetched once?)``."""
    entries = [e for e in site.access_log()[since:] if not e["path"].endswith("/robots.txt")]
    fetched = page_fetches(entries, site.port)
    try:
        check_fetched_once(fetched, pages, what="normal site")
        once = True
    except RepeatedFetches as exc:
        print(f"  {exc}", flush=True)
        once = False
    span = entries[-1]["time"] - entries[0]["time"] if len(entries) > 1 else 0.0
    done = len(set(fetched) & set(pages))
    return done, (len(fetched) / span if span else 0.0), once


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
    print(machine(), flush=True)
    settings = bench_settings(("redis", "zookeeper", "mongodb"))
    with metadata_address():
        run(args, settings, listeners())


def run(args, settings, private):
    """``args.rounds`` rounds of both crawls of the normal site, the JSON line;
    ``private``: the listeners."""
    targets = [f"http://{PRIVATE_HOST}:{private['loopback'].port}", f"http://{METADATA_HOST}",
               f"http://{METADATA_HOST}/latest/meta-data", "http://[fd00::1]",
               "http://100.100.100.200", f"http://2130706498:{private['loopback'].port}"]
    settings, guard = guarded(settings, [*DEFAULT_HOSTS, HOSTILE_HOST])
    try:
        with tempfile.TemporaryDirectory() as folder, bench_redis(settings):
            work = Path(folder)
            spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=args.pages_per_host)
            manifest = generate_site(work / "normal", spec)
            hostile_port = free_port([HOSTILE_HOST])
            hostile_starts, locations = write_hostile_site(work / "hostile", hostile_port,
                                                          targets)
            with StaticSite(work / "normal" / "www", spec.hosts, spec.port,
                            work / "normal" / "run") as normal, \
                    StaticSite(work / "hostile" / "www", [HOSTILE_HOST], hostile_port,
                               work / "hostile" / "run",
                               locations={HOSTILE_HOST: locations}) as hostile:
                rounds = [one_round(settings, (normal, hostile), manifest, hostile_starts,
                                    work / f"round{n}", args.limit)
                          for n in range(args.rounds)]
            finish({"guard": guard, "metadata_listener": "metadata" in private,
                    "limit_per_host": args.limit or None,
                    "private_requests": sum(len(listener.hits)
                                            for listener in private.values()),
                    **summary(rounds)})
    finally:
        for listener in private.values():
            listener.close()
        drop_bench_database(settings)
        drop_zookeeper_root(settings)


def one_round(settings, sites, manifest, hostile_starts, work, limit):
    """The normal site crawled alone, then beside the hostile one (its start page, and
    each of the pages aimed at the browser and the guard as a seed of a crawl of its
    own, so that they are fetched, and rendered, while the normal site is crawled):
    its pages/s in each, and the beside run's figures. The beside run ends once every
    normal page is fetched: the hostile site's long tail (an endless calendar, a page of
    thousands of links) measures nothing after that."""
    normal, hostile = sites
    pages = site_pages(manifest)
    rule = dict(RULE, render="auto")
    since = len(normal.access_log())
    crawl_once(settings, {"alone": (manifest["start_url"], rule)}, work / "logs-alone", limit)
    _, alone_rate, _ = normal_run(normal, since, pages)
    since, hostile_since = len(normal.access_log()), len(hostile.access_log())
    crawls = {"beside": (manifest["start_url"], rule),
              **{f"hostile-{n}": (url, HOSTILE_RULE) for n, url in enumerate(hostile_starts)}}
    code, log, alive = crawl_once(
        settings, crawls, work / "logs-beside", limit,
        until=lambda: all_fetched(normal, since, pages))
    done, beside_rate, once = normal_run(normal, since, pages)
    hostile_log = hostile.access_log()[hostile_since:]
    window = fetch_window(normal.access_log()[since:])
    during = [entry for entry in hostile_log if window[0] <= entry["time"] <= window[1]]
    seeds = {urlsplit(url).path for url in hostile_starts}
    missed = sorted(seeds - {entry["path"] for entry in hostile_log
                             if entry["time"] <= window[1]})
    polls = sum(entry["path"] == "/hostile/busy.html?poll" for entry in during)
    render = stat_counts(log, "crawlcluster/render/")
    print(f"  normal site alone: {alone_rate:.1f} pages/s, beside the hostile one: "
          f"{beside_rate:.1f} pages/s ({beside_rate / (alone_rate or 1):.2f}); the hostile "
          f"site answered {len(during)} requests while the normal one was crawled (the "
          f"never-quiet page's script {polls} of them)"
          + (f"; not fetched before it ended: {missed}" if missed else ""), flush=True)
    return {"code": code, "alive": alive, "log": log, "pages": len(pages), "done": done,
            "once": once, "alone": alone_rate, "beside": beside_rate,
            "hostile_requests_during": len(during), "hostile_seeds_missed": missed,
            "busy_polls_during": polls,
            "renders": render.get("pages", 0), "quiet_capped": render.get("quiet_capped", 0),
            "render_timeouts": render.get("timeouts", 0),
            "render_requests_refused": render.get("requests_refused", 0)}


def all_fetched(site, since, pages):
    fetched = page_fetches(site.access_log()[since:], site.port)
    return {canonical_url(url) for url in pages} <= set(fetched)


def fetch_window(entries):
    """First and last request time of a site's log entries (robots.txt left out)."""
    times = [entry["time"] for entry in entries if not entry["path"].endswith("/robots.txt")]
    return (min(times), max(times)) if times else (0.0, 0.0)


def summary(rounds):
    """The JSON line's figures over the rounds: the ratio is the median round's (this
    machine's speed drifts by a third between runs a minute apart), each round's figures
    listed; counts are the median round's, the checks hold in every round."""
    for r in rounds:
        r["ratio"] = r["beside"] / r["alone"] if r["alone"] else 0.0
    median = sorted(rounds, key=lambda r: r["ratio"])[len(rounds) // 2]
    log = median["log"]
    shown = ("alone", "beside", "ratio", "hostile_requests_during", "busy_polls_during",
             "renders", "quiet_capped",
             "render_timeouts", "render_requests_refused", "hostile_seeds_missed")
    return {
        "spider_alive": all(r["code"] == 0 and r["alive"] for r in rounds),
        "normal_pages": median["pages"],
        "normal_pages_done": min(r["done"] for r in rounds),
        "normal_fetched_once": all(r["once"] for r in rounds),
        "hostile_seeds_fetched_meanwhile": not any(r["hostile_seeds_missed"] for r in rounds),
        "browser_replacements": stat_counts(log, "crawlcluster/render/browsers_replaced/"),
        "browsers_started": stat_counts(log, "crawlcluster/render/").get("browsers", 0),
        "busy_page_rendered_meanwhile": all(r["busy_polls_during"] for r in rounds),
        "hostile_pages_refused": stat_counts(log, "crawlcluster/pages/refused/"),
        "guard_refused": stat_counts(log, "urlguard/refused/"),
        "hostile_links_refused": stat_counts(log, "crawlcluster/links/refused/"),
        "rounds": [{key: (round(r[key], 3) if isinstance(r[key], float) else r[key])
                    for key in shown} for r in rounds],
        "normal_pages_per_s_alone": median["alone"],
        "normal_pages_per_s_beside": median["beside"],
        "normal_pages_per_s_vs_alone": median["ratio"],
    }


if __name__ == "__main__":
    main()
