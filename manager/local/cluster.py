"""A whole cluster on this machine: ``crawlcluster up`` / ``crawlcluster down``.

``up`` starts (or reuses) the servers, then the master (or several, sharing
the frontier's shards), preprocess, monitor and the metrics exporter, then N managers on their own
ports (node1, node2, ...; each with its own simulated host IP, 127.0.0.<n>, so
the per-IP throttle sees N hosts), and has each schedule M spider processes
per spider type through its own scrapyd API. With a ``manager.local.netns.NodeNetwork``
each node runs in a network namespace of its own, with a real address of its
own, instead. Every process is recorded in the state directory (the same PID
records ``services`` uses, named ``cluster-*``); ``down`` stops exactly those,
managers first (their spider processes are in their process group and get
the same SIGTERM, so leased tasks are released), then the servers that
``services`` started.
"""

import json
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from manager.local.crawl import cluster_env
from manager.local.ports import bindable, free_port, listening
from manager.local.processes import CLUSTER_MARK, cluster_processes, spawn, stop_process
from manager.local.services import LocalServers
from manager.local.statedir import StateDir
from manager.metrics import exporter_address
from manager.registry import listen_address
from settings.clients import ensure_topics
from settings.errors import ServiceError
from settings.loader import Settings

ROLES = ("master", "preprocess", "monitor", "exporter")
SPIDER_TYPES = ("universal", "precise")
PROJECT = "crawlcluster"
# A local cluster's sites are on loopback: its crawls and previews may reach it.
LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")
ROOT = str(Path(__file__).resolve().parents[2])


