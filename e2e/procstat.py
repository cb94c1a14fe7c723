"""What the stack's processes cost, read from ``/proc`` (Linux): process trees, CPU
time, resident memory. Used by the soak and the end-to-end bench."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def children_by_parent() -> dict[int, list[int]]:
    """Every live process's children (from /proc), by parent pid."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces.
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def process_tree(pid: int, children: Mapping[int, list[int]] | None = None) -> list[int]:
    """``pid`` and all its descendants (``children``: one :func:`children_by_parent`
    walk shared by several trees)."""
    if children is None:
        children = children_by_parent()
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending.extend(children.get(current, []))
    return tree


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far (0 when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_bytes(pid: int) -> int:
    """Resident memory of one process (0 when gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE
    except (OSError, IndexError, ValueError):
        return 0


def trees_cpu_seconds(
    roots: Iterable[int], children: Mapping[int, list[int]] | None = None
) -> float:
    """CPU time so far of the processes in the trees under ``roots``: the live ones
    (a child that has exited and been reaped no longer counts)."""
    if children is None:
        children = children_by_parent()
    return sum(cpu_seconds(pid) for root in roots for pid in process_tree(root, children))


def wait_quiet(
    roots: Iterable[int], *, max_cores: float = 0.1, window_s: float = 1.0, timeout_s: float = 60.0
) -> bool:
    """Until the process trees under ``roots`` use less than ``max_cores`` of CPU over
    a ``window_s`` window (background work such as deferred flushes has finished);
    False when ``timeout_s`` passes first."""
    roots = tuple(roots)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = trees_cpu_seconds(roots)
        time.sleep(window_s)
        if trees_cpu_seconds(roots) - before < max_cores * window_s:
            return True
    return False


class CpuMeter:
    """CPU seconds spent between :meth:`start` and :meth:`stop` by groups of process
    trees (``{"envoy": [pid], "ext_proc": [pid, ...]}``) and by this process itself
    (``"client"``: the load generator)."""

    CLIENT = "client"

    def __init__(self, groups: Mapping[str, Iterable[int]]) -> None:
        self._groups = {label: tuple(pids) for label, pids in groups.items()}
        self._started: dict[str, float] = {}

    def _groups_now(self) -> dict[str, float]:
        children = children_by_parent()  # one /proc walk for every group
        return {label: trees_cpu_seconds(pids, children) for label, pids in self._groups.items()}

    def start(self) -> None:
        self._started = self._groups_now()
        # Read after this process's own /proc walk, and before the one in stop():
        # the client's time is the load's only.
        self._started[self.CLIENT] = time.process_time()

    def stop(self) -> dict[str, float]:
        """Seconds per group since :meth:`start`, ``client`` included."""
        now = {self.CLIENT: time.process_time()}
        now |= self._groups_now()
        return {label: max(0.0, now[label] - started) for label, started in self._started.items()}
