"""An incremental series: a magazine crawled three times as one series while it changes.

  python bench/changes.py [--articles N] [--refetch-after SECONDS] [--sitemap]

The site is manager/local/blogsite.py's magazine without its script-built section:
articles under slugs of their titles, every page linking its categories, 80 tags and 14
authors (about 110 links a page), lists (categories, tags, authors, paged) linked from
everywhere; served by nginx, which gives every page an ``ETag`` and ``Last-Modified``
and answers 304 to a request that sends them back unchanged.

Run 1 crawls it whole: the full run. Before runs 2 and 3 the site writes its next
edition: 10% of its articles changed (a paragraph added), 5% added (on its lists), 2%
taken down (404, off every list); every other page is left as it was. Each run is a new
crawl of lineage ``news``, as a schedule with ``series`` submits them, with
``refetch_after`` (default 0: each run asks again for every article the series has, with
its validators, so a page taken down is found gone); a universal spider process each.
With ``--sitemap`` the site lists its articles in ``sitemap.xml`` with their ``lastmod``
(when each last changed) and the crawl reads it: with ``--refetch-after 86400`` a run
fetches only the articles dated after the series' last fetch and the new ones, and finds
a page taken down only once it is due again.

Printed per run: pages asked by status, seconds (nginx's log, first request to last),
spider and MongoDB CPU, what ``info`` counted. nginx's log is checked: a page asked twice
in one run stops the benchmark. The last line is one JSON object (runs 2 and 3 together):
``pages_changed``, ``pages_added``, ``pages_removed`` (what the site did);
``versions_stored`` (earlier versions kept in MongoDB), ``firehose_changed``,
``firehose_new``, ``firehose_gone`` (messages on the items topic) and ``gone`` (pages
``info`` counts gone), which should equal them; ``unchanged_writes`` (documents written
in runs 2-3, and versions kept, of pages the site left as they were) and
``firehose_unchanged`` (their messages), which should be 0;
``detail_refetches_unchanged`` (requests for articles the site left as they were) and
``not_modified`` (of those, the 304s); each run's ``seconds`` and ``mongodb_cpu_s``, and
runs 2 and 3 against the full run (``run2_time_vs_full``, ...).
"""

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    bench_redis,
    bench_settings,
    drop_bench_database,
    finish,
    machine,
)
from bench.crawl import children_cpu_seconds, process_cpu_seconds
from manager.local.blogsite import (
    BLOG_RULE,
    BlogSpec,
    blog_plan,
    generate_blog_site,
)
from manager.local.crawl import Crawl, submit
from manager.local.ports import free_port
from manager.local.sitelog import check_fetched_once, page_fetches
from manager.local.statedir import StateDir
from manager.local.staticsite import StaticSite
from master.crawls import CrawlStore
from settings.clients import kafka_admin, kafka_consumer, mongo_client

LINEAGE = "news"
SHARES = {"changed": 0.10, "added": 0.05, "removed": 0.02}


def next_edition(plan, rng, www, number):
    """Change, add and take down articles of ``plan`` in place (removed pages' files
    deleted); return ``{"changed", "added", "removed"}``: their paths."""
    articles = plan["articles"]
    count = len(articles)
    removed = rng.sample(articles, round(count * SHARES["removed"]))
    gone = {id(article) for article in removed}
    left = [article for article in articles if id(article) not in gone]
    changed = rng.sample(left, round(count * SHARES["changed"]))
    for article in changed:
        article["content"] = [*article["content"], f"Update {number}: the story goes on."]
    added = [new_article(plan, rng, number, n) for n in range(round(count * SHARES["added"]))]
    plan["articles"] = left + added
    for article in removed:          # its folder too: nginx answers 403 for a bare one
        shutil.rmtree(www / article["path"].strip("/"))
    return {"changed": [a["path"] for a in changed], "added": [a["path"] for a in added],
            "removed": [a["path"] for a in removed]}


def new_article(plan, rng, edition, n):
    words = rng.sample(("city", "river", "budget", "school", "metro", "vote", "park"), 3)
    slug = f"{'-'.join(words)}-e{edition}n{n}"
    month = rng.randint(1, 12)
    return {"path": f"/2026/{month:02d}/{slug}/", "live": False, "slug": slug,
            "title": " ".join(words).capitalize() + f" (edition {edition}, {n})",
            "date": f"2026-{month:02d}-{rng.randint(1, 28):02d}",
            "author": rng.choice(plan["authors"]),
            "category": rng.choice(("politics", "business", "culture", "sport")),
            "tags": rng.sample(plan["tags"], 3),
            "content": [" ".join(rng.choice(words) for _ in range(40)) + "."]}


def write_sitemap(www, base, plan, modified):
    """``sitemap.xml``: every article with its ``lastmod`` (``modified``: path -> when it
    last changed; else the first edition's date)."""
    entries = "".join(f"<url><loc>{base}{a['path']}</loc><lastmod>"
                      f"{modified.get(a['path'], '2026-01-01')}</lastmod></url>"
                      for a in plan["articles"])
    (www / "sitemap.xml").write_text('<?xml version="1.0"?><urlset xmlns="http://www.'
                                     f'sitemaps.org/schemas/sitemap/0.9">{entries}</urlset>')


