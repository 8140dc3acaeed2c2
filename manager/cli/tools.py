"""Tools: ``export`` a crawl's items, the ``proxy`` pool, ``start-spider`` on every node,
the ``settings``."""

import argparse
import sys
import time
from typing import Any

from manager.cli.common import EXIT_FAILED
from manager.export import FORMATS as EXPORT_FORMATS
from settings.loader import Settings
from settings.reference import settings_table


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    """Write a crawl's stored items to a file (or stdout), with a progress bar on stderr."""
    import os

    from manager.export import (
        CrawlItems,
        export_client,
        export_items,
        file_name,
        parse_since,
        progress_bar,
    )

    since = parse_since(args.since) if args.since else None
    changed_since = parse_since(args.changed_since) if args.changed_since else None
    client = export_client(settings, "export")
    try:
        items = CrawlItems(client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]], args.crawlid,
                           since, changed_since)
        total = items.count()
        if not total:
            print(f"crawlcluster export: crawl {args.crawlid} has no items stored"
                  + (f" since {args.since}" if args.since else "")
                  + (f" changed since {args.changed_since}" if args.changed_since else ""),
                  file=sys.stderr)
            return EXIT_FAILED

        def progress(done: int) -> None:
            print(f"\rexporting {args.crawlid} {progress_bar(done, max(done, total))}",
                  end="", file=sys.stderr, flush=True)

        if args.output == "-":
            count = export_items(items, args.format, sys.stdout.buffer, progress)
            sys.stdout.buffer.flush()
        else:
            path = args.output or file_name(args.crawlid, args.format)
            partial = f"{path}.partial"          # no half-written file under the name
            with open(partial, "wb") as out:
                count = export_items(items, args.format, out, progress)
            os.replace(partial, path)
        print(f"\n{count} items of {args.crawlid} written to "
              f"{'stdout' if args.output == '-' else path} ({args.format})", file=sys.stderr)
        return 0
    finally:
        client.close()


def cmd_proxy(args: argparse.Namespace, settings: Settings) -> int:
    """Validate the proxy pool (once or every N seconds), or serve its API."""
    from crawler.proxy import ProxyPool
    from settings.clients import mongo_client

    pool = ProxyPool.from_settings(mongo_client(settings, "proxy"), settings)
    if args.action == "serve":
        from crawler.proxyapi import serve

        return serve(pool, settings)
    while True:
        alive, removed = pool.validate()
        print(f"proxies: {alive} alive, {removed} removed")
        if not args.every:
            return 0
        time.sleep(args.every)


def cmd_start_spider(args: argparse.Namespace, settings: Settings) -> int:
    """Schedule a deployed spider on every registered node (or those named)."""
    from manager.everynode import pairs, start_everywhere
    from settings.clients import stop_zookeeper, zookeeper_client

    arguments, spider_settings = pairs(args.arg, "-a"), pairs(args.set, "-s")
    zookeeper = zookeeper_client(settings, "cli")
    try:
        replies = start_everywhere(settings, zookeeper, args.project, args.spider, arguments,
                                   spider_settings, args.node)
    finally:
        stop_zookeeper(zookeeper)
    for node, reply in replies.items():
        if reply.get("status") == "ok":
            print(f"{node}: started {args.spider} as job {reply['jobid']}")
        else:
            print(f"{node}: refused: {reply.get('message')}")
    return 0 if all(reply.get("status") == "ok" for reply in replies.values()) else EXIT_FAILED


def cmd_settings(args: argparse.Namespace, settings: Settings) -> int:
    """Print the effective settings, or the settings table of docs/settings.md."""
    if args.markdown:
        print(settings_table())
        return 0
    for name in sorted(settings):
        print(f"{name} = {settings[name]!r}")
    return 0


def cmd_webhooks(args: argparse.Namespace, settings: Settings) -> int:
    """The webhook delivery log, newest first: one line per attempt, or JSON."""
    import json

    from master.keys import Keys
    from message_processing.events.webhooks import delivery_log
    from settings.clients import redis_client

    client = redis_client(settings, "cli")
    entries = delivery_log(client, Keys.from_settings(settings), args.limit, args.crawlid)
    pending = client.zcard(Keys.from_settings(settings).webhook_queue())
    if args.json:
        print(json.dumps({"pending": pending, "attempts": entries}, indent=1))
        return 0
    for entry in entries:
        answer = entry["status"] or entry["error"] or ""
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(entry['time']))}  "
              f"{entry['outcome']:<9} #{entry['attempt']:<3} {entry['event']}  "
              f"{entry['url']}  {answer}")
    print(f"{pending} deliveries waiting")
    return 0


def add_commands(commands: Any) -> None:
    hooks = commands.add_parser("webhooks", help="the webhook delivery log of crawl events "
                                                 "(newest first) and deliveries waiting")
    hooks.add_argument("--crawlid", help="only this crawl's")
    hooks.add_argument("--limit", type=int, default=50, help="attempts shown (default 50)")
    hooks.add_argument("--json", action="store_true", help="as JSON")
    hooks.set_defaults(func=cmd_webhooks)
    proxy = commands.add_parser("proxy", help="validate the proxy pool or serve its HTTP API")
    proxy.add_argument("action", choices=["validate", "serve"])
    proxy.add_argument("--every", type=float, metavar="SECONDS",
                       help="validate again every SECONDS (default: once)")
    proxy.set_defaults(func=cmd_proxy)
    export = commands.add_parser("export", help="write a crawl's stored items to a file: "
                                 "JSON lines, CSV or Parquet")
    export.add_argument("--crawlid", required=True)
    export.add_argument("--format", choices=EXPORT_FORMATS, default="jsonl")
    export.add_argument("--since", metavar="TIME",
                        help="only items stored since TIME (epoch seconds or ISO 8601, UTC "
                             "unless it names a zone)")
    export.add_argument("--changed-since", metavar="TIME",
                        help="only items new, changed or gone since TIME (as --since)")
    export.add_argument("-o", "--output", metavar="FILE",
                        help="where to write (- for stdout; default <crawlid>.<format>)")
    export.set_defaults(func=cmd_export)
    start = commands.add_parser(
        "start-spider", help="start a deployed spider (scrapyd-deploy) on every node, as a "
                             "long-running cluster job")
    start.add_argument("project", help="the project's name (`crawlcluster` for ours)")
    start.add_argument("spider")
    start.add_argument("-a", dest="arg", action="append", default=[], metavar="NAME=VALUE",
                       help="a spider argument, as with `scrapy crawl`")
    start.add_argument("-s", dest="set", action="append", default=[], metavar="NAME=VALUE",
                       help="a Scrapy setting for the job")
    start.add_argument("--node", action="append", metavar="NAME",
                       help="only this node (repeatable); default every registered node")
    start.set_defaults(func=cmd_start_spider)
    show = commands.add_parser("settings", help="print the effective settings")
    show.add_argument("--markdown", action="store_true",
                      help="print the defaults as docs/settings.md's Markdown table")
    show.set_defaults(func=cmd_settings)
