"""Write stamps: which of two versions of a row a cache was told of last is the newer.

The processes of one host tell each other's corpus caches what they write (the cache
relay, :mod:`sidecar.runtime.relay`), each over a socket of its own. Two processes'
frames about one row can therefore arrive in the other order than their writes:
worker A writes a row, worker B writes it again, and a third worker reads B's frame
first. Applying A's frame then would serve the older version until the next refresh.

Every write of a user's rows holds that user's lock for the whole host
(:class:`~sidecar.memory.write.rows.locks.HostLocks`), and a cache is told of a write
after the store has it and before the lock is let go. So the time a cache is told,
on the host's monotonic clock (``CLOCK_MONOTONIC`` is one clock for all the
processes of a Linux host), orders the writes of a row as the store does. That time
travels with the frame as its *stamp*; a cache keeps the newest stamp it applied for
each row (and each user whose rows it dropped as a whole) and does not apply a row
with an older one.

Bounded: stamps older than ``horizon_s`` are forgotten. A frame is late by
milliseconds, not by the refresh interval that reads every change anyway.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from sidecar.memory.records.records import MemoryRecord


class WriteStamps:
    """The newest write stamp applied per row id and per user id."""

    def __init__(
        self, horizon_s: float, *, clock_ns: Callable[[], int] = time.monotonic_ns
    ) -> None:
        if horizon_s <= 0:
            raise ValueError("horizon_s must be positive")
        self._horizon_ns = int(horizon_s * 1e9)
        self._clock_ns = clock_ns
        self._rows: OrderedDict[str, int] = OrderedDict()
        self._users: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._rows) + len(self._users)

    def now(self) -> int:
        """The stamp of a write this process makes now."""
        return self._clock_ns()

    def note(self, records: Sequence[MemoryRecord], stamp: int) -> None:
        """``records`` were applied at ``stamp``."""
        for record in records:
            _raise(self._rows, record.id, stamp)
        self._prune()

    def note_user(self, user_id: str, stamp: int) -> None:
        """All of ``user_id``'s rows were dropped at ``stamp``."""
        _raise(self._users, user_id, stamp)
        self._prune()

    def newer(self, records: Sequence[MemoryRecord], stamp: int) -> list[MemoryRecord]:
        """The ``records`` of a write stamped ``stamp`` that are not older than what
        was applied for them (noted as applied now); the others are left out."""
        kept = [
            r
            for r in records
            if self._rows.get(r.id, stamp) <= stamp and self._users.get(r.user_id, stamp) <= stamp
        ]
        self.note(kept, stamp)
        return kept

    def _prune(self) -> None:
        cutoff = self._clock_ns() - self._horizon_ns
        for stamps in (self._rows, self._users):
            # Oldest first (near enough: a peer's frame may be a little older than
            # the entries before it, and then stays a little longer).
            while stamps and next(iter(stamps.values())) < cutoff:
                stamps.popitem(last=False)


def _raise(stamps: OrderedDict[str, int], key: str, stamp: int) -> None:
    if stamps.get(key, stamp) <= stamp:
        stamps[key] = stamp
        stamps.move_to_end(key)


class CacheMirror(Protocol):
    """Told what a cache is told by this process's writes, with their write stamps
    (this module's), so the caches of the host's other processes
    take the same (:class:`sidecar.runtime.relay.RelayPeers`)."""

    def applied(self, records: Sequence[MemoryRecord], stamp: int) -> None: ...

    def invalidated(self, records: Sequence[MemoryRecord], stamp: int) -> None: ...

    def invalidated_user(self, user_id: str, stamp: int) -> None: ...
