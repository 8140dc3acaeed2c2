"""The state directory of the local servers and cluster: PID records that tell our
process from a later one with its PID, logs and data folders.
"""

import itertools
import json
from pathlib import Path
from typing import Any

from settings import procfs

Record = dict[str, Any]       # a StateDir record: pid, command, start_ticks, address, ...


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


def served_by(record: Record) -> str | None:
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
