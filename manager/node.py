"""The spider manager of one node (``crawlcluster manager``): scrapyd, configured.

scrapyd 1.6 already is the service this node needs: a Twisted HTTP API whose
endpoints existing clients and dashboards speak, a SQLite queue of pending
jobs that survives restarts, a poller, a launcher that caps running processes
and gives each its job id and log file. Its components are chosen by config,
so this module only writes that config from our settings and adds what
scrapyd has no slot for:

* the installed crawler project is served without eggs (scrapyd's
  ``[settings]`` projects: ``crawlcluster = crawler.settings``);
* ``manager.web.Root`` (scrapyd's Root plus ``cluster.json`` and the UI) and
  ``manager.web.Schedule`` (scrapyd's, refusing unsafe names) replace theirs;
* finished jobs are kept in SQLite too (``SqliteJobStorage``);
* the node registers itself: an ephemeral znode and a Redis heartbeat;
* ``/metrics`` serves its spider processes' Prometheus metrics (manager/metrics.py).

Spider processes inherit the manager's effective settings through their
environment, plus ``CRAWLCLUSTER_NODE_NAME``, and register their own jobs
with the master's job registry (crawler/scheduler/).
"""

import contextlib
import ipaddress
import logging
import os
import socket
import uuid
from pathlib import Path
from typing import Any

from manager.metrics import fresh_metrics_dir, metrics_dir
from manager.registry import (
    NodeRegistry,
    listen_address,
    node_info,
    node_name,
    state_dir,
    watch_reactor,
)
from manager.web import limit_request_size
from settings.errors import ConfigError
from settings.loader import Settings, environment_for

logger = logging.getLogger(__name__)
ROLE = "manager"
PROJECT = "crawlcluster"
# scrapyd reads these before its config: our settings are the one source of each
SCRAPYD_OVERRIDES = ("SCRAPYD_BIND_ADDRESS", "SCRAPYD_HTTP_PORT", "SCRAPYD_UNIX_SOCKET_PATH",
                     "SCRAPYD_USERNAME", "SCRAPYD_PASSWORD")


def check_exposure(settings: Settings) -> None:
    """ConfigError unless the manager's API is safe where it listens: credentials both
    set or both empty, and set when it listens beyond loopback (it schedules spiders,
    previews any URL, and hands out the crawls' items)."""
    username = settings["CRAWLCLUSTER_MANAGER_USERNAME"]
    password = settings["CRAWLCLUSTER_MANAGER_PASSWORD"]
    if bool(username) != bool(password):
        raise ConfigError("set both CRAWLCLUSTER_MANAGER_USERNAME and "
                          "CRAWLCLUSTER_MANAGER_PASSWORD, or neither (one alone would leave "
                          "the manager with no authentication)")
    if ":" in username:
        raise ConfigError("CRAWLCLUSTER_MANAGER_USERNAME may not contain ':' (HTTP basic auth)")
    host, port = listen_address(settings)
    if not username and not is_loopback_host(host):
        raise ConfigError(
            f"the manager would listen on {host}:{port}, beyond loopback, with no "
            "authentication: set CRAWLCLUSTER_MANAGER_USERNAME and "
            "CRAWLCLUSTER_MANAGER_PASSWORD (or CRAWLCLUSTER_MANAGER_ADDRESS to "
            f"127.0.0.1:{port})")


