"""Hostile site beside a normal one: what a hostile site costs a crawl of a normal one.

  python bench/hostile.py [--pages-per-host N] [--rounds 3] [--limit 20]

Two sites served by nginx: bench/crawl.py's generated news site (4 hosts on loopback)
and a hostile site (manager/local/sitegen.py's: lying charsets, binary, huge and
malformed pages, a decompression bomb, redirect loops, redirects to a file and to no
URL, a page of thousands of links and one of invalid links, an endless calendar), to
which this adds a page that drips out slowly, one whose script never goes quiet, and
links, redirects, scripts, images and frames aimed at private addresses: a listener on
a loopback address none of the sites uses, and the cloud metadata address (added to
loopback for the run where this machine lacks it and the run is root's). One spider
process crawls the normal site alone, then both sites at once, ``render: auto``; three
such rounds by default, the ratio the median round's (this machine's speed drifts by a
third between runs a minute apart). Every host is throttled alike, 20 requests a second
by default, as a crawl of real sites is (the cluster's own default is one a second): the
question is what the hostile site's pages cost the normal site's, not how one spider
process shares its CPU between two crawls that each could use all of it. ``--limit 0``
asks that too: unthrottled, the normal site alone keeps the process busy (400 pages/s
with ``render: never``), and beside the hostile crawl's 3,437 mostly cheap pages it gets
about half (0.47-0.56 with ``render: never``): a take shares the process among the
domains with queued tasks, and the normal site's next tasks are queued only once its
pages are parsed, in the same process.

The address guard allows only the sites' own addresses among private networks
(``CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS``); where the guard takes no such setting, the
run says so (``guard``: false) and the loopback listener is reachable as in any local
cluster.

Ends with a JSON line: ``private_requests`` (requests that reached the listeners),
``spider_alive`` (the spider ran to its end, exit code 0, in every round), ``normal_pages_done`` (of
``normal_pages``), ``normal_fetched_once`` (nginx's log: each normal page once),
``browser_replacements`` by reason (``worn``: its planned share of pages),
``browsers_started``, ``render_timeouts``, ``render_quiet_capped``, and by reason
``hostile_pages_refused``, ``hostile_links_refused`` and ``guard_refused`` (the
spider's stats), and ``normal_pages_per_s_vs_alone``: the normal site's pages/s beside
the hostile site over its pages/s alone (first to last fetch).
"""

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_hostile_site, generate_site
from manager.local.sitelog import RepeatedFetches, check_fetched_once, page_fetches
from manager.local.staticsite import StaticSite
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


def write_hostile_site(root: Path, port: int, targets: list[str]) -> tuple[str, list[str]]:
    """The hostile site with its extras; its start URL and nginx locations."""
    manifest, locations = generate_hostile_site(root, port, HOSTILE_HOST)
    extras, more = add_hostile_extras(root, targets)
    index = root / "www" / HOSTILE_HOST / "hostile" / "index.html"
    links = "".join(f'<a href="{path}">{path}</a>' for path in extras)
    index.write_bytes(index.read_bytes().replace(b"</body>", links.encode() + b"</body>"))
    return manifest["start_url"], locations[HOSTILE_HOST] + more


def guarded(settings, hosts):
    """``settings`` with only the sites' own addresses allowed among private networks
    (the local cluster allows all of loopback), where the address guard takes that
    setting; and whether it does."""
    if "CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS" not in default_settings():
        return settings, False
    return settings.copy_with(CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS=[
        f"{host}/32" for host in hosts]), True


def crawl_once(settings, crawls, log_dir, limit=0):
    """Submit ``crawls`` ({crawlid: (start URL, rule)}) in a frontier of their own and
    run one spider process until it is idle; its exit code and log."""
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
    try:
        codes = crawl.wait(1800)
    finally:
        crawl.stop()
    return codes[0], (log_dir / "spider0.log").read_text(errors="replace")


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
    parser.add_argument("--pages-per-host", type=int, default=150)
    parser.add_argument("--limit", type=int, default=20,
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
            hostile_start, locations = write_hostile_site(work / "hostile", hostile_port,
                                                          targets)
            with StaticSite(work / "normal" / "www", spec.hosts, spec.port,
                            work / "normal" / "run") as normal, \
                    StaticSite(work / "hostile" / "www", [HOSTILE_HOST], hostile_port,
                               work / "hostile" / "run",
                               locations={HOSTILE_HOST: locations}) as hostile:
                rounds = [one_round(settings, (normal, hostile), manifest, hostile_start,
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


def one_round(settings, sites, manifest, hostile_start, work, limit):
    """The normal site crawled alone, then beside the hostile one: its pages/s in each,
    and the beside run's figures."""
    normal, hostile = sites
    pages = site_pages(manifest)
    hostile_since = len(hostile.access_log())
    rule = dict(RULE, render="auto")
    since = len(normal.access_log())
    crawl_once(settings, {"alone": (manifest["start_url"], rule)}, work / "logs-alone", limit)
    _, alone_rate, _ = normal_run(normal, since, pages)
    since = len(normal.access_log())
    code, log = crawl_once(settings, {"beside": (manifest["start_url"], rule),
                                      "hostile": (hostile_start, HOSTILE_RULE)},
                           work / "logs-beside", limit)
    done, beside_rate, once = normal_run(normal, since, pages)
    hostile_fetches = len(hostile.access_log()) - hostile_since
    print(f"  normal site alone: {alone_rate:.1f} pages/s, beside the hostile one: "
          f"{beside_rate:.1f} pages/s ({beside_rate / (alone_rate or 1):.2f}; the hostile site "
          f"answered {hostile_fetches} requests)", flush=True)
    return {"code": code, "log": log, "pages": len(pages), "done": done, "once": once,
            "alone": alone_rate, "beside": beside_rate}


def summary(rounds):
    """The JSON line's figures over the rounds: the ratio is the median round's (this
    machine's speed drifts by a third between runs a minute apart), every round's listed;
    counts are the last round's, the checks hold in every round."""
    ratios = [r["beside"] / r["alone"] if r["alone"] else 0.0 for r in rounds]
    log = rounds[-1]["log"]
    render = stat_counts(log, "crawlcluster/render/")
    return {
        "spider_alive": all(r["code"] == 0 for r in rounds),
        "normal_pages": rounds[-1]["pages"],
        "normal_pages_done": min(r["done"] for r in rounds),
        "normal_fetched_once": all(r["once"] for r in rounds),
        "browser_replacements": stat_counts(log, "crawlcluster/render/browsers_replaced/"),
        "browsers_started": render.get("browsers", 0),
        "render_timeouts": render.get("timeouts", 0),
        "render_quiet_capped": render.get("quiet_capped", 0),
        "hostile_pages_refused": stat_counts(log, "crawlcluster/pages/refused/"),
        "guard_refused": stat_counts(log, "urlguard/refused/"),
        "hostile_links_refused": stat_counts(log, "crawlcluster/links/refused/"),
        "normal_pages_per_s_alone": statistics.median(r["alone"] for r in rounds),
        "normal_pages_per_s_beside": statistics.median(r["beside"] for r in rounds),
        "rounds_vs_alone": [round(ratio, 3) for ratio in ratios],
        "normal_pages_per_s_vs_alone": statistics.median(ratios),
    }


if __name__ == "__main__":
    main()
