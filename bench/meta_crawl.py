"""A spider's own CPU per page with ``meta`` on and off, crawling real news pages.

bench/fields.py's ``spider_cpu_meta_on_vs_off``: the article-extraction benchmark's pages
served by nginx (each ``copies`` times, under its original path, so a date in its URL is
still there), a crawl of them by one spider process of ours as a user runs one (an index
of them, each page stored with a field), once with ``CRAWLCLUSTER_PAGE_META`` on and
once off, in interleaved rounds. CPU is the spider process's whole life (user + system,
every thread), as bench/crawl.py measures it; nginx's log shows each page fetched once.
"""

import re
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench.common import bench_redis, drop_bench_database, served_pages
from bench.crawl import run_ours
from manager.local.ports import free_port
from manager.local.staticsite import StaticSite

HOST = "127.0.0.1"
RULE = {"rules": [
    {"allow": [r"/$", r"/c\d+/index\.html$"], "follow": True},
    {"allow": [r"/c\d+/\d{3}/"], "follow": False, "fields": {"title": "//title/text()"}},
]}
UNSAFE = re.compile(r"[^A-Za-z0-9/_.-]")


def page_path(number, url):
    """Where a page is served: its number, then its original path (what a URL says of
    its date kept), always an ``.html`` file."""
    path = UNSAFE.sub("-", urlsplit(url).path) or "/"
    if not path.endswith(".html"):
        path = path.rstrip("/") + "/index.html"
    return f"{number:03d}{path}"


def news_site(folder, pages, port, copies):
    """nginx's folder of ``pages`` (``[(HTML bytes, URL)]``), each ``copies`` times under
    ``/c<copy>/``, with an index page a copy; the start URL and the URLs a crawl fetches."""
    www = folder / "www" / HOST          # nginx serves a host from its own folder
    start = f"http://{HOST}:{port}/"
    indexes, fetched = [], [start]
    for copy in range(copies):
        links = []
        for number, (body, url) in enumerate(pages):
            relative = f"c{copy}/{page_path(number, url)}"
            (www / relative).parent.mkdir(parents=True, exist_ok=True)
            (www / relative).write_bytes(body)
            links.append(f'<li><a href="/{relative}">page {number}</a></li>')
        (www / f"c{copy}" / "index.html").write_text(
            f"<html><body><ul>{''.join(links)}</ul></body></html>")
        indexes.append(f'<a href="/c{copy}/index.html">copy {copy}</a>')
        fetched += [f"{start}c{copy}/index.html"] + [
            f"{start}c{copy}/{page_path(number, url)}" for number, (_, url) in enumerate(pages)]
    (www / "index.html").write_text(f"<html><body>{' '.join(indexes)}</body></html>")
    return start, fetched


def spider_cpu_meta_on_vs_off(settings, pages, copies, rounds):
    """``(CPU ms a page with meta off, with meta on, pages a run)``: each the median of
    ``rounds``, the two runs of a round in alternating order."""
    work = Path(tempfile.mkdtemp(prefix="metacrawl-"))
    port = free_port([HOST])
    start, expected = news_site(work, pages, port, copies)
    manifest = {"start_url": start}
    cpu = {False: [], True: []}
    with bench_redis(settings), StaticSite(work / "www", [HOST], port, work / "run") as site:
        for number in range(rounds):
            for meta in ((False, True) if number % 2 == 0 else (True, False)):
                since = len(site.access_log())
                (work / f"log-{number}-{meta}").mkdir()
                started = time.monotonic()
                used = run_ours(settings, manifest, RULE, 1, work / f"log-{number}-{meta}",
                                CRAWLCLUSTER_PAGE_META=str(meta).lower())
                fetched, _, _ = served_pages(site, since, expected, f"meta {meta}")
                cpu[meta].append(used["cpu"] * 1000 / fetched)
                print(f"  round {number + 1}, meta {'on ' if meta else 'off'}: {fetched} "
                      f"pages, spider {cpu[meta][-1]:.2f} CPU ms a page "
                      f"({time.monotonic() - started:.0f} s)", flush=True)
                drop_bench_database(settings)
    return statistics.median(cpu[False]), statistics.median(cpu[True]), len(expected)
