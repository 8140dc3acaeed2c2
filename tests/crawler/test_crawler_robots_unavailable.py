"""A robots.txt answered 429 or 5xx disallows everything for now (RFC 9309) and is read
again soon; the host's tasks are released, not failed."""

import re
import time

import pytest
from scrapy import Request
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.utils.test import get_crawler
from twisted.internet.defer import Deferred

from crawler.middlewares import ROBOTS_REFUSAL, ROBOTS_UNAVAILABLE, BoundedRobotsTxtMiddleware
from crawler.paused import PausedDomains

NETLOC = "site.example.com"


def finish(coroutine):
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("waited on the reactor")


def read(middleware, status, body=b""):
    middleware._parsers[NETLOC] = Deferred()
    middleware.read_at[NETLOC] = time.monotonic()
    request = Request(f"http://{NETLOC}/page")
    response = Response(f"http://{NETLOC}/robots.txt", status=status, body=body)
    finish(middleware._parse_robots(response, NETLOC, request))
    return middleware._parsers[NETLOC]


@pytest.fixture
def middleware():
    crawler = get_crawler(settings_dict={"ROBOTSTXT_OBEY": True,
                                         "CRAWLCLUSTER_ROBOTS_MAX_AGE": 3600.0,
                                         "CRAWLCLUSTER_PUSHBACK_PAUSE": 2.0})
    paused = PausedDomains()

    async def no_receivers(**kwargs):      # robots_parsed: no reactor runs in this test
        return []

    crawler.signals.send_catch_log_async = no_receivers
    crawler.crawlcluster = type("Context", (), {"paused": paused})()
    return BoundedRobotsTxtMiddleware(crawler), paused


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_refused_robots_txt_disallows_everything_until_read_again_soon(middleware, status):
    robots, paused = middleware
    paused.pause("example.com", 30.0)        # the robots.txt's 429 paused its domain
    parser = read(robots, status, body=b"User-agent: *\nAllow: /\n")
    assert not parser.allowed(f"http://{NETLOC}/page", "bot")
    with pytest.raises(IgnoreRequest, match=f"^{ROBOTS_UNAVAILABLE} \\({status}\\)"):
        robots.process_request_2(parser, Request(f"http://{NETLOC}/page"))
    # Read again once the pause is over, not after the usual max age.
    again_in = robots.read_at[NETLOC] + robots.max_age - time.monotonic()
    assert 29 < again_in <= 30.0


def test_a_robots_txt_read_again_and_served_lifts_the_refusal(middleware):
    robots, _ = middleware
    read(robots, 503)
    assert robots._forget(NETLOC)
    parser = read(robots, 200, body=b"User-agent: *\nDisallow: /private\n")
    robots.process_request_2(parser, Request(f"http://{NETLOC}/page"))     # allowed
    with pytest.raises(IgnoreRequest, match=re.escape(ROBOTS_REFUSAL)):
        robots.process_request_2(parser, Request(f"http://{NETLOC}/private/x"))
    assert NETLOC not in robots.unavailable
