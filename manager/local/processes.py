"""Starting and stopping local processes, and finding those of a local cluster by the
mark in their environment.
"""

import os
import signal
import subprocess
import time
from pathlib import Path

from manager.local.statedir import StateDir
from settings import procfs
from settings.errors import ServiceError


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