def is_loopback_host(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (``0.0.0.0`` and
    ``::`` are every interface: not)."""
    try:
        found = socket.getaddrinfo(host.strip("[]"), None)
    except (socket.gaierror, UnicodeError):
        return False
    return bool(found) and all(
        ipaddress.ip_address(str(entry[4][0]).split("%")[0]).is_loopback for entry in found)


def scrapyd_config(settings: Settings) -> Any:
    """scrapyd's Config for this node, from our settings only (no scrapyd.conf read)."""
    from scrapyd.config import Config

    host, port = listen_address(settings)
    base = state_dir(settings)
    values = {
        "bind_address": host,
        "http_port": str(port),
        "username": settings["CRAWLCLUSTER_MANAGER_USERNAME"],
        "password": settings["CRAWLCLUSTER_MANAGER_PASSWORD"],
        "max_proc": str(settings.getint("CRAWLCLUSTER_MANAGER_MAX_PROC")),
        "max_proc_per_cpu": "4",
        "poll_interval": str(settings.getfloat("CRAWLCLUSTER_MANAGER_POLL_INTERVAL")),
        "logs_dir": str(base / "logs"),
        "dbs_dir": str(base / "dbs"),
        "eggs_dir": "eggs",     # relative: the runner in a spider process reads it too
        "items_dir": "",
        "jobs_to_keep": "20",
        "finished_to_keep": "200",
        "node_name": node_name(settings),
        "runner": "scrapyd.runner",
        "application": "scrapyd.app.application",
        "launcher": "manager.launcher.SupervisingLauncher",
        "poller": "scrapyd.poller.QueuePoller",
        "spiderqueue": "scrapyd.spiderqueue.SqliteSpiderQueue",
        "jobstorage": "scrapyd.jobstorage.SqliteJobStorage",
        "eggstorage": "manager.eggs.BoundedEggStorage",
        "webroot": "manager.web.Root",
        "prefix_header": "x-forwarded-prefix",
        "debug": "off",
    }
    config = Config(values={})
    for option, value in values.items():
        config.cp.set(Config.SECTION, option, value)
    config.cp.add_section("settings")
    config.cp.set("settings", PROJECT, "crawler.settings")
    config.cp.add_section("services")
    for endpoint, path in SERVICES.items():
        config.cp.set("services", endpoint, path)
    return config


SERVICES = {
    "schedule.json": "manager.web.Schedule",
    "cancel.json": "scrapyd.webservice.Cancel",
    "status.json": "scrapyd.webservice.Status",
    "addversion.json": "manager.spiderlist.AddVersion",
    "listprojects.json": "scrapyd.webservice.ListProjects",
    "listversions.json": "scrapyd.webservice.ListVersions",
    "listspiders.json": "manager.spiderlist.ListSpiders",
    "delproject.json": "scrapyd.webservice.DeleteProject",
    "delversion.json": "scrapyd.webservice.DeleteVersion",
    "listjobs.json": "manager.web.ListJobs",
    "daemonstatus.json": "scrapyd.webservice.DaemonStatus",
    "cluster.json": "manager.web.ClusterView",
    "overview.json": "manager.web.Overview",
    "sites.json": "manager.web.Sites",
    "validate.json": "manager.json_endpoints.Validate",
    "preview.json": "manager.json_endpoints.Preview",
    "crawl.json": "manager.web.CrawlControl",
    "export": "manager.web.Export",
}


def spider_environment(settings: Settings) -> dict[str, str]:
    """The environment spider processes start with: exactly the manager's settings, and
    the directory their metrics go to."""
    environment = environment_for(settings, CRAWLCLUSTER_NODE_NAME=node_name(settings),
                                  PROMETHEUS_MULTIPROC_DIR=str(metrics_dir(settings)))
    # A deployed project's egg names its own settings module (scrapyd's runner sets it
    # unless one is set already); ours is named by the state directory's scrapy.cfg.
    environment.pop("SCRAPY_SETTINGS_MODULE", None)
    return environment


def write_project_config(directory: Path) -> None:
    """The ``scrapy.cfg`` by which Scrapy, started in ``directory`` as scrapyd's runner
    starts it, finds the cluster's own project (``SCRAPY_PROJECT=crawlcluster``)."""
    (directory / "scrapy.cfg").write_text(
        "# Written by the manager: the cluster's own spiders, for scrapyd's runner.\n"
        f"[settings]\n{PROJECT} = crawler.settings\n")


def main(settings: Settings) -> int:
    """Run the manager until SIGTERM/SIGINT (Twisted's reactor handles both)."""
    from twisted.application.service import IServiceCollection
    from twisted.internet import reactor as twisted_reactor
    from twisted.internet import task
    from twisted.python import log as twisted_log

    from settings.clients import redis_client, stop_zookeeper, zookeeper_client
    from settings.process import exit_within

    reactor: Any = twisted_reactor      # zope interfaces mypy cannot see through
    check_exposure(settings)
    twisted_log.PythonLoggingObserver().start()
    redis = redis_client(settings, ROLE)
    zookeeper = zookeeper_client(settings, ROLE)
    fresh_metrics_dir(metrics_dir(settings))
    environment = spider_environment(settings)      # read before it is replaced
    os.environ.clear()
    os.environ.update({name: value for name, value in environment.items()
                       if name not in SCRAPYD_OVERRIDES})
    config = scrapyd_config(settings)
    # scrapyd's runner, in each spider process, reads eggs from ./eggs: the state dir.
    os.chdir(state_dir(settings))
    write_project_config(state_dir(settings))
    from scrapyd.app import application

    app = application(config)
    limit_request_size(app, settings.getint("CRAWLCLUSTER_MAX_MESSAGE_BYTES"))
    app.crawlcluster = {"settings": settings, "redis": redis, "zookeeper": zookeeper}
    registry = NodeRegistry(settings, zookeeper, redis, node_info(settings))
    registry.start()
    beat = task.LoopingCall(_beat_safely, registry)
    beat.start(registry.heartbeats.interval, now=False)
    watchdog = registry.heartbeats.watchdog(settings, ROLE, registry.info["node"], start=False)
    reactor.callWhenRunning(watch_reactor, watchdog)
    services: Any = IServiceCollection(app)
    services.startService()
    start_configured_spiders(app, settings)
    host, port = listen_address(settings)
    logger.info("manager %s: scrapyd API and UI on http://%s:%d/ (%s); logs in %s",
                registry.info["node"], host, port,
                "basic auth" if settings["CRAWLCLUSTER_MANAGER_USERNAME"] else "no auth",
                Path(config.get("logs_dir")))

    def shutdown() -> None:
        beat.stop()
        try:
            registry.stop()
        finally:
            stop_zookeeper(zookeeper)
            redis.close()

    bound = settings.getfloat("CRAWLCLUSTER_SHUTDOWN_TIMEOUT")
    # Spiders end within the bound by themselves; SIGKILLed 2 s after it, if not.
    reactor.addSystemEventTrigger("before", "shutdown", watchdog.stop)
    reactor.addSystemEventTrigger("before", "shutdown", exit_within, bound + 5, "the manager")
    reactor.addSystemEventTrigger("before", "shutdown", stop_spiders,
                                  services.getServiceNamed("launcher"), bound + 2)
    reactor.addSystemEventTrigger("before", "shutdown", services.stopService)
    reactor.addSystemEventTrigger("after", "shutdown", shutdown)
    reactor.run()
    return 0


def stop_spiders(launcher: Any, timeout: float) -> Any:
    """SIGTERM every spider this manager runs and wait until each has exited; SIGKILL
    those still there after ``timeout`` seconds (a spider ends by itself within
    ``CRAWLCLUSTER_SHUTDOWN_TIMEOUT``). The manager exits only then: a spider must not
    outlive it, still closing while the servers are stopped. Returns a Deferred."""
    from twisted.internet import defer
    from twisted.internet import reactor as twisted_reactor

    reactor: Any = twisted_reactor      # zope interfaces mypy cannot see through

    # scrapyd's launcher starts the next pending job as one ends: not while stopping;
    # nor does it start a spider that exited again.
    launcher._get_message = lambda slot: None
    launcher.stopping = True
    processes = list(launcher.processes.values())
    if processes:
        logger.info("stopping %d spiders", len(processes))
    for process in processes:
        _signal(process, "TERM")

    def kill_the_rest() -> None:
        for process in processes:
            if not process.deferred.called:
                logger.error("spider job %s (pid %s) still running %.0f s after SIGTERM: "
                             "killing it", process.job, process.pid, timeout)
                _signal(process, "KILL")

    killer = reactor.callLater(timeout, kill_the_rest)
    ended = defer.DeferredList([process.deferred for process in processes])
    ended.addBoth(lambda _: killer.cancel() if killer.active() else None)
    return ended


def _signal(process: Any, name: str) -> None:
    from twisted.internet.error import ProcessExitedAlready

    with contextlib.suppress(ProcessExitedAlready):
        process.transport.signalProcess(name)


def start_configured_spiders(app: Any, settings: Settings) -> None:
    """Queue the spiders ``CRAWLCLUSTER_MANAGER_SPIDERS`` asks for, once per start, as
    scrapyd's schedule.json would (they wait for work: no idle timeout)."""
    from scrapyd.interfaces import ISpiderScheduler

    scheduler = app.getComponent(ISpiderScheduler)
    node = node_name(settings)
    # new each start: a manager in a container is PID 1 each time it starts, and a job
    # named as the one it replaces would inherit its leases rather than have them taken
    # back as a dead job's at once
    start = uuid.uuid4().hex[:6]
    for spider, count in settings["CRAWLCLUSTER_MANAGER_SPIDERS"].items():
        for index in range(int(count)):
            jobid = f"{node}-{spider}-{index + 1}-{start}"
            scheduler.schedule(PROJECT, spider, priority=0.0, _job=jobid,
                               settings={"CRAWLCLUSTER_IDLE_TIMEOUT": "0"})
            logger.info("started %s as job %s", spider, jobid)


def _beat_safely(registry: NodeRegistry) -> None:
    import redis
    from kazoo.exceptions import KazooException

    try:
        registry.beat()
    except (redis.RedisError, KazooException) as exc:
        logger.error("manager heartbeat failed (tried again at the next): %s", exc)
