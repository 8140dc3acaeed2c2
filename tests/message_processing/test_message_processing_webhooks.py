"""Webhook deliveries: signed, retried with backoff from Redis across a receiver's outage
and a monitor's restart, each event delivered once, logged; private addresses refused."""

import hmac
import json
import subprocess
import sys

from crawler.urlguard import UrlGuard
from manager.local.crawl import cluster_env
from manager.local.ports import free_port
from master.counters import WindowCounts
from master.keys import Keys
from message_processing.events.outbox import EventOutbox
from message_processing.events.webhooks import (
    REDIRECT_ATTEMPTS,
    RetryPolicy,
    Webhooks,
    signature,
)
from tests.message_processing.receiver import Receiver

SECRET = "s3cret"


class Clock:
    """The test's time: the backoff is driven by it, not waited for."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def webhooks(redis, settings, clock, networks=("127.0.0.0/8",), **extra):
    return Webhooks(redis, Keys.from_settings(settings), UrlGuard(networks), SECRET,
                    RetryPolicy(backoff=1.0, backoff_max=32.0, max_attempts=20),
                    timeout=2.0, clock=clock, **extra)


def event(n):
    return {"id": f"crawl-{n}:finished", "type": "finished", "crawlid": f"crawl-{n}",
            "time": 1.0, "data": {"pages": n}}


def test_deliveries_survive_a_minute_of_receiver_outage_and_a_restart(redis, test_settings):
    clock = Clock()
    receiver = Receiver(free_port())            # down: nothing listens on its port yet
    hooks = webhooks(redis, test_settings, clock)
    for n in range(5):
        hooks.add(receiver.url, event(n))
    start = clock.now
    try:
        while clock.now - start < 90:
            if clock.now - start >= 60 and receiver.server is None:
                receiver.start()                # back after a minute
            if clock.now - start == 30:         # the monitor restarts: state is in Redis
                hooks = webhooks(redis, test_settings, clock)
            hooks.deliver_due()
            clock.now += 1
    finally:
        receiver.stop()
    ids = [body["id"] for body in receiver.bodies()]
    assert sorted(ids) == [f"crawl-{n}:finished" for n in range(5)]      # each once
    assert hooks.pending() == 0
    log = hooks.log()
    assert {entry["outcome"] for entry in log} == {"delivered", "retry"}
    tries = sorted(entry["attempt"] for entry in log if entry["event"] == "crawl-0:finished")
    assert tries == [1, 2, 3, 4, 5, 6, 7]      # at 0, 1, 3, 7, 15, 31 s: down; 63 s: up
    first = receiver.received[0]
    assert hmac.compare_digest(first["headers"]["X-Crawlcluster-Signature"],
                               signature(SECRET, first["raw"]))
    assert first["headers"]["X-Crawlcluster-Delivery"] == first["body"]["id"]
    shown = json.loads(subprocess.run(            # the log, through the CLI
        [sys.executable, "-m", "manager.cli", "webhooks", "--crawlid", "crawl-0", "--json"],
        env=cluster_env(test_settings), capture_output=True, check=True).stdout)
    assert [entry["outcome"] for entry in shown["attempts"]] == ["delivered"] + ["retry"] * 6
    assert shown["pending"] == 0


def test_a_private_address_is_refused_unless_allowed(redis, test_settings):
    clock = Clock()
    receiver = Receiver(free_port()).start()
    try:
        hooks = webhooks(redis, test_settings, clock, networks=())
        hooks.add(receiver.url, event(1))
        hooks.deliver_due()
        assert receiver.received == []
        assert hooks.pending() == 0             # refused for good: not retried
        [entry] = hooks.log()
        assert entry["outcome"] == "given_up" and "private_address" in entry["error"]
        given_up = WindowCounts.from_settings(redis, test_settings, "monitor:webhooks:given_up")
        assert given_up.values()["lifetime"] == 1
    finally:
        receiver.stop()


def test_backoff_doubles_up_to_its_cap():
    policy = RetryPolicy(backoff=5.0, backoff_max=60.0)
    assert [policy.wait(n) for n in (1, 2, 3, 4, 5)] == [5.0, 10.0, 20.0, 40.0, 60.0]


def test_a_name_that_does_not_resolve_yet_is_tried_again(redis, test_settings):
    """A DNS failure may pass (a receiver's name not yet published): the delivery waits
    for its next attempt instead of being given up."""
    clock = Clock()
    hooks = webhooks(redis, test_settings, clock)
    hooks.add("http://receiver.invalid/hook", event(7))
    assert hooks.deliver_due() == 1
    [entry] = hooks.log()
    assert entry["outcome"] == "retry", entry
    assert hooks.pending() == 1


def test_a_webhook_urls_token_is_never_logged(redis, test_settings, caplog):
    """A URL's path and query may carry a token: logs and the delivery log show its
    scheme and host only."""
    caplog.set_level("INFO")
    port = free_port()
    hooks = webhooks(redis, test_settings, Clock())
    hooks.add(f"http://127.0.0.1:{port}/hook/tok3n-path?key=tok3n-query", event(1))
    hooks.deliver_due()                           # nothing listens: retried
    refusing = webhooks(redis, test_settings, Clock(), networks=())
    refusing.add(f"http://127.0.0.1:{port}/hook/tok3n-path?key=tok3n-query", event(2))
    refusing.deliver_due()                        # refused by the guard: given up
    log = hooks.log()
    assert {entry["outcome"] for entry in log} == {"retry", "given_up"}
    assert {entry["url"] for entry in log} == {f"http://127.0.0.1:{port}"}
    assert "tok3n" not in json.dumps(log) and "tok3n" not in caplog.text
    assert f"http://127.0.0.1:{port}" in caplog.text


def test_a_redirect_is_not_followed_and_given_up_after_a_few_attempts(
        redis, test_settings, caplog):
    clock = Clock()
    receiver = Receiver(free_port(), status=302,
                        location="https://elsewhere.example/moved?key=tok3n").start()
    try:
        hooks = webhooks(redis, test_settings, clock)
        hooks.add(receiver.url, event(3))
        for _ in range(60):                       # a minute of the test's clock
            hooks.deliver_due()
            clock.now += 1
    finally:
        receiver.stop()
    assert len(receiver.received) == REDIRECT_ATTEMPTS and hooks.pending() == 0
    outcomes = [entry["outcome"] for entry in reversed(hooks.log())]
    assert outcomes == ["retry"] * (REDIRECT_ATTEMPTS - 1) + ["given_up"]
    assert "https://elsewhere.example" in hooks.log()[0]["error"]
    assert "tok3n" not in caplog.text
    redirected = WindowCounts.from_settings(redis, test_settings, "monitor:webhooks:redirected")
    assert redirected.values()["lifetime"] == REDIRECT_ATTEMPTS


def test_a_refused_webhook_names_the_webhook_setting(redis, test_settings):
    settings = test_settings.copy_with(CRAWLCLUSTER_WEBHOOK_ALLOWED_NETWORKS=[])
    hooks = Webhooks(redis, Keys.from_settings(settings), UrlGuard.for_webhooks(settings),
                     SECRET, RetryPolicy(), clock=Clock())
    hooks.add(f"http://127.0.0.1:{free_port()}/hook", event(4))
    hooks.deliver_due()
    [entry] = hooks.log()
    assert entry["outcome"] == "given_up"
    assert "CRAWLCLUSTER_WEBHOOK_ALLOWED_NETWORKS" in entry["error"]
    assert "CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS" not in entry["error"]


def test_deliveries_waiting_for_one_host_are_capped(redis, test_settings):
    """A receiver down for long (or a crawl naming one host many times) holds at most
    max_per_host deliveries; past it an event's delivery is dropped, logged, counted."""
    clock = Clock()
    keys = Keys.from_settings(test_settings)
    hooks = webhooks(redis, test_settings, clock, max_per_host=2)
    receiver = Receiver(free_port())                  # down
    outbox = EventOutbox(redis, keys, claim_ttl=60, webhooks=hooks,
                         notify_of=lambda crawlid: [receiver.url], clock=clock)
    for n in range(3):
        outbox.claim(f"crawl-{n}:ended", event(n))
    assert outbox.send_due(lambda values: None) == 3
    assert hooks.pending() == 2
    hooks.deliver_due()                               # failed tries stay counted
    assert hooks.pending() == 2
    [dropped] = [entry for entry in hooks.log() if entry["outcome"] == "dropped"]
    assert dropped["event"] == "crawl-2:finished" and "at most 2" in dropped["error"]
    counted = WindowCounts.from_settings(redis, test_settings, "monitor:webhooks:dropped")
    assert counted.values()["lifetime"] == 1
    receiver.start()
    try:
        clock.now += 60
        hooks.deliver_due()
    finally:
        receiver.stop()
    assert hooks.pending() == 0 and len(receiver.bodies()) == 2
    assert redis.zcard(keys.webhook_host_queue("127.0.0.1")) == 0     # room again


def test_deliveries_waiting_in_all_are_capped(redis, test_settings):
    """Crawls naming many receiver hosts (each under its own cap) hold at most max_queued
    deliveries in all; past it a delivery is dropped, logged, counted."""
    clock = Clock()
    keys = Keys.from_settings(test_settings)
    hooks = webhooks(redis, test_settings, clock, max_queued=3)
    outbox = EventOutbox(redis, keys, claim_ttl=60, webhooks=hooks, clock=clock,
                         notify_of=lambda crawlid: [f"http://{crawlid}.invalid/hook"])
    for n in range(5):
        outbox.claim(f"crawl-{n}:ended", event(n))
    assert outbox.send_due(lambda values: None) == 5
    assert hooks.pending() == 3
    dropped = [entry for entry in hooks.log() if entry["outcome"] == "dropped"]
    assert len(dropped) == 2 and all("at most 3 in all" in entry["error"] for entry in dropped)
    counted = WindowCounts.from_settings(redis, test_settings, "monitor:webhooks:dropped")
    assert counted.values()["lifetime"] == 2
