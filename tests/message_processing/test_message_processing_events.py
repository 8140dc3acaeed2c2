"""Crawl events end to end: real crawls over a generated site (nginx), two monitor
processes, Kafka, Redis, MongoDB, a webhook receiver and Alertmanager."""

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from manager.local.alerting import RULES, LocalAlerting
from manager.local.crawl import run_crawl, submit
from manager.local.demo import UNIVERSAL_RULE
from manager.local.ports import free_port
from manager.local.processes import stop_process
from manager.local.sitegen import DEFAULT_HOSTS, SiteSpec, generate_site
from manager.local.staticsite import StaticSite
from master.keys import Keys
from master.sitehealth import SiteCounts, SiteHealth, site_health_of
from message_processing.events import make_event
from message_processing.events.outbox import EventOutbox
from message_processing.events.sitechecks import (
    Broken,
    Thresholds,
    final_checks,
    recent_coverage,
)
from message_processing.events.watch import CrawlEvents, WatchOptions
from settings.clients import kafka_admin
from settings.jsonschemas import SchemaChecker
from tests.message_processing.receiver import Receiver
from tests.message_processing.test_message_processing_intake import Role
from tests.message_processing.test_message_processing_webhooks import SECRET

SCHEMA = Path(__file__).resolve().parents[2] / "message_processing" / "schemas" / "event.json"
BROKEN = DEFAULT_HOSTS[1]        # its layout changes halfway: detail titles lose their <h1>


@pytest.fixture(scope="module")
def changing_site(tmp_path_factory):
    """The generated site, served; ``change_layout()`` drops the title's <h1> from every
    detail page of one host."""
    root = tmp_path_factory.mktemp("events-site")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=30, gbk_page=False)
    manifest = generate_site(root, spec)

    def change_layout():
        for path in (root / "www" / BROKEN / "news").glob("*.html"):
            path.write_text(path.read_text().replace('<h1 class="title">', '<h2 class="title">')
                            .replace("</h1>", "</h2>"))

    site = StaticSite(root / "www", spec.hosts, spec.port, root / "run").start()
    yield manifest, change_layout
    site.stop()


def change_layout_once_judged(redis, keys, crawlid, change_layout):
    """A thread changing the site's layout once a monitor has judged ``BROKEN``'s title
    as matching (its coverage over a first stretch of items): halfway through its pages."""
    def watch():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            raw = redis.hget(keys.event_watch(), crawlid)
            state = json.loads(raw) if raw else {}
            if "title" in state.get("sites", {}).get(BROKEN, {}).get("had", ()):
                change_layout()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def events_topic(test_settings):
    from kafka.admin import NewTopic

    name = test_settings["CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC"].replace("requests", "events")
    admin = kafka_admin(test_settings, "test")
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    yield name
    admin.delete_topics([name])
    admin.close()


@pytest.fixture
def receiver():
    hook = Receiver(free_port()).start()
    yield hook
    hook.stop()


