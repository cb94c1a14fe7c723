"""The memory admin service: the one layer under the HTTP admin API and the
``sidecar memories`` CLI.

Every call names the owner (a user id, validated) and reaches only that owner's
rows: every read and write goes through :func:`~sidecar.memory.store.filters.build_filter`
with ``owner=``, so another user's memory id is simply *not found* — the same
answer as an id that does not exist, so existence does not leak. Writes keep the
corpus cache current (write-through, or invalidation where rows leave a unit) and
new or changed text is embedded again; adds go through the write path's
enrichment (abstract, links, category), imports through
:func:`~sidecar.memory.write.bulk.bulk_load`.

Nothing here logs memory text; log lines carry counts and the request id only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import ValidationError

from sidecar.admin.models import (
    ListQuery,
    MemoryInput,
    MemoryLine,
    MemoryPatch,
    SearchQuery,
    ValidationFailed,
    memory_json,
    validation_errors,
)
from sidecar.config import SidecarConfig
from sidecar.errors import SidecarError
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.model.batches import chunks
from sidecar.memory.model.records import (
    Hit,
    MemoryRecord,
    NodeType,
    Scope,
    Status,
    Visibility,
    as_vector,
    content_hash,
    memory_id,
    now_ms,
)
from sidecar.memory.read.corpus_cache import CorpusCache
from sidecar.memory.read.service import MemoryService
from sidecar.memory.store.filters import build_filter, validate_identifier
from sidecar.memory.store.migrate import fill_embeddings
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.store.tombstones import mark_for_reload, mark_forgotten
from sidecar.memory.write.bulk import bulk_load
from sidecar.memory.write.enrich import Enricher
from sidecar.memory.write.gateway import WriteGateway
from sidecar.memory.write.journal import TurnJournal
from sidecar.memory.write.locks import OwnerLock
from sidecar.metrics import Metrics
from sidecar.runtime.components import Components

log = logging.getLogger(__name__)

#: Most supersession steps followed either way by :meth:`MemoryAdmin.history`.
MAX_HISTORY = 100
#: Most import problems reported (the rest are counted).
MAX_IMPORT_ERRORS = 50
#: How long ``forget`` waits for a turn of the user that is being written.
FORGET_WAIT_S = 10.0
_ID_BATCH = 500


class NotFound(SidecarError):
    """No such memory for this user (whether it does not exist or is someone else's)."""


@dataclass(frozen=True, slots=True)
class MemoryPage:
    items: list[MemoryRecord]
    total: int
    offset: int
    limit: int

    @property
    def next_offset(self) -> int | None:
        following = self.offset + len(self.items)
        return following if following < self.total else None


@dataclass(frozen=True, slots=True)
class History:
    """A memory and its supersession chain, oldest first (the memory included)."""

    memory: MemoryRecord
    chain: list[MemoryRecord]
    #: Ids of the memories this one directly replaced.
    supersedes: list[str]


@dataclass(frozen=True, slots=True)
class ForgetReport:
    user: str
    #: Memory rows deleted, by status.
    memories: dict[str, int]
    categories: int
    rows: int
    #: Unwritten turns of the user dropped from the write journal (None: the
    #: journal was not reachable from here).
    journal_discarded: int | None
    #: Turns still being written when the rows were deleted (normally 0).
    journal_in_progress: int | None


@dataclass(frozen=True, slots=True)
class ImportReport:
    user: str
    lines: int
    memories: int
    categories: int
    #: Rows that had to be embedded (no vector, another model or dimension).
    embedded: int
    #: Rows upserted, back-links on existing memories and new categories included.
    rows_written: int
    seconds: float


@dataclass(slots=True)
class _Parsed:
    records: list[MemoryRecord] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    dropped: int = 0

    def error(self, path: str, message: str) -> None:
        if len(self.errors) < MAX_IMPORT_ERRORS:
            self.errors.append((path, message))
        else:
            self.dropped += 1


def owner_id(user: str) -> str:
    """``user`` if it is a valid owner id (:class:`InvalidIdentifier` otherwise)."""
    return validate_identifier(user, "user id")


class MemoryAdmin:
    """List, search, read, add, change, delete, trace, forget, export and import one
    user's memories."""

    def __init__(
        self,
        *,
        config: SidecarConfig,
        store: MemoryStore,
        embedder: Embedder,
        memory: MemoryService,
        writes: WriteGateway,
        enricher: Enricher,
        metrics: Metrics,
        journal: TurnJournal | None = None,
        tree_lock: Callable[[str], OwnerLock] | None = None,
    ) -> None:
        self._config = config
        self._store = store
        self._embedder = embedder
        self._memory = memory
        self._cache: CorpusCache = memory.cache
        #: The write path's enricher (abstract, links, category).
        self._enricher = enricher
        #: For rows that are already filed under a category (imports): links and
        #: abstracts, the category kept.
        self._linker = Enricher(memory.cache, config.enrichment)
        self._metrics = metrics
        self._journal = journal
        #: Every write goes through the write path's gateway: its hygiene, the
        #: owner's lock (so admin writes never interleave with a turn's), the caches.
        self._writes = writes
        #: The category tree's per-owner lock (``evolve``), taken by ``forget``.
        self._tree_lock = tree_lock

    @classmethod
    def from_components(
        cls, components: Components, *, journal: TurnJournal | None = None
    ) -> MemoryAdmin:
        """The admin service over :class:`sidecar.runtime.components.Components`."""
        enricher = components.enricher or Enricher(
            components.memory.cache, components.config.enrichment
        )
        return cls(
            config=components.config,
            store=components.store,
            embedder=components.embedder,
            memory=components.memory,
            writes=components.writes,
            enricher=enricher,
            metrics=components.metrics,
            journal=journal,
            tree_lock=components.hierarchy.lock if components.hierarchy is not None else None,
        )

    @property
    def embedding_model(self) -> str:
        return self._config.embedding.model

    # -- reads -------------------------------------------------------------------------

    async def list_memories(self, user: str, query: ListQuery | None = None) -> MemoryPage:
        """One page of the user's memories (category nodes are not listed)."""
        owner = owner_id(user)
        query = query or ListQuery()
        equals = {
            name: str(value)
            for name, value in (
                ("memory_type", query.memory_type),
                ("session_id", query.session_id),
                ("category_id", query.category_id),
            )
            if value
        }
        status = None if query.status == "all" else Status(query.status)
        rows = await self._store.scan(build_filter(owner=owner, status=status, equals=equals))
        rows.sort(key=lambda r: (r.created_at, r.id), reverse=query.order == "desc")
        window = rows[query.offset : query.offset + query.limit]
        return MemoryPage(window, len(rows), query.offset, query.limit)

    async def get(self, user: str, memory: str, *, with_vector: bool = False) -> MemoryRecord:
        """The user's memory ``memory`` (any status); :class:`NotFound` otherwise."""
        owner = owner_id(user)
        found = await self._find(owner, memory, with_vector=with_vector)
        if found is None:
            raise NotFound(f"no memory {memory!r} for this user")
        return found

    async def _find(
        self, owner: str, memory: str, *, with_vector: bool = False
    ) -> MemoryRecord | None:
        validate_identifier(memory, "memory id")
        rows = await self._store.query(
            build_filter(owner=owner, ids=[memory], status=None),
            limit=1,
            with_vectors=with_vector,
        )
        return rows[0] if rows else None

    async def search(self, user: str, query: SearchQuery) -> list[Hit]:
        """What retrieval (the request path's code) finds for ``query.q`` among the
        user's own memories (shared memories of others are left out)."""
        owner = owner_id(user)
        retrieval = self._config.defaults.retrieval
        if query.strategy is not None:
            retrieval = retrieval.model_copy(update={"strategy": query.strategy})
        (embedded,) = await self._memory.embed([query.q], retrieval)
        hits = await self._memory.search(embedded, Scope(owner), retrieval, top_k=query.top_k + 20)
        return [h for h in hits if h.record.user_id == owner][: query.top_k]

    async def history(self, user: str, memory: str) -> History:
        """The memory with what it replaced (rows whose ``superseded_by`` points to
        it, recursively) and what replaced it, oldest first."""
        owner = owner_id(user)
        current = await self.get(owner, memory)
        seen = {current.id: current}
        earlier: list[MemoryRecord] = []
        frontier = [current.id]
        supersedes: list[str] = []
        while frontier and len(seen) < MAX_HISTORY:
            found = await self._store.scan(
                build_filter(owner=owner, status=None, equals={"superseded_by": frontier[0]})
            )
            if frontier[0] == current.id:
                supersedes = sorted(r.id for r in found)
            frontier = frontier[1:]
            for record in found:
                if record.id not in seen:
                    seen[record.id] = record
                    earlier.append(record)
                    frontier.append(record.id)
        later: list[MemoryRecord] = []
        step = current
        while step.superseded_by and len(seen) < MAX_HISTORY:
            following = await self._find(owner, step.superseded_by)
            if following is None or following.id in seen:
                break
            seen[following.id] = following
            later.append(following)
            step = following
        earlier.sort(key=lambda r: (r.created_at, r.id))
        return History(current, [*earlier, current, *later], supersedes)

    # -- writes ------------------------------------------------------------------------

    async def add(self, user: str, data: MemoryInput) -> tuple[MemoryRecord, bool]:
        """Store a new memory through the write path's enrichment. Returns it and
        whether it was created (False: the user already has this exact memory)."""
        owner = owner_id(user)
        text = self._clean(data.content, "body.content")
        rid = memory_id(owner, text)
        async with self._writes.lock(owner):
            existing = await self._find(owner, rid)
            if existing is not None and existing.status == Status.ACTIVE:
                return existing, False
            vector = (await self._embedder.embed([text]))[0]
            now = now_ms()
            record = MemoryRecord(
                id=rid,
                user_id=owner,
                content=text,
                embedding=as_vector(vector),
                group_id=data.group_id,
                visibility=data.visibility,
                memory_type=data.memory_type,
                source="admin",
                session_id=data.session_id,
                importance=data.importance,
                confidence=data.confidence,
                created_at=now,
                updated_at=now,
                content_hash=content_hash(text),
            )
            topics = {rid: data.topic} if data.topic else None
            stored = await self._writes.store(owner, [record], self._enricher, topics)
        self._metrics.admin_rows.labels(operation="add").inc()
        return _pick(stored, rid), True

    async def update(self, user: str, memory: str, patch: MemoryPatch) -> MemoryRecord:
        """Change a memory in place (its id stays); new text is embedded again."""
        owner = owner_id(user)
        async with self._writes.lock(owner):
            current = await self._find(owner, memory, with_vector=True)
            if current is None:
                raise NotFound(f"no memory {memory!r} for this user")
            changes = patch.changes()
            text = changes.pop("content", None)
            if text is not None:
                text = self._clean(text, "body.content")
            if text is not None and text != current.content:
                vector = (await self._embedder.embed([text]))[0]
                changes.update(
                    content=text,
                    embedding=as_vector(vector),
                    content_hash=content_hash(text),
                    abstract="",  # derived from the text: the enricher fills them again
                    overview="",
                )
            updated = current.with_changes(**changes, updated_at=now_ms())
            if updated.visibility == Visibility.GROUP and not updated.group_id:
                raise ValidationFailed([("body.group_id", "visibility 'group' needs a group_id")])
            if updated.embedding is None:  # a row written without one: embed it now
                vector = (await self._embedder.embed([updated.content]))[0]
                updated = updated.with_changes(embedding=as_vector(vector))
            # A changed visibility or group moves the row between cache units.
            self._cache.invalidate(current)
            stored = await self._writes.store(owner, [updated], self._enricher)
        self._metrics.admin_rows.labels(operation="update").inc()
        return _pick(stored, current.id)

    async def delete(self, user: str, memory: str) -> MemoryRecord:
        """Delete one memory for good (its text at once; a hollow tombstone tells the
        other workers' caches, see :mod:`sidecar.memory.store.tombstones`); returns what
        was deleted."""
        owner = owner_id(user)
        async with self._writes.lock(owner):
            current = await self.get(owner, memory)
            await self._writes.delete([current])
        self._metrics.admin_rows.labels(operation="delete").inc()
        return current

    async def forget(self, user: str) -> ForgetReport:
        """Delete every row the user owns (memories of any status, categories), drop
        their unwritten turns from the write journal, invalidate the caches."""
        owner = owner_id(user)
        # Outside the owner's lock: a turn being written needs it to finish.
        discarded, in_progress = await self._discard_turns(owner)
        async with contextlib.AsyncExitStack() as held:
            if self._tree_lock is not None:  # no evolve writes categories back meanwhile
                await held.enter_async_context(self._tree_lock(owner))
            await held.enter_async_context(self._writes.lock(owner))
            rows = await self._store.scan(build_filter(owner=owner, node_type=None, status=None))
            await self._writes.delete(rows)
            # Any writer with a turn of theirs accepted before now drops it.
            await mark_forgotten(self._store, owner)
        # Their unit reloads, and what the request path keeps of their questions
        # (vectors, rewrites) goes, here and, over the cache relay, in every worker.
        self._writes.forget_cached(owner)
        memories: dict[str, int] = {}
        categories = 0
        for record in rows:
            if record.node_type == NodeType.CATEGORY:
                categories += 1
            else:
                memories[str(record.status)] = memories.get(str(record.status), 0) + 1
        self._metrics.admin_rows.labels(operation="forget").inc(len(rows))
        log.info(
            "forgot a user: rows=%d journal_discarded=%s", len(rows), discarded
        )  # no user id: the request id ties it to the admin call
        return ForgetReport(
            owner, dict(sorted(memories.items())), categories, len(rows), discarded, in_progress
        )

    async def _discard_turns(self, owner: str) -> tuple[int | None, int | None]:
        journal = self._journal
        if journal is None or not journal.is_open:
            return None, None
        discarded, in_progress = await journal.discard_user(owner)
        deadline = time.monotonic() + FORGET_WAIT_S
        while in_progress and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # let the turn being written finish first
            more, in_progress = await journal.discard_user(owner)
            discarded += more
        return discarded, in_progress

    def _clean(self, text: str, where: str) -> str:
        """``text`` after the write path's hygiene; a validation error when nothing
        meaningful is left."""
        cleaned = self._writes.clean(text)
        if not cleaned:
            raise ValidationFailed([(where, "has no letter or digit once cleaned")])
        return cleaned

    # -- export / import ---------------------------------------------------------------

    async def export(self, user: str, *, embeddings: bool = False) -> AsyncIterator[str]:
        """Every row the user owns as JSON lines (categories first, then memories,
        oldest first): everything :meth:`import_lines` needs to restore them."""
        owner = owner_id(user)
        rows = await self._store.scan(
            build_filter(owner=owner, node_type=None, status=None), with_vectors=embeddings
        )
        rows.sort(key=lambda r: (r.node_type != NodeType.CATEGORY, r.created_at, r.id))
        model = self.embedding_model if embeddings else None
        for record in rows:
            line = memory_json(record, embedding=embeddings, model=model)
            yield json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"

    async def import_lines(
        self, user: str, lines: Iterable[str | bytes], *, reembed: bool = False
    ) -> ImportReport:
        """Validate every line first (nothing is written when any is invalid: a
        :class:`ValidationFailed` lists them as ``line N.field``), then store the
        rows with their ids through the bulk loader and the write path's enrichment.
        Rows without a usable vector are embedded."""
        owner = owner_id(user)
        started = time.perf_counter()
        parsed = self._parse_lines(owner, lines, reembed=reembed)
        count = len(parsed.records)
        async with self._writes.lock(owner):
            await self._check_ids(owner, parsed)
            if parsed.errors:
                if parsed.dropped:
                    parsed.errors.append(("<file>", f"{parsed.dropped} more problems"))
                raise ValidationFailed(parsed.errors)
            records = parsed.records
            embedded = sum(1 for r in records if r.embedding is None)
            records = await self._embed_missing(records)
            categories = [r for r in records if r.node_type == NodeType.CATEGORY]
            memories = [r for r in records if r.node_type != NodeType.CATEGORY]
            filed = [r for r in memories if r.category_id]
            unfiled = [r for r in memories if not r.category_id]
            written = 0
            # Categories first, so filed memories never point at a missing one.
            for batch, enricher in ((categories, None), (filed, self._linker)):
                if batch:
                    stats = await bulk_load(
                        batch,
                        embedder=self._embedder,
                        enricher=enricher,
                        writes=self._writes,
                    )
                    written += stats.rows
            if unfiled:  # filed by the write path's categorizer, like new memories
                stats = await bulk_load(
                    unfiled,
                    embedder=self._embedder,
                    enricher=self._enricher,
                    writes=self._writes,
                )
                written += stats.rows
            if written:  # rows keep their own times: other caches reload the user's
                await mark_for_reload(self._store, owner)
        self._metrics.admin_rows.labels(operation="import").inc(count)
        self._writes.notify_stored(owner)
        log.info("imported rows=%d embedded=%d written=%d", count, embedded, written)
        return ImportReport(
            owner,
            count,
            len(memories),
            len(categories),
            embedded,
            written,
            round(time.perf_counter() - started, 3),
        )

    def _parse_lines(self, owner: str, lines: Iterable[str | bytes], *, reembed: bool) -> _Parsed:
        parsed = _Parsed()
        ids: dict[str, int] = {}
        dim = self._store.dim
        now = now_ms()
        for number, raw in enumerate(lines, 1):
            text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
            if not text.strip():
                continue
            where = f"line {number}"
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                parsed.error(where, f"invalid JSON: {exc.msg}")
                continue
            except RecursionError:
                parsed.error(where, "invalid JSON: nested too deep")
                continue
            if not isinstance(data, dict):
                parsed.error(where, "not a JSON object")
                continue
            try:
                line = MemoryLine.model_validate(data)
            except ValidationError as exc:
                for path, message in validation_errors(exc, where):
                    parsed.error(path, message)
                continue
            if line.user_id is not None and line.user_id != owner:
                parsed.error(f"{where}.user_id", "belongs to another user than the import's")
                continue
            record = _record(owner, line, self._writes.clean, now)
            if not record.content and record.node_type != NodeType.CATEGORY:
                parsed.error(f"{where}.content", "has no letter or digit once cleaned")
                continue
            if record.id in ids:
                parsed.error(f"{where}.id", f"repeats line {ids[record.id]}")
                continue
            ids[record.id] = number
            vector = line.embedding
            usable = (
                vector is not None
                and not reembed
                and len(vector) == dim
                and line.embedding_model in (None, self.embedding_model)
                and np.all(np.isfinite(vector))
            )
            parsed.records.append(
                record.with_changes(embedding=_unit(vector) if usable and vector else None)
            )
        return parsed

    async def _check_ids(self, owner: str, parsed: _Parsed) -> None:
        """An id another user's row holds cannot be imported (the upsert would take
        that row over). The HTTP API lets only all-users tokens import, so this
        answer is never an oracle for a scoped token."""
        ids = [r.id for r in parsed.records]
        for batch in chunks(ids, _ID_BATCH):
            taken = await self._store.query(
                build_filter(ids=batch, node_type=None, status=None), limit=len(batch)
            )
            for record in taken:
                if record.user_id != owner:
                    parsed.error(f"id {record.id}", "is already used by another row")

    async def _embed_missing(self, records: list[MemoryRecord]) -> list[MemoryRecord]:
        return await fill_embeddings(
            records, self._embedder, category_vectors=self._config.hierarchy.embedding
        )


def _unit(vector: tuple[float, ...]) -> tuple[float, ...]:
    """``vector`` L2-normalised (as retrieval expects); unit vectors are kept as is."""
    array = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(array))
    if norm == 0.0 or abs(norm - 1.0) < 1e-4:
        return vector
    return as_vector(array / norm)


