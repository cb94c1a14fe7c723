"""Retrieval access tracking: which memories the request path injected, written back
as access counts and times (read by the re-rank's salience and by retention's score).

The request path only calls :meth:`AccessTracker.record` — a few dictionary updates,
no I/O, no await. A background task flushes the recorded accesses every
``retention.access_flush_s``: in batches of up to ``FLUSH_BATCH`` memories, it reads
which of them are still active (id and owner only) and their current access rows,
adds the new accesses and writes the access rows back in one call (the store keeps
them apart from the memory rows, see :mod:`sidecar.memory.store.milvus`: nothing of a
memory row is read or rewritten). Once every batch is written, the counts this
process's corpus cache holds are updated (``CACHE_SLICE`` at a time, letting requests
run between). Three store calls per batch, whatever the number of owners: the calls'
fixed cost would dominate if each owner's few memories made a round of their own.

No owner's write lock is taken (a batch spans many owners, and the host-wide locks
are per bucket of owners, which one task cannot hold two of): a memory deleted
between the check and the write keeps an access row — id, owner, count, time, no
content — until its tombstone is purged, which removes the access rows of the rows
it deletes (:meth:`MemoryStore.delete`); one archived meanwhile keeps its count, as
every archived memory does. ``updated_at`` is left alone:
it means a content change (and the corpus caches' delta refreshes key on it, so
other replicas pick access counts up at their next full reload — counts are
advisory).

Bounded: at most ``retention.access_max_pending`` distinct memories wait for a flush;
accesses to further memories are dropped and counted until the next flush (which a
full set starts early). A flush that fails puts its accesses back (they merge with
newer ones). Across replicas, increments to the same row can race (last writer
wins): counts are an approximate signal, not an audit log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sidecar.config import RetentionConfig
from sidecar.errors import SidecarError
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.corpus.units import units_of
from sidecar.memory.records.records import AccessStat, Hit, NodeType, now_ms
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.metrics import Metrics
from sidecar.tasks import cancel_and_wait

log = logging.getLogger(__name__)

#: Memories per store round of a flush (one read of which are still active, one of
#: their access rows, one write): the calls' fixed cost dominates small ones.
FLUSH_BATCH = 2000
#: Flushed counts the corpus cache takes between two yields to the event loop.
CACHE_SLICE = 250


@dataclass(slots=True)
class _Access:
    owner: str
    count: int
    last: int  # epoch ms of the latest access
    #: The count and time the memory had when first recorded (the flush adds to its
    #: access row, or to these where it has none yet).
    base_count: int = 0
    base_at: int = 0
    #: The corpus-cache units that hold it (:func:`units_of`).
    units: tuple[str, ...] = ()


class AccessTracker:
    """Records injected memories in memory; flushes them in batches (one per process)."""

    def __init__(
        self,
        store: MemoryStore,
        cache: CorpusCache,
        config: RetentionConfig,
        metrics: Metrics,
        *,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._store = store
        self._cache = cache
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self._pending: dict[str, _Access] = {}  # memory id -> accesses not yet flushed
        self._full = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: The schedule's flush in progress (it outlives a cancelled schedule).
        self._scheduled: asyncio.Task[int] | None = None
        self._flushing = asyncio.Lock()

    @property
    def pending(self) -> int:
        """Distinct memories with accesses not yet flushed."""
        return len(self._pending)

    def record(self, hits: Sequence[Hit]) -> None:
        """The request path injected ``hits``: count one access for each. Never blocks."""
        now = self._clock()
        dropped = 0
        for hit in hits:
            record = hit.record
            if record.node_type != NodeType.MEMORY:
                continue
            entry = self._pending.get(record.id)
            if entry is not None:
                entry.count += 1
                entry.last = max(entry.last, now)
            elif len(self._pending) < self._config.access_max_pending:
                self._pending[record.id] = _Access(
                    record.user_id,
                    1,
                    now,
                    record.access_count,
                    record.accessed_at,
                    tuple(units_of(record)),
                )
            else:
                dropped += 1
        if dropped:
            self._metrics.access_updates.labels(outcome="dropped").inc(dropped)
            self._full.set()

    async def flush(self) -> int:
        """Write every recorded access; the number of memories updated. The accesses
        of a batch that fails are kept for the next flush."""
        async with self._flushing:  # one flush at a time (schedule, stop, on demand)
            batch, self._pending = self._pending, {}
            self._full.clear()
            ordered = sorted(batch, key=lambda memory_id: (batch[memory_id].owner, memory_id))
            chunks = [
                {memory_id: batch[memory_id] for memory_id in ordered[start : start + FLUSH_BATCH]}
                for start in range(0, len(ordered), FLUSH_BATCH)
            ]
            flushed = 0
            written: dict[str, list[AccessStat]] = {}  # cache unit -> its counts written
            for position, entries in enumerate(chunks):
                try:
                    updated = await self._flush_batch(entries)
                except SidecarError as exc:
                    self._metrics.access_updates.labels(outcome="failed").inc(len(entries))
                    log.warning("access flush failed: %s", type(exc).__name__)
                    self._put_back(entries)
                    continue
                except BaseException:  # cancelled (shutdown): keep what is not written
                    for rest in chunks[position:]:
                        self._put_back(rest)
                    self._cache.apply_access(written)
                    raise
                flushed += len(updated)
                for stat in updated:
                    for key in entries[stat.id].units:
                        written.setdefault(key, []).append(stat)
            await self._apply_to_cache(written)
            return flushed

    async def _apply_to_cache(self, written: dict[str, list[AccessStat]]) -> None:
        """The corpus cache takes the flush's counts once all are written, a few units
        (``CACHE_SLICE`` counts) at a time, letting requests run in between: each
        count is a copy of a cached row, and each unit's scopes take their new rows
        once per flush, so a whole batch at once would hold the event loop for tens of
        milliseconds. A cancel leaves the rest to the cache's next full reload (counts
        are advisory)."""
        piece: dict[str, list[AccessStat]] = {}
        size = 0
        for key in sorted(written):
            piece[key] = written[key]
            size += len(piece[key])
            if size >= CACHE_SLICE:
                self._cache.apply_access(piece)
                piece, size = {}, 0
                await asyncio.sleep(0)
        if piece:
            self._cache.apply_access(piece)

    async def _flush_batch(self, entries: dict[str, _Access]) -> list[AccessStat]:
        """One store round for up to ``FLUSH_BATCH`` memories, whoever owns them: the
        access rows written."""
        owners = await self._store.owners(build_filter(ids=entries), limit=len(entries))
        live = sorted(i for i, owner in owners.items() if entries[i].owner == owner)
        stored = await self._store.read_access(live)
        updated = []
        for memory_id in live:
            entry = entries[memory_id]
            current = stored.get(memory_id)
            count = max(entry.base_count, current.count if current else 0) + entry.count
            at = max(entry.base_at, current.at if current else 0, entry.last)
            updated.append(AccessStat(memory_id, entry.owner, count, at))
        await self._store.write_access(updated)
        self._metrics.access_updates.labels(outcome="flushed").inc(len(updated))
        if len(updated) < len(entries):  # superseded, archived or deleted since
            self._metrics.access_updates.labels(outcome="gone").inc(len(entries) - len(updated))
        return updated

    def _put_back(self, entries: dict[str, _Access]) -> None:
        for memory_id, entry in entries.items():
            newer = self._pending.get(memory_id)
            if newer is not None:
                newer.count += entry.count
                newer.last = max(newer.last, entry.last)
            elif len(self._pending) < self._config.access_max_pending:
                self._pending[memory_id] = entry
            else:
                self._metrics.access_updates.labels(outcome="dropped").inc()

    # -- the schedule ----------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._config.access_flush_s):
                    await self._full.wait()
            # Shielded from stop(): a store write goes on in its thread when its
            # awaiter is cancelled, so a cancelled flush would put back accesses that
            # were written, and the final flush would count them twice.
            self._scheduled = asyncio.get_running_loop().create_task(self.flush())
            try:
                await asyncio.shield(self._scheduled)
            except Exception as exc:  # a bug must not end the schedule
                log.error("access flush failed (bug): %s", type(exc).__name__)
                await asyncio.sleep(self._config.access_flush_s)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="access-flush")

    async def stop(self, *, flush: bool = True) -> None:
        """Stop the schedule; then flush what is recorded (unless ``flush`` is off)."""
        task, self._task = self._task, None
        await cancel_and_wait(task)
        scheduled, self._scheduled = self._scheduled, None
        if scheduled is not None:
            await asyncio.wait([scheduled])  # its outcome was the schedule's to report
        if flush and self._pending:
            try:
                await self.flush()
            except Exception as exc:  # shutting down: report, never raise
                log.warning("final access flush failed: %s", type(exc).__name__)
