"""The write gateway: the one way memory rows reach the store.

Every writer goes through it — the turn writer, the admin API (add, update, delete,
forget, import), retention, the category tree and bulk loads — so every row is
written the same way::

    hygiene -> the owner's lock -> enrichment -> upsert -> corpus cache -> cache relay

* **hygiene** (:meth:`WriteGateway.clean`): text is made valid UTF-8, loses control
  and invisible characters, has its whitespace collapsed and is capped at
  ``store.max_content_chars`` (:mod:`sidecar.memory.language.sanitize`); text left
  without a letter or digit is not stored;
* **the owner's lock** (:meth:`WriteGateway.lock`): every read-modify-write of an
  owner's rows holds it, across the host's processes with several workers;
* **enrichment** of new content (:meth:`WriteGateway.store`) by the writer's
  :class:`~sidecar.memory.write.rows.enrich.Enricher` (abstracts, links and, with the
  write path's, the category from the category tree's categorizer), and the changed
  rows stamped with the time the store changed, which other caches' delta refreshes
  key on (rows that only gained a back-link keep theirs: a link is not a change of
  content, and ``updated_at`` feeds recency);
* **upsert** in chunks, then **write-through** to this process's corpus cache,
  which tells the host's other processes over the cache relay (its mirror);
* the observers given at construction are told of each owner that got new content
  (retention's cap check).

Deletes overwrite rows with tombstones (:meth:`WriteGateway.delete`, see
:mod:`sidecar.memory.store.tombstones`) so that every cache drops them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sidecar.errors import SidecarError
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.language.sanitize import clean_text, is_meaningful
from sidecar.memory.records.batches import UPSERT_CHUNK, chunks
from sidecar.memory.records.records import MemoryRecord, Status, now_ms
from sidecar.memory.store.protocol import Store
from sidecar.memory.store.tombstones import ForgetMarkers, mark_for_reload, tombstone
from sidecar.memory.write.rows.enrich import Enricher
from sidecar.memory.write.rows.locks import KeyedLocks, OwnerLock

#: Told of an owner whose rows got new content (e.g. retention's cap check).
StoredObserver = Callable[[str], None]


class NotedOwners:
    """The owners that got new content since a scheduled job last looked at them,
    with how many writes (only when the job is scheduled): handed to the gateway as
    an observer, read by the job's next pass (retention, consolidation), which takes
    the most written first."""

    def __init__(self, *, scheduled: bool) -> None:
        self._scheduled = scheduled
        #: owner -> writes since the job's last pass over them.
        self.counts: dict[str, int] = {}

    def note(self, owner: str) -> None:
        """Rows were stored for ``owner``."""
        if self._scheduled:
            self.counts[owner] = self.counts.get(owner, 0) + 1


class WriteGateway:
    """See the module docstring. ``locks`` are shared with every other job that
    rewrites an owner's rows; ``on_stored`` is told of each owner that got new
    content."""

    def __init__(
        self,
        store: Store,
        cache: CorpusCache,
        *,
        max_content_chars: int,
        locks: KeyedLocks | None = None,
        on_stored: Sequence[StoredObserver] = (),
        sole_writer: bool = False,
    ) -> None:
        self._store = store
        self._cache = cache
        self._max_chars = max_content_chars
        self._locks = locks or KeyedLocks()
        self._on_stored = tuple(on_stored)
        #: When each owner was last forgotten (remembered where ``sole_writer``:
        #: this process is the only one that writes the store).
        self.forgets = ForgetMarkers(store, remember=sole_writer)

    @property
    def dim(self) -> int:
        """The store's vector dimension."""
        return self._store.dim

    def lock(self, owner: str) -> OwnerLock:
        """The lock that serialises every write of ``owner``'s rows."""
        return self._locks.get(owner)

    def clean(self, text: str) -> str:
        """``text`` as it may be stored; ``""`` when nothing meaningful is left."""
        cleaned = clean_text(text, self._max_chars)
        return cleaned if is_meaningful(cleaned) else ""

    async def store(
        self,
        owner: str,
        rows: Sequence[MemoryRecord],
        enricher: Enricher,
        topics: Mapping[str, str] | None = None,
    ) -> list[MemoryRecord]:
        """New or changed content of ``owner`` (the caller holds the owner's lock):
        enriched by ``enricher``, stamped, upserted and written through; the rows
        written (back-links on other rows included). ``topics``: memory id -> named
        topic."""
        if not rows:
            return []
        enriched = await enricher.enrich(owner, rows, topics)
        changed = {r.id for r in rows}
        now = now_ms()
        stamped = [
            r.with_changes(updated_at=max(now, r.updated_at)) if r.id in changed else r
            for r in enriched
        ]
        await self.put(stamped)
        self.notify_stored(owner)
        return stamped

    def notify_stored(self, owner: str) -> None:
        """Tell the observers that ``owner`` got new content (done by :meth:`store`;
        bulk loads, which keep their rows' times, call it themselves)."""
        for observer in self._on_stored:
            observer(owner)

    async def put(self, rows: Sequence[MemoryRecord]) -> None:
        """Rows that are complete as they are (imported, archived, already enriched):
        upserted in chunks, then written through the cache."""
        for chunk in chunks(rows, UPSERT_CHUNK):
            await self._store.upsert(chunk)
        self._cache.apply(rows)

    async def delete(self, rows: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        """Delete ``rows`` (read with or without vectors): each is overwritten by its
        tombstone and leaves every cache. Returns the tombstones."""
        now = now_ms()
        graves = [tombstone(r, self._store.dim, now) for r in rows if r.status != Status.DELETED]
        await self.put(graves)
        return graves

    async def refile(self, owner: str, *groups: Sequence[MemoryRecord]) -> None:
        """Rows of ``owner`` whose place in the category tree changed (new categories,
        moved memories, superseded nodes), upserted group by group in the order
        given. They keep their ``updated_at``, so every other cache is told to
        reload the owner, and this process's cache reloads their units."""
        written = [row for group in groups for row in group]
        for group in groups:
            if group:
                await self._store.upsert(group)
        if not written:
            return
        await mark_for_reload(self._store, owner)
        for row in written:
            self._cache.invalidate(row)

    def forget_cached(self, owner: str) -> None:
        """Drop what every process caches of ``owner`` (their corpus units, and over
        the cache's observers the request path's caches of their questions)."""
        self._cache.invalidate_user(owner)


def stored_row(rows: Sequence[MemoryRecord], wanted: str) -> MemoryRecord:
    """The stored version of ``wanted`` among the rows a :meth:`WriteGateway.store`
    returned."""
    for row in rows:
        if row.id == wanted:
            return row
    raise SidecarError(f"the write of {wanted} returned no such row")  # a bug, not input
