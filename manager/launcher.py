"""scrapyd's launcher, supervising the node's long-running spiders.

scrapyd starts a job and forgets it when it ends. A spider the manager starts to wait
for work (no idle timeout: the node's configured spiders) is meant to run for good, so
when one exits non-zero (it crashed, was killed, or its watchdog ended it as stuck) it
is started again, as the same spider with the same settings and arguments, after a
backoff that doubles each time (manager/restarts.py). One that keeps dying is *waiting*:
it is started again once the servers a spider needs answer (Redis, ZooKeeper, MongoDB;
a Redis Cluster failover of the node the settings name, a server restarting), at most
once a minute, and is listed meanwhile in ``listjobs.json``'s ``waiting`` and the node's
``crawlcluster_spiders_waiting`` metric. One that closed past its memory bound (exit
status ``EXIT_RECYCLE``) is started again at once, uncounted. Jobs with an idle timeout
(``CRAWLCLUSTER_IDLE_TIMEOUT``, the node's or the job's own), and spiders that end
cleanly, are not restarted.
"""

import logging
import sys
import time
from typing import Any

from scrapyd.interfaces import IEnvironment, ISpiderScheduler
from scrapyd.launcher import Launcher, ScrapyProcessProtocol, get_crawl_args
from twisted.internet import reactor as twisted_reactor
from twisted.internet import threads

from crawler.commands.crawl import CLUSTER_SERVERS, SERVERS
from manager.restarts import SERVER_CHECK_EVERY, RestartPolicy
from settings.clients import check_server
from settings.process import EXIT_RECYCLE

logger = logging.getLogger(__name__)

IDLE_SETTING = "CRAWLCLUSTER_IDLE_TIMEOUT"
reactor: Any = twisted_reactor      # zope interfaces mypy cannot see through


class ExitRecordingProtocol(ScrapyProcessProtocol):
    """scrapyd's process protocol, keeping the exit status (None: killed by a signal)."""

    def __init__(self, project: str, spider: str, job: str, env: dict[str, str],
                 args: list[str], message: dict[str, Any]) -> None:
        super().__init__(project, spider, job, env, args)
        self.exit_code: int | None = 0
        self.message = message   # what scrapyd's queue gave for it: spider, settings, arguments

    def processEnded(self, status: Any) -> None:
        self.exit_code = getattr(status.value, "exitCode", None)
        super().processEnded(status)


class SupervisingLauncher(Launcher):
    def __init__(self, config: Any, app: Any) -> None:
        super().__init__(config, app)
        self.stopping = False              # set by the manager at shutdown: no restarts
        self.policy = RestartPolicy()                 # deaths by a spider's first job id
        self.first_job: dict[str, str] = {}           # a restarted job's id -> its spider's first
        # a spider's first job id -> what listjobs says of it while it waits for servers
        self.waiting: dict[str, dict[str, Any]] = {}

    def _spawn_process(self, message: dict[str, Any], slot: int) -> None:
        original = dict(message, settings=dict(message.get("settings", {})))
        environment = self.app.getComponent(IEnvironment)
        message.setdefault("settings", {})
        message["settings"].update(environment.get_settings(message))
        env = environment.get_environment(message, slot)
        args = [sys.executable, "-m", self.runner, "crawl", *get_crawl_args(message)]
        process = ExitRecordingProtocol(message["_project"], message["_spider"],
                                        message["_job"], env, args, original)
        process.deferred.addBoth(self._process_finished, slot)
        reactor.spawnProcess(process, sys.executable, args=args, env=env)
        self.processes[slot] = process

    def _process_finished(self, result: Any, slot: int) -> None:
        process = self.processes[slot]
        super()._process_finished(result, slot)
        if process.exit_code != 0 and not self.stopping and self._long_running(process):
            if process.exit_code == EXIT_RECYCLE:
                self._recycle(process)
            else:
                self._restart(process)

    def _long_running(self, process: ExitRecordingProtocol) -> bool:
        """Whether a job waits for work for good (no idle timeout)."""
        idle = process.message.get("settings", {}).get(IDLE_SETTING)
        if idle is None:
            idle = self.app.crawlcluster["settings"].getfloat(IDLE_SETTING)
        return float(idle) == 0

    def _restart(self, process: ExitRecordingProtocol) -> None:
        first = self.first_job.pop(process.job, process.job)     # only live jobs kept
        delay = self.policy.died(first)
        restarts = self.policy.restarts(first)
        job = f"{first}-r{restarts}-{int(time.time())}"
        self.first_job[job] = first
        if self.policy.waiting(first):
            logger.error("spider job %s exited with %s, dying too often (%d times in the "
                         "last %.0f s): %s waits for its servers to answer, then starts as %s "
                         "(at once after an outage, else %.0f s after it died)", process.job,
                         process.exit_code, restarts, self.policy.window, process.spider, job,
                         self.policy.cap)
            self.waiting[first] = {"spider": process.spider, "job": job, "since": time.time(),
                                   "exit_code": process.exit_code, "deaths": restarts}
        else:
            logger.warning("spider job %s exited with %s: starting %s again as %s in %.0f s "
                           "(restart %d in %.0f s)", process.job, process.exit_code,
                           process.spider, job, delay, restarts, self.policy.window)
        reactor.callLater(delay, self._start_when_servers_answer, process, job, first)

    def _start_when_servers_answer(self, process: ExitRecordingProtocol, job: str,
                                   first: str) -> None:
        """Schedule the job again, unless it is waiting and a server it needs is down
        (then look again in ``SERVER_CHECK_EVERY`` s); the servers are checked in a
        thread (a dead one takes its connect timeout)."""
        if self.stopping:
            return
        if first not in self.waiting:
            self.policy.started(first)
            self._schedule_again(process, job)
            return

        def checked(down: list[str]) -> None:
            if self.stopping:
                return
            entry = self.waiting[first]
            entry["servers_down"] = down
            entry["outage_seen"] = entry.get("outage_seen", False) or bool(down)
            if down or not self.policy.may_start(first, entry["outage_seen"]):
                reactor.callLater(SERVER_CHECK_EVERY, self._start_when_servers_answer,
                                  process, job, first)
                return
            logger.info("the servers of %s answer again: starting it as %s", process.spider, job)
            del self.waiting[first]
            self.policy.started(first)
            self._schedule_again(process, job)

        threads.deferToThread(self._servers_down, process.spider).addCallback(checked)

    def _servers_down(self, spider: str) -> list[str]:
        settings = self.app.crawlcluster["settings"]
        return [kind for kind in SERVERS.get(spider, CLUSTER_SERVERS)
                if not check_server(settings, kind)[0]]

    def _recycle(self, process: ExitRecordingProtocol) -> None:
        first = self.first_job.pop(process.job, process.job)
        job = f"{first}-m{int(time.time())}"
        self.first_job[job] = first
        logger.info("spider job %s closed past its memory bound: starting %s again as %s",
                    process.job, process.spider, job)
        self._schedule_again(process, job)

    def _schedule_again(self, process: ExitRecordingProtocol, job: str) -> None:
        if self.stopping:
            return
        message = dict(process.message, _job=job)
        project, spider = message.pop("_project"), message.pop("_spider")
        message.pop("priority", None)
        self.app.getComponent(ISpiderScheduler).schedule(project, spider, priority=0.0,
                                                         **message)
