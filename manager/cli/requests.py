"""Requests through Kafka, as a client sends them: ``submit``, ``info``, ``stop``,
``pause``, ``resume``, ``watch``, ``schedule``, ``stats``, ``config``, ``sites``."""

import argparse
import json
import sys
from typing import Any

from manager.cli.common import client_parser, query, read_file, with_client
from settings.errors import CrawlClusterError
from settings.loader import Settings


def cmd_submit(args: argparse.Namespace, settings: Settings) -> int:
    """Send requests from a file (or stdin) and print each reply."""
    from message_processing.client import read_requests, submit

    text = sys.stdin.read() if args.file == "-" else read_file(args.file)
    requests = read_requests(text)
    return with_client(settings, args, lambda client: submit(client, requests, args.json))


def cmd_info(args: argparse.Namespace, settings: Settings) -> int:
    return query(args, settings, {"type": "info", "crawlid": args.crawlid})


def cmd_sites(args: argparse.Namespace, settings: Settings) -> int:
    """A crawl's health per site (``info`` with ``sites``): a table, or the JSON."""
    from message_processing.client import print_reply

    def ask(client: Any) -> int:
        reply = client.ask({"type": "info", "crawlid": args.crawlid, "sites": True,
                            "userid": args.user})
        if reply.get("status") == "error":
            print_reply(reply, args.json)
            return 1
        sites = reply.get("sites", [])
        print(json.dumps(sites, ensure_ascii=False) if args.json else sites_table(sites))
        return 0

    return with_client(settings, args, ask)


def sites_table(sites: list[dict[str, Any]]) -> str:
    """One line per site: pages, errors, pushback, rendered, items, dropped, each
    field's coverage, and what looks wrong (marked ``!``)."""
    fields = list(dict.fromkeys(name for site in sites for name in site["coverage"]))
    header = ["", "site", "pages", "errors", "pushback", "rendered", "items", "dropped",
              *fields, "problems"]
    rows = [header]
    for site in sites:
        rows.append(["!" if site["problems"] else "", site["site"], str(site["pages"]),
                     str(site["errors"]), str(sum(site["pushback"].values())),
                     str(site["rendered"]), str(site["items"]), str(site["dropped"]),
                     *(f"{site['coverage'][name]:.0%}" if name in site["coverage"] else "-"
                       for name in fields),
                     "; ".join(site["problems"])])
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                        strict=True)).rstrip()
                     for row in rows)


def cmd_stop(args: argparse.Namespace, settings: Settings) -> int:
    return query(args, settings, {"type": "stop", "crawlid": args.crawlid})


def cmd_pause(args: argparse.Namespace, settings: Settings) -> int:
    return query(args, settings, {"type": "pause", "crawlid": args.crawlid})


def cmd_resume(args: argparse.Namespace, settings: Settings) -> int:
    return query(args, settings, {"type": "resume", "crawlid": args.crawlid})


def cmd_schedule(args: argparse.Namespace, settings: Settings) -> int:
    """Add, list, pause, resume or delete a recurring crawl."""
    request = {"type": "schedule", "action": args.action}
    if args.action != "list":
        if not args.schedule_id:
            raise CrawlClusterError(f"schedule {args.action} needs a schedule id")
        request["schedule_id"] = args.schedule_id
    if args.action == "add":
        if (args.cron is None) == (args.every is None) or not args.crawl:
            raise CrawlClusterError("schedule add needs --crawl FILE and one of --cron or "
                                    "--every")
        text = sys.stdin.read() if args.crawl == "-" else read_file(args.crawl)
        try:
            crawl = json.loads(text)
        except ValueError as exc:
            raise CrawlClusterError(f"--crawl {args.crawl}: not JSON: {exc}") from None
        if not isinstance(crawl, dict):
            raise CrawlClusterError(f"--crawl {args.crawl}: not a JSON object")
        # a crawl request file serves as it is: each run gets its own id and user
        request["crawl"] = {key: value for key, value in crawl.items()
                            if key not in ("type", "crawlid", "userid", "uuid")}
        request.update({"cron": args.cron} if args.cron is not None else {"every": args.every})
        if args.series:
            request["series"] = True
    return query(args, settings, request)


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    return query(args, settings, {"type": "stats", "stats": args.module})


