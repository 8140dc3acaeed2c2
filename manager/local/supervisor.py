"""``crawlcluster supervisor``: keeps the roles of a local cluster running.

``crawlcluster up`` starts it beside the roles (recorded as ``cluster-supervisor``;
``down`` stops it first). Every second it looks at the roles the state directory
records: one whose process is gone (it crashed, was killed, or its watchdog ended it as
stuck) is started again by ``LocalCluster.start`` (a node's manager schedules its
spiders again), after a backoff that doubles with each restart of that role
(``manager/restarts.py``). A role that keeps dying is *waiting*: it is started again
once every server of the cluster answers, at most once a minute, and reported so
meanwhile (its log line, ``supervisor.json`` in the state directory, ``crawlcluster
services status``, the exporter's ``crawlcluster_role_waiting``). A node's spiders are
its manager's to restart (manager/launcher.py).
"""

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from manager.local.cluster import LocalCluster
from manager.local.statedir import StateDir
from manager.restarts import SERVER_CHECK_EVERY, RestartPolicy
from settings.clients import SERVER_KINDS, check_server
from settings.loader import Settings
from settings.process import stop_on_signals

logger = logging.getLogger(__name__)

NAME = "cluster-supervisor"


class Supervisor:
    def __init__(self, cluster: LocalCluster,
                 clock: Callable[[], float] = time.monotonic,
                 servers_answer: Callable[[], bool] | None = None) -> None:
        self.cluster = cluster
        self.state: StateDir = cluster.state
        self.clock = clock
        self.policy = RestartPolicy(clock=clock)
        self.servers_answer = servers_answer or self._servers_answer
        self.due: dict[str, float] = {}             # role -> when its restart is due
        self.outage_seen: set[str] = set()          # waiting roles that saw a server down
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
        """Note the roles found dead; start again those whose backoff has passed (a
        waiting one only once the servers answer)."""
        now = self.clock()
        for name in self._dead_roles():
            if name not in self.due:
                self._schedule(name, now)
        due = [name for name, at in self.due.items() if at <= now]
        waiting = [name for name in due if self.policy.waiting(name)]
        if waiting and not self.servers_answer():
            self.outage_seen.update(waiting)
        elif waiting:
            waiting = [name for name in waiting
                       if not self.policy.may_start(name, name in self.outage_seen)]
        for name in waiting:                         # not yet: look again in a while
            self.due[name] = now + SERVER_CHECK_EVERY
        for name in set(due) - set(waiting):
            del self.due[name]
            self.outage_seen.discard(name)
            self._restart(name)

    def _dead_roles(self) -> list[str]:
        names = [kind for kind in self.state.recorded_kinds()
                 if kind.startswith("cluster-") and kind != NAME]
        return [name for name in names if self.state.recorded(name) is None]

    def _schedule(self, name: str, now: float) -> None:
        delay = self.policy.died(name)
        policy = self.policy
        if policy.waiting(name):
            logger.error("%s died too often (%d times in the last %.0f s): waiting for the "
                         "servers to answer, then started again (at once after an outage, "
                         "else %.0f s after it died; see its log, %s)", name,
                         policy.restarts(name), policy.window, policy.cap,
                         self.state.log_path(name))
            self._count(name, waiting=True)
        else:
            logger.warning("%s is not running: starting it again in %.0f s (restart %d in "
                           "%.0f s)", name, delay, policy.restarts(name), policy.window)
        self.due[name] = now + delay

    def _servers_answer(self) -> bool:
        down = [kind for kind in SERVER_KINDS if not check_server(self.cluster.settings, kind)[0]]
        if down:
            logger.info("waiting roles not started yet: %s not answering", ", ".join(down))
        return not down

    def _restart(self, name: str) -> None:
        self.policy.started(name)
        try:
            self.cluster.start(name.removeprefix("cluster-"))
        except Exception as exc:  # noqa: BLE001 - counted; the next round looks again
            logger.error("starting %s again failed: %s", name, exc)
        record = self.state.recorded(name)
        logger.info("%s started again%s", name, f" (pid {record['pid']})" if record else "")
        self._count(name)

    def _count(self, name: str, waiting: bool = False) -> None:
        """Record a restart, or that ``name`` is waiting (``supervisor.json``)."""
        role = name.removeprefix("cluster-")
        entry = self.totals.setdefault(role, {"restarts": 0, "waiting": False})
        entry["waiting"] = waiting
        if not waiting:
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
