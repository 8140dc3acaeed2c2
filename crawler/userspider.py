"""A Scrapy spider of one's own on the cluster: its crawl, and its Requests as tasks.

A spider that is not one of the cluster's rule-driven spiders (``ClusterSpider``) runs
one crawl, named after the spider, however many processes run it: the first process to
open registers it (``CrawlStore.register``). Every Request the spider makes becomes a
task of that crawl with the Request in it as JSON (``crawler/taskrequests.py``): those
from its pages hang from the page's task (one level deeper), its start requests from
the crawl itself (depth 0). Start requests go through the seen-URL filter whatever their
``dont_filter`` says, so a second process, or the same one started again, does not issue
them again; any other Request with ``dont_filter`` is queued without the filter.
A Request is known by its canonical URL (a ``GET`` without a body, as the cluster's own
links are) or else by Scrapy's request fingerprint (a form's ``POST``, say).

Items are the project's own: nothing is added to them. A page's task is acknowledged
once its output is out and each of its items has passed the project's pipelines (Scrapy's
``item_scraped``, ``item_dropped`` and ``item_error`` signals).
"""

import time
from typing import Any

from scrapy import Request, Spider, signals
from scrapy.downloadermiddlewares.cookies import CookiesMiddleware
from scrapy.http import Response

from crawler.context import JobContext
from crawler.taskrequests import request_from_json, request_to_json
from master.crawls import CrawlConfig
from master.tasks import Task

REGISTER_EVERY = 60.0          # seconds between a process's checks that its crawl is stored


class UserLink:
    """What the scheduler needs of a user spider's Request to queue it."""

    def __init__(self, callback: str, extra: dict[str, Any], unfiltered: bool) -> None:
        self.callback = callback      # the callback's name ("parse" if none)
        self.extra = extra            # task fields: the Request as JSON, its fingerprint
        self.unfiltered = unfiltered  # dont_filter: queued without the filter

    @property
    def key(self) -> str | None:
        """What the filter knows it by, if not its URL (its request fingerprint)."""
        return self.extra.get("key")


class UserCrawl:
    """The crawl of one user spider, as one of its processes sees it."""

    def __init__(self, context: JobContext, spider: Spider) -> None:
        self.context = context
        self.spider = spider
        self.fingerprinter = context.crawler.request_fingerprinter
        depth_limit = context.crawler.settings.getint("DEPTH_LIMIT")
        self.config: CrawlConfig = {"crawlid": spider.name, "spider_type": spider.name,
                                    "url": "", "user_spider": True,
                                    "maxdepth": depth_limit or None}
        context.crawls.register(self.config)
        self.registered_at = time.monotonic()
        self.cookie_jars: dict[Any, Any] | None = None   # Scrapy's, found at the first link
        # the spider's methods bound once (see crawler/scheduler/taskrequest.py's ``bound``)
        self.methods: dict[Any, Any] = {}
        # the parent of its start requests: the crawl itself, one level above its pages
        self.root: dict[str, Any] = {
            "task": {"crawlid": spider.name, "spider_type": spider.name, "depth": -1},
            "config": self.config}
        for signal in (signals.item_scraped, signals.item_dropped, signals.item_error):
            context.crawler.signals.connect(self._item_done, signal=signal)

    def keep_registered(self, now: float) -> None:
        """Store the crawl again, at most every ``REGISTER_EVERY`` s, if retention retired
        it (``CRAWLCLUSTER_CRAWL_RETENTION`` after it drained): a long-running spider,
        idle for days before its start-URL key is fed again, still has its crawl, and a
        crawl request may still name it. What the retired crawl had seen is gone with it."""
        if now - self.registered_at >= REGISTER_EVERY:
            self.registered_at = now
            self.context.crawls.register(self.config)

    def link(self, request: Request, start: bool) -> UserLink:
        """The task fields of a Request; ``RequestNotJSON`` (or ``ValueError``, a callback
        that is not the spider's method) if it cannot be a task."""
        fields = request_to_json(request, self.spider)
        session = self._session_cookies(request)
        if session:
            fields["cookies"] = with_session_cookies(fields.get("cookies"), session)
        extra: dict[str, Any] = {"request": {k: v for k, v in fields.items() if k != "url"}}
        if request.method != "GET" or request.body:
            extra["key"] = "fp:" + self.fingerprinter.fingerprint(request).hex()
        if request.priority:
            extra["priority"] = request.priority
        return UserLink(fields.get("callback") or "parse", extra,
                        request.dont_filter and not start)

    def _session_cookies(self, request: Request) -> dict[str, str]:
        """The cookies this process's jar (Scrapy's ``CookiesMiddleware``, the request's
        ``cookiejar``) would send with the request: a session a login set here goes with
        the task to whichever process fetches it, whose jar then holds it too."""
        if self.cookie_jars is None:
            self.cookie_jars = _cookie_jars(self.context.crawler)
        jar = (self.cookie_jars or {}).get(request.meta.get("cookiejar"))
        if jar is None or next(iter(jar), None) is None or request.meta.get("dont_merge_cookies"):
            return {}
        probe = Request(request.url)
        jar.add_cookie_header(probe)
        header = probe.headers.get("Cookie")
        if not header:
            return {}
        pairs = (pair.partition("=") for pair in header.decode("latin-1").split("; "))
        return {name: value for name, _, value in pairs if name}

    def request_for(self, task: Task, meta: dict[str, Any]) -> Request:
        """The Request of a taken task, the cluster's ``meta`` added; ``ValueError`` if
        the spider has no longer the callback it names."""
        # a seed submitted through Kafka carries no Request: it is the spider's parse's
        request = request_from_json({"url": task["url"], **task.get("request", {})},
                                    self.spider)
        request.meta.update(meta)
        request.dont_filter = True                 # filtered once, before it was queued
        request.callback = self._lasting(request.callback)
        request.errback = self._lasting(request.errback)
        return request

    def _lasting(self, method: Any) -> Any:
        """The first bound method equal to ``method`` (the same function of the spider)."""
        if getattr(method, "__self__", None) is not self.spider:
            return method
        try:
            return self.methods.setdefault(method, method)
        except TypeError:                  # a spider class with __eq__ and no __hash__
            return method

    def _item_done(self, item: Any, response: Response | None = None, **_: Any) -> None:
        info = response.meta.get("crawlcluster") if response is not None else None
        if info and is_user_crawl(info["config"]):
            self.context.tracker.item_finished(info["member"])


def with_session_cookies(own: Any, session: dict[str, str]) -> Any:
    """A Request's own ``cookies`` (a dict, or a list of dicts), the session's added
    where the Request does not set the same name itself."""
    if isinstance(own, list):
        names = {cookie.get("name") for cookie in own}
        return own + [{"name": name, "value": value} for name, value in session.items()
                      if name not in names]
    return {**session, **(own or {})}


def _cookie_jars(crawler: Any) -> dict[Any, Any] | None:
    """The cookie jars of the process's ``CookiesMiddleware`` (empty if it is off; None
    before the engine is there)."""
    if crawler.engine is None:
        return None
    for middleware in crawler.engine.downloader.middleware.middlewares:
        if isinstance(middleware, CookiesMiddleware):
            return middleware.jars
    return {}


def is_user_crawl(config: CrawlConfig) -> bool:
    """Whether a crawl is a user spider's: its own (``UserCrawl``), or one submitted
    through Kafka naming it (message_processing/preprocess/plugins/crawl.py)."""
    return bool(config.get("user_spider"))
