"""Intake benchmark: valid crawl requests per second through preprocess into Redis,
and how long ``info`` takes on a crawl with 100,000 pending tasks.

  python bench/preprocess.py [--messages N]

1. N valid crawl requests (thesis and scrapy-cluster formats, each with a
   rule) are produced to a fresh topic with 4 partitions, then consumed by
   the preprocess role (validation, one Redis transaction per partition and
   poll, acks on the replies topic, offsets committed) until Redis holds every
   crawl (timed from the first poll that brings messages: the consumer group
   join before it is a one-time cost, printed apart). The peer, on the same
   messages from the same broker: the intake the way scrapy-cluster's
   kafka-monitor does it, one message at a time
   (``json.loads``, jsonschema validation, one Redis write per message, no
   replies), reported as ``vs_naive``.
2. 100,000 tasks of one crawl over 50 domains are queued; an ``info``
   request is produced to Kafka and the time until its reply arrives (through
   preprocess and monitor) is measured.
Each side's CPU time per request is reported too: this process's (every thread,
the Kafka clients' included) and the Redis server's, over the same window.
Figures are the medians of ``--rounds`` interleaved rounds (default 3).
The last line is one JSON object.
"""

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import CpuClock, bench_redis, bench_settings, finish, machine, rate
from master.crawls import CrawlStore
from master.frontier import Frontier
from master.keys import Keys
from master.tasks import make_task
from message_processing.client import RequestClient
from message_processing.monitor.service import Monitor
from message_processing.preprocess.service import Preprocess
from message_processing.requests import crawl_config, validate
from settings.clients import ensure_topics, kafka_admin, kafka_consumer, kafka_producer

RULE = {"rules": [{"allow": ["/news/\\d+"], "deny": ["/login"], "follow": True},
                  {"allow": ["/article/"], "fields": {"title": "//h1/text()",
                                                      "body": {"css": "div.content"}}}],
        "required": ["title"]}


def requests(count, run):
    for n in range(count):
        if n % 2:
            yield {"url": f"http://sc{n % 97}.example.org/{n}", "appid": "bench",
                   "crawlid": f"{run}-sc{n}", "allow_regex": [r".*\.html"], "maxdepth": 2,
                   "uuid": f"{run}-{n}"}
        else:
            yield {"type": "crawl", "userid": "bench", "crawlid": f"{run}-c{n}",
                   "url": f"http://site{n % 97}.example.com/news/{n}", "spider_type": "universal",
                   "rule": RULE, "maxdepth": 3, "priority": 60, "uuid": f"{run}-{n}"}


def produce(settings, count, run):
    producer = kafka_producer(settings, "bench", linger_ms=20, batch_size=256 * 1024)
    topic = settings["CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC"]
    for request in requests(count, run):
        producer.send(topic, json.dumps(request).encode())
    producer.flush()
    producer.close()


def measure_preprocess(settings, client, count):
    """``(seconds, CPU seconds {"process", "redis"}, consumer group join seconds)``."""
    preprocess = Preprocess.from_settings(settings)
    joined = time.perf_counter()
    cpu = CpuClock(client)
    started = None                  # from the poll that first brought messages
    stored = 0                      # a poll returns once its messages are in Redis
    while stored < count:
        before = time.perf_counter()
        if started is None:
            cpu.start()
        fresh = preprocess.poll_once(timeout_ms=100)
        if fresh and started is None:
            started = before
        stored += fresh
    seconds, used = time.perf_counter() - started, cpu.read()
    preprocess.close()
    # Checked after the clock stops: counting 1,024 shards' pools takes ~30 ms.
    queued = Frontier.from_settings(client, settings).pool_count()
    assert queued == count, f"{queued} seeds queued of {count} requests"
    return seconds, used, started - joined


def measure_naive(settings, client, count):
    """scrapy-cluster's kafka-monitor loop: a message at a time, jsonschema, one write."""
    from jsonschema import Draft202012Validator

    from message_processing.requests import SCHEMA_DIR, request_type

    validators = {}
    keys = Keys.from_settings(settings)
    consumer = kafka_consumer(settings, "bench", settings["CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC"],
                              group_id=f"naive-{uuid.uuid4().hex[:6]}")
    done = 0
    cpu = CpuClock(client)
    started = None
    while done < count:
        before = time.perf_counter()
        if started is None:
            cpu.start()
        batches = consumer.poll(timeout_ms=100)
        if batches and started is None:
            started = before
        for records in batches.values():
            for record in records:
                message = json.loads(record.value)
                kind = request_type(message)
                if kind not in validators:
                    schema = json.loads((SCHEMA_DIR / f"{kind}.json").read_text())
                    validators[kind] = Draft202012Validator(schema)
                validators[kind].validate(message)
                _, request = validate(message)          # the rule checks
                config = crawl_config(kind, request)
                client.zadd(keys.prefix + ":naive", {json.dumps(config): 0})
                done += 1
    seconds, used = time.perf_counter() - started, cpu.read()
    consumer.close()
    return seconds, used


