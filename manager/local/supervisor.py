"""``crawlcluster supervisor``: keeps the roles of a local cluster running.

``crawlcluster up`` starts it beside the roles (recorded as ``cluster-supervisor``;
``down`` stops it first). Every second it looks at the roles the state directory
records: one whose process is gone (it crashed, was killed, or its watchdog ended it as
stuck) is started again by ``LocalCluster.start`` (a node's manager schedules its
spiders again), after a backoff that doubles with each restart of that role within
``RESTART_WINDOW``. A role that died ``RESTART_LIMIT`` times within
the window is reported (its log line, ``supervisor.json`` in the state directory,
``crawlcluster services status``) and left stopped. A node's spiders are its manager's
to restart (manager/launcher.py).
"""

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from manager.local.cluster import LocalCluster
from manager.local.services import StateDir
from settings.loader import Settings
from settings.process import stop_on_signals

logger = logging.getLogger(__name__)

RESTART_LIMIT = 5
RESTART_WINDOW = 600.0            # seconds
FIRST_BACKOFF = 1.0               # seconds; doubled at each restart within the window
NAME = "cluster-supervisor"


class Supervisor:
    def __init__(self, cluster: LocalCluster,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster = cluster
        self.state: StateDir = cluster.state
        self.clock = clock
        self.deaths: dict[str, list[float]] = {}    # role -> times it was found dead
        self.due: dict[str, float] = {}             # role -> when its restart is due
        self.totals: dict[str, dict[str, Any]] = {}  # role -> its restarts since this `up`
        self.stopping = threading.Event()

    def run(self, every: float = 1.0) -> None:
        logger.info("supervising the roles of %s", self.state.root)
        while not self.stopping.wait(every):
            try:
                self.round()
            except Exception as exc:  # noqa: BLE001 - the supervisor outlives any failure
                logger.error("supervisor round failed (tried again): %s", exc)

    def stop(self) -> None:
        self.stopping.set()

    def round(self) -> None:
        """Note the roles found dead; start again those whose backoff has passed."""
        now = self.clock()
        for name in self._dead_roles():
            if name not in self.due and not self._given_up(name):
                self._schedule(name, now)
        for name in [name for name, at in self.due.items() if at <= now]:
            del self.due[name]
            self._restart(name)

    def _dead_roles(self) -> list[str]:
        names = [kind for kind in self.state.recorded_kinds()
                 if kind.startswith("cluster-") and kind != NAME]
        return [name for name in names if self.state.recorded(name) is None]

    def _schedule(self, name: str, now: float) -> None:
        deaths = [at for at in self.deaths.get(name, []) if now - at < RESTART_WINDOW]
        deaths.append(now)
        self.deaths[name] = deaths
        if len(deaths) > RESTART_LIMIT:
            logger.error("%s died %d times in %.0f s: not started again (see its log, %s)",
                         name, len(deaths), RESTART_WINDOW,
                         self.state.log_path(name))
            self._count(name, given_up=True)
            return
        delay = FIRST_BACKOFF * 2 ** (len(deaths) - 1)
        logger.warning("%s is not running: starting it again in %.0f s (restart %d in "
                       "%.0f s)", name, delay, len(deaths), RESTART_WINDOW)
        self.due[name] = now + delay

    def _restart(self, name: str) -> None:
        try:
            self.cluster.start(name.removeprefix("cluster-"))
        except Exception as exc:  # noqa: BLE001 - counted; the next round looks again
            logger.error("starting %s again failed: %s", name, exc)
        record = self.state.recorded(name)
        logger.info("%s started again%s", name, f" (pid {record['pid']})" if record else "")
        self._count(name)

    def _given_up(self, name: str) -> bool:
        return bool(self.totals.get(name.removeprefix("cluster-"), {}).get("given_up", False))

    def _count(self, name: str, given_up: bool = False) -> None:
        role = name.removeprefix("cluster-")
        entry = self.totals.setdefault(role, {"restarts": 0, "given_up": False})
        if given_up:
            entry["given_up"] = True
        else:
            entry["restarts"] += 1
        entry["last"] = time.time()
        self.state.restarts_path().write_text(json.dumps(self.totals, sort_keys=True))


def main(settings: Settings, nodes: int, procs: int, masters: int) -> int:
    """``crawlcluster supervisor``: until SIGTERM/SIGINT."""
    cluster = LocalCluster(settings, nodes=nodes, procs=procs, masters=masters,
                           out=lambda line: logger.info("%s", line))
    supervisor = Supervisor(cluster)
    stop_on_signals(supervisor.stop, settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT"),
                    "the supervisor")
    supervisor.run()
    return 0
