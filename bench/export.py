"""Export benchmark: ``crawlcluster export`` of a large crawl, memory and rate.

  python bench/export.py [--items N] [--formats jsonl csv parquet]

Stores a crawl of N items (default 1,000,000; the fields a universal crawl stores, a few
hundred bytes of main text each) in MongoDB, then runs ``crawlcluster export`` for each
format, once on a tenth of the crawl (``--since``) and once on all of it, each in a
process of its own, and reports its peak resident memory (ru_maxrss) and items per
second. Memory that stays flat from a tenth to all of the items is what "constant
memory" means here. The last line is one JSON object.
"""

import argparse
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import bench_settings, finish, machine  # noqa: E402
from crawler.pipelines import insert_items  # noqa: E402
from manager.export import export_client  # noqa: E402
from settings.loader import environment_for  # noqa: E402

BATCH = 10_000


def store(database, count):
    """A crawl ``big`` of ``count`` items, stored at 1.0, 2.0, ... per batch."""
    ensured: set[str] = set()
    started = time.monotonic()
    for start in range(0, count, BATCH):
        items = [{"url": f"http://site{n % 50}.example/article/{n}.html", "crawlid": "big",
                  "spider_type": "universal", "title": f"Article {n}", "depth": n % 5,
                  "status": 200, "fetched_at": 1_800_000_000.0 + n,
                  "main_text": "Some paragraph of the article. " * 12}
                 for n in range(start, min(start + BATCH, count))]
        insert_items(database, items, ensured, {"stored_at": float(start // BATCH + 1),
                                                "stored_by": "bench"})
        print(f"\rstored {start + len(items):,} of {count:,} items", end="", flush=True)
    print(f" ({time.monotonic() - started:.0f} s)", flush=True)


PEAK = ("import resource, sys; from manager.cli import main; code = main(sys.argv[1:]); "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); "
        "sys.exit(code)")


def export(settings, fmt, since, path):
    """``crawlcluster export`` in a process of its own: (seconds, its peak RSS in MB)."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", PEAK, "export", "--crawlid", "big",
                           "--format", fmt, "--since", repr(since), "-o", str(path)],
                          check=False, env=environment_for(settings), cwd=ROOT,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"crawlcluster export --format {fmt} failed:\n{done.stderr}")
    return time.monotonic() - started, int(done.stderr.split()[-1]) / 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--formats", nargs="+", default=["jsonl", "csv", "parquet"])
    args = parser.parse_args()
    settings = bench_settings(("mongodb",))
    settings = settings.copy_with(
        CRAWLCLUSTER_MONGODB_DATABASE=f"bench_export_{uuid.uuid4().hex[:6]}")
    client = export_client(settings, "bench")
    database = client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]]
    work = Path(tempfile.mkdtemp(prefix="exportbench-"))
    results = {}
    try:
        store(database, args.items)
        batches = -(-args.items // BATCH)
        tenth = float(batches - max(batches // 10, 1) + 1)     # the last tenth's batches
        for fmt in args.formats:
            for label, since in (("tenth", tenth), ("all", 0.0)):
                seconds, peak = export(settings, fmt, since, work / f"{label}.{fmt}")
                items = args.items if label == "all" else \
                    database["items_universal"].count_documents({"stored_at": {"$gte": since}})
                size = (work / f"{label}.{fmt}").stat().st_size
                results[f"{fmt}_{label}"] = {"items": items, "seconds": seconds,
                                             "items_per_s": items / seconds,
                                             "peak_rss_mb": peak, "bytes": size}
                print(f"  {fmt:<8} {label:<6} {items:>9,} items in {seconds:6.1f} s "
                      f"({items / seconds:8,.0f}/s), peak RSS {peak:6.1f} MB, "
                      f"{size / 1e6:8.1f} MB file", flush=True)
                (work / f"{label}.{fmt}").unlink()
    finally:
        client.drop_database(settings["CRAWLCLUSTER_MONGODB_DATABASE"])
        client.close()
    finish({"items": args.items, "runs": results, "machine": machine(),
            **{f"{fmt}_peak_rss_growth_mb": results[f"{fmt}_all"]["peak_rss_mb"]
               - results[f"{fmt}_tenth"]["peak_rss_mb"] for fmt in args.formats}})


if __name__ == "__main__":
    main()