def measure_info(settings, client, pending):
    keys = Keys.from_settings(settings)
    frontier = Frontier.from_settings(client, settings)
    for start in range(0, pending, 5000):
        frontier.push([make_task(f"http://www.site{n % 50}.com/{n}", "big", "universal")
                       for n in range(start, min(pending, start + 5000))])
    assert len(CrawlStore(client, keys).progress("big")["pending"]) == 50
    preprocess = Preprocess.from_settings(settings)
    monitor = Monitor.from_settings(settings)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            preprocess.poll_once(timeout_ms=50)
            monitor.run_once()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    asker = RequestClient.from_settings(settings, timeout=30)
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        reply = asker.ask({"type": "info", "userid": "bench", "crawlid": "big"})
        timings.append(time.perf_counter() - started)
        assert reply["total_pending"] == pending, reply
    stop.set()
    thread.join()
    asker.close()
    preprocess.close()
    monitor.close()
    plugin_started = time.perf_counter()
    monitor.context.crawls.progress("big")
    return sorted(timings)[len(timings) // 2], time.perf_counter() - plugin_started


def per_request_us(used, count):
    return {part: seconds * 1e6 / count for part, seconds in used.items()}


def describe_cpu(us):
    return f"{us['process']:.0f} µs of the process's CPU and {us['redis']:.0f} µs of Redis's"


def fresh_topics(settings):
    token = uuid.uuid4().hex[:8]
    settings = settings.copy_with(CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC=f"bench.{token}.requests",
                                  CRAWLCLUSTER_KAFKA_REPLIES_TOPIC=f"bench.{token}.replies",
                                  CRAWLCLUSTER_KAFKA_GROUP_ID=f"bench-{token}")
    ensure_topics(settings, "bench")
    return settings


def drop_topics(settings):
    admin = kafka_admin(settings, "bench")
    admin.delete_topics([settings["CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC"],
                         settings["CRAWLCLUSTER_KAFKA_REPLIES_TOPIC"]])
    admin.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    settings = fresh_topics(bench_settings(("redis", "kafka")))
    summary = {"machine": machine(), "messages": args.messages, "rounds": args.rounds}
    produce(settings, args.messages, "pp")
    ours, naive = [], []
    cpu = {"ours": [], "naive": []}         # CPU microseconds per request, per round
    try:
        for round_number in range(args.rounds):
            # Each round reads the same messages afresh: its own group and key prefix.
            token = uuid.uuid4().hex[:6]
            fresh = settings.copy_with(CRAWLCLUSTER_KAFKA_GROUP_ID=f"bench-{token}",
                                       CRAWLCLUSTER_KEY_PREFIX=f"bench:{token}")
            with bench_redis(fresh) as client:
                seconds, used, join_seconds = measure_preprocess(fresh, client, args.messages)
                ours.append(seconds)
                cpu["ours"].append(per_request_us(used, args.messages))
                seconds, used = measure_naive(fresh, client, args.messages)
                naive.append(seconds)
                cpu["naive"].append(per_request_us(used, args.messages))
            print(f"round {round_number + 1}: preprocess {rate(args.messages, ours[-1]):,.0f} "
                  f"valid crawl requests/s ({describe_cpu(cpu['ours'][-1])}), one-at-a-time "
                  f"intake {rate(args.messages, naive[-1]):,.0f}/s "
                  f"({describe_cpu(cpu['naive'][-1])}) (after the consumer group join, "
                  f"{join_seconds:.1f} s, which neither count)")
        ours, naive = statistics.median(ours), statistics.median(naive)
        cpu = {name: {part: statistics.median(run[part] for run in runs) for part in runs[0]}
               for name, runs in cpu.items()}
        print(f"median: {rate(args.messages, ours):,.0f}/s, {naive / ours:.2f}x the "
              f"one-at-a-time intake; CPU per request {describe_cpu(cpu['ours'])}, "
              f"the one-at-a-time intake's {describe_cpu(cpu['naive'])}")
        with bench_redis(settings) as client:
            info_seconds, plugin_seconds = measure_info(settings, client, 100_000)
            print(f"info on a crawl with 100,000 pending tasks: {info_seconds * 1000:.1f} ms "
                  f"through Kafka, preprocess and monitor (the count itself "
                  f"{plugin_seconds * 1000:.2f} ms)")
    finally:
        drop_topics(settings)
    summary.update(valid_per_s=rate(args.messages, ours), naive_per_s=rate(args.messages, naive),
                   vs_naive=naive / ours, info_seconds_100k=info_seconds,
                   info_count_seconds=plugin_seconds,
                   cpu_us_per_request=cpu["ours"], naive_cpu_us_per_request=cpu["naive"])
    finish(summary)


if __name__ == "__main__":
    main()
