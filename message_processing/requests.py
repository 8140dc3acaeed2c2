"""Requests as they arrive on Kafka: decoded, routed by type, validated, normalized.

Every request type has one JSON Schema in ``schemas/`` (compiled once).
A request names its type in ``type``; scrapy-cluster's requests, which have
no ``type``, are recognised by the fields they must have, in a fixed order,
never by trying schemas in turn. Defaults from the schema are filled in. A
crawl's rule is checked with the crawler's own rule validation, its URL must
be http(s) with a valid host. Anything wrong raises ``RequestError`` with the
exact reason (and the field, where there is one).
"""

import json
import re
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from master.rules import SPIDER_TYPES, RuleError, rule_from_scrapy_cluster, validate_rule
from master.schedules import ScheduleError, check_when
from master.series import user_lineage
from settings import defaults
from settings.errors import CrawlClusterError
from settings.jsonschemas import SchemaChecker

Message = dict[str, Any]     # a decoded JSON object: a request, or a reply
SCHEMA_DIR = Path(__file__).parent / "schemas"
TYPES = ("crawl", "info", "stop", "pause", "resume", "schedule", "stats", "site_config",
         "sc_crawl", "sc_action", "sc_stats", "sc_zookeeper")
_HOST = re.compile(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                   r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")
SC_ZOOKEEPER_ACTIONS = ("domain-update", "domain-remove", "blacklist-update", "blacklist-remove")
# a JSON string (skipped whole, brackets in it are text) or one bracket. An unterminated
# string runs to the end of the text (its closing quote is optional): each character is
# read by one match only, so a scan is linear in the text, whatever the text is
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)


class RequestError(CrawlClusterError):
    """A request that cannot be accepted; ``reason`` says exactly why."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        self.reason = reason
        self.field = field
        super().__init__(f"{field}: {reason}" if field else reason)


@cache
def checker(request_type: str) -> SchemaChecker:
    return SchemaChecker.from_file(SCHEMA_DIR / f"{request_type}.json")


def decode(raw: bytes | None, max_bytes: int,
           max_depth: int = defaults.CRAWLCLUSTER_MAX_JSON_DEPTH) -> Message:
    """The JSON object in a Kafka message value, or RequestError."""
    if raw is None:
        raise RequestError("empty message")
    if len(raw) > max_bytes:
        raise RequestError(f"message of {len(raw)} bytes is over the {max_bytes}-byte limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"not UTF-8: {exc}") from None
    if nested_deeper_than(text, max_depth):
        # json.loads would recurse once per level and raise RecursionError
        raise RequestError(f"JSON nested deeper than {max_depth} levels "
                           "(CRAWLCLUSTER_MAX_JSON_DEPTH)")
    try:
        message = json.loads(text)
    except ValueError as exc:
        raise RequestError(f"not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise RequestError(f"not a JSON object but a {type(message).__name__}")
    return message


def nested_deeper_than(text: str, limit: int) -> bool:
    """Whether the arrays and objects in JSON ``text`` nest more than ``limit`` deep (read
    up to the first bracket past it), in one pass linear in the text's length: a string,
    even one never closed, is skipped whole, so brackets in it are not counted. Text with
    no more brackets than ``limit`` is not scanned at all: it cannot nest deeper."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return True
        elif token in "]}":
            depth -= 1
    return False


def request_type(message: Message) -> str:
    """The type a request is routed by: its ``type``, else scrapy-cluster's shape."""
    if "type" in message:
        if message["type"] not in TYPES:
            raise RequestError(f"unknown type {message['type']!r}; expected one of "
                               f"{', '.join(TYPES)}", "type")
        return str(message["type"])
    if "appid" in message:
        if "url" in message:
            return "sc_crawl"
        if "stats" in message:
            return "sc_stats"
        if message.get("action") in SC_ZOOKEEPER_ACTIONS:
            return "sc_zookeeper"
        if "action" in message:
            return "sc_action"
    raise RequestError("no 'type' field, and not a scrapy-cluster request "
                       "(appid with url, stats or action)", "type")


