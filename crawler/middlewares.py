"""Downloader and spider middlewares that tie Scrapy to the cluster.

``StatusCounterMiddleware`` counts every response's status per spider type
(thesis table 4-8). ``TaskStatusMiddleware`` reports tasks that could not be fetched:
404/410 fail for good, other errors and exhausted retries are retried by the
cluster. ``RandomUserAgentMiddleware`` gives each request a real browser's
User-Agent unless the crawl set one. ``TaskOutputMiddleware`` (spider) marks
a page's links with their parent task and its items with their task, and
tells the tracker when the page's output is all out.
"""

import ipaddress
import random
import socket
from functools import lru_cache
from importlib import resources
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.exceptions import IgnoreRequest, NotConfigured

from crawler.context import ClusterComponent
from master.frontier import outcome_for_status


def _member(request):
    info = request.meta.get("crawlcluster")
    return info["member"] if info else None


class StatusCounterMiddleware(ClusterComponent):
    """Counts every response's status (next to the downloader, so redirects count too)."""

    def process_response(self, request, response):
        self.context.tracker.count_status(response.status)
        return response


class TaskStatusMiddleware(ClusterComponent):
    @property
    def tracker(self):
        return self.context.tracker

    def process_response(self, request, response):
        member = _member(request)
        outcome, reason = outcome_for_status(response.status)
        if member and outcome != "done":
            self.tracker.fail(member, outcome, reason)
        return response

    def process_exception(self, request, exception):
        member = _member(request)
        if member:
            outcome = "failed" if type(exception).__name__ == "IgnoreRequest" else "retry"
            self.tracker.fail(member, outcome, f"{type(exception).__name__}: {exception}"[:200])


class RandomUserAgentMiddleware:
    """A random real browser User-Agent (bundled list) unless the request has one."""

    def __init__(self, agents):
        self.agents = agents

    @classmethod
    def from_crawler(cls, crawler):
        text = resources.files("crawler").joinpath("data/user_agents.txt").read_text("utf-8")
        agents = [line.strip() for line in text.splitlines()
                  if line.strip() and not line.startswith("#")]
        return cls(agents)

    def process_request(self, request):
        if b"User-Agent" not in request.headers:
            request.headers[b"User-Agent"] = random.choice(self.agents)


class TaskOutputMiddleware(ClusterComponent):
    async def process_spider_output_async(self, response, result):
        info = response.meta.get("crawlcluster")
        tracker = self.context.tracker
        async for element in result:
            yield self._mark(element, info, tracker)
        if info:
            tracker.page_finished(info["member"])

    def process_spider_output(self, response, result):
        info = response.meta.get("crawlcluster")
        tracker = self.context.tracker
        for element in result:
            yield self._mark(element, info, tracker)
        if info:
            tracker.page_finished(info["member"])

    def process_spider_exception(self, response, exception):
        info = response.meta.get("crawlcluster")
        if info:
            self.context.tracker.fail(
                info["member"], "retry", f"spider error: {type(exception).__name__}: {exception}")

    @staticmethod
    def _mark(element, info, tracker):
        if info is None:
            return element
        if isinstance(element, Request):
            element.meta["crawlcluster_parent"] = {"task": info["task"], "config": info["config"]}
        elif isinstance(element, dict):
            element["_task"] = info["member"]
            tracker.item_out(info["member"])
        return element


class PrivateAddressGuardMiddleware:
    """With ``CRAWLCLUSTER_REFUSE_PRIVATE_ADDRESSES``, refuse any request (redirects
    included) whose host is or resolves to a private, loopback, link-local, reserved
    or multicast address: a crawl submitted by anyone must not reach the cluster's
    own network. The refused task fails for good, with the reason."""

    @classmethod
    def from_crawler(cls, crawler):
        from crawler.context import cluster_settings

        if not cluster_settings(crawler.settings).getbool("CRAWLCLUSTER_REFUSE_PRIVATE_ADDRESSES"):
            raise NotConfigured("CRAWLCLUSTER_REFUSE_PRIVATE_ADDRESSES is off")
        return cls()

    def process_request(self, request, spider=None):
        host = urlsplit(request.url).hostname or ""
        blocked = private_addresses(host)
        if blocked:
            raise IgnoreRequest(f"refused {request.url}: {host} is a private address "
                                f"({', '.join(blocked)})")


@lru_cache(maxsize=4096)
def private_addresses(host):
    """The private/loopback/link-local/reserved addresses ``host`` is or resolves to."""
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return ()              # unresolvable: the download fails on its own
        addresses = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos}
    return tuple(sorted(str(a) for a in addresses
                        if a.is_private or a.is_loopback or a.is_link_local or a.is_reserved
                        or a.is_multicast or a.is_unspecified))