def quick_rules(path):
    """The shipped alert rules with every ``for:`` at 1 s: the same rules fire, in seconds."""
    rules = yaml.safe_load(RULES.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule["for"] = "1s"
    path.write_text(yaml.safe_dump(rules))
    return path


@pytest.fixture
def alertmanager(test_settings, receiver, tmp_path):
    """The exporter, and Prometheus and Alertmanager as ``services up --alerting`` starts
    them (Prometheus scraping the exporter and evaluating the shipped rules every second),
    alerts to the receiver's ``/alerts``."""
    settings = test_settings.copy_with(
        CRAWLCLUSTER_STATE_DIR=str(tmp_path / "state"),
        CRAWLCLUSTER_EXPORTER_ADDRESS=f"127.0.0.1:{free_port()}",
        CRAWLCLUSTER_PROMETHEUS_ADDRESS=f"127.0.0.1:{free_port()}",
        CRAWLCLUSTER_ALERTMANAGER_ADDRESS=f"127.0.0.1:{free_port()}",
        CRAWLCLUSTER_ALERT_WEBHOOK=f"http://127.0.0.1:{receiver.port}/alerts",
        CRAWLCLUSTER_ALERT_GROUP_WAIT=1)
    exporter = Role("exporter", settings, tmp_path / "exporter.log",
                    CRAWLCLUSTER_EXPORTER_ADDRESS=settings["CRAWLCLUSTER_EXPORTER_ADDRESS"])
    alerting = LocalAlerting(settings, out=lambda line: None,
                             rules=quick_rules(tmp_path / "alerts.yml"), interval=1)
    alerting.up()
    yield settings
    for kind in ("prometheus", "alertmanager"):
        record = alerting.state.recorded(kind)
        if record:
            stop_process(record["pid"])
    exporter.stop()


@pytest.fixture
def monitors(test_settings, kafka_topics, events_topic, tmp_path):
    started = [Role("monitor", test_settings, tmp_path / f"monitor{n}.log",
                    CRAWLCLUSTER_KAFKA_EVENTS_TOPIC=events_topic,
                    CRAWLCLUSTER_EVENTS_INTERVAL=0.3, CRAWLCLUSTER_EVENTS_SETTLE=3,
                    CRAWLCLUSTER_WEBHOOK_SECRET=SECRET, CRAWLCLUSTER_WEBHOOK_BACKOFF=0.5,
                    CRAWLCLUSTER_WEBHOOK_ALLOWED_NETWORKS='["127.0.0.0/8"]')
               for n in range(2)]
    yield started
    for monitor in started:
        monitor.stop()


def topic_events(settings, topic, until, timeout=120.0):
    """The events on ``topic`` once ``until(events)`` holds (then 3 s more)."""
    from kafka import TopicPartition

    from settings.clients import kafka_consumer

    consumer = kafka_consumer(settings, "test", group_id=None)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    settle = None
    try:
        while settle is None or time.monotonic() < settle:
            assert time.monotonic() < deadline, f"events so far: {[e['id'] for e in events]}"
            for batch in consumer.poll(timeout_ms=300).values():
                events += [json.loads(record.value) for record in batch]
            if settle is None and until(events):
                settle = time.monotonic() + 3
    finally:
        consumer.close()
    return events


def of_type(events, kind):
    return [event for event in events if event["type"] == kind]


def test_a_layout_change_gives_one_site_broken_then_finished_once_each(
        test_settings, mongo_db, redis, changing_site, monitors, receiver, alertmanager,
        events_topic, tmp_path):
    manifest, change_layout = changing_site
    submit(test_settings, {"crawlid": "news", "userid": "u1", "spider_type": "universal",
                           "url": manifest["start_url"], "rule": UNIVERSAL_RULE,
                           "maxdepth": 10, "notify": [receiver.url]})
    changer = change_layout_once_judged(redis, Keys.from_settings(test_settings), "news",
                                        change_layout)
    # 5 pages a second a site: the monitors judge a first stretch of the site's items
    # before its layout changes, and enough come after
    assert run_crawl(test_settings, "universal", tmp_path, CRAWLCLUSTER_THROTTLE_HITS="5",
                     CRAWLCLUSTER_THROTTLE_WINDOW="1") == [0]
    assert not changer.is_alive()
    events = topic_events(test_settings, events_topic, lambda found: of_type(found, "finished"))

    checker = SchemaChecker.from_file(SCHEMA)
    assert all(checker.first_error(event) is None for event in events)
    ids = [event["id"] for event in events]
    assert len(ids) == len(set(ids))           # two monitors, each event sent once
    assert {event["type"] for event in events} == {"started", "site_broken", "finished"}
    [broken] = of_type(events, "site_broken")
    assert (broken["site"], broken["field"]) == (BROKEN, "title")
    [finished] = of_type(events, "finished")
    record = mongo_db["crawls"].find_one({"crawlid": "news"})
    stored = mongo_db["items_universal"].count_documents({"crawlid": "news"})
    assert finished["data"]["items"] == stored > 0
    assert (finished["data"]["pages"], finished["data"]["failures"]) == (record["pages"], 0)
    assert finished["data"]["sites"][BROKEN]["coverage"]["title"] < 0.8
    assert all(site["coverage"]["title"] == 1.0 for host, site
               in finished["data"]["sites"].items() if host != BROKEN)

    deadline = time.monotonic() + 30            # the webhook: the same events, signed
    while len(receiver.bodies()) < len(events) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sorted(body["id"] for body in receiver.bodies()) == sorted(ids)

    # Prometheus's own rule fires on the exporter's coverage; Alertmanager notifies
    deadline = time.monotonic() + 60
    while not coverage_alerts(receiver) and time.monotonic() < deadline:
        time.sleep(0.5)
    fired = coverage_alerts(receiver)
    assert {(alert["labels"]["site"], alert["labels"]["field"]) for alert in fired} == {
        (BROKEN, "title")}
    assert all(alert["labels"]["crawlid"] == "news" for alert in fired)
    assert BROKEN in fired[0]["annotations"]["summary"]


def coverage_alerts(receiver):
    """The SiteFieldCoverageLow alerts of Alertmanager's notifications at the receiver."""
    return [alert for body in receiver.bodies("/alerts") for alert in body["alerts"]
            if alert["labels"]["alertname"] == "SiteFieldCoverageLow"]


def test_a_crawl_whose_every_request_fails_gives_failed(test_settings, mongo_db, redis,
                                                        monitors, events_topic, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/nothing-listens-here.html"
    submit(test_settings, {"crawlid": "doomed", "userid": "u1", "spider_type": "universal",
                           "url": url, "rule": UNIVERSAL_RULE})
    run_crawl(test_settings, "universal", tmp_path)
    events = topic_events(test_settings, events_topic, lambda found: of_type(found, "failed"))
    [failed] = of_type(events, "failed")
    assert failed["data"]["reason"] == "every request failed"
    assert failed["data"]["failures"] == 1 and failed["data"]["pages"] == 0
    assert not of_type(events, "finished")


def site(items, title, date=None, expected=None):
    figures = SiteHealth("a", pages=items, items=items,
                         matched={"title": title, "date": items if date is None else date})
    figures.expected = expected or {"title": items, "date": items}
    return figures


def test_a_field_the_site_had_failing_on_recent_items_is_broken_once_enough_came():
    limits = Thresholds(coverage_min=0.8, min_items=10)
    found, kept = recent_coverage("a", site(10, 10), None, limits)
    assert found == [] and kept["had"] == ["date", "title"]
    assert recent_coverage("a", site(15, 15), kept, limits) == ([], None)   # 5: too few
    found, kept = recent_coverage("a", site(30, 16), kept, limits)
    assert [(b.site, b.field, b.reason) for b in found] == [("a", "title", "coverage")]
    assert found[0].details["coverage"] == 0.3 and kept["expected"]["title"] == 30
    pages_only = site(0, 0)
    pages_only.pages = 4
    final = final_checks({"a": site(30, 30), "b": pages_only}, limits, previous={"c": 40})
    assert [(b.site, b.reason) for b in final] == [("b", "no_items"), ("c", "previous_run")]


def test_a_field_a_site_never_had_is_not_broken():
    """An optional field that a site's pages never carry, or a field the site's layout
    never matched, is no change: neither while the crawl runs nor at its end."""
    limits = Thresholds(coverage_min=0.8, min_items=10)
    found, kept = recent_coverage("a", site(12, 12, date=0), None, limits)
    assert found == [] and kept["had"] == ["title"]
    found, kept = recent_coverage("a", site(30, 30, date=0), kept, limits)
    assert found == [] and kept["had"] == ["title"]
    whole = site(30, 30, date=0)
    assert final_checks({"a": whole}, limits, had={"a": kept["had"]}) == []
    fell = site(30, 12)
    assert [(b.field, b.details["over"]) for b in final_checks(
        {"a": fell}, limits, had={"a": ["title"]})] == [("title", "whole crawl")]


def test_coverage_counts_the_fields_of_the_rule_that_made_the_item_and_real_values():
    """A crawl with two rules: an article's items are not counted against the product
    rule's field; 0 is a value, "", None and [] are not."""
    counts = SiteCounts()
    fields = ["title", "price", "tags"]
    for n in range(10):
        counts.item("c", "a", fields, {"title": "T", "tags": ["x"] if n < 8 else []}, [])
        counts.item("c", "a", fields, {"title": "" if n < 5 else "P", "price": 0}, [])
    raw = {f"{s} {m}": str(v) for (s, m), v in counts.take()["c"].items()}
    health = site_health_of(raw)["a"]
    assert health.coverage == {"title": 0.75, "tags": 0.8, "price": 1.0}
    assert health.expected == {"title": 20, "tags": 10, "price": 10}


def test_site_broken_ids_differ_by_reason():
    config = {"crawlid": "c1", "userid": "u1"}
    ids = {make_event("site_broken", config, {}, site="a.example", reason=reason)["id"]
           for reason in ("no_items", "previous_run")}
    ids.add(make_event("site_broken", config, {}, site="a.example", field="title",
                       reason="coverage")["id"])
    assert ids == {"c1:site_broken:no_items:a.example", "c1:site_broken:previous_run:a.example",
                   "c1:site_broken:coverage:a.example:title"}


def test_site_broken_events_of_a_crawl_are_capped(redis, test_settings, caplog):
    keys = Keys.from_settings(test_settings)
    outbox = EventOutbox(redis, keys, claim_ttl=60, webhooks=None, notify_of=lambda c: [])
    watch = CrawlEvents(redis, keys, outbox, lambda crawlid: {},
                        WatchOptions(site_broken_max=3))
    found = [Broken(f"site{n}.example", None, "no_items", {}) for n in range(5)]
    state = {"sites": {}}
    watch.emit_broken({"crawlid": "many"}, found, state)
    watch.emit_broken({"crawlid": "many"}, found, state)       # claimed ones count once
    sent = []
    outbox.send_due(sent.extend)
    assert [json.loads(value)["site"] for value in sent] == [
        "site0.example", "site1.example", "site2.example"]
    assert state["broken"] == 3
    assert "CRAWLCLUSTER_EVENTS_SITE_BROKEN_MAX" in caplog.text


def test_an_event_is_claimed_once_however_many_monitors_see_it(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    outboxes = [EventOutbox(redis, keys, claim_ttl=60, webhooks=None,
                            notify_of=lambda crawlid: []) for _ in range(2)]
    event = make_event("finished", {"crawlid": "c1", "userid": "u1"}, {"pages": 3})
    claims = [outbox.claim("c1:ended", event) for _ in range(3) for outbox in outboxes]
    assert claims == [True, False, False, False, False, False]
    sent = []
    assert outboxes[1].send_due(sent.extend) == 1
    assert outboxes[0].send_due(sent.extend) == 0          # out of the outbox once sent
    assert [json.loads(value)["id"] for value in sent] == ["c1:finished"]
    assert 0 < redis.ttl(keys.event_claim("c1:ended")) <= 60


def test_a_crawl_without_progress_with_work_pending_is_stalled_once(redis, test_settings):
    keys = Keys.from_settings(test_settings)
    now = [time.time()]
    outbox = EventOutbox(redis, keys, claim_ttl=60, webhooks=None, notify_of=lambda c: [],
                         clock=lambda: now[0])
    watch = CrawlEvents(redis, keys, outbox, lambda crawlid: {},
                        WatchOptions(stall_seconds=600), clock=lambda: now[0])
    submit(test_settings, {"crawlid": "idle", "userid": "u1", "spider_type": "universal",
                           "url": "http://127.0.0.1:9/", "rule": UNIVERSAL_RULE})
    sent = []
    for step in (0, 300, 301, 400):      # the seed waits: no spider runs
        now[0] += step
        watch.run_once()
        outbox.send_due(sent.extend)
    kinds = [json.loads(value)["type"] for value in sent]
    assert kinds == ["started", "stalled"]
    assert json.loads(sent[1])["data"]["pending"] == 1



def test_every_crawl_of_the_index_is_looked_at_not_only_the_newest(redis, test_settings):
    """With more crawls than CRAWLCLUSTER_EVENTS_CRAWLS, each look takes the newest and the
    next of the older ones in turn: a crawl past the newest still gets its events, and a
    look stays bounded."""
    keys = Keys.from_settings(test_settings)
    outbox = EventOutbox(redis, keys, claim_ttl=60, webhooks=None, notify_of=lambda c: [])
    watch = CrawlEvents(redis, keys, outbox, lambda crawlid: {}, WatchOptions(crawls=2))
    crawlids = [f"many-{n}" for n in range(7)]
    for crawlid in crawlids:
        submit(test_settings, {"crawlid": crawlid, "userid": "u1", "spider_type": "universal",
                               "url": "http://127.0.0.1:9/", "rule": UNIVERSAL_RULE})
    redis.zadd(keys.crawls(), {crawlid: n for n, crawlid in enumerate(crawlids)})
    looked = [watch.run_once() for _ in range(4)]
    assert looked == [4, 4, 3, 4]        # the newest two, and two of the five older in turn
    sent = []
    outbox.send_due(sent.extend)
    started = {json.loads(value)["crawlid"] for value in sent
               if json.loads(value)["type"] == "started"}
    assert started == set(crawlids)
    assert set(redis.hkeys(keys.event_watch())) == set(crawlids)

def test_a_crawl_whose_rule_makes_no_items_is_not_failed_for_having_none():
    """A link-check crawl (rules that only follow) or a user spider's (its items go
    through its own pipelines) ends `finished` with no items; a rule with fields that
    stored none ends `failed`."""
    from message_processing.events.watch import expects_items, failure_of

    summary = {"pages": 40, "failures": 0, "items": 0, "stopped": False}
    follow_only = {"spider_type": "universal", "rule": {"rules": [{"follow": True}]}}
    with_fields = {"spider_type": "universal",
                   "rule": {"rules": [{"fields": {"title": "//h1/text()"}}]}}
    user_spider = {"spider_type": "myproject.news", "rule": None}
    assert failure_of(summary, expects_items(follow_only)) is None
    assert failure_of(summary, expects_items(user_spider)) is None
    assert failure_of(summary, expects_items(with_fields)) == "no items"


def test_an_events_claim_outlives_the_crawls_retention(redis, test_settings):
    """A crawl kept 30 days after it ended keeps its claims longer: its events are not
    sent again while it is still in the crawl index."""
    from message_processing.events.runner import EventRunner

    settings = test_settings.copy_with(CRAWLCLUSTER_CRAWL_RETENTION=30 * 86400.0)
    runner = EventRunner(settings, redis, producer=None, guard=None)
    event = make_event("finished", {"crawlid": "kept", "userid": "u1"}, {"pages": 1})
    assert runner.outbox.claim("kept:ended", event)
    assert redis.ttl(Keys.from_settings(settings).event_claim("kept:ended")) > 30 * 86400
    assert runner.watch.options.claim_ttl > 30 * 86400


def test_an_ended_crawls_claim_lives_as_long_as_the_crawl_is_in_the_index(redis, test_settings):
    """A crawl retiring late (its masters down for long) keeps its ended claim: each look
    gives it its full time again, so finished is not sent twice."""
    keys = Keys.from_settings(test_settings)
    outbox = EventOutbox(redis, keys, claim_ttl=600, webhooks=None, notify_of=lambda c: [])
    watch = CrawlEvents(redis, keys, outbox, lambda crawlid: {}, WatchOptions())
    submit(test_settings, {"crawlid": "late", "userid": "u1", "spider_type": "universal",
                           "url": "http://127.0.0.1:9/", "rule": UNIVERSAL_RULE})
    event = make_event("finished", {"crawlid": "late", "userid": "u1"}, {"pages": 1})
    assert outbox.claim("late:ended", event)
    redis.expire(keys.event_claim("late:ended"), 5)        # about to run out
    assert watch.run_once() == 0
    assert redis.ttl(keys.event_claim("late:ended")) > 500


def test_a_layout_changed_between_two_runs_of_a_schedule_is_broken_at_the_runs_end(
        redis, test_settings):
    """A field a site covered over the schedule's previous run, matching nothing from the
    start of this one, is site_broken at its end; the run after, judged against this one
    (where the site had no title), is not."""
    keys = Keys.from_settings(test_settings)
    outbox = EventOutbox(redis, keys, claim_ttl=60, webhooks=None, notify_of=lambda c: [])
    watch = CrawlEvents(redis, keys, outbox, lambda crawlid: {}, WatchOptions())
    summary = {"pages": 30, "failures": 0, "items": 30, "dropped": 0, "pending": 0,
               "stopped": False}
    broken = []
    for day, title in (("01", 30), ("02", 0), ("03", 0)):
        config = {"crawlid": f"daily-202601{day}T000000Z", "userid": "u1"}
        watch.end(config, summary, {"a": site(30, title)}, 0.0,
                  {"sig": None, "since": 0.0, "sites": {}})
        sent = []
        outbox.send_due(sent.extend)
        broken += [json.loads(value) for value in sent
                   if json.loads(value)["type"] == "site_broken"]
    assert [(event["crawlid"], event["site"], event["field"], event["data"]["over"])
            for event in broken] == [("daily-20260102T000000Z", "a", "title", "whole crawl")]


def test_a_receiver_that_never_answers_holds_up_no_other_crawls_events(
        test_settings, redis, events_topic):
    """Webhook deliveries to a receiver that takes its whole timeout (any host a crawl's
    notify names) run beside the events: another crawl's event still reaches the events
    topic within a round."""
    import socket

    from crawler.urlguard import UrlGuard
    from message_processing.delivery import DeliveringProducer
    from message_processing.events.runner import EventRunner

    settings = test_settings.copy_with(CRAWLCLUSTER_KAFKA_EVENTS_TOPIC=events_topic,
                                       CRAWLCLUSTER_WEBHOOK_TIMEOUT=2.0)
    silent = socket.create_server(("127.0.0.1", 0), backlog=50)     # accepts, never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
    runner = EventRunner(settings, redis, DeliveringProducer(settings, "test"),
                         UrlGuard(["127.0.0.0/8"]))
    for n in range(3):
        runner.webhooks.add(url, make_event("stalled", {"crawlid": f"slow-{n}"}, {}))
    stopping = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stopping,), daemon=True)
    thread.start()
    try:
        time.sleep(1.0)                        # the deliveries to the silent receiver wait
        runner.outbox.claim("other:ended", make_event("finished", {"crawlid": "other"}, {}))
        claimed = time.monotonic()
        while redis.zcard(Keys.from_settings(settings).event_outbox()) and (
                time.monotonic() - claimed < 20):
            time.sleep(0.05)
        waited = time.monotonic() - claimed
    finally:
        stopping.set()
        thread.join(30)
        silent.close()
    assert waited < 2.5, f"the event waited {waited:.1f} s behind the webhook deliveries"
    events = topic_events(settings, events_topic, lambda found: found, timeout=30)
    assert [event["id"] for event in events] == ["other:finished"]
