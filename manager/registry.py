"""This node in the cluster: its name and address, and its registration (an
ephemeral znode under ``<root>/nodes`` and a Redis heartbeat) that ``cluster.json``,
the UI and the local cluster read."""

import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from master.registry import Heartbeats
from settings.errors import ConfigError
from settings.loader import Settings
from settings.node import node_ip
from settings.process import Watchdog

logger = logging.getLogger(__name__)
ROLE = "manager"


def listen_address(settings: Settings) -> tuple[str, int]:
    host, _, port = settings["CRAWLCLUSTER_MANAGER_ADDRESS"].rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"CRAWLCLUSTER_MANAGER_ADDRESS must be host:port, "
                          f"not {settings['CRAWLCLUSTER_MANAGER_ADDRESS']!r}")
    return host, int(port)


def node_name(settings: Settings) -> str:
    return str(settings["CRAWLCLUSTER_NODE_NAME"] or (
        f"{socket.gethostname()}-{listen_address(settings)[1]}"))


def nodes_path(settings: Settings) -> str:
    return str(settings["CRAWLCLUSTER_ZOOKEEPER_ROOT"]).rstrip("/") + "/nodes"


def node_info(settings: Settings) -> dict[str, Any]:
    host, port = listen_address(settings)
    url = settings["CRAWLCLUSTER_MANAGER_PUBLIC_URL"] or f"http://{host}:{port}/"
    max_proc = settings.getint("CRAWLCLUSTER_MANAGER_MAX_PROC") or 4 * (os.cpu_count() or 1)
    return {"node": node_name(settings), "host": socket.gethostname(), "ip": node_ip(settings),
            "http_port": port, "bind_address": host, "url": url, "pid": os.getpid(),
            "max_proc": max_proc}


class NodeRegistry:
    """This node in the cluster view: an ephemeral znode (gone when the manager's
    ZooKeeper session ends) and a Redis heartbeat (gone after its TTL). A session
    lost while the manager lives (a pause or a partition longer than the session
    timeout) ends with the znode re-created at the next beat after reconnecting."""

    def __init__(self, settings: Settings, zookeeper: Any, redis: Any,
                 info: dict[str, Any]) -> None:
        self.zookeeper = zookeeper
        self.path = nodes_path(settings) + "/" + info["node"]
        self.info = info
        self.heartbeats = Heartbeats.from_settings(redis, settings)
        self.session_lost = False

    def start(self) -> None:
        self.zookeeper.add_listener(self._on_session_state)
        self.register()
        self.beat()

    def _on_session_state(self, state: Any) -> None:
        from kazoo.protocol.states import KazooState

        if state == KazooState.LOST:       # kazoo's thread: only note it
            self.session_lost = True

    def register(self) -> None:
        from kazoo.exceptions import NodeExistsError

        self.zookeeper.ensure_path(self.path.rsplit("/", 1)[0])
        data = json.dumps(self.info).encode()
        try:
            self.zookeeper.create(self.path, data, ephemeral=True)
        except NodeExistsError:
            # A previous manager of this name whose session has not expired yet.
            self.zookeeper.delete(self.path)
            self.zookeeper.create(self.path, data, ephemeral=True)

    def beat(self) -> None:
        if self.session_lost and self.zookeeper.connected:
            self.register()
            self.session_lost = False
            logger.warning("the ZooKeeper session was lost; %s registered again", self.path)
        self.heartbeats.beat(ROLE, self.info["node"])

    def stop(self) -> None:
        self.heartbeats.stop(ROLE, self.info["node"])
        if self.zookeeper.connected:   # else the node's znode goes with its session
            self.zookeeper.delete(self.path)


def state_dir(settings: Settings) -> Path:
    """This node's manager directory: logs, the SQLite job queues, eggs, metrics."""
    path = settings.getpath("CRAWLCLUSTER_STATE_DIR") / f"manager-{node_name(settings)}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def watch_reactor(watchdog: Watchdog) -> None:
    """Start a Twisted role's watchdog as its reactor starts running, beaten every second
    (a blocked reactor misses the beats). The role's start-up is not watched: on a
    loaded machine it took longer than a short bound, and the watchdog ended the role
    with a request the kernel had already accepted on its port."""
    from twisted.internet import task

    watchdog.beat()
    watchdog.start()
    task.LoopingCall(watchdog.beat).start(1.0)
