"""Local alerting for ``crawlcluster services up --alerting``: Prometheus evaluating
docs/prometheus/alerts.yml over the exporter's metrics, and Alertmanager (Debian's
``prometheus-alertmanager``) routing the alerts that fire to a webhook.

Both run like the other local servers: a folder each under the state directory, their
PIDs recorded there (``services down`` stops them). The configurations are written from
the settings each time: ``CRAWLCLUSTER_PROMETHEUS_ADDRESS``,
``CRAWLCLUSTER_ALERTMANAGER_ADDRESS``, ``CRAWLCLUSTER_ALERT_WEBHOOK`` (where Alertmanager
POSTs its notifications; none, and alerts are kept and shown but sent nowhere) and
``CRAWLCLUSTER_ALERT_GROUP_WAIT``. docs/observability.md has email and chat examples.
"""

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from manager.local.installs import apt_install
from manager.local.ports import listening
from manager.local.processes import spawn
from manager.local.statedir import StateDir
from settings.errors import ServiceError
from settings.loader import Settings

RULES = Path(__file__).resolve().parents[2] / "docs" / "prometheus" / "alerts.yml"
BINARIES = {"prometheus": "prometheus", "alertmanager": "prometheus-alertmanager"}


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


def alertmanager_config(webhook: str, group_wait: float) -> dict[str, Any]:
    """Alertmanager's configuration: every alert to ``webhook`` (no receiver if empty),
    grouped by alert name, the first notification of a group after ``group_wait`` s."""
    route = {"receiver": "webhook" if webhook else "none", "group_by": ["alertname"],
             "group_wait": f"{group_wait:g}s", "group_interval": "1m",
             "repeat_interval": "4h"}
    receivers: list[dict[str, Any]] = [{"name": "none"}]
    if webhook:
        receivers.append({"name": "webhook", "webhook_configs": [
            {"url": webhook, "send_resolved": True}]})
    return {"route": route, "receivers": receivers}


def prometheus_config(exporter: str, alertmanager: str, rules: Path,
                      interval: float = 15.0) -> dict[str, Any]:
    """Prometheus's configuration: the exporter scraped and the alert rules evaluated every
    ``interval`` s, the alerts sent to the local Alertmanager."""
    every = f"{interval:g}s"
    return {"global": {"scrape_interval": every, "evaluation_interval": every},
            "rule_files": [str(rules)],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
            "scrape_configs": [{"job_name": "crawlcluster-cluster",
                                "static_configs": [{"targets": [exporter]}]}]}


class LocalAlerting:
    """Start Prometheus and Alertmanager beside the local servers. ``rules`` and
    ``interval`` (seconds between scrapes and rule evaluations) are the shipped rules and
    Prometheus's usual 15 s unless given."""

    def __init__(self, settings: Settings, out: Callable[..., None] = print,
                 rules: Path = RULES, interval: float = 15.0) -> None:
        self.settings = settings
        self.rules = rules
        self.interval = interval
        self.state = StateDir(settings.getpath("CRAWLCLUSTER_STATE_DIR"))
        self.out = out
        self.timeout = settings.getfloat("CRAWLCLUSTER_SERVICES_START_TIMEOUT")

    def up(self) -> list[str]:
        """Start Alertmanager, then Prometheus, unless running; returns those started."""
        started = []
        for kind, command in (("alertmanager", self.alertmanager_command()),
                              ("prometheus", self.prometheus_command())):
            record = self.state.recorded(kind)
            if record:
                self.out(f"{kind:<12} already running (pid {record['pid']})")
                continue
            self._start(kind, command)
            started.append(kind)
        return started

    def _start(self, kind: str, command: list[str]) -> None:
        if shutil.which(command[0]) is None:
            if not self.settings.getbool("CRAWLCLUSTER_SERVICES_INSTALL"):
                raise ServiceError(f"{command[0]} is not installed and "
                                   f"CRAWLCLUSTER_SERVICES_INSTALL is off")
            apt_install(command[0])
        host, port = split_address(self.settings[f"CRAWLCLUSTER_{kind.upper()}_ADDRESS"])
        process = spawn(command, self.state.log_path(kind), cwd=self.state.data_dir(kind))
        self.state.record(kind, process.pid, command, address=f"{host}:{port}")
        deadline = time.monotonic() + self.timeout
        while not listening(host, port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise ServiceError(f"{kind} did not start on {host}:{port}; see "
                                   f"{self.state.log_path(kind)}")
            time.sleep(0.1)
        self.out(f"{kind:<12} {host}:{port}  started (pid {process.pid})")

    def alertmanager_command(self) -> list[str]:
        folder = self.state.data_dir("alertmanager")
        config = folder / "alertmanager.yml"
        config.write_text(json.dumps(alertmanager_config(
            self.settings["CRAWLCLUSTER_ALERT_WEBHOOK"] or "",
            self.settings.getfloat("CRAWLCLUSTER_ALERT_GROUP_WAIT")), indent=2))
        return [BINARIES["alertmanager"], f"--config.file={config}",
                f"--storage.path={folder / 'data'}",
                f"--web.listen-address={self.settings['CRAWLCLUSTER_ALERTMANAGER_ADDRESS']}",
                "--cluster.listen-address="]          # one instance: no gossip port

    def prometheus_command(self) -> list[str]:
        folder = self.state.data_dir("prometheus")
        config = folder / "prometheus.yml"
        config.write_text(json.dumps(prometheus_config(
            self.settings["CRAWLCLUSTER_EXPORTER_ADDRESS"],
            self.settings["CRAWLCLUSTER_ALERTMANAGER_ADDRESS"], self.rules, self.interval),
            indent=2))
        return [BINARIES["prometheus"], f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address={self.settings['CRAWLCLUSTER_PROMETHEUS_ADDRESS']}"]
