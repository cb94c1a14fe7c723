"""Per-owner write locks shared by the sidecar processes of one host.

With ``server.workers`` > 1 two workers may write turns of the same user at the same
time; each serialises its own writes per owner (:class:`~sidecar.memory.write.writer.KeyedLocks`),
and these locks serialise them across the workers: an exclusive ``flock`` on one of
``buckets`` files (owners hashed into them), taken without blocking in a polling
loop, so a cancelled waiter never leaves a lock behind, and with one holder per
bucket inside a process (``flock`` does not exclude two holders of one descriptor).
The kernel drops the locks of a process that dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

from sidecar.config import SidecarConfig

#: First and longest pause between attempts on a bucket another process holds.
_POLL_START_S = 0.002
_POLL_MAX_S = 0.05


def owner_bucket(owner: str, buckets: int) -> int:
    """Which of ``buckets`` lock files ``owner`` hashes into (stable across processes,
    unlike ``hash()``)."""
    return zlib.crc32(owner.encode("utf-8")) % buckets


class HostLocks:
    """Per-owner locks across the processes that share ``directory``."""

    def __init__(self, directory: str | Path, *, buckets: int = 64) -> None:
        if buckets < 1:
            raise ValueError("buckets must be at least 1")
        self._directory = Path(directory).expanduser()
        self._directory.mkdir(parents=True, exist_ok=True)
        self._buckets = buckets
        self._fds: dict[int, int] = {}
        self._local: dict[int, asyncio.Lock] = {}

    def bucket(self, owner: str) -> int:
        return owner_bucket(owner, self._buckets)

    def _fd(self, bucket: int) -> int:
        fd = self._fds.get(bucket)
        if fd is None:
            path = self._directory / f"owner-{bucket:03d}.lock"
            fd = self._fds[bucket] = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        return fd

    @contextlib.asynccontextmanager
    async def hold(self, owner: str) -> AsyncIterator[None]:
        """Hold ``owner``'s bucket: no other holder in this process or another."""
        bucket = self.bucket(owner)
        local = self._local.setdefault(bucket, asyncio.Lock())
        async with local:
            fd = self._fd(bucket)
            pause = _POLL_START_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(pause)
                    pause = min(_POLL_MAX_S, pause * 2)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def host_locks_for(config: SidecarConfig, name: str = "owner-locks") -> HostLocks | None:
    """The host's per-owner locks called ``name`` when several processes write its
    rows (workers, writers of their own; a directory beside the journals; one name
    per kind of lock, so a holder of one kind may take the other)."""
    if not config.supervised:
        return None
    return HostLocks(Path(config.write_queue.journal_path).expanduser().parent / name)
