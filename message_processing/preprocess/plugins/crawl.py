"""Crawl requests (thesis and scrapy-cluster formats): the crawl stored once, its
seed queued (and added to the crawl's Bloom filter, so a page linking back to it
is not fetched again), its expiry scheduled for the monitor, an ack sent."""

from message_processing.plugins import Plugin
from message_processing.preprocess.plugins import Staged
from message_processing.replies import reply_to
from message_processing.requests import RequestError, crawl_config


class CrawlPlugin(Plugin):
    handles = ("crawl",)

    def __init__(self, context):
        self.context = context

    def prepare(self, kind, request, source):
        config = crawl_config(kind, request)
        try:
            seed = self.context.crawls.seed_task(config)  # names checked before any write
        except ValueError as exc:
            raise RequestError(str(exc), "crawlid") from None
        reply = reply_to(request, action="crawl", status="accepted",
                         spider_type=config["spider_type"])
        return Staged(write=lambda batch: self._write(config, request, seed, batch),
                      reply=reply, seen=(config["crawlid"], config["url"]))

    def _write(self, config, request, seed, batch):
        context = self.context
        context.crawls.stage(config, context.frontier, batch, seed)
        if config.get("expires"):
            entry = {"id": f"expire:{config['crawlid']}", "kind": "expire",
                     "format": "scrapy-cluster" if "appid" in request else "thesis",
                     "request": {name: request[name] for name in
                                 ("crawlid", "uuid", "appid", "userid", "spiderid")
                                 if name in request}}
            context.worklist.add(entry, due=config["expires"], pipe=batch.pipe)
