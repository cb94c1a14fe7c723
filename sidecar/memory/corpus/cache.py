"""The cache of per-scope corpora (:class:`~sidecar.memory.corpus.corpus.Corpus`).

The :class:`CorpusCache` builds corpora from cache *units* — one user's own rows,
one group's shared rows, all public rows — each loaded from the store with a filter
from :func:`sidecar.memory.store.filters.build_filter`, so the visibility rule is applied
by the same single function as everywhere else. This process's writes go through
to the cached units at once; other replicas' writes arrive through one background
refresh every ``ttl_s`` (a single query for the rows changed since the last one,
whatever the number of cached users); each unit is fully reloaded at most every
``full_reload_s`` (deletions). Loads are single-flight per unit.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from sidecar.config import CacheConfig
from sidecar.errors import SidecarError
from sidecar.memory.corpus.compaction import Key
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.features import FeatureMemo, Reader
from sidecar.memory.corpus.read_ahead import ReadAhead
from sidecar.memory.corpus.snapshots import Snapshots
from sidecar.memory.corpus.units import (
    Unit,
    access_applied,
    fetched_unit,
    held,
    held_rows,
    keys_user,
    unit_filter,
    unit_keys,
    units_of,
    user_unit,
)
from sidecar.memory.corpus.warming import Prepare, Warmer
from sidecar.memory.corpus.write_stamps import CacheMirror, WriteStamps
from sidecar.memory.records.records import (
    RELOAD_MARKER,
    AccessStat,
    MemoryRecord,
    Scope,
    Status,
    now_ms,
)
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.protocol import Store
from sidecar.metrics import Metrics
from sidecar.tasks import cancel_and_wait

#: Allowance for clocks of writers (other replicas) behind this process's: the shared
#: refresh reads rows updated from this long before its last query on.
CLOCK_SKEW_MS = 5_000
#: Ids per store query when the shared refresh fetches rows with their vectors.
_ID_BATCH = 500


class CorpusCache:
    """See the module docstring. ``mirror`` is told of this process's writes
    (``apply``, ``invalidate*``), not of the rows refreshes read: the cache relay
    passes them to the host's other processes. ``on_user_invalidated`` is told of
    every user invalidated here or by a peer: what else this process keeps of that
    user (the request path's caches of their questions) goes too. ``readers``: what
    the retrieval stages read of each memory, read as rows enter the cache
    (:mod:`~sidecar.memory.corpus.read_ahead`; a writer process reads none)."""

    def __init__(
        self,
        store: Store,
        config: CacheConfig,
        metrics: Metrics,
        *,
        mirror: CacheMirror | None = None,
        on_user_invalidated: Callable[[str], object] | None = None,
        readers: Sequence[tuple[str, Reader]] = (),
        prepare: Prepare | None = None,
    ) -> None:
        self._store = store
        self._config = config
        self._metrics = metrics
        self._units: OrderedDict[str, Unit] = OrderedDict()
        self._invalidations: dict[str, int] = {}
        self._seq = 0
        self._loading: dict[str, asyncio.Future[Unit]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: One background task refreshes every cached unit each ``ttl_s`` with a
        #: single store query (rows changed since ``_watermark``), so the refresh
        #: cost does not grow with the number of cached users.
        self._refresher: asyncio.Task[None] | None = None
        self._watermark: int | None = None
        self._mirror = mirror
        self._on_user_invalidated = on_user_invalidated
        #: The newest write applied per row, so a peer's older frame is not applied
        #: over it; kept for two refresh intervals.
        self.stamps = WriteStamps(2 * config.ttl_s)
        #: What was read of each memory (tokens, subject ...), for every snapshot:
        #: a new one reads only memories it has not seen (bounded like the rows).
        self._features = FeatureMemo(config.max_rows)
        self._ahead = ReadAhead(self._features, readers)
        #: The scopes' snapshots, made from the units.
        self._snapshots = Snapshots(
            store.dim, self._features, config.max_scopes, metrics, on_swapped=self._swapped
        )
        #: Makes the snapshots a write or a load changed, and what ``prepare`` reads
        #: of them, before the next request (:mod:`~sidecar.memory.corpus.warming`).
        self._warmer = (
            Warmer(
                prepare,
                config,
                metrics,
                ready=self._ready,
                served=self._served,
                holding=self._snapshots.holding,
                rows=self._rows,
            )
            if prepare is not None and config.warm_after_ms > 0
            else None
        )

    async def corpus(self, scope: Scope) -> Corpus:
        """The scope's corpus, loading (and waiting for) whatever is missing or stale.
        The loads run side by side (a user in many groups has many units) and in
        tasks of their own: a caller that gives up at its deadline leaves them to
        finish for the next request."""
        keys = unit_keys(scope)
        pending = {key: self._start(key) for key in keys if self._needs_load(key)}
        units = [await self._unit(key, pending.get(key)) for key in keys]
        return self._merge(keys, units)

    async def current(self, scope: Scope) -> Corpus:
        """The scope's corpus with the owner's rows as stored now, whoever wrote them:
        for the write path when other processes write the same store. The owner's
        cached unit is compared with a scalar scan of all the owner's rows and the
        rows it does not hold in that version are fetched (with vectors) and applied
        (a unit not cached is loaded in full). Not by ``updated_at``: a back-link or a
        category move keeps a row's ``updated_at``, and a writer working from a copy
        without another process's link would write the row back without it. Cached
        rows the scan no longer finds at all (deleted outright) leave too, unless
        written within the writers' clock skew (a concurrent refresh may have just
        brought them in)."""
        key = user_unit(scope.user_id)
        unit = self._units.get(key)
        if unit is not None:
            started_wall = now_ms()
            heads = await self._store.scan(unit_filter(key, updated_since=0), strong=True)
            changed = await self._changed_rows(heads, strong=True)
            present = {r.id for r in heads}
            gone = [
                r.with_changes(status=Status.DELETED)
                for r in unit.rows
                if r.id not in present and r.updated_at < started_wall - CLOCK_SKEW_MS
            ]
            self._metrics.cache_lookups.labels(outcome="delta").inc()
            if changed or gone:
                self._apply([*changed, *gone])
        return await self.corpus(scope)

    def corpus_nowait(self, scope: Scope) -> Corpus | None:
        """The cached corpus without waiting: stale units are served while they are
        refreshed in the background; ``None`` (and a background load) when a unit
        was never loaded or was invalidated. For the request path."""
        keys = unit_keys(scope)
        units = []
        missing = False
        for key in keys:
            unit = self._units.get(key)
            if unit is None or self._stale(unit):
                self._background(key)
            if unit is None:
                missing = True
            else:
                units.append(unit)
        if missing:
            self._metrics.cache_lookups.labels(outcome="cold").inc()
            if self._warmer is not None:
                self._warmer.wanted(tuple(keys))
            return None
        self._metrics.cache_lookups.labels(outcome="hit").inc()
        return self._merge(keys, units)

    def _merge(self, keys: list[str], units: list[Unit]) -> Corpus:
        return self._snapshots.merged(tuple(keys), units)

    async def compactions(self) -> None:
        """Wait until no deleted memory is left in the served snapshots' layers."""
        await self._snapshots.compactions()

    def _background(self, key: str) -> None:
        if key not in self._loading:
            self._start(key).add_done_callback(self._loaded)

    def _loaded(self, load: asyncio.Future[Unit]) -> None:
        if not load.cancelled() and load.exception() is not None:
            self._metrics.cache_lookups.labels(outcome="load_error").inc()

    async def warmings(self) -> None:
        """Wait until the snapshots readied after writes and loads are ready."""
        if self._warmer is not None:
            await self._warmer.settled()

    def _warm(self, *unit_keys: str) -> None:
        if self._warmer is not None:
            self._warmer.changed(*unit_keys)

    def _swapped(self, keys: Key) -> None:
        if self._warmer is not None:
            self._warmer.soon(keys)

    def _ready(self, keys: Key) -> tuple[Corpus, str] | None:
        """``keys``' snapshot as its units are now (made if need be), and its user;
        None while a unit is missing, stale or loading."""
        if any(key in self._loading or self._needs_load(key) for key in keys):
            return None
        return self._merge(list(keys), [self._units[key] for key in keys]), keys_user(keys)

    def _served(self, keys: Key) -> Corpus | None:
        return self._snapshots.served(keys, [self._units.get(key) for key in keys])

    def _rows(self, keys: Key) -> int | None:
        units = [self._units.get(key) for key in keys]
        if any(unit is None for unit in units):
            return None
        return sum(len(unit.rows) for unit in units if unit is not None)

    async def close(self) -> None:
        if self._warmer is not None:
            await self._warmer.close()
        refresher, self._refresher = self._refresher, None
        await cancel_and_wait(refresher)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, SidecarError):
                await task
        await self._snapshots.compactions()

    def apply(
        self, records: Sequence[MemoryRecord], *, mirror: bool = True, stamp: int | None = None
    ) -> None:
        """Write-through after this process stored ``records`` (holding their owner's
        write lock): every cached unit a record belongs to gets the new version (by
        id), so the next request sees it; rows no longer active leave the unit. Loads
        in flight are not kept (they may predate the write). ``mirror=False``: not
        told to the host's other processes. ``stamp``: another process's write, from
        the relay (never told on); rows this cache holds a newer write of are left
        out (:mod:`sidecar.memory.corpus.write_stamps`)."""
        if stamp is None:
            stamp = self.stamps.now()
            self.stamps.note(records, stamp)
        else:
            mirror = False
            fresh = self.stamps.newer(records, stamp)
            if len(fresh) < len(records):
                self._metrics.relay_stale_rows.inc(len(records) - len(fresh))
            records = fresh
        self._apply(records)
        if mirror and self._mirror is not None:
            self._mirror.applied(records, stamp)

    def apply_access(self, flushed: Mapping[str, Sequence[AccessStat]]) -> None:
        """This process flushed these access counts and times, by the cache unit that
        holds each memory: its cached rows take them, and nothing else (a newer
        version of a row keeps its content). Not told to the host's other processes:
        counts change no content, and their next full reload reads them. Only the
        flushed rows are visited; the snapshots are patched (:meth:`Corpus.with_access`),
        not rebuilt."""
        self._seq, before, rows = access_applied(self._units, flushed, self._seq)
        if before:
            self._snapshots.patched(before, rows, self._units)

    def _apply(self, records: Sequence[MemoryRecord]) -> None:
        # A deleted memory's text leaves the memo now (the next snapshot leaves its
        # row out, and the compactor folds its vector and postings out after it).
        self._features.drop([r.id for r in records if r.status == Status.DELETED])
        changed: dict[str, dict[str, MemoryRecord]] = {}
        for record in records:
            for key in units_of(record):
                changed.setdefault(key, {})[record.id] = record
        for key, updates in changed.items():
            self._invalidations[key] = self._invalidations.get(key, 0) + 1
            unit = self._units.get(key)
            if unit is None:
                continue
            kept = []
            for row in unit.rows:
                update = updates.get(row.id)
                if update is None:
                    kept.append(row)
                elif update.embedding is not row.embedding and update.embedding == row.embedding:
                    # Same vector re-read from the store (e.g. a category move): share
                    # the cached one so corpora see an unchanged vector at once.
                    updates[row.id] = update.with_changes(embedding=row.embedding)
            fresh = sorted(
                (r for r in updates.values() if r.status == Status.ACTIVE), key=lambda r: r.id
            )
            self._ahead.read(fresh)
            self._seq += 1
            unit.changed(
                (*kept, *fresh),
                self._seq,
                held_rows(updates),
            )
        self._warm(*changed)

    def _start_refresher(self) -> None:
        if self._refresher is None or self._refresher.done():
            loop = asyncio.get_running_loop()
            self._refresher = loop.create_task(self._refresh_loop(), name="corpus-refresh")

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self._config.ttl_s)
            try:
                await self.refresh()
            except SidecarError:  # the store is down: units age, per-unit loads retry
                self._metrics.cache_lookups.labels(outcome="load_error").inc()

    async def refresh(self) -> int:
        """Apply every row changed since the last refresh (one store query, all
        users) to the cached units and mark them fresh; returns the rows read."""
        units = [u for u in self._units.values() if u.loaded_at > float("-inf")]
        if not units:
            return 0
        started = time.monotonic()
        started_wall = now_ms()
        since = self._watermark
        if since is None:
            since = min(u.loaded_wall_ms for u in units) - CLOCK_SKEW_MS
        # Scalars first; vectors only for the rows not already held in that version
        # (none in a single replica, whose own writes went through already, nor for
        # the rows the relay brought).
        heads = await self._store.scan(
            build_filter(node_type=None, status=None, updated_since=since, deleted=True)
        )
        changed = await self._changed_rows(heads)
        self._metrics.cache_lookups.labels(outcome="delta").inc()
        newest = max((r.updated_at for r in heads), default=since)
        if changed:
            self._apply(changed)
        self._reload_marked(heads)
        for unit in units:
            if unit.loaded_at > float("-inf"):  # not invalidated meanwhile
                unit.loaded_at = max(unit.loaded_at, started)
                unit.max_updated = max(unit.max_updated, newest)
        # Next time: rows written from just before this query on (skew allowed for).
        self._watermark = max(since, started_wall - CLOCK_SKEW_MS)
        return len(changed)

    def _reload_marked(self, heads: list[MemoryRecord]) -> None:
        """Units with a reload marker newer than their last load start reload in full
        (rows written with older times: imports; category moves, back-links)."""
        for row in heads:
            if row.status != Status.DELETED or row.source != RELOAD_MARKER:
                continue
            for key in units_of(row):
                unit = self._units.get(key)
                if unit is not None and row.updated_at >= unit.loaded_wall_ms - CLOCK_SKEW_MS:
                    self._bump(key)

    async def _changed_rows(
        self, heads: list[MemoryRecord], *, strong: bool = False
    ) -> list[MemoryRecord]:
        """The full rows (with vectors) of ``heads`` (scalar rows) that some cached
        unit does not hold in that version (``strong``: read as :meth:`current`
        reads, every acknowledged write included)."""
        index: dict[str, dict[str, MemoryRecord]] = {}
        wanted = sorted({r.id for r in heads if not held(self._units, r, index)})
        changed: list[MemoryRecord] = []
        for start in range(0, len(wanted), _ID_BATCH):
            chunk = wanted[start : start + _ID_BATCH]
            changed.extend(
                await self._store.query(
                    build_filter(ids=chunk, node_type=None, status=None, deleted=True),
                    limit=len(chunk),
                    with_vectors=True,
                    strong=strong,
                )
            )
        return changed

    def invalidate(
        self, record: MemoryRecord, *, mirror: bool = True, stamp: int | None = None
    ) -> None:
        """Mark every unit ``record`` belongs to stale (e.g. after a delete): they
        reload from the store, so a peer's write of it stamped before this is not
        applied after it. ``mirror`` and ``stamp`` as for :meth:`apply`."""
        if stamp is None:
            stamp = self.stamps.now()
        else:
            mirror = False
        self.stamps.note([record], stamp)
        self._features.drop([record.id])
        for key in units_of(record):
            self._bump(key)
        if mirror and self._mirror is not None:
            self._mirror.invalidated([record], stamp)

    def invalidate_user(
        self, user_id: str, *, mirror: bool = True, stamp: int | None = None
    ) -> None:
        """Mark the user's own unit stale and drop the snapshots made of it; peers'
        writes of their rows stamped before this are not applied after it. Tells
        ``on_user_invalidated``."""
        if stamp is None:
            stamp = self.stamps.now()
        else:
            mirror = False
        self.stamps.note_user(user_id, stamp)
        self._features.forget_user(user_id)
        key = user_unit(user_id)
        self._bump(key)
        self._snapshots.drop(key)
        if mirror and self._mirror is not None:
            self._mirror.invalidated_user(user_id, stamp)
        if self._on_user_invalidated is not None:
            self._on_user_invalidated(user_id)

    def clear(self) -> None:
        for key in list(self._units):
            self._bump(key)

    def _bump(self, key: str) -> None:
        """Mark a unit stale: waiting readers reload it, the request path keeps
        serving the old snapshot while it reloads in the background."""
        self._invalidations[key] = self._invalidations.get(key, 0) + 1
        unit = self._units.get(key)
        if unit is not None:
            unit.loaded_at = float("-inf")
            unit.full_at = float("-inf")  # e.g. a delete: only a full load shows it

    def _stale(self, unit: Unit) -> bool:
        """Due for a load of its own: the shared refresh is overdue (it refreshes
        every ``ttl_s``; a unit is given twice that), or a full reload is due."""
        now = time.monotonic()
        return (
            now - unit.loaded_at >= 2 * self._config.ttl_s
            or now - unit.full_at >= self._config.full_reload_s
        )

    def _needs_load(self, key: str) -> bool:
        unit = self._units.get(key)
        return unit is None or self._stale(unit)

    async def _unit(self, key: str, pending: asyncio.Future[Unit] | None = None) -> Unit:
        if pending is None and not self._needs_load(key):
            self._units.move_to_end(key)
            return self._units[key]
        return await asyncio.shield(pending or self._start(key))

    def _start(self, key: str) -> asyncio.Future[Unit]:
        """The load of ``key`` under way, started in a task of its own when none is
        (concurrent loads of the same unit share one store query)."""
        pending = self._loading.get(key)
        if pending is not None:
            return pending
        self._metrics.cache_lookups.labels(outcome="load").inc()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Unit] = loop.create_future()
        self._loading[key] = future
        task = loop.create_task(self._load(key, future))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return future

    async def _load(self, key: str, future: asyncio.Future[Unit]) -> None:
        """Load one unit into ``future``."""
        try:
            invalidations = self._invalidations.get(key, 0)
            unit, new = await self._fetch(key, self._units.get(key))
            await self._ahead.read_sliced(
                new, lambda: self._invalidations.get(key, 0) == invalidations
            )
            # A write during the load invalidated it: use this snapshot once, don't keep it.
            if self._invalidations.get(key, 0) == invalidations:
                self._units[key] = unit
                self._units.move_to_end(key)
                self._evict()
                self._start_refresher()
            future.set_result(unit)
            self._warm(key)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:  # handed to the waiters
            future.set_exception(exc)
            future.exception()  # waiters may be gone: never "exception was never retrieved"
        finally:
            self._loading.pop(key, None)

    async def _fetch(self, key: str, old: Unit | None) -> tuple[Unit, Sequence[MemoryRecord]]:
        """A full load, or a delta refresh of ``old`` (:func:`fetched_unit`); and the
        rows it brought in."""
        self._seq += 1
        fetched = await fetched_unit(self._store, key, old, self._seq, self._config.full_reload_s)
        if fetched.delta:
            self._metrics.cache_lookups.labels(outcome="delta").inc()
        self._features.drop(fetched.deleted)
        return fetched.unit, fetched.new

    def _evict(self) -> None:
        total = sum(len(u.rows) for u in self._units.values())
        while total > self._config.max_rows and len(self._units) > 1:
            _, unit = self._units.popitem(last=False)
            total -= len(unit.rows)
        self._metrics.cache_rows.set(total)
