"""Versions benchmark: what storing items costs, new and stored again, against upserts.

  python bench/versions.py [--items N] [--changed FRACTION]

Stores a crawl of N items (default 100,000) in batches of 100 (the spiders' default,
``CRAWLCLUSTER_MONGODB_BATCH``) three ways, each into a fresh database, and measures the
client's CPU and the MongoDB server's CPU per item:

- ``new``: ``insert_items`` of pages never stored (a crawl's common case: one unordered
  insert a batch);
- ``again``: the same pages stored again, a FRACTION of them (default 0.1) changed (a
  revisit: the stored hashes read in one query a batch, ``last_seen`` for the unchanged,
  replace and a kept version for the changed);
- ``upsert``: the peer way, one ``UpdateOne(upsert=True)`` per item in an unordered bulk
  write, for pages never stored.

Ratios: ``new_server_cpu_vs_upsert`` (below 1: the insert path costs the server less)
and ``again_server_cpu_vs_new``. The last line is one JSON object.
"""

import argparse
import resource
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import bench_settings, finish, machine, storage_cpu_seconds  # noqa: E402
from crawler.pipelines import insert_items  # noqa: E402
from settings.clients import mongo_client  # noqa: E402

BATCH = 100


def items(count, changed=0.0, edition=0):
    """The items of a universal crawl; ``changed`` of them with another title."""
    every = int(1 / changed) if changed else 0
    return [{"url": f"http://site{n % 50}.example/article/{n}.html", "crawlid": "c",
             "spider_type": "universal",
             "title": f"Article {n}" + (f", edition {edition}" if every and n % every == 0
                                        else ""),
             "depth": n % 5, "status": 200, "fetched_at": 1_800_000_000.0 + n,
             "main_text": "Some paragraph of the article. " * 12}
            for n in range(count)]


def client_cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measured(settings, label, write, documents):
    """Run ``write(batch)`` over ``documents`` in batches; the cost per item."""
    client0, server0, started = client_cpu(), storage_cpu_seconds(settings), time.monotonic()
    for start in range(0, len(documents), BATCH):
        write(documents[start:start + BATCH])
        if start % (BATCH * 100) == 0:
            print(f"\r  {label:<7} {start + BATCH:>9,} of {len(documents):,}", end="",
                  flush=True)
    seconds = time.monotonic() - started
    client = client_cpu() - client0
    server = storage_cpu_seconds(settings) - server0
    count = len(documents)
    print(f"\r  {label:<7} {count:>9,} items in {seconds:6.1f} s: client "
          f"{client / count * 1e6:6.0f} µs/item, server {server / count * 1e6:6.0f} µs/item",
          flush=True)
    return {"seconds": seconds, "items_per_s": count / seconds,
            "client_cpu_us_per_item": client / count * 1e6,
            "server_cpu_us_per_item": server / count * 1e6}


def upserts(database):
    from pymongo import UpdateOne

    collection = database["items_universal"]
    collection.create_index([("crawlid", 1), ("url", 1)], unique=True)

    def write(batch):
        collection.bulk_write([UpdateOne({"crawlid": item["crawlid"], "url": item["url"]},
                                         {"$set": item}, upsert=True) for item in batch],
                              ordered=False)
    return write


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--changed", type=float, default=0.1)
    args = parser.parse_args()
    settings = bench_settings(("mongodb", "redis"))
    client = mongo_client(settings.copy_with(CRAWLCLUSTER_SOCKET_TIMEOUT=120.0), "bench")
    names = [f"bench_versions_{uuid.uuid4().hex[:6]}" for _ in range(2)]
    runs = {}
    try:
        ensured: set[str] = set()
        ours = client[names[0]]

        def insert(batch):
            insert_items(ours, batch, ensured, {"stored_at": time.time(), "stored_by": "b"})

        runs["new"] = measured(settings, "new", insert, items(args.items))
        runs["again"] = measured(settings, "again", insert,
                                 items(args.items, args.changed, edition=2))
        runs["upsert"] = measured(settings, "upsert", upserts(client[names[1]]),
                                  items(args.items))
        versions = ours["versions_universal"].count_documents({})
    finally:
        for name in names:
            client.drop_database(name)
        client.close()
    finish({"items": args.items, "changed": args.changed, "versions_stored": versions,
            "runs": runs, "machine": machine(),
            "new_server_cpu_vs_upsert": runs["new"]["server_cpu_us_per_item"]
            / runs["upsert"]["server_cpu_us_per_item"],
            "again_server_cpu_vs_new": runs["again"]["server_cpu_us_per_item"]
            / runs["new"]["server_cpu_us_per_item"]})


if __name__ == "__main__":
    main()
