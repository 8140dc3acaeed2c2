"""Bloom filter benchmark: crawlcluster's filter against scrapy-redis's set-based way.

  python bench/bloom.py [--quick]

Measures, in one run against the same Redis:
  1. batched check-and-add URLs/s (1,000 URLs per call), hashing on the client
     and hashing in Lua, against scrapy-redis's RFPDupeFilter (one SADD round
     trip per request) and SADD of the same digests pipelined 1,000 at a time;
     three interleaved rounds each, the median reported;
  2. bytes per URL at capacity 10M and 0.1%;
  3. the false-positive rate of the default sizing filled to capacity;
  4. the thesis Table 5-3 experiment: 1M distinct URLs + 50k duplicates into
     h = 1..4 groups of k = 4 hashes, at equal total memory (10M bits) and at
     equal memory per group (10M bits each), counted two ways.
The last line is one JSON object.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_redis, bench_settings, finish, machine, rate, require_peers
from master.bloom import BloomFilter
from master.bloomparams import BloomParams
from master.keys import Keys
from master.urls import url_digest

BATCH = 1000


def make_urls(count, tag, start=0):
    """Realistic links: many hosts, dated paths, a fifth with query strings."""
    urls = []
    for i in range(start, start + count):
        url = f"http://www.site{i % 997}.com/{tag}/{2020 + i % 6}/{i}.html"
        if i % 5 == 0:
            url += f"?page={i % 7}&id={i}"
        urls.append(url)
    return urls


def add_in_batches(bloom, urls):
    flags = []
    for start in range(0, len(urls), BATCH):
        flags.extend(bloom.add_many(urls[start:start + BATCH]))
    return flags


def contains_in_batches(bloom, urls):
    flags = []
    for start in range(0, len(urls), BATCH):
        flags.extend(bloom.contains_many(urls[start:start + BATCH]))
    return flags


def median_of_rounds(label, values):
    """Print and return the median of a measurement's rounds."""
    values = sorted(values)
    median = values[len(values) // 2]
    print(f"  {label:<44} {median:>9,.0f} URLs/s (rounds: "
          + ", ".join(f"{v:,.0f}" for v in values) + ")")
    return median


def our_filter(client, keys, urls, hash_in):
    params = BloomParams.for_capacity(10_000_000, 0.001, groups=2)

    def measure(round_number):
        bloom = BloomFilter(client, keys, f"speed-{hash_in}-{round_number}", params,
                            hash_in=hash_in)
        started = time.perf_counter()
        add_in_batches(bloom, urls)
        elapsed = time.perf_counter() - started
        bloom.clear()
        return rate(len(urls), elapsed)

    return params, measure


def scrapy_redis_roundtrip(client, keys, urls):
    from scrapy import Request
    from scrapy_redis.dupefilter import RFPDupeFilter

    requests = [Request(url) for url in urls]

    def measure(round_number):
        dupefilter = RFPDupeFilter(client, f"{keys.prefix}:bench:rfp:{round_number}")
        started = time.perf_counter()
        for request in requests:
            dupefilter.request_seen(request)
        return rate(len(urls), time.perf_counter() - started)

    return measure


def sadd_pipelined(client, keys, urls):
    def measure(round_number):
        key = f"{keys.prefix}:bench:sadd:{round_number}"
        started = time.perf_counter()
        for start in range(0, len(urls), BATCH):
            pipe = client.pipeline(transaction=False)
            for url in urls[start:start + BATCH]:
                pipe.sadd(key, url_digest(url))
            pipe.execute()
        elapsed = time.perf_counter() - started
        measure.bytes_per_url = client.memory_usage(key) / len(urls)
        client.delete(key)
        return rate(len(urls), elapsed)

    return measure


def throughput(client, keys, urls, rounds):
    """Ours (client and Lua hashing) against scrapy-redis's ways, interleaved."""
    params, client_hashing = our_filter(client, keys, urls, "client")
    _, lua_hashing = our_filter(client, keys, urls[:len(urls) // 4], "lua")
    pipelined = sadd_pipelined(client, keys, urls)
    roundtrip = scrapy_redis_roundtrip(client, keys, urls[:len(urls) // 10])
    measures = (
        ("client", "check-and-add, hashing on the client", client_hashing),
        ("sadd_pipelined", "SADD of the same digests, pipelined", pipelined),
        ("lua", "check-and-add, hashing in Lua", lua_hashing),
        ("sadd_roundtrip", "scrapy-redis RFPDupeFilter (SADD per URL)", roundtrip))
    # Round n of every measurement before round n + 1 of any: this VM's speed drifts
    # by +-30% from minute to minute.
    values = {name: [] for name, _, _ in measures}
    for number in range(rounds):
        for name, _, measure in measures:
            values[name].append(measure(number))
    results = {name: median_of_rounds(label, values[name]) for name, label, _ in measures}
    print(f"  (a Redis set of SHA-1 digests takes {pipelined.bytes_per_url:.0f} bytes/URL)")
    return params, results


def default_sizing_fp(client, keys, capacity, queries):
    """Fill a default-shaped filter to capacity; query unseen URLs; check every added one."""
    params = BloomParams.for_capacity(capacity, 0.001, groups=2)
    bloom = BloomFilter(client, keys, "sizing", params)
    added = make_urls(capacity, "seen")
    add_in_batches(bloom, added)
    missing = contains_in_batches(bloom, added).count(False)
    hits = contains_in_batches(bloom, make_urls(queries, "unseen")).count(True)
    bloom.clear()
    print(f"  default sizing, {capacity:,} URLs: {params.describe()}")
    print(f"    full-filter false positives {hits / queries:.4%} (target 0.1%), "
          f"false negatives {missing}")
    return hits / queries, missing


def thesis_experiment(client, keys, distinct, duplicates, queries):
    """Table 5-3: false positives for h = 1..4 groups of k = 4 hashes."""
    stream = make_urls(distinct, "t53")
    stream += stream[:duplicates]
    unseen = make_urls(queries, "t53-unseen")
    rows, false_negatives = [], 0
    for memory in ("equal total memory", "equal memory per group"):
        for groups in range(1, 5):
            total_bits = 10 * distinct * (1 if memory.startswith("equal total") else groups)
            params = BloomParams(groups=groups, hashes=4, group_cells=total_bits // groups,
                                 blocks=1)
            bloom = BloomFilter(client, keys, f"t53-{groups}-{len(rows)}", params)
            flags = add_in_batches(bloom, stream)
            false_negatives += flags[distinct:].count(True)      # a duplicate called new
            during = flags[:distinct].count(False) / distinct    # a new URL called seen
            full = contains_in_batches(bloom, unseen).count(True) / queries
            bloom.clear()
            expected = params.false_positive_rate(distinct)
            rows.append({"memory": memory, "h": groups, "bits": total_bits,
                         "during_insert": during, "full_filter": full, "expected": expected})
            print(f"  {memory:<23} h={groups} {total_bits / 1e6:>4.0f}M bits: "
                  f"during insert {during:.4%}, full filter {full:.4%} "
                  f"(formula {expected:.4%})")
    return rows, false_negatives


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, a rough run")
    args = parser.parse_args()
    require_peers("scrapy_redis")
    scale = 10 if args.quick else 1
    settings = bench_settings()
    keys = Keys.from_settings(settings)
    print(f"bench/bloom.py on {machine()}")
    with bench_redis(settings) as client:
        print("throughput")
        speed_urls = make_urls(100_000 // scale, "speed")
        params, speeds = throughput(client, keys, speed_urls, rounds=3)
        print("memory")
        bytes_per_url = params.bytes / 10_000_000
        print(f"  capacity 10M at 0.1%: {params.describe()}: {bytes_per_url:.2f} bytes/URL")
        print("false positives")
        fp_rate, missing = default_sizing_fp(client, keys, 1_000_000 // scale,
                                             1_000_000 // scale)
        print("thesis Table 5-3 (1M distinct + 50k duplicates, k=4 per group)")
        rows, false_negatives = thesis_experiment(client, keys, 1_000_000 // scale,
                                                  50_000 // scale, 200_000 // scale)
    finish({
        "urls_per_s": speeds["client"],
        "urls_per_s_lua_hashing": speeds["lua"],
        "vs_sadd_pipelined": speeds["client"] / speeds["sadd_pipelined"],
        "vs_sadd_roundtrip": speeds["client"] / speeds["sadd_roundtrip"],
        "bytes_per_url": bytes_per_url,
        "fp_rate": fp_rate,
        "fp_target": 0.001,
        "false_negatives": false_negatives + missing,
        "table_5_3": rows,
        "machine": machine(),
    })


if __name__ == "__main__":
    main()
