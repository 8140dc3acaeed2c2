"""The ``crawlcluster`` command: one front for every role and tool.

Each subcommand is a small function taking the parsed arguments and the
settings and returning an exit status. Errors crawlcluster raises on purpose
become one line on stderr and exit status 2; nothing below the CLI exits.
"""

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from manager.export import FORMATS as EXPORT_FORMATS
from settings.clients import SERVER_KINDS, check_server, server_address
from settings.errors import CrawlClusterError
from settings.loader import Settings, load_settings
from settings.reference import settings_table

T = TypeVar("T")

EXIT_FAILED = 1
EXIT_ERROR = 2


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
        return 0
    if args.action == "status":
        return 0 if servers.status(kinds) else EXIT_FAILED
    servers.down(args.kinds or None)
    return 0


def cmd_master(args: argparse.Namespace, settings: Settings) -> int:
    """Run the dispatcher until SIGTERM/SIGINT."""
    from master.dispatcher import main as run_dispatcher

    return _when_reachable(settings, lambda: run_dispatcher(settings))


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    """Start a local cluster; in the foreground until Ctrl-C unless --detach."""
    from manager.local.cluster import LocalCluster

    cluster = LocalCluster(settings, nodes=args.nodes, procs=args.procs, masters=args.masters)
    try:
        for line in cluster.describe(cluster.up()):
            print(line, flush=True)
        print(f"supervisor  pid {cluster.supervise()}: starts again the roles that die "
              f"(restarts in `crawlcluster services status`)", flush=True)
        if args.detach:
            print("running in the background; `crawlcluster down` stops it")
            return 0
        print("Ctrl-C stops the cluster", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("\nstopping...", flush=True)
        cluster.down()
        return 0


def cmd_supervisor(args: argparse.Namespace, settings: Settings) -> int:
    from manager.local.supervisor import main as supervise

    return supervise(settings, args.nodes, args.procs, args.masters)


def cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    """Stop what `up` (or `demo --keep`) started."""
    from manager.local.cluster import LocalCluster

    stopped = LocalCluster(settings).down(servers=not args.keep_servers)
    print("stopped: " + (", ".join(stopped) or "no cluster processes were recorded"))
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from manager.local.demo import main as run_demo

    return run_demo(settings, args)


def cmd_manager(args: argparse.Namespace, settings: Settings) -> int:
    """Run this node's scrapyd-compatible spider manager until SIGTERM/SIGINT."""
    from manager.node import main as run_manager

    return _when_reachable(settings, lambda: run_manager(settings))


def cmd_preprocess(args: argparse.Namespace, settings: Settings) -> int:
    """Run the Kafka intake until SIGTERM/SIGINT."""
    from message_processing.preprocess.service import Preprocess

    _when_reachable(settings, lambda: Preprocess.from_settings(settings)).run()
    return 0


def cmd_exporter(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the cluster's Prometheus metrics until SIGTERM/SIGINT."""
    from manager.metrics import main as run_exporter

    return _when_reachable(settings, lambda: run_exporter(settings))


def cmd_monitor(args: argparse.Namespace, settings: Settings) -> int:
    """Answer stored queries and commands until SIGTERM/SIGINT."""
    from message_processing.monitor.service import Monitor

    _when_reachable(settings, lambda: Monitor.from_settings(settings)).run()
    return 0


def _when_reachable(settings: Settings, start: Callable[[], T]) -> T:
    """A role's start, tried again while its servers are unreachable (for
    CRAWLCLUSTER_STARTUP_WAIT seconds): its clients are made before it does anything."""
    from settings.process import start_when_reachable

    return start_when_reachable(start, settings.getfloat("CRAWLCLUSTER_STARTUP_WAIT"))


def _with_client(settings: Settings, args: argparse.Namespace,
                 work: Callable[[Any], int]) -> int:
    from message_processing.client import RequestClient

    client = RequestClient.from_settings(settings, timeout=args.timeout)
    try:
        return work(client)
    finally:
        client.close()


def cmd_submit(args: argparse.Namespace, settings: Settings) -> int:
    """Send requests from a file (or stdin) and print each reply."""
    from message_processing.client import read_requests, submit

    text = sys.stdin.read() if args.file == "-" else _read_file(args.file)
    requests = read_requests(text)
    return _with_client(settings, args, lambda client: submit(client, requests, args.json))


def _read_file(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise CrawlClusterError(f"cannot read {path}: {exc.strerror}") from None


def _query(args: argparse.Namespace, settings: Settings, request: dict[str, Any]) -> int:
    from message_processing.client import print_reply

    def ask(client: Any) -> int:
        reply = client.ask(dict(request, userid=args.user))
        print_reply(reply, args.json)
        return 1 if reply.get("status") == "error" else 0

    return _with_client(settings, args, ask)


def cmd_info(args: argparse.Namespace, settings: Settings) -> int:
    return _query(args, settings, {"type": "info", "crawlid": args.crawlid})


def cmd_stop(args: argparse.Namespace, settings: Settings) -> int:
    return _query(args, settings, {"type": "stop", "crawlid": args.crawlid})


def cmd_pause(args: argparse.Namespace, settings: Settings) -> int:
    return _query(args, settings, {"type": "pause", "crawlid": args.crawlid})


def cmd_resume(args: argparse.Namespace, settings: Settings) -> int:
    return _query(args, settings, {"type": "resume", "crawlid": args.crawlid})


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
        text = sys.stdin.read() if args.crawl == "-" else _read_file(args.crawl)
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
    return _query(args, settings, request)


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    return _query(args, settings, {"type": "stats", "stats": args.module})


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
    return _query(args, settings, request)


def cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    from message_processing.client import watch

    request = {"type": "info", "crawlid": args.crawlid, "userid": args.user}
    return _with_client(settings, args,
                        lambda client: watch(client, request, args.every, as_json=args.json))


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
    client = export_client(settings, "export")
    try:
        items = CrawlItems(client[settings["CRAWLCLUSTER_MONGODB_DATABASE"]], args.crawlid,
                           since)
        total = items.count()
        if not total:
            print(f"crawlcluster export: crawl {args.crawlid} has no items stored"
                  + (f" since {args.since}" if args.since else ""), file=sys.stderr)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crawlcluster",
        description="Distributed Scrapy crawling over Redis, Kafka, ZooKeeper and MongoDB.")
    parser.add_argument("--settings", metavar="FILE",
                        help="settings file (.json or .py); overrides defaults, "
                             "environment variables override it")
    parser.add_argument("--log-level", help="override CRAWLCLUSTER_LOG_LEVEL")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

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
    services.set_defaults(func=cmd_services, quiet_clients=True)

    master = commands.add_parser(
        "master", help="run a dispatcher: pools to job queues by weighted round robin")
    master.set_defaults(func=cmd_master)

    up = commands.add_parser("up", help="start a local cluster: servers, master, preprocess, "
                                        "monitor, N nodes with M spiders each")
    up.add_argument("--nodes", type=int, default=1, help="managers (nodes) to start")
    up.add_argument("--procs", type=int, default=1, help="spider processes per type per node")
    up.add_argument("--masters", type=int, default=1,
                    help="dispatchers (they share the frontier's shards by lease)")
    up.add_argument("-d", "--detach", action="store_true", help="return once it is up")
    up.set_defaults(func=cmd_up)
    supervisor = commands.add_parser(
        "supervisor", help="keep a local cluster's roles running (`up` starts it)")
    supervisor.add_argument("--nodes", type=int, default=1)
    supervisor.add_argument("--procs", type=int, default=1)
    supervisor.add_argument("--masters", type=int, default=1)
    supervisor.set_defaults(func=cmd_supervisor)
    down = commands.add_parser("down", help="stop what `up` or `demo --keep` started")
    down.add_argument("--keep-servers", action="store_true",
                      help="leave Redis, Kafka, ZooKeeper and MongoDB running")
    down.set_defaults(func=cmd_down)
    demo = commands.add_parser("demo", help="a local cluster crawls a demo site through Kafka")
    demo.add_argument("--nodes", type=int, default=2)
    demo.add_argument("--procs", type=int, default=1)
    demo.add_argument("--keep", action="store_true", help="leave the cluster running (UI)")
    demo.set_defaults(func=cmd_demo)
    commands.add_parser(
        "manager", help="run this node's spider manager (scrapyd-compatible API, web UI)"
    ).set_defaults(func=cmd_manager)
    commands.add_parser(
        "preprocess", help="run the Kafka intake: validate requests, store them in Redis"
    ).set_defaults(func=cmd_preprocess)
    commands.add_parser(
        "monitor", help="answer info/stats/stop/config requests and expire crawls"
    ).set_defaults(func=cmd_monitor)
    commands.add_parser(
        "exporter", help="serve the cluster's Prometheus metrics (frontier, crawls, jobs, "
        "roles, Bloom filter)"
    ).set_defaults(func=cmd_exporter)
    _client_commands(commands)

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
    return parser


def _client_commands(commands: Any) -> None:
    def client_parser(name: str, help_text: str,
                      func: Callable[[argparse.Namespace, Settings], int]) -> Any:
        parser = commands.add_parser(name, help=help_text)
        parser.add_argument("--json", action="store_true", help="print replies as JSON")
        parser.add_argument("--timeout", type=float, metavar="SECONDS",
                            help="wait this long for a reply (CRAWLCLUSTER_REPLY_TIMEOUT)")
        parser.add_argument("--user", default="cli", help="userid sent with the request")
        parser.set_defaults(func=func, quiet_clients=True)
        return parser

    submit = client_parser("submit", "send JSON requests from FILE (or - for stdin), "
                                     "print each ack or error", cmd_submit)
    submit.add_argument("file", metavar="FILE|-")
    for name, help_text, func in (("info", "a crawl's pending tasks and counts", cmd_info),
                                  ("stop", "stop a crawl and purge its pending tasks", cmd_stop),
                                  ("pause", "pause a crawl: park its waiting tasks", cmd_pause),
                                  ("resume", "resume a paused crawl", cmd_resume),
                                  ("watch", "live progress of a crawl until it drains",
                                   cmd_watch)):
        parser = client_parser(name, help_text, func)
        parser.add_argument("--crawlid", required=True)
        if name == "watch":
            parser.add_argument("--every", type=float, default=2.0, metavar="SECONDS")
    schedule = client_parser("schedule", "recurring crawls: add one (a crawl by cron "
                             "expression or interval), list, pause, resume or delete",
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
    stats = client_parser("stats", "rolling counts, status codes, heartbeats, queues", cmd_stats)
    stats.add_argument("module", nargs="?", default="all",
                       choices=["all", "preprocess", "monitor", "crawler", "spider", "machine",
                                "queue"])
    config = client_parser("config", "change a domain's rate limit or the blacklist", cmd_config)
    config.add_argument("what", choices=["rate", "blacklist"])
    config.add_argument("domain")
    config.add_argument("--hits", type=int, help="requests allowed per window (rate)")
    config.add_argument("--ip-hits", type=int,
                        help="of those, allowed from one source address (rate; default all)")
    config.add_argument("--window", type=float, default=60.0, help="window in seconds (rate)")
    config.add_argument("--remove", action="store_true",
                        help="remove the domain's limit, or take it off the blacklist")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check_kinds(parser, getattr(args, "kinds", None))
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


def _check_kinds(parser: argparse.ArgumentParser, kinds: list[str] | None) -> None:
    unknown = [kind for kind in kinds or () if kind not in SERVER_KINDS]
    if unknown:
        parser.error(f"unknown server kind {unknown[0]!r}; choose from {', '.join(SERVER_KINDS)}")


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


if __name__ == "__main__":
    sys.exit(main())
