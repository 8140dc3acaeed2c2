"""Preprocess and monitor as real processes against the real Kafka-API broker and Redis."""

import itertools
import json
import signal
import subprocess
import sys
import time
from datetime import datetime

import pytest

from manager.local.crawl import cluster_env
from master.counters import WindowCounts
from master.crawls import CrawlStore
from master.frontier import Frontier
from master.keys import Keys
from master.pushback import PushbackStore
from message_processing.delivery import DeliveryFailed
from settings.clients import kafka_consumer, kafka_producer
from tests.message_processing.samples import MALFORMED, MAX_BYTES, crawl, valid


class Role:
    """``crawlcluster preprocess|monitor`` in a subprocess with the test's settings."""

    def __init__(self, role, settings, log_path, **extra):
        self.log_path = log_path
        env = cluster_env(settings, fast=False, **{"CRAWLCLUSTER_MAX_MESSAGE_BYTES": MAX_BYTES,
                                                   "CRAWLCLUSTER_MONITOR_SLEEP": 0.05, **extra})
        self.log = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen([sys.executable, "-m", "manager.cli", role], env=env,
                                        stdout=self.log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)

    def alive(self):
        return self.process.poll() is None

    def text(self):
        return self.log_path.read_text()

    def stop(self, sig=signal.SIGTERM):
        if self.alive():
            self.process.send_signal(sig)
            self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture
def roles(frontier_settings, kafka_topics, tmp_path):
    started = []

    def start(role, name=None, **extra):
        started.append(Role(role, frontier_settings, tmp_path / f"{name or role}.log", **extra))
        return started[-1]

    yield start
    for role in started:
        role.stop()


class Wire:
    """The test's side of Kafka: produce requests, collect every reply."""

    def __init__(self, settings):
        from kafka import TopicPartition

        self.topic = settings["CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC"]
        self.producer = kafka_producer(settings, "test")
        self.consumer = kafka_consumer(settings, "test", group_id=None)
        replies = settings["CRAWLCLUSTER_KAFKA_REPLIES_TOPIC"]
        self.consumer.assign([TopicPartition(replies, p)
                              for p in self.consumer.partitions_for_topic(replies)])
        self.consumer.seek_to_beginning()
        self.replies = []

    def send(self, value):
        raw = json.dumps(value).encode() if isinstance(value, dict) else value
        key = b"tombstone" if raw is None else None      # Kafka needs a key or a value
        meta = self.producer.send(self.topic, raw, key=key).get(timeout=30)
        return f"{meta.topic}/{meta.partition}/{meta.offset}"

    def collect(self, until, timeout=90.0, settle=0.0):
        """Poll replies until ``until(replies)`` holds (then ``settle`` s more)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not until(self.replies):
            self._poll()
        end = time.monotonic() + settle
        while time.monotonic() < end:
            self._poll()
        return self.replies

    def _poll(self):
        for records in self.consumer.poll(timeout_ms=200).values():
            self.replies += [json.loads(record.value) for record in records]

    def by_uuid(self):
        found = {}
        for reply in self.replies:
            found.setdefault(reply.get("uuid"), []).append(reply)
        return found

    def close(self):
        self.producer.close()
        self.consumer.close()


@pytest.fixture
def wire(test_settings, kafka_topics):
    client = Wire(test_settings)
    yield client
    client.close()



def waiting(redis, keys):
    """Tasks waiting in the universal spiders' pools (every shard)."""
    return Frontier(redis, keys).pool_count("universal")