def validate(message: Message) -> tuple[str, Message]:
    """``(type, request with defaults)`` for a decoded message, or RequestError."""
    kind = request_type(message)
    error = checker(kind).first_error(message)
    if error is not None:
        field = ".".join(str(part) for part in error.absolute_path) or None
        raise RequestError(error.message, field)
    request = _with_defaults(kind, message)
    if kind in ("crawl", "sc_crawl"):
        if not is_cluster_spider(crawl_rule(kind, request)[0]) and "maxdepth" not in message:
            request.pop("maxdepth", None)   # a user spider's own DEPTH_LIMIT (preprocess)
        check_url(request["url"])
        for name in ("sitemaps", "feeds", "notify"):
            for n, url in enumerate(request.get(name) or ()):
                check_url(url, f"{name}.{n}")
        _check_rule(kind, request)
    if kind == "schedule" and request["action"] == "add":
        request["crawl"] = _checked_schedule(request)
    return kind, request


SET_BY_SCHEDULE = ("type", "crawlid", "userid", "uuid", "expires")


def _checked_schedule(request: Message) -> Message:
    """A schedule's timing checked, and its crawl checked as a crawl request of the
    schedule's user: the crawl's config, which each run submits under its own id."""
    try:
        check_when(request)
    except ScheduleError as exc:
        raise RequestError(exc.reason, exc.field) from None
    template = request["crawl"]
    for name in SET_BY_SCHEDULE + (("lineage",) if request.get("series") else ()):
        if name in template:
            raise RequestError("set by the schedule for each run; leave it out",
                               f"crawl.{name}")
    try:
        _, crawl = validate({**template, "type": "crawl", "userid": request["userid"],
                             "crawlid": request["schedule_id"]})
    except RequestError as exc:
        raise RequestError(exc.reason, f"crawl.{exc.field}" if exc.field else "crawl") from None
    config = crawl_config("crawl", crawl)
    return {name: value for name, value in config.items() if name not in SET_BY_SCHEDULE}


def route(kind: str, request: Message) -> str:
    """The plugin kind a validated request goes to (scrapy-cluster's formats mapped)."""
    if kind == "sc_action":
        return str(request["action"])                   # info | stop
    return {"sc_crawl": "crawl", "sc_stats": "stats",
            "sc_zookeeper": "site_config"}.get(kind, kind)


def _with_defaults(kind: str, message: Message) -> Message:
    return {**checker(kind).defaults(), **message}


def check_url(url: str, field: str = "url") -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise RequestError(f"URL scheme must be http or https, not {parts.scheme!r}", field)
    try:
        host, _ = parts.hostname, parts.port
    except ValueError as exc:
        raise RequestError(f"bad URL: {exc}", field) from None
    if not host or not _HOST.fullmatch(host):
        raise RequestError(f"URL has no valid host: {url!r}", field)


def _check_rule(kind: str, request: Message) -> None:
    spider_type, rule = crawl_rule(kind, request)
    if not is_cluster_spider(spider_type):
        return              # a user spider: its callbacks, not a rule (checked by preprocess)
    try:
        validate_rule(spider_type, rule)
    except RuleError as exc:
        raise RequestError(str(exc).split(": ", 1)[1], exc.field) from None


def is_cluster_spider(spider_type: str) -> bool:
    """Whether a spider type is one of the cluster's rule-driven spiders; any other name
    is a user spider's (docs/migrating.md), known once its first process has run."""
    return spider_type in SPIDER_TYPES


def crawl_rule(kind: str, request: Message) -> tuple[str, dict[str, Any]]:
    """``(spider type, rule)`` of a crawl request of either format (a user spider's
    rule is empty: its callbacks decide what it follows)."""
    if kind == "crawl":
        spider_type, rule = request["spider_type"], request["rule"]
    else:
        spider_type = "universal" if request["spiderid"] == "link" else request["spiderid"]
        rule = request.get("rule") or {}
        if is_cluster_spider(spider_type) and not rule:
            rule = rule_from_scrapy_cluster(request)
    return spider_type, rule if is_cluster_spider(spider_type) else {}


def crawl_config(kind: str, request: Message) -> Message:
    """The crawl config stored once per crawl, from either request format."""
    spider_type, rule = crawl_rule(kind, request)
    config = {key: value for key, value in request.items()
              if key not in ("type", "appid", "spiderid", "allowed_domains", "allow_regex",
                             "deny_regex", "deny_extensions")}
    config.update(spider_type=spider_type, rule=rule,
                  userid=request.get("userid", request.get("appid")))
    if "lineage" in config:       # a series is its user's: stored under the user's lineage
        config["lineage"] = user_lineage(config["userid"], config["lineage"])
    return config
