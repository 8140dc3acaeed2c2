"""scrapyd's launcher, supervising the node's long-running spiders.

scrapyd starts a job and forgets it when it ends. A spider the manager starts to wait
for work (no idle timeout: the node's configured spiders) is meant to run for good, so
when one exits non-zero (it crashed, was killed, or its watchdog ended it as stuck) it
is started again, as the same spider with the same settings and arguments, after a
backoff that doubles each time. One that dies ``RESTART_LIMIT`` times within
``RESTART_WINDOW`` seconds is reported and left stopped. One that closed past its
memory bound (exit status ``EXIT_RECYCLE``) is started again at once, uncounted. Jobs
with an idle timeout (``CRAWLCLUSTER_IDLE_TIMEOUT``, the node's or the job's own), and
spiders that end cleanly, are not restarted.
"""

import logging
import sys
import time
from typing import Any

from scrapyd.interfaces import IEnvironment, ISpiderScheduler
from scrapyd.launcher import Launcher, ScrapyProcessProtocol, get_crawl_args
from twisted.internet import reactor

from settings.process import EXIT_RECYCLE

logger = logging.getLogger(__name__)

IDLE_SETTING = "CRAWLCLUSTER_IDLE_TIMEOUT"
RESTART_LIMIT = 5
RESTART_WINDOW = 600.0          # seconds
FIRST_BACKOFF = 1.0             # seconds; doubled at each restart within the window


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
        self.restarts: dict[str, list[float]] = {}    # a spider's first job id -> restart times
        self.first_job: dict[str, str] = {}           # a restarted job's id -> its spider's first

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
        reactor.spawnProcess(process, sys.executable, args=args, env=env)  # type: ignore[misc]
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
        now = time.monotonic()
        times = [at for at in self.restarts.get(first, []) if now - at < RESTART_WINDOW]
        if len(times) >= RESTART_LIMIT:
            logger.error("spider job %s exited with %s and died %d times in %.0f s: not "
                         "started again (see its log)", process.job, process.exit_code,
                         len(times), RESTART_WINDOW)
            return
        times.append(now)
        self.restarts[first] = times
        delay = FIRST_BACKOFF * 2 ** (len(times) - 1)
        job = f"{first}-r{len(times)}-{int(time.time())}"
        self.first_job[job] = first
        logger.warning("spider job %s exited with %s: starting %s again as %s in %.0f s "
                       "(restart %d in %.0f s)", process.job, process.exit_code,
                       process.spider, job, delay, len(times), RESTART_WINDOW)
        reactor.callLater(delay, self._schedule_again, process, job)

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