def wait_for(condition, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_mixed_valid_and_malformed_messages(redis, test_settings, roles, wire):
    preprocess = roles("preprocess")
    roles("monitor")
    keys = Keys.from_settings(test_settings)
    malformed = MALFORMED * 3                               # 79 kinds, 237 messages
    valids = [valid(n) for n in range(1000 - len(malformed))]
    sources = {}
    for n in range(1000):                                   # interleaved
        if n % 4 == 0 and malformed:
            raw, reason = malformed.pop()
            sources[wire.send(raw)] = reason
        else:
            wire.send(valids.pop())
    assert not malformed and not valids
    total = 1000
    wire.collect(lambda replies: len(replies) >= total, timeout=120, settle=2.0)
    assert preprocess.alive()

    errors = {reply["message"]: reply for reply in wire.replies if reply.get("status") == "error"}
    assert set(errors) == set(sources)
    for source, reason in sources.items():
        assert reason in errors[source]["error"], (source, errors[source])

    uuids = wire.by_uuid()
    expected = {f"v{n}" for n in range(total - len(sources))}
    assert set(uuids) - {None} - {r.get("uuid") for r in errors.values()} == expected
    assert all(len(uuids[uuid]) == 1 for uuid in expected)     # each answered once

    crawls = [n for n in expected if int(n[1:]) % 10 in (0, 1)]
    assert waiting(redis, keys) == len(crawls)            # each seed stored once
    stored = redis.mget([keys.crawl(f"c{n[1:]}" if int(n[1:]) % 10 == 0 else f"sc{n[1:]}")
                         for n in crawls])
    assert all(stored)
    counts = WindowCounts(redis, keys.window_counts("preprocess:total")).values()
    fails = WindowCounts(redis, keys.window_counts("preprocess:fail")).values()
    assert counts["lifetime"] == total and fails["lifetime"] == len(sources)


def test_json_nested_5000_deep_is_refused_naming_the_depth(redis, test_settings, roles, wire):
    """JSON nested 5,000 deep (json.loads would raise RecursionError) gets a reply naming
    the limit, one log line and a failure count; the intake goes on."""
    preprocess = roles("preprocess", CRAWLCLUSTER_MAX_MESSAGE_BYTES=1 << 16)
    deep = {wire.send(b'{"type": "crawl", "attrs": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
            wire.send(b'{"a": ' * 5000 + b"1" + b"}" * 5000)}
    wire.send(crawl(1, uuid="after"))
    wire.collect(lambda replies: len(replies) >= 3, timeout=60, settle=1.0)
    errors = {reply["message"]: reply for reply in wire.replies if reply.get("status") == "error"}
    assert set(errors) == deep
    for reply in errors.values():
        assert "JSON nested deeper than 64 levels (CRAWLCLUSTER_MAX_JSON_DEPTH)" in reply["error"]
    assert "after" in wire.by_uuid()                            # and the intake went on
    assert preprocess.alive()
    log = preprocess.text()
    assert "Traceback" not in log and "RecursionError" not in log
    assert sum("refused" in line and "nested deeper" in line for line in log.splitlines()) == 2
    keys = Keys.from_settings(test_settings)
    assert WindowCounts(redis, keys.window_counts("preprocess:fail")).values()["lifetime"] == 2


def test_two_instances_share_the_partitions(redis, test_settings, roles, wire):
    first = roles("preprocess", "first")
    second = roles("preprocess", "second")

    def assigned(role):
        lines = [line for line in role.text().splitlines() if "partitions assigned" in line]
        return lines and "[]" not in lines[-1]

    wait_for(lambda: assigned(first) and assigned(second), 60, "both instances to own partitions")
    for n in range(400):
        wire.send(crawl(n, uuid=f"u{n}"))
    wire.collect(lambda replies: len(replies) >= 400, settle=2.0)
    assert sorted(wire.by_uuid()) == sorted(f"u{n}" for n in range(400))
    assert waiting(redis, Keys.from_settings(test_settings)) == 400


BOTH = pytest.mark.parametrize("frontier_settings", ["redis", "redis-cluster"], indirect=True)


@BOTH
def test_sigkill_mid_batch_loses_and_duplicates_nothing(frontier_redis, test_settings, roles,
                                                        wire):
    redis = frontier_redis
    keys = Keys.from_settings(test_settings)
    total = 4000
    for n in range(total):
        wire.send(crawl(n, uuid=f"u{n}"))
    first = roles("preprocess", "first", CRAWLCLUSTER_PREPROCESS_BATCH=50)
    wait_for(lambda: waiting(redis, keys) > 200, 60, "the intake to start")
    first.stop(signal.SIGKILL)
    assert waiting(redis, keys) < total                  # killed mid-way
    roles("preprocess", "second")
    wait_for(lambda: waiting(redis, keys) >= total, 120, "every crawl stored")
    time.sleep(2.0)
    assert waiting(redis, keys) == total
    assert all(redis.get(keys.crawl(f"c{n}")) for n in range(total))
    wire.collect(lambda replies: len(wire.by_uuid()) >= total, settle=1.0)
    assert set(wire.by_uuid()) == {f"u{n}" for n in range(total)}


@BOTH
def test_scrapy_cluster_examples_and_every_monitor_plugin(roles, wire, zookeeper):
    roles("preprocess")
    roles("monitor")

    def ask(request):
        wire.send(request)
        wire.collect(lambda replies: request["uuid"] in wire.by_uuid())
        return wire.by_uuid()[request["uuid"]][-1]

    # scrapy-cluster's documented requests, unchanged but for the uuid on the crawl
    ack = ask({"url": "http://dmoztools.net", "appid": "testapp", "crawlid": "abc123",
               "uuid": "crawl1"})
    assert ack["status"] == "accepted" and ack["crawlid"] == "abc123"
    info = ask({"action": "info", "appid": "testapp", "uuid": "someuuid", "crawlid": "abc123",
                "spiderid": "link"})
    for field in ("server_time", "crawlid", "total_pending", "total_domains", "spiderid",
                  "appid", "domains", "uuid"):
        assert field in info
    assert info["total_pending"] == 1 and info["domains"] == {"dmoztools.net": {"total": 1}}
    app_info = ask({"action": "info", "appid": "testapp", "uuid": "appwide", "spiderid": "link"})
    assert app_info["crawlids"]["abc123"]["total_pending"] == 1
    stats = ask({"stats": "kafka-monitor", "appid": "testapp", "uuid": "myuuid"})
    assert stats["kafka-monitor"]["total"]["lifetime"] >= 3
    assert {"total", "fail", "plugins"} <= set(stats["kafka-monitor"])
    assert set(stats["kafka-monitor"]["total"]) == {"900", "3600", "21600", "43200", "86400",
                                                    "604800", "lifetime"}
    everything = ask({"stats": "all", "appid": "testapp", "uuid": "all1"})
    assert {"kafka-monitor", "redis-monitor", "spiders", "machines", "queues"} <= set(everything)
    assert everything["modules"]["preprocess"] and everything["modules"]["monitor"]
    assert everything["queues"]["pool"] == 1
    zk = ask({"uuid": "abc123", "appid": "madisonTest", "action": "domain-update",
              "domain": "dmoz.org", "hits": 60, "window": 60, "scale": 0.9})
    assert zk["status"] == "ok"
    config = json.loads(zookeeper.get(zk["znode"])[0])
    assert config["domains"]["dmoz.org"] == {"hits": 60, "window": 60.0, "scale": 0.9}
    ask({"type": "site_config", "userid": "u", "action": "blacklist", "domain": "spam.com",
         "uuid": "bl"})
    assert "spam.com" in json.loads(zookeeper.get(zk["znode"])[0])["blacklist"]
    stop = ask({"action": "stop", "appid": "testapp", "uuid": "1ist234", "crawlid": "abc123",
                "spiderid": "link"})
    assert stop["action"] == "stop" and stop["total_purged"] == 1
    after = ask({"type": "info", "userid": "u", "crawlid": "abc123", "uuid": "after"})
    assert after["total_pending"] == 0 and after["stopped"] and after["purged"] == 1

    # expire: a crawl due to expire in 2 s is purged and announced
    ask(crawl(9, uuid="soon", expires=time.time() + 2))
    expired = wire.collect(lambda replies: any(r.get("action") == "expired" for r in replies),
                           timeout=30)
    [notice] = [r for r in expired if r.get("action") == "expired"]
    assert notice["crawlid"] == "c9" and notice["total_expired"] == 1 and notice["uuid"] == "soon"


def run_cli(settings, *args, timeout=60):
    env = cluster_env(settings, fast=False)
    return subprocess.run([sys.executable, "-m", "manager.cli", *args, "--timeout", "30"],
                          check=False, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_cli_client_submit_info_config_stats_pause_resume_watch_stop(test_settings, roles,
                                                                    redis, tmp_path):
    roles("preprocess")
    roles("monitor")
    requests = tmp_path / "requests.jsonl"
    requests.write_text("\n".join([json.dumps(crawl(1)), json.dumps(crawl(2, url="ftp://x.com/")),
                                   "not json"]) + "\n")
    submitted = run_cli(test_settings, "submit", str(requests))
    assert submitted.returncode == 1, submitted.stderr               # some were refused
    lines = sorted(submitted.stdout.splitlines())
    assert lines[0] == "accepted crawl c1 (universal)"
    assert "[url]: URL scheme must be http or https, not 'ftp'" in lines[1]
    assert lines[2].startswith("error ") and "not JSON" in lines[2]

    info = run_cli(test_settings, "info", "--crawlid", "c1")
    assert info.stdout.strip() == ("crawl c1: 1 pending over 1 domains; done 0, failed 0"), info
    raw = json.loads(run_cli(test_settings, "info", "--crawlid", "c1", "--json").stdout)
    assert raw["domains"] == {"site1.com": {"total": 1}} and raw["pushback"] == {}
    # the site pushes back: info and watch show its rate factor and its pause
    PushbackStore.from_settings(redis, test_settings).report("site1.com", "429", 300.0, 1.0)
    info = run_cli(test_settings, "info", "--crawlid", "c1")
    line = info.stdout.splitlines()[1]
    assert line.startswith("pushback site1.com x0.80 paused ") and line.endswith("(429, 1)")
    raw = json.loads(run_cli(test_settings, "info", "--crawlid", "c1", "--json").stdout)
    assert raw["pushback"]["site1.com"]["pushbacks"] == 1
    config = run_cli(test_settings, "config", "rate", "site1.com", "--hits", "3")
    assert config.returncode == 0 and "rate site1.com: done" in config.stdout
    stats = json.loads(run_cli(test_settings, "stats", "queue", "--json").stdout)
    assert stats["queues"]["pool"] == 1

    # pause and resume through Kafka: the waiting task is parked, then back in the pool
    paused = run_cli(test_settings, "pause", "--crawlid", "c1")
    assert paused.stdout.strip() == "crawl c1 paused: 1 tasks parked", paused
    raw = json.loads(run_cli(test_settings, "info", "--crawlid", "c1", "--json").stdout)
    assert raw["paused"] and raw["parked"] == 1
    assert json.loads(run_cli(test_settings, "stats", "queue", "--json").stdout)[
        "queues"]["pool"] == 0
    resumed = run_cli(test_settings, "resume", "--crawlid", "c1")
    assert resumed.stdout.strip() == "crawl c1 resumed: 1 tasks back in the pools", resumed
    assert json.loads(run_cli(test_settings, "stats", "queue", "--json").stdout)[
        "queues"]["pool"] == 1
    bad = run_cli(test_settings, "pause", "--crawlid", "no/such")
    assert bad.returncode != 0 and "[crawlid]" in bad.stdout, bad

    # recurring crawls from the command line
    template = tmp_path / "crawl.json"
    template.write_text(json.dumps({key: value for key, value in crawl(3).items()
                                    if key not in ("type", "crawlid", "userid")}))
    added = run_cli(test_settings, "schedule", "add", "news", "--cron", "0 * * * *",
                    "--crawl", str(template))
    assert added.stdout.startswith("schedule news: add done, next run 20"), added
    listed = run_cli(test_settings, "schedule", "list").stdout
    assert listed.startswith("news  cron '0 * * * *'  next 20") and "site3.com" in listed
    refused = run_cli(test_settings, "schedule", "add", "late", "--cron", "0 25 * * *",
                      "--crawl", str(template))
    assert refused.returncode == 1 and "[cron]" in refused.stdout, refused
    deleted = run_cli(test_settings, "schedule", "delete", "news")
    assert deleted.stdout.strip() == "schedule news: delete done"
    assert run_cli(test_settings, "schedule", "list").stdout.strip() == "no schedules"

    env = cluster_env(test_settings, fast=False)
    watcher = subprocess.Popen([sys.executable, "-m", "manager.cli", "watch", "--crawlid", "c1",
                                "--every", "0.5"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    time.sleep(3)
    assert watcher.poll() is None                                     # still pending
    stopped = run_cli(test_settings, "stop", "--crawlid", "c1")
    assert stopped.stdout.strip() == "crawl c1 stop: 1 purged"
    _, progress = watcher.communicate(timeout=30)
    assert watcher.returncode == 0
    assert "crawl c1: pending 1  done 0  failed 0" in progress
    assert "pushback site1.com x0.80 paused" in progress
    assert "crawl c1: pending 0" in progress
    assert "links: 0 found, 0 new, 0 seen before, 0 refused" in progress   # a seed only


def test_requests_claimed_by_a_dead_monitor_are_answered_once_by_another(
        redis, test_settings, roles, wire):
    from message_processing.worklist import WorkList

    roles("preprocess")
    keys = Keys.from_settings(test_settings)
    for n in range(5):
        wire.send({"type": "stats", "userid": "u", "uuid": f"s{n}", "stats": "queue"})
    wait_for(lambda: redis.zcard(keys.monitor_work()) == 5, 60, "the queries stored")
    # A monitor claims them and dies before answering...
    assert len(WorkList(redis, keys, claim_seconds=3.0).claim(10)) == 5
    # ... another answers each once its claim runs out.
    roles("monitor", CRAWLCLUSTER_MONITOR_CLAIM_SECONDS=3.0)
    wire.collect(lambda replies: len(wire.by_uuid()) >= 5, timeout=60, settle=2.0)
    answered = wire.by_uuid()
    assert sorted(answered) == [f"s{n}" for n in range(5)]
    assert all(len(replies) == 1 for replies in answered.values())
    assert redis.zcard(keys.monitor_work()) == 0


@BOTH
def test_schedule_requests_and_two_masters_fire_each_run_once(frontier_redis,
                                                             frontier_settings, roles, wire):
    """A schedule added through Kafka, every 2 s, with two master processes running:
    one crawl per due time, each stored once with its seed queued once; bad schedules
    are refused naming the field; pause stops the runs."""
    for role in ("preprocess", "monitor"):
        roles(role)
    roles("master", name="master1")
    roles("master", name="master2")
    template = {key: value for key, value in crawl(1).items()
                if key not in ("type", "crawlid", "userid")}

    def ask(request):
        wire.send(request)
        wire.collect(lambda replies: request["uuid"] in wire.by_uuid())
        return wire.by_uuid()[request["uuid"]][-1]

    def schedule(uuid, **fields):
        return ask({"type": "schedule", "userid": "u1", "uuid": uuid, **fields})

    for n, (fields, field) in enumerate([
            ({"cron": "0 25 * * *"}, "cron"),
            ({"cron": "0 * * * *", "every": 60}, "cron"),
            ({"every": 0}, "every"),
            ({"every": 60, "crawl": {**template, "crawlid": "x"}}, "crawl.crawlid"),
            ({"every": 60, "crawl": {**template, "url": "ftp://x.com/"}}, "crawl.url"),
            ({"every": 60, "crawl": {**template, "maxdepth": -1}}, "crawl.maxdepth")]):
        reply = schedule(f"bad{n}", action="add", schedule_id="tick",
                         **{"crawl": template, **fields})
        assert reply["status"] == "error" and reply["field"] == field, reply
    assert schedule("nothing", action="pause", schedule_id="nope")["field"] == "schedule_id"

    added = schedule("add", action="add", schedule_id="tick", every=2, crawl=template)
    assert added["status"] == "ok" and added["next_due"], added
    time.sleep(11)
    paused = schedule("pause", action="pause", schedule_id="tick")
    assert paused["status"] == "ok" and paused["next_due"] is None
    [listed] = schedule("list", action="list")["schedules"]
    assert listed["id"] == "tick" and listed["paused"] and listed["every"] == 2

    keys = Keys.from_settings(frontier_settings)
    runs = sorted(crawlid for crawlid in frontier_redis.zrange(keys.crawls(), 0, -1)
                  if crawlid.startswith("tick-"))
    times = [datetime.strptime(crawlid[5:], "%Y%m%dT%H%M%SZ") for crawlid in runs]
    assert len(runs) >= 3, runs
    assert all((b - a).total_seconds() == 2 for a, b in itertools.pairwise(times)), runs
    counts = CrawlStore.from_settings(frontier_redis, frontier_settings)
    assert all(counts.progress(crawlid)["counts"] == {"queued": 1} for crawlid in runs)
    time.sleep(3)
    after = [crawlid for crawlid in frontier_redis.zrange(keys.crawls(), 0, -1)
             if crawlid.startswith("tick-")]
    assert len(after) <= len(runs) + 1           # at most one run was on its way at the pause


def test_a_monitor_whose_delivery_failed_answers_again_only_what_the_broker_lacks(
        redis, test_settings):
    """The broker stored two of five replies and went away: those two entries leave the
    work list; the other three keep their replies, which are looked for on the topic
    before they are sent again (answered anew, they would differ)."""
    from message_processing.monitor.service import Monitor
    from message_processing.worklist import WorkList
    from tests.message_processing.test_message_processing_preprocess import StoresTheFirst

    keys = Keys.from_settings(test_settings)
    worklist = WorkList(redis, keys)
    for n in range(5):
        request = {"type": "stats", "userid": "u", "uuid": f"s{n}", "stats": "queue"}
        worklist.add({"id": f"s{n}", "kind": "stats", "format": "thesis", "request": request})
    producer = StoresTheFirst(2)
    monitor = Monitor(test_settings, redis, producer)
    try:
        with pytest.raises(DeliveryFailed):
            monitor.run_once()
    finally:
        monitor.close()
    left = [json.loads(member)["id"] for member in redis.zrange(keys.monitor_work(), 0, -1)]
    stored = [json.loads(reply)["uuid"] for reply in producer.delivered]
    assert len(left) == 3 and not set(left) & set(stored)
    [(first, _)] = producer.asked

    producer = StoresTheFirst(None)
    monitor = Monitor(test_settings, redis, producer)
    try:
        assert monitor.run_once() == 3
    finally:
        monitor.close()
    [(again, unsure)] = producer.asked
    assert again == first[2:] and unsure == [0, 1, 2]      # the same bytes, looked for first
    assert redis.zcard(keys.monitor_work()) == 0
