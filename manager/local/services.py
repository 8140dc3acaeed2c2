"""Local servers for development, tests and CI: ``crawlcluster services``.

Starts Redis, ZooKeeper, a Kafka-API broker (Tansu) and a MongoDB-wire
server (SecantusDB) on the loopback addresses the settings name, each in its
own folder under the state directory, and records their PIDs there. A server
whose configured address is not loopback is external: ``up`` starts nothing
for it and only checks it answers. ``down`` stops exactly the recorded PIDs.
"""

import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterable

from manager.local.installs import run_install
from manager.local.ports import is_loopback, listen_address, listening
from manager.local.processes import leftover_processes, spawn, stop_process
from manager.local.serverspec import REDIS_CLUSTER_NODES, ServerSpec
from manager.local.statedir import Record, StateDir, served_by
from settings.clients import (
    SERVER_KINDS,
    check_server,
    masters_url,
    server_address,
)
from settings.errors import ServiceError
from settings.loader import Settings

logger = logging.getLogger(__name__)


class LocalServers:
    """Bring the configured servers up, report them, take them down."""

    def __init__(self, settings: Settings, out: Callable[..., None] = print) -> None:
        self.settings = settings
        self.state = StateDir(settings.getpath("CRAWLCLUSTER_STATE_DIR"))
        self.allow_install = settings.getbool("CRAWLCLUSTER_SERVICES_INSTALL")
        self.start_timeout = settings.getfloat("CRAWLCLUSTER_SERVICES_START_TIMEOUT")
        self.out = out

    def up(self, kinds: Iterable[str] = SERVER_KINDS) -> list[str]:
        """Start every server of ``kinds`` not already answering; wait for each.
        Returns the kinds started now."""
        started = {}
        for kind in kinds:
            process = self._start_if_needed(kind)
            if process is not None:
                started[kind] = process
        for kind, process in started.items():
            self._wait_until_ready(kind, process)
        return list(started)

    def _start_if_needed(self, kind: str) -> subprocess.Popen[bytes] | None:
        host, port = listen_address(self.settings, kind)
        address = server_address(self.settings, kind)
        if not is_loopback(host):
            _, detail = check_server(self.settings, kind)
            self.out(f"{kind:<10} {address}  external, not started here: {detail}")
            return None
        record = self.state.recorded(kind)
        if record and not self._serves_configured(record, kind):
            raise ServiceError(
                f"{kind} {address} not started: the {kind} recorded in "
                f"{self.state.root} (pid {record['pid']}) serves {served_by(record)}, not "
                f"{host}:{port}{' as a Redis Cluster' if self._cluster(kind) else ''}; stop it "
                f"first (crawlcluster services down {kind}, with the settings it was started "
                f"with)")
        if record:
            self.out(f"{kind:<10} {address}  already running (pid {record['pid']})")
            return None
        if listening(host, port):
            self.out(f"{kind:<10} {address}  port in use by a server not started here; using it")
            return None
        return self._start(kind, host, port)

    def _start(self, kind: str, host: str, port: int) -> subprocess.Popen[bytes]:
        spec = ServerSpec(kind)
        if not spec.installed():
            if not self.allow_install:
                raise ServiceError(
                    f"{kind} is not installed and CRAWLCLUSTER_SERVICES_INSTALL is off")
            spec.install()
        if kind == "redis" and self.settings.getbool("CRAWLCLUSTER_REDIS_CLUSTER"):
            return self._start_redis_cluster(spec, host, port)
        return self._spawn(spec, kind, host, port)

    def _spawn(self, spec: ServerSpec, kind: str, host: str,
               port: int) -> subprocess.Popen[bytes]:
        command = spec.command(host, port, self.state.data_dir(kind), self.settings)
        process = spawn(command, self.state.log_path(kind), cwd=self.state.data_dir(kind))
        self.state.record(kind, process.pid, command, address=f"{host}:{port}",
                          cluster=self._cluster(kind))
        return process

    def _cluster(self, kind: str) -> bool:
        return kind == "redis" and self.settings.getbool("CRAWLCLUSTER_REDIS_CLUSTER")

    def _serves_configured(self, record: Record, kind: str) -> bool:
        """Whether a recorded server is the one the settings name (its address and, for
        Redis, single or Cluster): another is not "already running"."""
        host, port = listen_address(self.settings, kind)
        served = served_by(record)
        cluster = record.get("cluster", "--cluster-enabled" in record.get("command", []))
        return served in (None, f"{host}:{port}") and cluster == self._cluster(kind)

    def _start_redis_cluster(self, spec: ServerSpec, host: str,
                             port: int) -> subprocess.Popen[bytes]:
        """Six nodes from ``port`` on, joined as 3 masters each with a replica; the
        first is recorded as "redis", the others as "redis-node-<port>"."""
        ports = range(port, port + REDIS_CLUSTER_NODES)
        processes = [self._spawn(spec, "redis" if p == port else f"redis-node-{p}", host, p)
                     for p in ports]
        deadline = time.monotonic() + self.start_timeout
        while not all(listening(host, p) for p in ports):
            if time.monotonic() > deadline or any(proc.poll() is not None for proc in processes):
                raise ServiceError(f"the Redis Cluster nodes on ports {port}-{ports[-1]} did not "
                                   f"start; see {self.state.log_path('redis')}")
            time.sleep(0.05)
        run_install(["redis-cli", "--cluster", "create", *(f"{host}:{p}" for p in ports),
                      "--cluster-replicas", "1", "--cluster-yes"], os.environ)
        while not _cluster_ok(host, port):
            if time.monotonic() > deadline:
                raise ServiceError(f"the Redis Cluster on {host}:{port} did not reach state ok")
            time.sleep(0.1)
        return processes[0]

    def _wait_until_ready(self, kind: str, process: subprocess.Popen[bytes]) -> None:
        host, port = listen_address(self.settings, kind)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.state.forget(kind)
                raise ServiceError(f"{kind} exited with {process.returncode} at start; "
                                   f"see {self.state.log_path(kind)}: {self._log_tail(kind)}")
            if listening(host, port):
                ok, detail = check_server(self.settings, kind)
                if ok:
                    self.out(f"{kind:<10} {server_address(self.settings, kind)}  "
                             f"started (pid {process.pid}), {detail}")
                    if self._cluster(kind):
                        self.out(f"{'':<10} its masters, to name them all (a role then "
                                 f"starts while any answers): CRAWLCLUSTER_REDIS_URL="
                                 f"{masters_url(self.settings)}")
                    return
            time.sleep(0.1)
        raise ServiceError(f"{kind} did not answer within {self.start_timeout:.0f} s; "
                           f"see {self.state.log_path(kind)}")

    def _log_tail(self, kind: str) -> str:
        lines = self.state.log_path(kind).read_text(errors="replace").strip().splitlines()
        return " | ".join(lines[-3:])

    def status(self, kinds: Iterable[str] = SERVER_KINDS) -> bool:
        """Print one line per server; return True if every one answers."""
        all_up = True
        for kind in kinds:
            ok, detail = check_server(self.settings, kind)
            record = self.state.recorded(kind)
            owner = f"pid {record['pid']}" if record else "not started here"
            if record and not self._serves_configured(record, kind):
                owner = (f"not started here; the {kind} started here (pid {record['pid']}) "
                         f"serves {served_by(record)}")
            self.out(f"{kind:<10} {server_address(self.settings, kind)}  {detail} [{owner}]")
            all_up = all_up and ok
        for role, entry in sorted(self.state.restarts().items()):
            self.out(f"{'restarts':<10} {role}: started again {entry['restarts']} times"
                     + (", and is waiting: it died too often, and is started again once "
                        "every server answers (see its log)" if entry.get("waiting") else ""))
        for pid, command in leftover_processes(self.state):
            self.out(f"{'leftover':<10} pid {pid}  {command}  (a process of this state "
                     f"directory's cluster that nothing recorded runs; `crawlcluster down` "
                     f"stops it)")
        return all_up

    def down(self, kinds: Iterable[str] | None = None) -> list[str]:
        """Stop exactly the recorded servers (of ``kinds``); return the kinds stopped."""
        stopped = []
        kinds = list(kinds or self.state.recorded_kinds())
        if "redis" in kinds:            # a local Redis Cluster's other nodes too
            kinds += [kind for kind in self.state.recorded_kinds()
                      if kind.startswith("redis-node-") and kind not in kinds]
        for kind in kinds:
            record = self.state.recorded(kind)
            if record:
                stop_process(record["pid"])
                self.out(f"{kind:<10} stopped (pid {record['pid']})")
                stopped.append(kind)
            self.state.forget(kind)
        if not stopped:
            self.out("no local servers recorded in " + str(self.state.root))
        return stopped


def _cluster_ok(host: str, port: int) -> bool:
    """Does a Redis Cluster node say the cluster is ok (every slot served)?"""
    result = subprocess.run(["redis-cli", "-h", host, "-p", str(port), "cluster", "info"],
                            check=False, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return "cluster_state:ok" in result.stdout
