"""A spider's own CPU per page with ``meta`` on and off, crawling real news pages.

bench/fields.py's ``spider_cpu_meta_on_vs_off``: the article-extraction benchmark's pages
served by nginx (each ``copies`` times, under its original path, so a date in its URL is
still there), a crawl of them by one spider process of ours as a user runs one (an index
of them, each page stored with a field), once with ``CRAWLCLUSTER_PAGE_META`` on and
once off, in interleaved rounds. CPU is the spider process's whole life (user + system,
every thread), as bench/crawl.py measures it; nginx's log shows each page fetched once,
and MongoDB an item of every page, each with ``meta`` when on and none when off. The
copies are alike, so htmldate's caches of parsed dates are warm for all but the first
(~0.03 ms a page less than cold, measured on the pages that need a guess).
"""

import re
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench.common import bench_redis, drop_bench_database, served_pages
from bench.crawl import run_ours
from manager.local.ports import free_port
from manager.local.staticsite import StaticSite
from settings.clients import mongo_client

HOST = "127.0.0.1"
RULE = {"rules": [
    {"allow": [r"://[^/]+/$", r"://[^/]+/index-\d+\.html$"], "follow": True},  # the root's
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
    """nginx's folder of ``pages`` (``[(HTML bytes, URL)]``), stored once and served
    ``copies`` times under ``/c<copy>/`` (links to that folder), with an index page a
    copy; the start URL and the URLs a crawl fetches."""
    www = folder / "www" / HOST          # nginx serves a host from its own folder
    start = f"http://{HOST}:{port}/"
    paths = [page_path(number, url) for number, (_, url) in enumerate(pages)]
    for path, (body, _) in zip(paths, pages, strict=True):
        (www / "pages" / path).parent.mkdir(parents=True, exist_ok=True)
        (www / "pages" / path).write_bytes(body)
    indexes, fetched = [], [start]
    for copy in range(copies):
        (www / f"c{copy}").symlink_to(www / "pages", target_is_directory=True)
        links = "".join(f'<li><a href="/c{copy}/{path}">page</a></li>' for path in paths)
        (www / f"index-{copy}.html").write_text(f"<html><body><ul>{links}</ul></body></html>")
        indexes.append(f'<a href="/index-{copy}.html">copy {copy}</a>')
        fetched += [f"{start}index-{copy}.html"] + [f"{start}c{copy}/{path}" for path in paths]
    (www / "index.html").write_text(f"<html><body>{' '.join(indexes)}</body></html>")
    return start, fetched


def spider_cpu_meta_on_vs_off(settings, pages, copies, rounds):
    """``(pages a run, [[CPU ms a page with meta off, with meta on] a round])``, the two
    runs of a round one after the other, in alternating order."""
    work = Path(tempfile.mkdtemp(prefix="metacrawl-"))
    port = free_port([HOST])
    start, expected = news_site(work, pages, port, copies)
    each_round = []
    with bench_redis(settings), StaticSite(work / "www", [HOST], port, work / "run") as site:
        for number in range(rounds):
            cpu = {}
            for meta in ((False, True) if number % 2 == 0 else (True, False)):
                since = len(site.access_log())
                crawlid, logs = f"meta-{number}-{meta}".lower(), work / f"log-{number}-{meta}"
                logs.mkdir()
                started = time.monotonic()
                used = run_ours(settings, {"start_url": start}, RULE, 1, logs, crawlid=crawlid,
                                CRAWLCLUSTER_PAGE_META=str(meta).lower())
                fetched, _, _ = served_pages(site, since, expected, f"meta {meta}")
                check_items(settings, crawlid, len(pages) * copies, meta)
                cpu[meta] = used["cpu"] * 1000 / fetched
                print(f"  round {number + 1}, meta {'on ' if meta else 'off'}: {fetched} "
                      f"pages, spider {cpu[meta]:.2f} CPU ms a page "
                      f"({time.monotonic() - started:.0f} s)", flush=True)
                drop_bench_database(settings)
            each_round.append([cpu[False], cpu[True]])
    shutil.rmtree(work / "www")          # the logs stay
    return len(expected), each_round


def check_items(settings, crawlid, pages, meta):
    """Stop the benchmark unless the crawl stored an item of each page, every one with
    ``meta`` if ``meta`` is on and none if off: a run that measured something else."""
    client = mongo_client(settings, "bench")
    try:
        items = client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]["items_universal"]
        stored = items.count_documents({"crawlid": crawlid})
        with_meta = items.count_documents({"crawlid": crawlid, "meta": {"$exists": True}})
    finally:
        client.close()
    if stored != pages or with_meta != (pages if meta else 0):
        raise SystemExit(f"bench/meta_crawl.py: meta {'on' if meta else 'off'}: {stored} "
                         f"items of {pages} pages, {with_meta} with meta")