class LocalCluster:
    def __init__(self, settings: Settings, nodes: int = 1, procs: int = 1,
                 spider_types: tuple[str, ...] = SPIDER_TYPES, out: Callable[..., None] = print,
                 spider_settings: dict[int, dict[str, Any]] | None = None, masters: int = 1,
                 network: Any = None) -> None:
        self.settings = with_local_sites_allowed(settings, network)
        self.network = network           # a manager.local.netns.NodeNetwork: nodes on own addresses
        self.masters = masters           # dispatchers sharing the frontier's shards
        self.spider_settings = spider_settings or {}     # node number -> Scrapy settings
        self.nodes = nodes
        self.procs = procs
        self.spider_types = spider_types
        self.out = out
        self.state = StateDir(settings.getpath("CRAWLCLUSTER_STATE_DIR"))
        self.started_here: list[tuple[str, str]] = []    # what this object started

    # --- up ----------------------------------------------------------------------------

    def up(self) -> dict[str, Any]:
        """Start everything not running yet; return ``{name: address or pid}``. When
        something fails to start, what this call started is stopped before the error
        goes up: no half-started cluster is left running."""
        try:
            return self._start_all()
        except BaseException:
            self.down(only_started_here=True)
            raise

    def _start_all(self) -> dict[str, Any]:
        servers = LocalServers(self.settings, out=self.out).up()
        self.started_here += [("server", kind) for kind in servers]
        ensure_topics(self.settings, "up")
        started = {role: self.start(role) for role in self.roles()}
        for number in range(1, self.nodes + 1):
            started[f"node{number}"] = self._start_node(number)
        return started

    def start(self, role: str) -> Any:
        """Start one role of the cluster unless it runs (``master``, ``exporter``,
        ``manager-node2``, ...); its pid, or a node's manager URL."""
        if role.startswith("manager-node"):
            return self._start_node(int(role.removeprefix("manager-node")))
        if role == "exporter":
            address = self.exporter_address()
            env = cluster_env(self.settings, fast=False, CRAWLCLUSTER_EXPORTER_ADDRESS=address)
            return self._start_role(role, env, address=address)
        return self._start_role(role, cluster_env(self.settings, fast=False))

    def roles(self) -> list[str]:
        """The role processes' names: master, master-2, ..., preprocess, monitor."""
        extra = [f"master-{number}" for number in range(2, self.masters + 1)]
        return [ROLES[0], *extra, *ROLES[1:]]

    def _start_role(self, name: str, env: dict[str, str],
                    wrap: Callable[[list[str]], list[str]] | None = None,
                    arguments: tuple[str, ...] = (), **extra: Any) -> int:
        """Start ``crawlcluster <role> [arguments]`` (the role: the name up to its first
        ``-``) unless its record shows it running; ``wrap`` turns the command into the
        one to run (a namespace); ``extra`` goes into the record."""
        record = self.state.recorded(f"cluster-{name}")
        if record:
            return record["pid"]
        command = [sys.executable, "-m", "manager.cli", name.split("-")[0], *arguments]
        command = wrap(command) if wrap else command
        process = spawn(command, self.state.log_path(f"cluster-{name}"), cwd=ROOT,
                        env={**env, CLUSTER_MARK: str(self.state.root)})
        self.state.record(f"cluster-{name}", process.pid, command, **extra)
        self.started_here.append(("role", f"cluster-{name}"))
        return process.pid

    def supervise(self) -> int:
        """Start ``crawlcluster supervisor`` for this cluster (manager/local/supervisor.py):
        it starts again the roles that die. Returns its pid."""
        arguments = ("--nodes", str(self.nodes), "--procs", str(self.procs),
                     "--masters", str(self.masters))
        if self.state.recorded("cluster-supervisor") is None:
            self.state.restarts_path().unlink(missing_ok=True)     # counts since this up
        return self._start_role("supervisor", cluster_env(self.settings, fast=False),
                                arguments=arguments)

    def exporter_address(self) -> str:
        """Where the exporter serves ``/metrics``: as recorded, else as configured, else
        (the port taken) a free port on the configured host."""
        record = self.state.recorded("cluster-exporter")
        if record:
            return record["address"]
        host, port = exporter_address(self.settings)
        if not bindable(host, port):
            port = free_port((host,))
        return f"{host}:{port}"

    def node_settings(self, number: int) -> Settings:
        """The settings of the number-th node's manager (and its spiders)."""
        base_host, base_port = listen_address(self.settings)
        if self.network is not None:          # its own address; the port is its own too
            address = self.network.address(number)
            return self.settings.copy_with(CRAWLCLUSTER_MANAGER_ADDRESS=f"{address}:{base_port}",
                                           CRAWLCLUSTER_NODE_NAME=f"node{number}",
                                           CRAWLCLUSTER_NODE_IP=address)
        record = self.state.recorded(f"cluster-manager-node{number}")
        port = record["port"] if record else base_port + number - 1
        if not record and not bindable(base_host, port):
            # taken by a listener, or by a client connection's local port
            port = free_port((base_host,))
        return self.settings.copy_with(
            CRAWLCLUSTER_MANAGER_ADDRESS=f"{base_host}:{port}",
            CRAWLCLUSTER_NODE_NAME=f"node{number}",
            CRAWLCLUSTER_NODE_IP=f"127.0.0.{number}")

    def _start_node(self, number: int) -> str:
        settings = self.node_settings(number)
        name = f"manager-node{number}"
        fresh = self.state.recorded(f"cluster-{name}") is None
        host, port = listen_address(settings)
        wrap = (lambda command: self.network.command(number, command)) if self.network else None
        self._start_role(name, cluster_env(settings, fast=False), wrap=wrap, port=port)
        _wait_port(host, port, self.state.log_path(f"cluster-{name}"))
        if fresh:
            for spider in self.spider_types:
                for index in range(self.procs):
                    schedule(settings, spider, f"node{number}-{spider}-{index + 1}",
                             **self.spider_settings.get(number, {}))
        return manager_url(settings)

    # --- down ----------------------------------------------------------------------------

    def down(self, servers: bool = True, only_started_here: bool = False) -> list[str]:
        """Stop what ``up`` started: managers (and their spiders), roles, servers; with
        ``only_started_here``, only what this object started (a demo leaves alone the
        cluster and servers it found running)."""
        names = [kind for kind in self.state.recorded_kinds() if kind.startswith("cluster-")]
        if only_started_here:
            names = [name for kind, name in self.started_here if kind == "role"]
        # The supervisor first: it would start again what is stopped next.
        managers = [name for name in names if name.startswith("cluster-manager-")]
        stopped = []
        bound = self.settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT")
        first = [name for name in names if name == "cluster-supervisor"] + managers
        for name in first + [name for name in names if name not in first]:
            record = self.state.recorded(name)
            if record:
                # A manager stops its spiders and waits for them (up to the bound plus 10
                # s) before it exits; the other roles end within the bound by themselves.
                manager = name in managers
                ended_by = stop_process(record["pid"], timeout=bound + (30 if manager else 10),
                                        group=not manager)
                stopped.append(name.removeprefix("cluster-"))
                if ended_by == "SIGKILL":
                    self.out(f"{name.removeprefix('cluster-')} did not stop after SIGTERM: "
                             f"killed")
            self.state.forget(name)
        if not only_started_here:
            self._stop_leftovers()
        kinds = [name for kind, name in self.started_here if kind == "server"]
        if servers and (kinds or not only_started_here):
            LocalServers(self.settings, out=self.out).down(kinds if only_started_here else None)
        return stopped

    def _stop_leftovers(self) -> None:
        """Stop the processes of this cluster no role took with it (a spider whose manager
        was killed, say), before the servers go: none outlives ``down``."""
        for pid, command in cluster_processes(self.state):
            ended_by = stop_process(pid, timeout=10.0, group=False)
            if ended_by:
                self.out(f"stopped a leftover process of this cluster (pid {pid}, "
                         f"{ended_by}): {command}")

    def describe(self, started: dict[str, Any]) -> list[str]:
        """The lines ``up`` prints, one per role, node and topic, in aligned columns."""
        settings = self.settings
        topics = (f"requests {settings['CRAWLCLUSTER_KAFKA_REQUESTS_TOPIC']}, "
                  f"replies {settings['CRAWLCLUSTER_KAFKA_REPLIES_TOPIC']}")
        rows = [("Kafka", f"{settings['CRAWLCLUSTER_KAFKA_BOOTSTRAP']}  {topics}")]
        rows += [(role, f"pid {started[role]}  log {self.state.log_path(f'cluster-{role}')}")
                 for role in self.roles()]
        metrics = (f"cluster http://{self.exporter_address()}/metrics, each node's at its "
                   "manager API /metrics")
        rows.append(("metrics", metrics))
        for number in range(1, self.nodes + 1):
            url = started[f"node{number}"]
            spiders = f"{self.procs} x {', '.join(self.spider_types)}"
            rows.append((f"node{number}", f"manager API {url}  UI {url}ui/  spiders: {spiders}"))
        width = max(len(label) for label, _ in rows) + 2
        return [f"{label:<{width}}{text}" for label, text in rows]


