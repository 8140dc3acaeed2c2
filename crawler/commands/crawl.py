"""``scrapy crawl``, checking the servers first.

A spider started with an unreachable Redis, ZooKeeper or MongoDB stops with
one line naming the server, its address and what to check, like every other
role, instead of a traceback from deep inside Scrapy's start-up. A spider that
closed past its memory bound exits with ``EXIT_RECYCLE``, for its manager to
start it again.
"""

import argparse
import sys

from scrapy.commands.crawl import Command as ScrapyCrawl

from crawler.context import cluster_settings
from crawler.extensions import MemoryBound
from settings.clients import check_role_servers
from settings.errors import ServerUnreachable
from settings.process import EXIT_RECYCLE

SERVERS = {"proxylist": ["mongodb"]}
CLUSTER_SERVERS = ["redis", "zookeeper", "mongodb"]


class Command(ScrapyCrawl):
    def run(self, args: list[str], opts: argparse.Namespace) -> None:
        spider = args[0] if args else ""
        assert self.settings is not None, "Scrapy gives a command its settings before run"
        try:
            check_role_servers(cluster_settings(self.settings), "crawler",
                               SERVERS.get(spider, CLUSTER_SERVERS))
        except ServerUnreachable as exc:
            print(f"scrapy crawl {spider}: {exc}", file=sys.stderr)
            self.exitcode = 2
            return
        super().run(args, opts)
        if MemoryBound.recycled and not self.exitcode:
            self.exitcode = EXIT_RECYCLE
