"""A whole cluster on this machine: ``up``, its ``supervisor``, ``down``, ``demo``."""

import argparse
import time
from typing import Any

from settings.loader import Settings


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


def _cluster_shape(parser: Any, nodes: int = 1) -> Any:
    parser.add_argument("--nodes", type=int, default=nodes, help="managers (nodes) to start")
    parser.add_argument("--procs", type=int, default=1,
                        help="spider processes per type per node")
    return parser


def add_commands(commands: Any) -> None:
    up = _cluster_shape(commands.add_parser(
        "up", help="start a local cluster: servers, master, preprocess, monitor, N nodes "
                   "with M spiders each"))
    up.add_argument("--masters", type=int, default=1,
                    help="dispatchers (they share the frontier's shards by lease)")
    up.add_argument("-d", "--detach", action="store_true", help="return once it is up")
    up.set_defaults(func=cmd_up)
    supervisor = _cluster_shape(commands.add_parser(
        "supervisor", help="keep a local cluster's roles running (`up` starts it)"))
    supervisor.add_argument("--masters", type=int, default=1)
    supervisor.set_defaults(func=cmd_supervisor)
    down = commands.add_parser("down", help="stop what `up` or `demo --keep` started")
    down.add_argument("--keep-servers", action="store_true",
                      help="leave Redis, Kafka, ZooKeeper and MongoDB running")
    down.set_defaults(func=cmd_down)
    demo = _cluster_shape(commands.add_parser(
        "demo", help="a local cluster crawls a demo site through Kafka"), nodes=2)
    demo.add_argument("--keep", action="store_true", help="leave the cluster running (UI)")
    demo.set_defaults(func=cmd_demo)