def cmd_config(args: argparse.Namespace, settings: Settings) -> int:
    actions = {("rate", False): "rate", ("rate", True): "remove_rate",
               ("blacklist", False): "blacklist", ("blacklist", True): "unblacklist"}
    request = {"type": "site_config", "action": actions[args.what, args.remove],
               "domain": args.domain}
    if args.what == "rate" and not args.remove:
        if args.hits is None:
            raise CrawlClusterError("rate needs --hits (requests allowed per --window seconds)")
        request.update(rate=args.hits, window=args.window)
        if args.ip_hits is not None:
            request["ip_hits"] = args.ip_hits
    return query(args, settings, request)


def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    from message_processing.client import watch

    request = {"type": "info", "crawlid": args.crawlid, "userid": args.user}
    return with_client(settings, args,
                        lambda client: watch(client, request, args.every, as_json=args.json))


def add_commands(commands: Any) -> None:
    submit = client_parser(commands, "submit", "send JSON requests from FILE (or - for "
                                               "stdin), print each ack or error", cmd_submit)
    submit.add_argument("file", metavar="FILE|-")
    for name, help_text, func in (("info", "a crawl's pending tasks and counts", cmd_info),
                                  ("stop", "stop a crawl and purge its pending tasks", cmd_stop),
                                  ("pause", "pause a crawl: park its waiting tasks", cmd_pause),
                                  ("resume", "resume a paused crawl", cmd_resume),
                                  ("watch", "live progress of a crawl until it drains",
                                   cmd_watch),
                                  ("sites", ("a crawl's health per site: pages, statuses, "
                                             "pushback, items, drops, field coverage"),
                                   cmd_sites)):
        parser = client_parser(commands, name, help_text, func)
        parser.add_argument("--crawlid", required=True)
        if name == "watch":
            parser.add_argument("--every", type=float, default=2.0, metavar="SECONDS")
    _schedule_command(commands)
    stats = client_parser(commands, "stats", "rolling counts, status codes, heartbeats, "
                                             "queues", cmd_stats)
    stats.add_argument("module", nargs="?", default="all",
                       choices=["all", "preprocess", "monitor", "crawler", "spider", "machine",
                                "queue"])
    _config_command(commands)


def _schedule_command(commands: Any) -> None:
    schedule = client_parser(commands, "schedule", "recurring crawls: add one (a crawl by "
                             "cron expression or interval), list, pause, resume or delete",
                             cmd_schedule)
    schedule.add_argument("action", choices=["add", "list", "pause", "resume", "delete"])
    schedule.add_argument("schedule_id", nargs="?", metavar="ID",
                          help="each run is a crawl of id ID-<due time, UTC>")
    schedule.add_argument("--cron", metavar="EXPR",
                          help="minute hour day month weekday, in UTC (e.g. '0 * * * *')")
    schedule.add_argument("--every", type=float, metavar="SECONDS", help="or an interval")
    schedule.add_argument("--crawl", metavar="FILE|-",
                          help="the crawl request each run submits (JSON; its type, "
                               "crawlid and userid are set by the schedule)")
    schedule.add_argument("--series", action="store_true",
                          help="run as one series: each run stores and sends on only what "
                               "is new or changed since the last (docs/requests.md)")


def _config_command(commands: Any) -> None:
    config = client_parser(commands, "config", "change a domain's rate limit or the "
                                               "blacklist", cmd_config)
    config.add_argument("what", choices=["rate", "blacklist"])
    config.add_argument("domain")
    config.add_argument("--hits", type=int, help="requests allowed per window (rate)")
    config.add_argument("--ip-hits", type=int,
                        help="of those, allowed from one source address (rate; default all)")
    config.add_argument("--window", type=float, default=60.0, help="window in seconds (rate)")
    config.add_argument("--remove", action="store_true",
                        help="remove the domain's limit, or take it off the blacklist")