def _record(owner: str, line: MemoryLine, clean: Callable[[str], str], now: int) -> MemoryRecord:
    """The row ``line`` restores; a memory's text after the write path's hygiene."""
    text = line.content if line.node_type == NodeType.CATEGORY else clean(line.content)
    created = now if line.created_at is None else line.created_at
    return MemoryRecord(
        id=line.id or memory_id(owner, text),
        user_id=owner,
        content=text,
        group_id=line.group_id,
        visibility=line.visibility,
        node_type=line.node_type,
        memory_type=line.memory_type,
        status=line.status,
        category_id=line.category_id,
        parent_id=line.parent_id,
        abstract=line.abstract,
        overview=line.overview,
        related_ids=line.related_ids,
        source=line.source,
        session_id=line.session_id,
        importance=line.importance,
        confidence=line.confidence,
        access_count=line.access_count,
        created_at=created,
        updated_at=created if line.updated_at is None else line.updated_at,
        accessed_at=line.accessed_at,
        superseded_by=line.superseded_by,
        content_hash=line.content_hash or content_hash(text),
    )


def _pick(rows: Sequence[MemoryRecord], wanted: str) -> MemoryRecord:
    for row in rows:
        if row.id == wanted:
            return row
    raise SidecarError(f"the write of {wanted} returned no such row")  # a bug, not input
