"""The per-user memory cap: when a user has more active memories than
``retention.max_memories_per_user``, the lowest-scoring ones are given up.

Score (:func:`retention_score`, weights from :class:`~sidecar.config.RetentionConfig`,
renormalised to sum 1)::

    importance_weight * importance
  + access_weight     * min(1, log1p(access_count) / log1p(access_saturation))
  + recency_weight    * 0.5 ** (age_days / recency_half_life_days)

The age runs from the memory's last use: the later of ``accessed_at`` (its last
injection, kept by :class:`~sidecar.memory.write.upkeep.access.AccessTracker`) and ``updated_at``
(its last content change); ``created_at`` when both are unset.

Order (:func:`prune_order`, first to go first): every non-constraint memory before
any ``constraint`` (a rule the user set for the assistant is the last thing to
forget), then the lower score, then the older ``created_at``, then the id — a total,
deterministic order, so two replicas pruning the same rows pick the same ones.

Archive, not delete (``action: archive``, the default). A pruned memory gets status
``archived``: it leaves every corpus (retrieval and dedup read active memories only)
exactly like a superseded one, but its row stays. Reasons:

* nothing is lost by policy — the cap is a serving budget, not a judgement that the
  fact is wrong; an operator can restore rows (status back to ``active``) or purge
  them, and if the user states the fact again its deterministic id revives the row;
* other replicas see it: an archive bumps ``updated_at``, which their corpus caches'
  delta refreshes read within ``cache.ttl_s``; a hard delete is only noticed by a
  full reload (``cache.full_reload_s``), and until then they keep serving it;
* this process writes it through (:meth:`CorpusCache.apply`), so the owner's cached
  corpus drops the rows at once without a reload of the remaining memories.

The cost is storage: archived rows stay in the collection. ``action: delete`` deletes
them instead: each becomes a hollow tombstone (:mod:`sidecar.memory.store.tombstones`; no
text left), dropped by this cache at once and by the others at their next delta
refresh, and purged later.

Pruning holds the owner's write lock (shared with the writer and the access
flushes), so it never interleaves with a turn being written for that owner: a
concurrent write cannot bring back a row it just archived through a stale back-link.

Schedule: the writer calls :meth:`Retention.note` for every owner it stored rows
for; every ``prune_interval_s`` :meth:`Retention.tick` checks at most
``max_owners_per_tick`` of them (one ``count`` each; rows are read only when over the
cap) and purges the tombstones of every delete that every cache has had time to see
(``purge_after_ms``). :meth:`Retention.prune` runs on demand.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence

from sidecar.config import RetentionConfig
from sidecar.errors import SidecarError
from sidecar.memory.records.records import MemoryRecord, MemoryType, Status, now_ms
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.store.tombstones import purge
from sidecar.memory.write.rows.gateway import NotedOwners, WriteGateway
from sidecar.metrics import Metrics
from sidecar.tasks import cancel_and_wait

log = logging.getLogger(__name__)

MS_PER_DAY = 86_400_000
#: Ids per store query or delete expression.
ID_BATCH = 500


def retention_score(record: MemoryRecord, config: RetentionConfig, now: int) -> float:
    """How much ``record`` is worth keeping, 0..1 (see the module docstring)."""
    total = config.importance_weight + config.access_weight + config.recency_weight
    importance = min(1.0, max(0.0, record.importance))
    access = min(
        1.0, math.log1p(max(0, record.access_count)) / math.log1p(config.access_saturation)
    )
    last_used = max(record.accessed_at, record.updated_at) or record.created_at
    if last_used > 0:
        age_days = max(0.0, (now - last_used) / MS_PER_DAY)
        recency: float = 0.5 ** (age_days / config.recency_half_life_days)
    else:
        recency = 0.0
    return (
        config.importance_weight * importance
        + config.access_weight * access
        + config.recency_weight * recency
    ) / total


def prune_order(
    records: Sequence[MemoryRecord], config: RetentionConfig, now: int
) -> list[MemoryRecord]:
    """``records`` in the order retention gives them up (first to go first)."""
    return sorted(
        records,
        key=lambda r: (
            r.memory_type == MemoryType.CONSTRAINT,
            retention_score(r, config, now),
            r.created_at,
            r.id,
        ),
    )


class Retention:
    """Enforces the per-user cap (one per process). Archives and deletes go through
    the write gateway (under the owner's lock, written through the caches)."""

    def __init__(
        self,
        store: MemoryStore,
        writes: WriteGateway,
        config: RetentionConfig,
        metrics: Metrics,
        *,
        noted: NotedOwners | None = None,
        clock: Callable[[], int] = now_ms,
        purge_after_ms: int | None = None,
    ) -> None:
        self._store = store
        #: Tombstones older than this are deleted by each tick (None: never).
        self._purge_after_ms = purge_after_ms
        self._writes = writes
        self._config = config
        self._metrics = metrics
        self._clock = clock
        self._noted = noted or NotedOwners(scheduled=config.prune_interval_s > 0)
        self._pending = self._noted.counts
        self._task: asyncio.Task[None] | None = None

    @property
    def config(self) -> RetentionConfig:
        return self._config

    @property
    def pending(self) -> dict[str, int]:
        """Owners waiting for a scheduled check (a copy)."""
        return dict(self._pending)

    def note(self, owner: str) -> None:
        """Rows were stored for ``owner``: check it at the next tick."""
        self._noted.note(owner)

    async def prune(self, owner: str) -> int:
        """Bring ``owner`` back to the cap; the number of memories given up."""
        started = time.perf_counter()
        try:
            async with self._writes.lock(owner):
                return await self._prune(owner)
        finally:
            self._metrics.prune_seconds.observe(time.perf_counter() - started)

    async def _prune(self, owner: str) -> int:
        cap = self._config.max_memories_per_user
        if await self._store.count(build_filter(owner=owner)) <= cap:
            return 0
        rows = await self._store.scan(build_filter(owner=owner))
        excess = len(rows) - cap
        if excess <= 0:
            return 0
        now = self._clock()
        victims = prune_order(rows, self._config, now)[:excess]
        ids = sorted(r.id for r in victims)
        if self._config.action == "delete":
            pruned = len(await self._writes.delete(victims))
        else:
            pruned = await self._archive(owner, ids, now)
        self._metrics.pruned.labels(action=self._config.action).inc(pruned)
        log.info(
            "retention pruned memories=%d cap=%d action=%s kept=%d",
            pruned,
            cap,
            self._config.action,
            len(rows) - pruned,
        )
        return pruned

    async def _archive(self, owner: str, ids: list[str], now: int) -> int:
        """Archive the active rows among ``ids`` (re-read with their vectors: an
        upsert replaces the whole row)."""
        archived: list[MemoryRecord] = []
        for start in range(0, len(ids), ID_BATCH):
            chunk = ids[start : start + ID_BATCH]
            current = await self._store.query(
                build_filter(owner=owner, ids=chunk), limit=len(chunk), with_vectors=True
            )
            archived.extend(
                r.with_changes(status=Status.ARCHIVED, updated_at=max(now, r.updated_at))
                for r in current
            )
        await self._writes.put(archived)  # written through: they leave the corpora at once
        return len(archived)

    # -- the schedule ----------------------------------------------------------------

    async def tick(self) -> int:
        """Check the owners with the most writes since their last check (at most
        ``max_owners_per_tick``); the memories given up in all. Then purge expired
        tombstones."""
        chosen = sorted(self._pending.items(), key=lambda kv: (-kv[1], kv[0]))
        total = 0
        for owner, count in chosen[: self._config.max_owners_per_tick]:
            self._pending.pop(owner, None)
            try:
                total += await self.prune(owner)
            except Exception as exc:  # the schedule must outlive any one owner's failure
                self._pending[owner] = self._pending.get(owner, 0) + count
                expected = isinstance(exc, SidecarError)
                log.warning(
                    "retention check failed: %s%s", type(exc).__name__, "" if expected else " (bug)"
                )
        await self.purge_tombstones()
        return total

    async def purge_tombstones(self) -> int:
        """Delete the tombstones every cache has had time to see (``purge_after_ms``);
        how many (0 when purging is off or the store failed: the next tick retries)."""
        if self._purge_after_ms is None:
            return 0
        try:
            purged = await purge(self._store, self._purge_after_ms)
        except SidecarError as exc:
            log.warning("tombstone purge failed: %s", type(exc).__name__)
            return 0
        if purged:
            self._metrics.tombstones_purged.inc(purged)
        return purged

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._config.prune_interval_s)
            await self.tick()

    def start(self) -> None:
        """Start the schedule (no-op when ``prune_interval_s`` is 0)."""
        if self._config.prune_interval_s > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="retention")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
