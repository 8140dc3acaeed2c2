"""The ``crawlcluster`` command: one front for every role and tool.

Each module adds its own subcommands (``add_commands``) next to their ``cmd_*``
functions, which take the parsed arguments and the settings and return an exit status:
``servers`` (ping, services), ``roles`` (master, manager, preprocess, monitor,
exporter), ``local`` (up, supervisor, down, demo), ``requests`` (submit, info, stop,
pause, resume, watch, schedule, stats, config), ``rules`` (try) and ``tools`` (proxy, export,
start-spider, settings). Errors crawlcluster raises on purpose become one line on stderr
and exit status 2; nothing below the CLI exits.
"""

import argparse
import logging
import sys

from manager.cli import local, requests, roles, rules, servers, tools
from manager.cli.common import EXIT_ERROR
from settings.errors import CrawlClusterError
from settings.loader import Settings, load_settings

COMMAND_MODULES = (servers, roles, local, requests, rules, tools)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crawlcluster",
        description="Distributed Scrapy crawling over Redis, Kafka, ZooKeeper and MongoDB.")
    parser.add_argument("--settings", metavar="FILE",
                        help="settings file (.json or .py); overrides defaults, "
                             "environment variables override it")
    parser.add_argument("--log-level", help="override CRAWLCLUSTER_LOG_LEVEL")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    servers.check_kinds(parser, getattr(args, "kinds", None))
    try:
        settings = load_settings(args.settings)
        if args.log_level:
            settings = settings.copy_with(CRAWLCLUSTER_LOG_LEVEL=args.log_level.upper())
        configure_logging(settings, quiet_clients=getattr(args, "quiet_clients", False))
        return args.func(args, settings)
    except CrawlClusterError as exc:
        print(f"crawlcluster {args.command}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


# Client libraries that log every connection at INFO; a role's own log says what matters.
THIRD_PARTY_LOGGERS = ("kafka", "kazoo", "pymongo", "urllib3", "botocore", "filelock")


def configure_logging(settings: Settings, quiet_clients: bool = False) -> None:
    logging.basicConfig(
        level=settings["CRAWLCLUSTER_LOG_LEVEL"],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if quiet_clients:
        # Checks report a dead server in one line; the client libraries would
        # otherwise log every failed connection attempt as well.
        third_party_level = logging.CRITICAL
    elif settings["CRAWLCLUSTER_LOG_LEVEL"] != "DEBUG":
        third_party_level = logging.WARNING
    else:
        return
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(third_party_level)
