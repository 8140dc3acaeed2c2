"""What the commands share: exit statuses, starting a role once its servers answer,
and the client of the request commands."""

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from settings.errors import CrawlClusterError
from settings.loader import Settings

T = TypeVar("T")
Command = Callable[[argparse.Namespace, Settings], int]

EXIT_FAILED = 1
EXIT_ERROR = 2


def when_reachable(settings: Settings, start: Callable[[], T]) -> T:
    """A role's start, tried again while its servers are unreachable (for
    CRAWLCLUSTER_STARTUP_WAIT seconds): its clients are made before it does anything."""
    from settings.process import start_when_reachable

    return start_when_reachable(start, settings.getfloat("CRAWLCLUSTER_STARTUP_WAIT"))


def with_client(settings: Settings, args: argparse.Namespace,
                 work: Callable[[Any], int]) -> int:
    from message_processing.client import RequestClient

    client = RequestClient.from_settings(settings, timeout=args.timeout)
    try:
        return work(client)
    finally:
        client.close()


def read_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise CrawlClusterError(f"cannot read {path}: {exc.strerror}") from None


def query(args: argparse.Namespace, settings: Settings, request: dict[str, Any]) -> int:
    from message_processing.client import print_reply

    def ask(client: Any) -> int:
        reply = client.ask(dict(request, userid=args.user))
        print_reply(reply, args.json)
        return 1 if reply.get("status") == "error" else 0

    return with_client(settings, args, ask)


def client_parser(commands: Any, name: str, help_text: str, func: Command) -> Any:
    """A command that sends requests through Kafka and prints the replies."""
    parser = commands.add_parser(name, help=help_text)
    parser.add_argument("--json", action="store_true", help="print replies as JSON")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="wait this long for a reply (CRAWLCLUSTER_REPLY_TIMEOUT)")
    parser.add_argument("--user", default="cli", help="userid sent with the request")
    parser.set_defaults(func=func, quiet_clients=True)
    return parser
