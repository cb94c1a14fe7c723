"""Per-owner write locks: every read-modify-write of an owner's rows (turns being
written, retention, access flushes, the category tree, admin edits) holds the
owner's :class:`KeyedLocks` lock.

With ``server.workers`` > 1 two workers may write turns of the same user at the same
time; each serialises its own writes per owner, and :class:`HostLocks` serialise
them across the workers: an exclusive ``flock`` on one of
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
import weakref
from collections.abc import AsyncIterator
from pathlib import Path

from sidecar.config import SidecarConfig
from sidecar.memory.store.gate import owner_bucket

#: First and longest pause between attempts on a bucket another process holds.
_POLL_START_S = 0.002
_POLL_MAX_S = 0.05


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


#: What :meth:`KeyedLocks.get` hands out: ``async with`` it.
OwnerLock = contextlib.AbstractAsyncContextManager[None]


class KeyedLocks:
    """One asyncio lock per key, kept only while someone holds or waits for it; with
    ``host`` (``server.workers`` > 1) each also holds the key's lock across the
    host's processes, so every read-modify-write of an owner's rows (turns being
    written, retention, access flushes, admin edits) excludes the other workers'."""

    def __init__(self, host: HostLocks | None = None) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._host = host

    def get(self, key: str) -> OwnerLock:
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        if self._host is None:
            return lock
        return self._with_host(lock, self._host, key)

    @staticmethod
    @contextlib.asynccontextmanager
    async def _with_host(lock: asyncio.Lock, host: HostLocks, key: str) -> AsyncIterator[None]:
        async with lock, host.hold(key):
            yield
