"""The CLI client: send requests to the requests topic, wait for their replies.

A reply is matched to its request by ``uuid`` (the client adds one when the
request has none) or, for a message too broken to carry one, by the
``topic/partition/offset`` preprocess names it with.
"""

import json
import sys
import time
import uuid as uuid_module
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from kafka.errors import KafkaError

from message_processing.delivery import DeliveryFailed
from message_processing.requests import Message
from settings.errors import CrawlClusterError, ServerUnreachable
from settings.loader import Settings

# A request as sent: a JSON object, or raw bytes (a line of a file that is not JSON).
Outgoing = Message | bytes

ROLE = "client"


class ReplyTimeout(CrawlClusterError):
    pass


class NotDelivered(CrawlClusterError):
    """The broker did not confirm a request in time: it was not taken."""


class RequestClient:
    def __init__(self, settings: Settings, producer: Any, consumer: Any,
                 timeout: float) -> None:
        self.requests_topic = settings["CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC"]
        self.replies_topic = settings["CRAWLCLUSTER_KAFKA_REPLIES_TOPIC"]
        self.bootstrap = settings["CRAWLCLUSTER_KAFKA_BOOTSTRAP"]
        self.producer = producer
        self.consumer = consumer
        self.timeout = timeout

    @classmethod
    def from_settings(cls, settings: Settings, timeout: float | None = None) -> "RequestClient":
        from kafka import TopicPartition

        from message_processing.delivery import DeliveringProducer
        from settings.clients import ensure_topics, kafka_consumer

        ensure_topics(settings, ROLE)
        producer = DeliveringProducer(settings, ROLE)
        consumer = kafka_consumer(settings, ROLE, group_id=None, enable_auto_commit=False)
        topic = settings["CRAWLCLUSTER_KAFKA_REPLIES_TOPIC"]
        partitions = [TopicPartition(topic, p)
                      for p in sorted(consumer.partitions_for_topic(topic) or {0})]
        consumer.assign(partitions)
        consumer.seek_to_end()
        for partition in partitions:            # resolve now: replies come after this point
            consumer.position(partition)
        timeout = timeout or settings.getfloat("CRAWLCLUSTER_REPLY_TIMEOUT")
        return cls(settings, producer, consumer, timeout)

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()

    def send(self, request: Outgoing) -> tuple[str, str]:
        """Produce one request; return the key its reply will match (uuid or source)."""
        if isinstance(request, dict) and not request.get("uuid"):
            request = dict(request, uuid=uuid_module.uuid4().hex)
        raw = request if isinstance(request, bytes) else json.dumps(request).encode("utf-8")
        try:
            # Sent again (once not found on the topic) while the broker restarts, until
            # the timeout has passed.
            [metadata] = self.producer.deliver(self.requests_topic, [raw], self.timeout,
                                               give_up_after=self.timeout)
        except (KafkaError, DeliveryFailed, ServerUnreachable) as exc:
            raise NotDelivered(f"request not confirmed by the Kafka broker at "
                               f"{self.bootstrap} within {self.timeout:.0f} s "
                               f"({type(exc).__name__}); send it again") from None
        source = f"{metadata.topic}/{metadata.partition}/{metadata.offset}"
        return request["uuid"] if isinstance(request, dict) else source, source

    def replies(self, waiting: dict[str, str]) -> Iterator[tuple[str, Message | None]]:
        """Yield ``(key, reply)`` for each awaited key until all came or time ran out.

        ``waiting`` maps uuid -> source; a reply matches by uuid or by source.
        """
        by_source = {source: key for key, source in waiting.items()}
        pending = set(waiting)
        deadline = time.monotonic() + self.timeout
        while pending and time.monotonic() < deadline:
            for records in self.consumer.poll(timeout_ms=200).values():
                for record in records:
                    reply = _decode(record.value)
                    key = reply.get("uuid") if reply.get("uuid") in pending else \
                        by_source.get(str(reply.get("message")))
                    if key is not None and key in pending:
                        pending.discard(key)
                        yield key, reply
        for key in pending:
            yield key, None

    def ask(self, request: Outgoing) -> Message:
        """Send one request and return its reply, or raise ReplyTimeout."""
        key, source = self.send(request)
        for _, reply in self.replies({key: source}):
            if reply is None:
                raise ReplyTimeout(f"no reply to {key} within {self.timeout:.0f} s "
                                   "(are preprocess and monitor running?)")
            return reply
        raise ReplyTimeout(f"no reply to {key}")