def run_series_crawl(settings, number, start_url, options, work, mongodb_pid):
    """One run of the series; its figures (seconds from nginx's log are added later)."""
    crawlid = f"{LINEAGE}-{number}"
    sitemaps = {"sitemaps": [start_url + "sitemap.xml"]} if options.sitemap else {}
    submit(settings, {"crawlid": crawlid, "lineage": LINEAGE, "spider_type": "universal",
                      "url": start_url, "rule": BLOG_RULE, "maxdepth": 5,
                      "refetch_after": options.refetch_after, **sitemaps})
    log_dir = work / crawlid
    log_dir.mkdir()
    spiders, mongodb = children_cpu_seconds(), process_cpu_seconds(mongodb_pid)
    started = time.time()
    crawl = Crawl(settings, "universal", log_dir, CRAWLCLUSTER_IDLE_TIMEOUT=3)
    try:
        for worker in crawl.workers:
            worker.wait(1800)
        master = process_cpu_seconds(crawl.master.pid)
    finally:
        crawl.stop()
    if any(worker.returncode for worker in crawl.workers):
        raise SystemExit(f"the spider of {crawlid} failed; see {log_dir}")
    return {"crawlid": crawlid, "started": started,
            "spider_cpu_s": children_cpu_seconds() - spiders - master,
            "mongodb_cpu_s": process_cpu_seconds(mongodb_pid) - mongodb}


