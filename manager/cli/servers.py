"""Commands for the servers: ``ping`` checks them, ``services`` runs local ones."""

import argparse
from typing import Any

from manager.cli.common import EXIT_FAILED
from settings.clients import SERVER_KINDS, check_server, server_address
from settings.loader import Settings


def cmd_ping(args: argparse.Namespace, settings: Settings) -> int:
    """Check every configured server; one line each."""
    all_ok = True
    for kind in args.kinds or SERVER_KINDS:
        ok, detail = check_server(settings, kind)
        print(f"{kind:<10} {server_address(settings, kind)}  {detail}")
        all_ok = all_ok and ok
    return 0 if all_ok else EXIT_FAILED


def cmd_services(args: argparse.Namespace, settings: Settings) -> int:
    """Start, report or stop the local servers."""
    from manager.local.services import LocalServers

    servers = LocalServers(settings)
    kinds = args.kinds or SERVER_KINDS
    if args.action == "up":
        servers.up(kinds)
        if args.alerting:
            from manager.local.alerting import LocalAlerting

            LocalAlerting(settings).up()
        return 0
    if args.action == "status":
        return 0 if servers.status(kinds) else EXIT_FAILED
    servers.down(args.kinds or None)
    return 0


def add_commands(commands: Any) -> None:
    ping = commands.add_parser("ping", help="check every configured server answers")
    ping.add_argument("kinds", nargs="*", metavar="KIND",
                      help=f"only these ({', '.join(SERVER_KINDS)})")
    ping.set_defaults(func=cmd_ping, quiet_clients=True)
    services = commands.add_parser(
        "services",
        help="start/report/stop local Redis, ZooKeeper, Kafka-API and MongoDB-wire servers")
    services.add_argument("action", choices=["up", "status", "down"])
    services.add_argument("kinds", nargs="*", metavar="KIND",
                          help=f"only these ({', '.join(SERVER_KINDS)}); down stops all")
    services.add_argument("--alerting", action="store_true",
                          help="up: start Prometheus (the alert rules) and Alertmanager too, "
                               "alerts to CRAWLCLUSTER_ALERT_WEBHOOK")
    services.set_defaults(func=cmd_services, quiet_clients=True)


def check_kinds(parser: argparse.ArgumentParser, kinds: list[str] | None) -> None:
    unknown = [kind for kind in kinds or () if kind not in SERVER_KINDS]
    if unknown:
        parser.error(f"unknown server kind {unknown[0]!r}; choose from {', '.join(SERVER_KINDS)}")
