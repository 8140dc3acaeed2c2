"""Request routing and validation (pure logic): every type, and malformed ones by name."""

import json
import time

import pytest

from master.series import user_lineage
from message_processing.requests import (
    RequestError,
    crawl_config,
    decode,
    nested_deeper_than,
    validate,
)
from tests.message_processing.samples import MALFORMED as MALFORMED_SAMPLES
from tests.message_processing.samples import MAX_BYTES

RULE = {"rules": [{"allow": ["/news/"], "fields": {"title": "//h1/text()"}}]}
VALID = [
    ("crawl", {"type": "crawl", "userid": "u1", "crawlid": "c1", "url": "http://a.com/",
               "spider_type": "universal", "rule": RULE}),
    ("info", {"type": "info", "userid": "u1", "crawlid": "c1", "uuid": "q1", "action": "info"}),
    ("stop", {"type": "stop", "userid": "u1", "crawlid": "c1", "uuid": "q2"}),
    ("stats", {"type": "stats", "userid": "u1", "uuid": "q3", "stats": "crawler"}),
    ("site_config", {"type": "site_config", "userid": "u1", "action": "rate",
                     "domain": "a.com", "rate": 10}),
    ("site_config", {"type": "site_config", "userid": "u1", "action": "blacklist",
                     "domain": "spam.com"}),
    # scrapy-cluster's documented examples, unchanged
    ("sc_crawl", {"url": "http://dmoztools.net", "appid": "testapp", "crawlid": "abc123"}),
    ("sc_action", {"action": "info", "appid": "testapp", "uuid": "someuuid",
                   "crawlid": "abc1234", "spiderid": "link"}),
    ("sc_action", {"action": "stop", "appid": "testapp", "uuid": "someuuid",
                   "crawlid": "ABC123", "spiderid": "link"}),
    ("sc_stats", {"stats": "kafka-monitor", "appid": "testapp", "uuid": "myuuid"}),
    ("sc_zookeeper", {"uuid": "abc123", "appid": "madisonTest", "action": "domain-update",
                      "domain": "dmoz.org", "hits": 60, "window": 60, "scale": 0.9}),
    ("sc_zookeeper", {"uuid": "abc123", "appid": "madisonTest", "action": "blacklist-update",
                      "domain": "bad.org"}),
]


@pytest.mark.parametrize("kind, message", VALID)
def test_valid_requests_route_and_validate(kind, message):
    routed, request = validate(message)
    assert routed == kind
    assert {k: v for k, v in request.items() if k in message} == message


def test_defaults_are_filled():
    _, request = validate(VALID[0][1])
    assert request["maxdepth"] == 3 and request["priority"] == 50
    _, request = validate(VALID[6][1])
    assert request["spiderid"] == "universal" and request["maxdepth"] == 0


def test_scrapy_cluster_crawl_maps_to_a_crawl_config():
    _, request = validate({"url": "http://a.com/", "appid": "app", "crawlid": "c9",
                           "allow_regex": [r".*\.html"], "spiderid": "link"})
    config = crawl_config("sc_crawl", request)
    assert config["spider_type"] == "universal" and config["userid"] == "app"
    assert config["rule"]["rules"][0]["allow"] == [r".*\.html"]
    assert "allow_regex" not in config and "appid" not in config


MALFORMED = [
    (b"\xff\xfe", "not UTF-8"),
    (b"{not json", "not JSON"),
    (b"[1, 2]", "not a JSON object but a list"),
    (b'"text"', "not a JSON object but a str"),
    (b"null", "not a JSON object but a NoneType"),
    (b"x" * 2000, "over the 1000-byte limit"),
]


@pytest.mark.parametrize("raw, reason", MALFORMED)
def test_undecodable_messages_name_the_reason(raw, reason):
    with pytest.raises(RequestError, match=reason):
        decode(raw, max_bytes=1000)


def test_nesting_past_the_depth_limit_is_refused_before_parsing():
    with pytest.raises(RequestError, match="JSON nested deeper than 3 levels"):
        decode(b'{"a": [[[1]]]}', max_bytes=1000, max_depth=3)
    assert decode(b'{"a": [[1]], "b": [[2]]}', max_bytes=1000, max_depth=3)
    # brackets inside strings are text, escaped quotes included
    assert decode(b'{"a": "[[[[\\"[[[[", "b": [{}]}', max_bytes=1000, max_depth=3)
    with pytest.raises(RequestError, match="nested deeper than 64 levels"):    # the default
        decode(b"[" * 5000 + b"]" * 5000, max_bytes=100000)


# strings never closed, each quote of which a scan that restarts at every quote would
# read to the end from: quadratic there (seconds at 32 KiB, an hour at 1 MiB), linear here
HOSTILE = [('', '"\\'), ('{"a": [', '"a\\'), ('"', '\\[')]


@pytest.mark.parametrize("start, unit", HOSTILE)
def test_the_depth_check_is_linear_in_hostile_text(start, unit):
    """Texts doubling from 16 KiB to 1 MiB are each judged well within 2 s."""
    judged = []
    size = 16 << 10
    while size <= 1 << 20:
        text = start + (unit * size)[:size - len(start) - 80] + "[" * 80
        started = time.perf_counter()
        judged.append(nested_deeper_than(text, 64))
        elapsed = time.perf_counter() - started
        assert elapsed < 2, f"{len(text)} characters took {elapsed:.1f} s"
        size *= 2
    assert len(text) == 1 << 20
    assert not any(judged)      # the brackets are all in the string
    with pytest.raises(RequestError, match="not JSON"):
        decode(text.encode(), max_bytes=2 << 20)