def _decode(raw: bytes) -> Message:
    try:
        reply = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    return reply if isinstance(reply, dict) else {}


def read_requests(text: str) -> list[Any]:
    """Requests in a file: one JSON value, a JSON array of them, or JSON lines. A line
    that is not JSON is sent as it is (preprocess will say what is wrong with it)."""
    try:
        value = json.loads(text)
        return value if isinstance(value, list) else [value]
    except ValueError:
        return [json.loads(line) if _is_json(line) else line.encode("utf-8")
                for line in text.splitlines() if line.strip()]


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


# --- printing ----------------------------------------------------------------------------

def describe_render(render: dict[str, int]) -> str:
    """``info``'s rendering counts as a line of their own, if there are any."""
    line = ""
    if render.get("rendered") or render.get("patterns_learnt"):
        line = (f"\nrendered {render.get('rendered', 0)} pages in a browser; "
                f"{render.get('needed', 0)} compared pages needed it; URL patterns learnt "
                f"{render.get('patterns_learnt', 0)}, {render.get('patterns_rendered', 0)} "
                "of them rendered")
    if render.get("looks_scripted"):
        line += (f"\n{render['looks_scripted']} pages looked built by scripts, and the "
                 "rule renders none: try its render auto")
    return line


def describe(reply: Message | None) -> str:
    """One readable line (or a few) for a reply."""
    if reply is None:
        return "no reply (timed out)"
    if reply.get("status") == "error":
        field = f" [{reply['field']}]" if reply.get("field") else ""
        name = reply.get("uuid") or reply.get("crawlid") or reply.get("message")
        return f"error {name}{field}: {reply.get('error')}"
    action = reply.get("action")
    if action == "crawl":
        return f"accepted crawl {reply.get('crawlid')} ({reply.get('spider_type')})"
    if action == "info" and "domains" in reply:
        line = (f"crawl {reply.get('crawlid')}: {reply['total_pending']} pending over "
                f"{reply['total_domains']} domains; done {reply.get('done', 0)}, failed "
                f"{reply.get('failed', 0)}{', stopped' if reply.get('stopped') else ''}")
        found = (reply.get("links") or {}).get("found")
        pushback = pushback_note(reply.get("pushback") or {}, shown=5).strip()
        return (line + ("\n" + describe_links(reply["links"]) if found else "")
                + describe_render(reply.get("render") or {})
                + ("\n" + pushback if pushback else ""))
    if action == "schedule":
        return describe_schedule(reply)
    if action in ("pause", "resume"):
        total = reply.get("total_parked", reply.get("total_resumed"))
        verb = "parked" if action == "pause" else "back in the pools"
        return f"crawl {reply.get('crawlid')} {action}d: {total} tasks {verb}"
    if action in ("stop", "expired"):
        total = reply.get("total_purged", reply.get("total_expired"))
        return f"crawl {reply.get('crawlid', '(all of the app)')} {action}: {total} purged"
    if reply.get("status") == "ok":
        return f"{action} {reply.get('domain')}: done ({reply.get('znode')})"
    return json.dumps(reply, indent=2, sort_keys=True, ensure_ascii=False)


def describe_schedule(reply: Message) -> str:
    """``schedule list``: a line per schedule; the other actions: what was done."""
    if reply["schedule_action"] == "list":
        lines = [f"{item['id']}  {_when(item)}  next {item['next_due'] or '(paused)'}  "
                 f"crawls {item['crawl']['url']}" + ("  as a series" if item.get("series") else "")
                 for item in reply["schedules"]]
        return "\n".join(lines) or "no schedules"
    due = f", next run {reply['next_due']}" if reply.get("next_due") else ""
    return f"schedule {reply['schedule_id']}: {reply['schedule_action']} done{due}"


