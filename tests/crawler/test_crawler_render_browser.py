"""The browser's life (crawler/render/browser.py) as pure logic: when it is replaced,
when Chromium's sandbox is on, and the headers a rendered page's fetch gives back."""

import logging

from scrapy.utils.test import get_crawler

from crawler.render import browser as browser_module
from crawler.render.browser import Browser, launch_args
from crawler.render.page_requests import joined_headers
from settings.loader import default_settings


class FakeBrowser:
    def __init__(self) -> None:
        self.connected = True

    def is_connected(self) -> bool:
        return self.connected


def a_browser(**settings: object) -> Browser:
    crawler = get_crawler(settings_dict={**default_settings(), **settings})
    browser = Browser(crawler, throttle=None)  # type: ignore[arg-type]
    browser.browser = FakeBrowser()
    return browser


def test_a_browser_is_replaced_only_after_failures_in_a_row():
    browser = a_browser(CRAWLCLUSTER_BROWSER_MAX_FAILURES=3)
    current = browser.browser
    for _ in range(2):
        browser._failed(current)
    assert browser._replace_because() == ""
    browser._rendered(current)                     # a success ends the run of failures
    for _ in range(2):
        browser._failed(current)
    assert browser._replace_because() == ""
    browser._failed(current)
    assert browser._replace_because() == "failures"


def test_a_browser_that_died_is_replaced_at_once_and_its_failures_are_not_counted():
    browser = a_browser()
    current = browser.browser
    current.connected = False
    browser._failed(current)
    assert browser.failures == 0
    assert browser._replace_because() == "died"


def test_a_failure_in_an_old_browser_does_not_count_against_the_new_one():
    browser = a_browser(CRAWLCLUSTER_BROWSER_MAX_FAILURES=1)
    old = FakeBrowser()
    browser._failed(old)
    assert browser._replace_because() == ""


def test_chromiums_sandbox_is_on_unless_root_and_root_is_warned_once(caplog):
    browser_module._warn_no_sandbox.cache_clear()
    args, sandbox = launch_args(1000)
    assert sandbox and "--no-sandbox" not in args
    assert "--host-resolver-rules=MAP * ~NOTFOUND" in args
    with caplog.at_level(logging.WARNING, logger="crawler.render.browser"):
        for _ in range(3):
            args, sandbox = launch_args(0)
    assert not sandbox and "--no-sandbox" in args
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "without its sandbox" in caplog.records[0].message


def test_a_fetched_answers_repeated_headers_are_joined_as_a_browser_takes_them():
    assert joined_headers([("Content-Type", "text/html"), ("Set-Cookie", "a=1"),
                           ("set-cookie", "b=2"), ("Vary", "Accept"), ("Vary", "Cookie")]) == {
        "content-type": "text/html", "set-cookie": "a=1\nb=2", "vary": "Accept, Cookie"}