def crawl(**changes):
    message = dict(VALID[0][1], **changes)
    return {k: v for k, v in message.items() if v is not None}


INVALID = [
    ({"type": "bogus"}, "type", "unknown type 'bogus'"),
    ({"hello": "world"}, "type", "no 'type' field"),
    ({"appid": "a"}, "type", "not a scrapy-cluster request"),
    (crawl(url=None), None, "'url' is a required property"),
    (crawl(userid=None), None, "'userid' is a required property"),
    (crawl(url="ftp://a.com/x"), "url", "scheme must be http or https"),
    (crawl(url="http:///nohost"), "url", "no valid host"),
    (crawl(url="http://exa mple.com/"), "url", "no valid host"),
    (crawl(url="http://a.com:99999/"), "url", "bad URL"),
    (crawl(crawlid="bad id!"), "crawlid", "does not match"),
    (crawl(spider_type="no such spider"), "spider_type", "does not match"),
    (crawl(maxdepth=-1), "maxdepth", "less than the minimum"),
    (crawl(priority=101), "priority", "greater than the maximum"),
    (crawl(priority="high"), "priority", "is not of type 'integer'"),
    (crawl(extra=1), None, "Additional properties are not allowed"),
    (crawl(rule={"rules": [{"allow": ["(bad"]}]}), "rule.rules[0].allow[0]", "invalid regex"),
    (crawl(rule={"rules": []}), "rule.rules", "should be non-empty"),
    (crawl(spider_type="precise", rule={"first_page_xpath": {"list_from": "//a["}}),
     "rule.first_page_xpath.list_from", "invalid xpath"),
    ({"type": "info", "userid": "u", "crawlid": "c"}, None, "'uuid' is a required property"),
    ({"type": "stats", "userid": "u", "uuid": "q", "stats": "everything"}, "stats",
     "is not one of"),
    ({"type": "site_config", "userid": "u", "action": "rate", "domain": "a.com"}, None,
     "'rate' is a required property"),
    ({"type": "site_config", "userid": "u", "action": "blacklist", "domain": "a b"}, "domain",
     "does not match"),
    ({"url": "http://a.com/", "appid": "app", "crawlid": "c", "priority": 0}, "priority",
     "less than the minimum"),
    ({"action": "pause", "appid": "a", "uuid": "u", "spiderid": "link"}, "action",
     "is not one of"),
    ({"stats": "kafka-monitor", "appid": "a"}, None, "'uuid' is a required property"),
    ({"uuid": "u", "appid": "a", "action": "domain-update", "domain": "d.org"}, None,
     "'hits' is a required property"),
    ({"uuid": "u", "appid": "a", "action": "domain-update", "domain": "d.org", "hits": 1,
      "window": 1, "scale": 2}, "scale", "greater than the maximum"),
]


@pytest.mark.parametrize("message, field, reason", INVALID)
def test_invalid_requests_name_the_field_and_reason(message, field, reason):
    with pytest.raises(RequestError) as caught:
        validate(json.loads(json.dumps(message)))
    assert caught.value.field == field
    assert reason in caught.value.reason


@pytest.mark.parametrize("raw, reason", MALFORMED_SAMPLES)
def test_every_malformed_sample_is_refused_with_its_reason(raw, reason):
    with pytest.raises(RequestError) as caught:
        validate(decode(raw, MAX_BYTES))
    assert reason in caught.value.reason


def test_a_series_schedule_keeps_its_runs_fields_and_sets_their_lineage_itself():
    crawl = {"url": "http://a.com/", "spider_type": "universal", "rule": RULE,
             "refetch_after": 3600}
    schedule = {"type": "schedule", "userid": "u1", "action": "add", "schedule_id": "news",
                "every": 3600, "series": True}
    _, request = validate({**schedule, "crawl": crawl})
    assert request["series"] is True and request["crawl"]["refetch_after"] == 3600
    with pytest.raises(RequestError) as refused:
        validate({**schedule, "crawl": {**crawl, "lineage": "other"}})
    assert refused.value.field == "crawl.lineage"
    _, plain = validate({**schedule, "series": False, "crawl": {**crawl, "lineage": "mine"}})
    assert plain["crawl"]["lineage"] == user_lineage("u1", "mine")
    with pytest.raises(RequestError) as refused:
        validate({"type": "crawl", "userid": "u1", "crawlid": "c1", **crawl,
                  "refetch_after": -1})
    assert refused.value.field == "refetch_after"


def test_a_crawls_lineage_is_its_users_own():
    """Another user naming the same lineage gets a series of its own: it can neither read
    the first one's pages nor replace its items."""
    crawl = {"type": "crawl", "crawlid": "c1", "url": "http://a.com/",
             "spider_type": "universal", "rule": RULE, "lineage": "news"}
    lineages = {crawl_config(*validate({**crawl, "userid": user}))["lineage"]
                for user in ("alice", "bob")}
    assert lineages == {user_lineage("alice", "news"), user_lineage("bob", "news")}
    assert len(lineages) == 2