def _when(schedule: Message) -> str:
    if "cron" in schedule:
        return f"cron '{schedule['cron']}'"
    return f"every {schedule['every']:g} s"


def describe_links(links: Message) -> str:
    """What became of the links a crawl's pages yielded, refusals by reason, e.g.
    ``links: 120 found, 80 new, 30 seen before, 10 refused (rule 6, robots 4)``."""
    refused = links.get("refused") or {}
    reasons = ", ".join(f"{reason} {count}" for reason, count in
                        sorted(refused.items(), key=lambda pair: (-pair[1], pair[0])))
    return (f"links: {links.get('found', 0)} found, {links.get('new', 0)} new, "
            f"{links.get('duplicate', 0)} seen before, {sum(refused.values())} refused"
            + (f" ({reasons})" if reasons else ""))


def print_reply(reply: Message | None, as_json: bool, out: TextIO = sys.stdout) -> None:
    print(json.dumps(reply, sort_keys=True, ensure_ascii=False) if as_json else describe(reply),
          file=out, flush=True)


def submit(client: RequestClient, requests: Iterable[Outgoing], as_json: bool,
           out: TextIO = sys.stdout) -> int:
    """Send every request, then print each reply; exit status 1 if any failed."""
    waiting = dict(client.send(request) for request in requests)
    failed = 0
    for _, reply in client.replies(waiting):
        print_reply(reply, as_json, out)
        failed += reply is None or reply.get("status") == "error"
    return 1 if failed else 0


def watch(client: RequestClient, request: Message, every: float = 2.0,
          out: TextIO = sys.stderr, as_json: bool = False) -> int:
    """Poll ``info`` until the crawl has nothing pending; a live progress line."""
    history: list[tuple[float, int]] = []
    while True:
        reply = client.ask(dict(request, uuid=uuid_module.uuid4().hex))
        if reply.get("status") == "error":
            print_reply(reply, as_json, out)
            return 1
        now = time.monotonic()
        finished = reply.get("done", 0) + reply.get("failed", 0)
        history = [(at, n) for at, n in history if now - at <= 60] + [(now, finished)]
        span = history[-1][0] - history[0][0]
        rate = (history[-1][1] - history[0][1]) / span * 60 if span > 0 else 0.0
        links = reply.get("links") or {}
        line = (f"crawl {reply.get('crawlid')}: pending {reply['total_pending']}  done "
                f"{reply.get('done', 0)}  failed {reply.get('failed', 0)}  "
                f"{rate:.0f} pages/min  links {links.get('found', 0)}, "
                f"{links.get('new', 0)} new{pushback_note(reply.get('pushback') or {})}")
        if as_json:
            print(json.dumps(reply, sort_keys=True), file=out, flush=True)
        else:
            print("\r" + line.ljust(79), end="", file=out, flush=True)
        drained = reply["total_pending"] == 0 and (finished or reply.get("stopped"))
        if drained:
            if not as_json:
                print("\n" + describe_links(links), file=out, flush=True)
            return 0
        time.sleep(every)


def pushback_note(pushback: dict[str, dict[str, Any]], shown: int = 2) -> str:
    """The domains pushing back most, for ``watch``'s line: "  pushback site x0.35
    paused 12s (429, 7)"."""
    worst = sorted(pushback.items(), key=lambda item: (item[1]["factor"], item[0]))[:shown]
    notes = [f"{domain} x{state['factor']:.2f}"
             + (f" paused {state['paused_for']:.0f}s" if state["paused_for"] > 0 else "")
             + f" ({state['reason']}, {state['pushbacks']})" for domain, state in worst]
    more = f" +{len(pushback) - shown}" if len(pushback) > shown else ""
    return f"  pushback {', '.join(notes)}{more}" if notes else ""
