"""Crawl events end to end: real crawls over a generated site (nginx), two monitor
processes, Kafka, Redis, MongoDB, a webhook receiver and Alertmanager."""

import json
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
from message_processing.events import make_event
from message_processing.events.outbox import EventOutbox
from message_processing.events.sitechecks import Thresholds, final_checks, recent_coverage
from message_processing.events.watch import CrawlEvents, WatchOptions
from settings.clients import kafka_admin
from settings.jsonschemas import SchemaChecker
from tests.message_processing.receiver import Receiver
from tests.message_processing.test_message_processing_intake import Role
from tests.message_processing.test_message_processing_webhooks import SECRET

SCHEMA = Path(__file__).resolve().parents[2] / "message_processing" / "schemas" / "event.json"
BROKEN = DEFAULT_HOSTS[1]        # its details from the 16th on lose their title's <h1>


@pytest.fixture(scope="module")
def changing_site(tmp_path_factory):
    """The generated site, one host's layout changed halfway through its detail pages."""
    root = tmp_path_factory.mktemp("events-site")
    spec = SiteSpec(port=free_port(DEFAULT_HOSTS), details_per_host=30, gbk_page=False)
    manifest = generate_site(root, spec)
    for page in manifest["pages"]:
        number = int(page["url"].rsplit("/", 1)[1].split(".")[0]) if "/news/" in page["url"] else 0
        if page["host"] == BROKEN and page["kind"] == "detail" and number > 15:
            path = root / "www" / BROKEN / "news" / f"{number}.html"
            path.write_text(path.read_text().replace('<h1 class="title">', '<h2 class="title">')
                            .replace("</h1>", "</h2>"))
    site = StaticSite(root / "www", spec.hosts, spec.port, root / "run").start()
    yield manifest, site
    site.stop()


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
    manifest, _ = changing_site
    submit(test_settings, {"crawlid": "news", "userid": "u1", "spider_type": "universal",
                           "url": manifest["start_url"], "rule": UNIVERSAL_RULE,
                           "maxdepth": 10, "notify": [receiver.url]})
    assert run_crawl(test_settings, "universal", tmp_path) == [0]
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


def test_a_field_failing_on_recent_items_is_broken_once_enough_came():
    class Site:
        def __init__(self, items, title):
            self.pages, self.items, self.matched = items, items, {"title": title, "date": items}

    limits = Thresholds(coverage_min=0.8, min_items=10)
    found, checked = recent_coverage("a", Site(15, 15), {"items": 10, "matched": {
        "title": 10, "date": 10}}, limits)
    assert (found, checked) == ([], False)     # 5 new items: too few to judge
    found, checked = recent_coverage("a", Site(30, 16), {"items": 10, "matched": {
        "title": 10, "date": 10}}, limits)
    assert checked and [(b.site, b.field, b.reason) for b in found] == [("a", "title",
                                                                         "coverage")]
    pages_only = Site(0, 0)
    pages_only.pages = 4
    final = final_checks({"a": Site(30, 30), "b": pages_only}, limits, previous={"c": 40})
    assert [(b.site, b.reason) for b in final] == [("b", "no_items"), ("c", "previous_run")]


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