def manager_url(settings: Settings) -> str:
    return f"http://{settings['CRAWLCLUSTER_MANAGER_ADDRESS']}/"


def schedule(settings: Settings, spider: str, jobid: str,
             **spider_settings: Any) -> dict[str, Any]:
    """Ask a node's manager to run a spider (its own API, as any scrapyd client)."""
    fields = [("project", PROJECT), ("spider", spider), ("jobid", jobid)]
    fields += [("setting", f"{key}={value}") for key, value in spider_settings.items()]
    reply = manager_call(settings, "schedule.json", fields)
    if reply.get("status") != "ok":
        raise ServiceError(f"{manager_url(settings)} refused {spider}: {reply.get('message')}")
    return reply


def manager_call(settings: Settings, endpoint: str,
                 fields: list[tuple[str, str]] | None = None) -> Any:
    request = urllib.request.Request(manager_url(settings) + endpoint,
                                     data=urllib.parse.urlencode(fields).encode()
                                     if fields is not None else None)
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def with_local_sites_allowed(settings: Settings, network: Any = None) -> Settings:
    """``settings`` with loopback (and a NodeNetwork's subnet, where its sites are) added
    to ``CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS``: the URL guard refuses them by default."""
    local = [*LOOPBACK_NETWORKS, *([f"{network.net}.0/24"] if network is not None else [])]
    allowed = list(settings.get("CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS") or [])
    return settings.copy_with(CRAWLCLUSTER_ALLOWED_PRIVATE_NETWORKS=[
        *allowed, *(net for net in local if net not in allowed)])


def _wait_port(host: str, port: int, log_path: Path | str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not listening(host, port):
        if time.monotonic() > deadline:
            tail = Path(log_path).read_text(errors="replace")[-800:]
            raise ServiceError(f"manager on {host}:{port} did not start; log:\n{tail}")
        time.sleep(0.1)
