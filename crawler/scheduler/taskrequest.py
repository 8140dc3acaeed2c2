"""Task → Request: the Request the spider fetches for a task taken from its queues."""

from typing import Any

from scrapy import Request, Spider

from crawler.context import JobContext
from crawler.userspider import UserCrawl, is_user_crawl
from master.tasks import Task, decode_task

Cookies = dict[str | bytes, str | bytes | bool | float | int]    # as a Request takes them


class TaskRequests:
    def __init__(self, context: JobContext, spider: Spider, user: UserCrawl | None) -> None:
        self.context = context
        self.spider = spider
        self.user = user        # a user spider's crawl (crawler/userspider.py)
        # Each name's bound method, made once: Scrapy looks a callback up in a cache of
        # weak references before reading its source for a generator's return (most of a
        # ms of ``inspect`` and ``ast``), and a method bound afresh for each page often
        # fell out of it.
        self.bound: dict[str, Any] = {}

    def request_for(self, member: str) -> Request | None:
        """The Request for a taken task, or None (reported failed) if it cannot be."""
        task = decode_task(member)
        tracker = self.context.tracker
        config = self.context.crawls.load(task["crawlid"])
        if self.user is not None and config is not None and is_user_crawl(config):
            return self._user_request_for(member, task, config)
        callback = self._callback(task.get("callback", "parse"))
        if config is None or callback is None:
            tracker.fail(member, "failed", "unknown crawl or callback")
            return None
        tracker.begin(member)
        headers = {"User-Agent": config["useragent"]} if config.get("useragent") else {}
        if self.context.revisit(config, task) is not None:
            headers.update(self.context.conditional_headers(task))
        return Request(task["url"], callback=callback, dont_filter=True, headers=headers,
                       cookies=parse_cookies(config.get("cookie")),
                       meta={"crawlcluster": {"member": member, "task": task, "config": config},
                             "depth": task.get("depth", 0)})

    def _callback(self, name: Any) -> Any:
        """The spider's method ``name`` if it is one of its callbacks, else None."""
        if not isinstance(name, str):
            return None
        if name not in self.bound:
            if name not in getattr(self.spider, "callbacks", ("parse",)):
                return None
            self.bound[name] = getattr(self.spider, name, None)
        return self.bound[name]

    def _user_request_for(self, member: str, task: Task, config: dict[str, Any]) -> Request | None:
        assert self.user is not None
        try:
            request = self.user.request_for(task, {
                "crawlcluster": {"member": member, "task": task, "config": config},
                "depth": task.get("depth", 0)})
        except ValueError as exc:                  # a callback the spider no longer has
            self.context.tracker.fail(member, "failed", str(exc))
            return None
        self.context.tracker.begin(member)
        return request


def parse_cookies(cookie: str | Cookies | None) -> Cookies:
    """A crawl's cookie as a dict: given as a dict, or as ``"a=1; b=2"``."""
    if not cookie:
        return {}
    if isinstance(cookie, dict):
        return cookie
    pairs = (part.split("=", 1) for part in str(cookie).split(";") if "=" in part)
    return {name.strip(): value.strip() for name, value in pairs}
