"""What rendering changes on a previewed page: the page as fetched loaded in the
system's Chromium, its scripts' own requests fetched through the preview's fetcher (the
throttle and robots.txt of their sites), and the spider run again on what the browser
leaves, as a crawl's ``render: auto`` compares a page's two forms."""

import os
from typing import Any

from scrapy.http import HtmlResponse

from crawler.preview.fetch import FetchError, PageFetcher
from crawler.render.browser import browser_path, launch_args
from crawler.render.page_requests import BLOCKED_RESOURCES
from settings.errors import CrawlClusterError

RENDER_TIMEOUT = 30.0      # seconds a preview's render may take
QUIET_MS = 500             # the page is done once its requests have been quiet this long


def rendered_page(response: HtmlResponse, fetcher: PageFetcher, executable: str,
                  load: tuple[str, ...] = ()) -> HtmlResponse:
    """``response`` as the browser leaves it (blocking: a preview runs in a thread)."""
    from playwright.sync_api import Error, sync_playwright

    blocked = set(BLOCKED_RESOURCES) - set(load)
    try:
        with sync_playwright() as playwright:
            args, sandbox = launch_args(os.geteuid())
            browser = playwright.chromium.launch(executable_path=browser_path(executable),
                                                 args=list(args), chromium_sandbox=sandbox)
            try:
                page = browser.new_page(user_agent=fetcher.user_agent)
                page.route("**/*", lambda route: _route(route, response, fetcher, blocked))
                page.goto(response.url, wait_until="load", timeout=RENDER_TIMEOUT * 1000)
                page.wait_for_load_state("networkidle", timeout=QUIET_MS * 20)
                body = page.content()
            finally:
                browser.close()
    except Error as exc:
        raise CrawlClusterError(f"rendering {response.url} failed: {exc.message}") from None
    return HtmlResponse(response.url, status=response.status, body=body.encode("utf-8"),
                        encoding="utf-8", flags=["rendered"])


def _route(route: Any, response: HtmlResponse, fetcher: PageFetcher, blocked: set[str]) -> None:
    """The page itself from what the preview fetched; a blocked kind refused; the rest
    fetched as the crawl would let the browser fetch it."""
    asked = route.request
    if asked.url == response.url and asked.is_navigation_request():
        route.fulfill(status=response.status, body=response.body, headers={
            "content-type": (response.headers.get("Content-Type") or b"text/html").decode()})
    elif asked.resource_type in blocked or asked.method != "GET":
        route.abort()
    else:
        try:
            status, headers, body = fetcher.asset(asked.url)
        except FetchError:
            route.abort()
            return
        route.fulfill(status=status, body=body, headers={
            "content-type": (headers.get("Content-Type") or b"application/octet-stream").decode()})
