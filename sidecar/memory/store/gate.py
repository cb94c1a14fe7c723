"""Reads never see a row half-upserted on milvus-lite.

milvus-lite (2.5.1) applies an upsert as a delete and then an insert, and a read that
runs between the two finds neither version of the row: with one thread upserting a
row in a loop and another querying it, a share of the queries come back empty
(docs/design/store-gate.md). Through the corpus cache that is a memory missing from a
user's corpus until the next full reload, and through the write path a memory the
dedup does not see. A Milvus server writes both halves in one transaction (one
timestamp), so a read there sees the old row or the new one, and needs no gate.

Where the store is milvus-lite, every store call that reads holds the
:class:`StoreGate` shared and every upsert holds it exclusively: ``flock`` s on files
in one directory, taken in the store's executor thread on descriptors of their own,
so they exclude the process's other threads as well as the other processes of the
host that use the same embedded server (``server.workers``, writer processes).

- **Per owner.** The gate has ``buckets`` shares, owners hashed into them. An upsert
  holds the shares of the owners of its rows; a read restricted to one owner (a
  :class:`~sidecar.memory.store.filters.Filter` with an ``owner``) holds that owner's
  share, any other read every share. So one user's write path does not wait for
  another user's, while a read that may return anyone's rows waits for every
  upsert. Shares are always taken in ascending order: no two holders wait for each
  other.
- **In turn.** Each share has a queue file a holder takes first, exclusively, and
  keeps only until it has the share: an upsert waiting for reads stops new reads
  from overtaking it, and a read waiting for an upsert gets in before the next
  upsert (without it a busy writer kept a reader out for seconds).
- **Bounded.** Every lock is taken without blocking, in a polling loop bounded by
  the store's call timeout, so a process stopped while holding one costs its peers a
  :class:`~sidecar.errors.StoreError`, never a hung thread; the kernel drops the
  locks of a process that dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from sidecar.errors import StoreError

#: First and longest pause between attempts while another holder has a lock.
_POLL_START_S = 0.0001
_POLL_MAX_S = 0.002
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC


def owner_bucket(owner: str, buckets: int) -> int:
    """Which of ``buckets`` lock files ``owner`` hashes into (stable across processes,
    unlike ``hash()``)."""
    return zlib.crc32(owner.encode("utf-8")) % buckets


class StoreGate:
    """Shared holders (reads) or one exclusive holder (an upsert) per owner share,
    host-wide."""

    def __init__(
        self,
        directory: str | Path,
        *,
        timeout_s: float,
        buckets: int = 16,
        waited: Callable[[str, float], None] | None = None,
    ) -> None:
        if buckets < 1:
            raise ValueError("buckets must be at least 1")
        self._directory = Path(directory).expanduser()
        self._directory.mkdir(parents=True, exist_ok=True)
        self._buckets = buckets
        self._timeout_s = timeout_s
        #: Told (mode, seconds) after each wait for another holder.
        self._waited = waited

    def bucket(self, owner: str) -> int:
        return owner_bucket(owner, self._buckets)

    @contextlib.contextmanager
    def held(self, owners: Iterable[str] | None, *, exclusive: bool) -> Iterator[None]:
        """Hold the shares of ``owners`` (None: every share) for one blocking store
        call, in the calling thread."""
        shares = (
            range(self._buckets) if owners is None else sorted({self.bucket(o) for o in owners})
        )
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        started = time.monotonic()
        deadline = started + self._timeout_s
        held: list[int] = []
        waited = False
        try:
            for share in shares:
                held.append(os.open(self._directory / f"share-{share:03d}", _FLAGS, 0o600))
                queue = os.open(self._directory / f"share-{share:03d}.queue", _FLAGS, 0o600)
                try:
                    waited = _lock(queue, fcntl.LOCK_EX, deadline) or waited
                    waited = _lock(held[-1], mode, deadline) or waited
                finally:
                    os.close(queue)  # the next in turn may queue for the share now
            if waited and self._waited is not None:
                self._waited("upsert" if exclusive else "read", time.monotonic() - started)
            yield
        finally:
            for fd in held:
                os.close(fd)  # releases the share


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
