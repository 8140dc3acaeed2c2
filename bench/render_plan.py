"""What a spider process pays every ``PLAN_FRESH`` s to read a ``render: auto`` crawl's plan.

  python bench/render_plan.py [--variables N] [--patterns N] [--reads N]

A crawl at its bounds: ``--variables`` URL template places learnt to be variables
(default ``MAX_PLACES``) and ``--patterns`` templates compared (default ``MAX_PATTERNS``).
Each process reads the plan again every ``PLAN_FRESH`` s. Two ways are timed over
``--reads`` reads, on the local Redis:
- ``whole_hash``: the variables kept as fields of ``Keys.crawl_render`` beside the
  patterns, so each read is one HGETALL of everything (the way before);
- ``new_only``: ``RenderPlan``'s read, the patterns' hash and the variables appended to
  ``Keys.crawl_render_variables`` past those this process has read (none, in a crawl
  whose variables have stopped changing; the first read takes them all, once).

Per way: client milliseconds a read, Redis CPU microseconds a read, and the reply's
bytes. Ends with a JSON line with those, and ``new_only_ms_vs_whole_hash``.
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import RedisWork, bench_redis, bench_settings, finish, machine  # noqa: E402
from crawler.render.pagegroups import MAX_PLACES  # noqa: E402
from crawler.render.policy import MAX_PATTERNS, RenderPlan  # noqa: E402
from master.crawls import render_patterns  # noqa: E402
from master.keys import Keys  # noqa: E402

CRAWL = "plan"


def fill(client, keys, variables, patterns):
    """The crawl's plan both ways: patterns' counts, and the variables (as hash fields
    beside them in a second hash standing for the old layout, and as the list)."""
    places = [f"h{n}.example|section" for n in range(variables)]
    counts = {}
    for n in range(patterns):
        counts[f"h{n}.example/section/{{w}}/ compared"] = 2
        counts[f"h{n}.example/section/{{w}}/ needed"] = 0
    client.hset(keys.crawl_render(CRAWL), mapping=counts)
    old = keys.crawl_render("old-layout")
    client.hset(old, mapping=counts)
    for start in range(0, variables, 5000):
        chunk = places[start:start + 5000]
        client.hset(old, mapping={f"~var {place}": 1 for place in chunk})
        client.rpush(keys.crawl_render_variables(CRAWL), *chunk)
    return old


def time_reads(client, reads, read):
    """``(ms a read, Redis CPU µs a read)``."""
    work = RedisWork(client).start()
    started = time.perf_counter()
    for _ in range(reads):
        read()
    seconds = time.perf_counter() - started
    cpu_us, _ = work.per(reads)
    return seconds * 1000 / reads, cpu_us


def reply_bytes(fields):
    return sum(len(name) + len(value) for name, value in fields.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variables", type=int, default=MAX_PLACES)
    parser.add_argument("--patterns", type=int, default=MAX_PATTERNS)
    parser.add_argument("--reads", type=int, default=200)
    args = parser.parse_args()
    settings = bench_settings()
    keys = Keys.from_settings(settings)
    with bench_redis(settings) as client:
        old = fill(client, keys, args.variables, args.patterns)

        def whole_hash():
            fields = client.hgetall(old)
            render_patterns(fields)
            return [name[5:] for name in fields if name.startswith("~var ")]

        plan = RenderPlan(client, keys)
        plan.template(CRAWL, "http://h0.example/section/x/")     # the first read: all
        first = plan.templates[CRAWL].shared_read

        def new_only():
            plan.patterns.clear()                                # PLAN_FRESH has passed
            plan.template(CRAWL, "http://h0.example/section/x/")

        old_ms, old_cpu = time_reads(client, args.reads, whole_hash)
        new_ms, new_cpu = time_reads(client, args.reads, new_only)
        old_bytes = reply_bytes(client.hgetall(old))
        new_bytes = reply_bytes(client.hgetall(keys.crawl_render(CRAWL)))
    print(f"{machine()}; {args.variables} variables, {args.patterns} templates, "
          f"{args.reads} reads")
    print(f"whole hash: {old_ms:.2f} ms, Redis {old_cpu:.0f} µs, {old_bytes} bytes a read")
    print(f"new only:   {new_ms:.2f} ms, Redis {new_cpu:.0f} µs, {new_bytes} bytes a read "
          f"(the first read took {first} variables)")
    finish({"variables": args.variables, "patterns": args.patterns,
            "whole_hash_ms": old_ms, "whole_hash_redis_us": old_cpu,
            "whole_hash_bytes": old_bytes, "new_only_ms": new_ms,
            "new_only_redis_us": new_cpu, "new_only_bytes": new_bytes,
            "new_only_ms_vs_whole_hash": new_ms / old_ms})


if __name__ == "__main__":
    main()
