"""The roles, one command each: ``master``, ``manager``, ``preprocess``, ``monitor``,
``exporter``. Each runs until SIGTERM/SIGINT, once its servers answer."""

import argparse
from typing import Any

from manager.cli.common import when_reachable
from settings.loader import Settings


def cmd_master(args: argparse.Namespace, settings: Settings) -> int:
    """Run the dispatcher until SIGTERM/SIGINT."""
    from master.dispatcher import main as run_dispatcher

    return when_reachable(settings, lambda: run_dispatcher(settings))


def cmd_manager(args: argparse.Namespace, settings: Settings) -> int:
    """Run this node's scrapyd-compatible spider manager until SIGTERM/SIGINT."""
    from manager.node import main as run_manager

    return when_reachable(settings, lambda: run_manager(settings))


def cmd_preprocess(args: argparse.Namespace, settings: Settings) -> int:
    """Run the Kafka intake until SIGTERM/SIGINT."""
    from message_processing.preprocess.service import Preprocess

    when_reachable(settings, lambda: Preprocess.from_settings(settings)).run()
    return 0


def cmd_exporter(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the cluster's Prometheus metrics until SIGTERM/SIGINT."""
    from manager.metrics import main as run_exporter

    return when_reachable(settings, lambda: run_exporter(settings))


def cmd_monitor(args: argparse.Namespace, settings: Settings) -> int:
    """Answer stored queries and commands, find crawl events and deliver their webhooks,
    until SIGTERM/SIGINT."""
    from crawler.urlguard import UrlGuard
    from message_processing.monitor.service import Monitor

    guard = UrlGuard.for_webhooks(settings)
    when_reachable(settings, lambda: Monitor.from_settings(settings, guard)).run()
    return 0


def add_commands(commands: Any) -> None:
    for name, help_text, func in (
            ("master", "run a dispatcher: pools to job queues by weighted round robin",
             cmd_master),
            ("manager", "run this node's spider manager (scrapyd-compatible API, web UI)",
             cmd_manager),
            ("preprocess", "run the Kafka intake: validate requests, store them in Redis",
             cmd_preprocess),
            ("monitor", "answer info/stats/stop/config requests and expire crawls",
             cmd_monitor),
            ("exporter", ("serve the cluster's Prometheus metrics (frontier, crawls, jobs, "
                          "roles, Bloom filter)"), cmd_exporter)):
        commands.add_parser(name, help=help_text).set_defaults(func=func)
