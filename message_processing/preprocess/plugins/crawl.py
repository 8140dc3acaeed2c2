"""Crawl requests (thesis and scrapy-cluster formats): the crawl stored once, its
seed queued (and added to the crawl's Bloom filter, so a page linking back to it
is not fetched again), its expiry scheduled for the monitor, an ack sent."""

from typing import TYPE_CHECKING

from master.crawls import CrawlConfig, WriteBatch
from master.rules import SPIDER_TYPES
from master.tasks import Task
from message_processing.plugins import Plugin
from message_processing.preprocess.plugins import Staged
from message_processing.replies import reply_to
from message_processing.requests import Message, RequestError, crawl_config, is_cluster_spider

if TYPE_CHECKING:
    from message_processing.preprocess.service import Context


class CrawlPlugin(Plugin):
    handles = ("crawl",)

    def __init__(self, context: "Context") -> None:
        self.context = context

    def prepare(self, kind: str, request: Message, source: str) -> Staged:
        config = crawl_config(kind, request)
        if not is_cluster_spider(config["spider_type"]):
            self._check_user_spider(kind, config)
        try:
            seed = self.context.crawls.seed_task(config)  # names checked before any write
        except ValueError as exc:
            raise RequestError(str(exc), "crawlid") from None
        reply = reply_to(request, action="crawl", status="accepted",
                         spider_type=config["spider_type"])
        return Staged(write=lambda batch: self._write(config, request, seed, batch),
                      reply=reply, seen=(config["crawlid"], config["url"]))

    def _check_user_spider(self, kind: str, config: CrawlConfig) -> None:
        """A crawl for a user spider: the spider must have registered its own crawl
        (its first process does, crawler/userspider.py); the crawl is marked as one."""
        registered = self.context.crawls.load(config["spider_type"])
        if not registered or not registered.get("user_spider"):
            raise RequestError(
                f"unknown spider {config['spider_type']!r}: not one of the cluster's "
                f"({', '.join(SPIDER_TYPES)}) nor a spider of your own that has run on the "
                "cluster (its first process registers it: deploy it and start it, "
                "docs/migrating.md)", "spider_type" if kind == "crawl" else "spiderid")
        config["user_spider"] = True
        config.setdefault("maxdepth", registered.get("maxdepth"))

    def _write(self, config: CrawlConfig, request: Message, seed: Task,
               batch: WriteBatch) -> None:
        context = self.context
        context.crawls.stage(config, context.frontier, batch, seed)
        if config.get("expires"):
            entry = {"id": f"expire:{config['crawlid']}", "kind": "expire",
                     "format": "scrapy-cluster" if "appid" in request else "thesis",
                     "request": {name: request[name] for name in
                                 ("crawlid", "uuid", "appid", "userid", "spiderid")
                                 if name in request}}
            context.worklist.add(entry, due=config["expires"], pipe=batch.pipe)