def read_topic(settings, topic, timeout=60.0):
    """Every message of ``topic``, decoded."""
    from kafka import TopicPartition

    consumer = kafka_consumer(settings, "bench", group_id=None)
    try:
        deadline = time.monotonic() + timeout
        while not (numbers := consumer.partitions_for_topic(topic)):
            if time.monotonic() > deadline:
                return []
            time.sleep(0.5)
        partitions = [TopicPartition(topic, number) for number in sorted(numbers)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        found = []
        while any(consumer.position(p) < ends[p] for p in partitions):
            if time.monotonic() > deadline:
                raise SystemExit(f"could not read {topic} to its end")
            for batch in consumer.poll(timeout_ms=500).values():
                found += [json.loads(record.value) for record in batch]
        return found
    finally:
        consumer.close()


def log_figures(site, since, until, editions, base):
    """What nginx saw of one run: seconds from its first request to its last, statuses,
    and the requests for articles the edition left as they were (all, and the 304s)."""
    entries = [e for e in site.access_log()[since:until]
               if not e["path"].endswith("/robots.txt")]
    check_fetched_once(page_fetches(entries, site.port), what="a run of the series")
    touched = {path for paths in editions.values() for path in paths}
    statuses = {}
    for entry in entries:
        statuses[entry["status"]] = statuses.get(entry["status"], 0) + 1
    articles = [e for e in entries if e["path"].startswith("/2026/")
                and "/page/" not in e["path"] and e["path"] not in touched]
    return {"seconds": entries[-1]["time"] - entries[0]["time"], "requests": len(entries),
            "statuses": statuses, "unchanged_asked": len(articles),
            "unchanged_304": sum(e["status"] == 304 for e in articles),
            "urls": {kind: {base + path for path in paths} for kind, paths in editions.items()}}


def stored_figures(database, runs):
    """What MongoDB holds of runs 2 and 3: versions kept, and writes of pages the site
    left as they were (documents stored in a run, versions kept, not of its edition)."""
    items, versions = database["items_universal"], database["versions_universal"]
    unchanged_writes = 0
    for n, run in enumerate(runs[1:], 1):
        until = runs[n + 1]["started"] if n + 1 < len(runs) else float("inf")
        edited = set().union(*run["urls"].values())
        unchanged_writes += sum(1 for doc in items.find(
            {"stored_at": {"$gte": run["started"], "$lt": until}}, {"url": 1})
            if doc["url"] not in edited)
    changed = set().union(*(run["urls"]["changed"] for run in runs[1:]))
    unchanged_writes += sum(1 for doc in versions.find({}, {"url": 1})
                            if doc["url"] not in changed)
    gone_marked = items.count_documents({"change": "gone"})
    return {"versions_stored": versions.count_documents({}),
            "unchanged_writes": unchanged_writes, "gone_marked": gone_marked}


def firehose_figures(messages, runs):
    """Messages of runs 2 and 3 by their ``change``, and those of unchanged pages."""
    later = {run["crawlid"]: run for run in runs[1:]}
    counts = {"firehose_new": 0, "firehose_changed": 0, "firehose_gone": 0,
              "firehose_unchanged": 0}
    for message in messages:
        run = later.get(message.get("crawlid"))
        if run is None:
            continue
        change = message.get("change")
        if f"firehose_{change}" in counts:
            counts[f"firehose_{change}"] += 1
        if message["url"] not in set().union(*run["urls"].values()):
            counts["firehose_unchanged"] += 1
    return counts


def print_run(run):
    changes, links = run["info"]["changes"], run["info"]["links"]
    print(f"  run {run['crawlid']}: {run['requests']} requests in {run['seconds']:.1f} s "
          f"{dict(sorted(run['statuses'].items()))}; spider {run['spider_cpu_s']:.1f} CPU s, "
          f"MongoDB {run['mongodb_cpu_s']:.2f} CPU s; changes {changes}; links kept "
          f"{links.get('kept', 0)}, swept {links.get('swept', 0)}", flush=True)


def summarize(runs, stored, firehose):
    full, later = runs[0], runs[1:]
    summary = {f"pages_{kind}": sum(len(run["urls"][kind]) for run in later)
               for kind in ("changed", "added", "removed")}
    summary.update(stored)
    summary.update(firehose)
    summary["gone"] = sum(run["info"]["changes"]["gone"] for run in later)
    summary["detail_refetches_unchanged"] = sum(run["unchanged_asked"] for run in later)
    summary["not_modified"] = sum(run["info"]["changes"]["not_modified"] for run in later)
    summary["detail_refetches_unchanged_304"] = sum(run["unchanged_304"] for run in later)
    for n, run in enumerate(runs, 1):
        name = "full" if n == 1 else f"run{n}"
        summary[f"{name}_seconds"] = run["seconds"]
        summary[f"{name}_mongodb_cpu_s"] = run["mongodb_cpu_s"]
        summary[f"{name}_spider_cpu_s"] = run["spider_cpu_s"]
        summary[f"{name}_requests"] = run["requests"]
        if n > 1:
            summary[f"{name}_time_vs_full"] = run["seconds"] / full["seconds"]
            summary[f"{name}_mongodb_cpu_vs_full"] = run["mongodb_cpu_s"] / full["mongodb_cpu_s"]
    return summary


def run(settings, options, mongodb_pid, work):
    host = "127.0.0.1"
    spec = BlogSpec(port=free_port((host,)), host=host, articles=options.articles,
                    live_articles=0, seed=68)
    plan = blog_plan(spec)
    rng = random.Random(68)
    generate_blog_site(work / "site", spec, plan)
    www = work / "site" / "www" / host
    modified = {}                  # article path -> when it last changed (the sitemap's)
    runs = []
    client = mongo_client(settings, "bench")
    database = client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]
    with StaticSite(work / "site" / "www", [host], spec.port, work / "site" / "run") as site, \
            bench_redis(settings) as redis:
        for number in (1, 2, 3):
            editions = {"changed": [], "added": [], "removed": []}
            if number > 1:
                time.sleep(1.1)          # an edited page's mtime (its ETag) moves on
                editions = next_edition(plan, rng, www, number)
                generate_blog_site(work / "site", spec, plan)
                now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
                modified.update(dict.fromkeys(editions["changed"] + editions["added"], now))
            if options.sitemap:
                write_sitemap(www, spec.base(), plan, modified)
            since = len(site.access_log())
            figures = run_series_crawl(settings, number, spec.base() + "/", options, work,
                                       mongodb_pid)
            figures.update(log_figures(site, since, None, editions, spec.base()))
            figures["info"] = CrawlStore.from_settings(redis, settings).progress(
                figures["crawlid"])
            print_run(figures)
            runs.append(figures)
        stored = stored_figures(database, runs)
    client.close()
    firehose = firehose_figures(read_topic(settings, settings["CRAWLCLUSTER_KAFKA_ITEMS_TOPIC"]),
                                runs)
    return summarize(runs, stored, firehose)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--articles", type=int, default=1000)
    parser.add_argument("--refetch-after", type=float, default=0.0,
                        help="the series' refetch_after (default 0: every article asked "
                             "again each run)")
    parser.add_argument("--sitemap", action="store_true",
                        help="the site lists its articles in a sitemap with their lastmod, "
                             "and the crawl reads it")
    args = parser.parse_args()
    settings = bench_settings(("redis", "mongodb", "kafka", "zookeeper"))
    token = settings["CRAWLCLUSTER_KEY_PREFIX"].split(":", 1)[1]
    settings = settings.copy_with(CRAWLCLUSTER_MONGODB_DATABASE=f"bench_{token}",
                                  CRAWLCLUSTER_FIREHOSE=True,
                                  CRAWLCLUSTER_KAFKA_ITEMS_TOPIC=f"bench.{token}.items")
    record = StateDir(settings.getpath("CRAWLCLUSTER_STATE_DIR")).recorded("mongodb")
    if not record:
        sys.exit("the MongoDB-wire server was not started by `crawlcluster services up`: "
                 "its CPU cannot be read")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-changes-") as work:
            summary = run(settings, args, record["pid"], Path(work))
    finally:
        drop_bench_database(settings)
        admin = kafka_admin(settings, "bench")
        try:
            admin.delete_topics([settings["CRAWLCLUSTER_KAFKA_ITEMS_TOPIC"]])
        except Exception as exc:  # noqa: BLE001 - a topic never made
            print(f"(items topic not deleted: {exc})")
        finally:
            admin.close()
    summary.update(articles=args.articles, refetch_after=args.refetch_after,
                   sitemap=args.sitemap, machine=machine())
    finish(summary)


if __name__ == "__main__":
    main()
