"""Reads never see a row half-upserted on milvus-lite.

milvus-lite (2.5.1) applies an upsert as a delete and then an insert, and a read that
runs between the two finds neither version of the row: with one thread upserting a
row in a loop and another querying it, 499 of 3,368 queries came back empty. Through
the corpus cache that is a memory missing from a user's corpus until the next full
reload, and through the write path a memory the dedup does not see. A Milvus server
writes both halves in one transaction (one timestamp), so a read there sees the old
row or the new one, and needs no gate.

Where the store is milvus-lite, every store call that reads holds the :class:`StoreGate`
shared and every upsert holds it exclusively: an ``flock`` on one file, taken in the
store's executor thread on a descriptor of its own, so it excludes the process's
other threads as well as the other processes of the host that use the same embedded
server (``server.workers``, writer processes). Holders come in turn: each first takes
a second file (the queue) exclusively and keeps it only until it has the gate, so an
upsert waiting for reads stops new reads from overtaking it, and a read waiting for an
upsert gets in before the next upsert (without it, a busy writer kept a reader out
for seconds). Both are taken without blocking, in a polling loop bounded by the
store's call timeout, so a process stopped while holding one costs its peers a
:class:`~sidecar.errors.StoreError`, never a hung thread; the kernel drops the locks
of a process that dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from sidecar.errors import StoreError

#: First and longest pause between attempts while another holder has the gate.
_POLL_START_S = 0.0001
_POLL_MAX_S = 0.002


class StoreGate:
    """Shared holders (reads) or one exclusive holder (an upsert), host-wide."""

    def __init__(
        self,
        path: str | Path,
        *,
        timeout_s: float,
        waited: Callable[[str, float], None] | None = None,
    ) -> None:
        self._path = Path(path).expanduser()
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._queue = self._path.with_name(self._path.name + ".queue")
        self._timeout_s = timeout_s
        #: Told (mode, seconds) after each wait for another holder.
        self._waited = waited

    @property
    def path(self) -> Path:
        return self._path

    @contextlib.contextmanager
    def held(self, *, exclusive: bool) -> Iterator[None]:
        """Hold the gate for one blocking store call (in the calling thread)."""
        started = time.monotonic()
        deadline = started + self._timeout_s
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            queue = os.open(self._queue, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                waited = _lock(queue, fcntl.LOCK_EX, deadline)
                waited = (
                    _lock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH, deadline) or waited
                )
            finally:
                os.close(queue)  # the next in turn may queue for the gate now
            if waited and self._waited is not None:
                self._waited("upsert" if exclusive else "read", time.monotonic() - started)
            yield
        finally:
            os.close(fd)  # releases the gate


def _lock(fd: int, mode: int, deadline: float) -> bool:
    """Take ``mode`` on ``fd`` by ``deadline``; whether it had to wait."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        pass
    pause = _POLL_START_S
    while True:
        time.sleep(pause)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise StoreError("the store gate stayed busy past the store timeout") from None
            pause = min(_POLL_MAX_S, pause * 2)
