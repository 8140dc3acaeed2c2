"""What Linux's /proc says of a process: its state, parent, start, children, memory.

One reader for every role that looks at processes: the local servers' records
(manager/local/services.py), a spider's memory bound (crawler/extensions.py) and its
browsers (crawler/render/). A process that is gone reads as nothing (None, empty), never
as an error: processes end between two looks.
"""

import os
from collections.abc import Iterator
from pathlib import Path


def read_bytes(path: str | Path) -> bytes:
    """A /proc file's bytes, or b"" if its process is gone."""
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def pids() -> Iterator[int]:
    """Every process's PID."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            yield int(entry.name)


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), or None if gone."""
    stat = read_bytes(f"/proc/{pid}/stat")
    return stat.rsplit(b")", 1)[-1].decode().split() if stat else None


def state(pid: int) -> str | None:
    """The one-letter state of a process (R, S, Z, ...), or None if gone."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def parent(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[1]) if fields else None


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def command_line(pid: int) -> bytes:
    """Its command line, arguments joined by NUL (b"" if gone)."""
    return read_bytes(f"/proc/{pid}/cmdline")


def children(pid: int) -> list[int]:
    """The child processes of ``pid``: its threads' ``children`` lists, or where the
    kernel keeps none, every process's parent."""
    tasks = list(Path(f"/proc/{pid}/task").glob("*/children"))
    if tasks:
        return [int(child) for task in tasks for child in read_bytes(task).split()]
    return [child for child in pids() if parent(child) == pid]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first."""
    below, frontier = [], [pid]
    while frontier:
        frontier = [child for each in frontier for child in children(each)]
        below += frontier
    return below


def resident_mb(pid: int | str = "self") -> float | None:
    """A process's resident memory in MB, this one's by default (None where /proc has no
    statm, or the process is gone)."""
    try:
        pages = int(read_bytes(f"/proc/{pid}/statm").split()[1])
    except (ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def proportional_mb(processes: list[int]) -> float:
    """The memory (MB, proportional set size: shared pages split between their users)
    of these processes."""
    total_kb = 0
    for pid in processes:
        for line in read_bytes(f"/proc/{pid}/smaps_rollup").decode().splitlines():
            if line.startswith("Pss:"):
                total_kb += int(line.split()[1])
    return total_kb / 1024
