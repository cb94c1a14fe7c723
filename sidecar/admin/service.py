"""The memory admin service: the one layer under the HTTP admin API and the
``sidecar memories`` CLI.

Every call names the owner (a user id, validated) and reaches only that owner's
rows: every read and write goes through :func:`~sidecar.memory.store.filters.build_filter`
with ``owner=``, so another user's memory id is simply *not found* — the same
answer as an id that does not exist, so existence does not leak. Writes keep the
corpus cache current (write-through, or invalidation where rows leave a unit) and
new or changed text is embedded again; adds go through the write path's
enrichment (abstract, links, category); exports and imports are
:mod:`sidecar.admin.transfer`.

Nothing here logs memory text; log lines carry counts and the request id only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sidecar.admin.explain import Explanations
from sidecar.admin.grants import ALL_USERS, Grant, SharingRefused
from sidecar.admin.models import (
    ListQuery,
    MemoryInput,
    MemoryPatch,
    SearchQuery,
    UsersQuery,
    ValidationFailed,
    memory_json,
)
from sidecar.admin.transfer import ImportReport, MemoryTransfer
from sidecar.admin.users import UserPage, list_users
from sidecar.config import SidecarConfig
from sidecar.errors import SidecarError
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.embedding_text import embedding_text
from sidecar.memory.read.injections import InjectionLog
from sidecar.memory.read.service import MemoryService
from sidecar.memory.records.records import (
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
from sidecar.memory.store.filters import build_filter, validate_identifier
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.write.rows.enrich import Enricher
from sidecar.memory.write.rows.gateway import WriteGateway, stored_row
from sidecar.memory.write.rows.locks import OwnerLock
from sidecar.memory.write.turns.dedup import Decision
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.memory.write.turns.journal_file import DiscardedTurns
from sidecar.memory.write.turns.writer import MemoryWriter
from sidecar.memory.write.upkeep.consolidation import ConsolidationReport, Consolidator
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

#: Most supersession steps followed either way by :meth:`MemoryAdmin.history`.
MAX_HISTORY = 100
#: How long ``forget`` waits for a turn of the user that is being written.
FORGET_WAIT_S = 10.0


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
class Added:
    """What an added memory became: ``memory`` holds the fact now (the new memory, or
    the one it restates or updated); ``replaced``, the memory it superseded."""

    memory: MemoryRecord
    decision: Decision
    replaced: MemoryRecord | None = None

    @property
    def created(self) -> bool:
        """A new memory was stored (added, or superseding another)."""
        return self.decision in (Decision.ADD, Decision.SUPERSEDE)

    def as_json(self) -> dict[str, Any]:
        """The API's and the CLI's answer to an add."""
        return {
            "created": self.created,
            "decision": str(self.decision),
            "memory": memory_json(self.memory),
            "replaced": self.replaced.id if self.replaced is not None else None,
        }


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
    #: What went from the write journal: unwritten turns dropped, written turns'
    #: text cleared, turns still being written (None: the journal was not
    #: reachable from here).
    journal: DiscardedTurns | None


def owner_id(user: str) -> str:
    """``user`` if it is a valid owner id (:class:`InvalidIdentifier` otherwise)."""
    return validate_identifier(user, "user id")


class MemoryAdmin:
    """Find users; list, search, read, add, change, delete, trace, forget, export and
    import one user's memories."""

    def __init__(
        self,
        *,
        config: SidecarConfig,
        store: MemoryStore,
        embedder: Embedder,
        memory: MemoryService,
        writes: WriteGateway,
        writer: MemoryWriter,
        enricher: Enricher,
        metrics: Metrics,
        journal: TurnJournal | None = None,
        tree_lock: Callable[[str], OwnerLock] | None = None,
        consolidator: Consolidator | None = None,
        injections: InjectionLog | None = None,
    ) -> None:
        self._config = config
        #: This process's injections explained (None: no profile keeps them).
        self.explanations = Explanations(store, injections)
        self._store = store
        self._embedder = embedder
        self._memory = memory
        self._cache: CorpusCache = memory.cache
        #: The write path's enricher (abstract, links, category).
        self._enricher = enricher
        self._metrics = metrics
        self._journal = journal
        #: Every write goes through the write path's gateway: its hygiene, the
        #: owner's lock (so admin writes never interleave with a turn's), the caches.
        self._writes = writes
        #: New and changed memories take a turn's decision (add, update, supersede, no-op).
        self._writer = writer
        #: The category tree's per-owner lock (``evolve``), taken by ``forget``.
        self._tree_lock = tree_lock
        self._consolidator = consolidator or Consolidator(
            store, writes, config.consolidation, metrics
        )
        self._transfer = MemoryTransfer(
            config=config,
            store=store,
            embedder=embedder,
            writes=writes,
            enricher=enricher,
            # Rows already filed under a category: links and abstracts, the category kept.
            linker=Enricher(memory.cache, config.enrichment),
            writer=writer,
            metrics=metrics,
        )

    @property
    def embedding_model(self) -> str:
        return self._config.embedding.model

    # -- export / import (:mod:`sidecar.admin.transfer`) -------------------------------

    def export(self, user: str, *, embeddings: bool = False) -> AsyncIterator[str]:
        """Every row the user owns as JSON lines: see :meth:`MemoryTransfer.export`."""
        return self._transfer.export(owner_id(user), embeddings=embeddings)

    async def import_lines(
        self,
        user: str,
        lines: Iterable[str | bytes],
        *,
        reembed: bool = False,
        grant: Grant = ALL_USERS,
    ) -> ImportReport:
        """Restore rows from JSON lines: see :meth:`MemoryTransfer.import_lines`.
        Only a token for all users imports (rows keep their ids and visibility)."""
        if not grant.all_users:
            raise SharingRefused(
                "import needs a token for all users (users: '*'): imported rows keep "
                "their ids and their visibility"
            )
        return await self._transfer.import_lines(owner_id(user), lines, reembed=reembed)

    # -- reads -------------------------------------------------------------------------

    async def users(self, query: UsersQuery | None = None, *, grant: Grant = ALL_USERS) -> UserPage:
        """A page of the user ids that own memories, by id, with their counts: those
        ``grant`` may manage, containing ``query.q`` (see :mod:`sidecar.admin.users`)."""
        return await list_users(self._store, query or UsersQuery(), grant.allows)

    async def list_memories(self, user: str, query: ListQuery | None = None) -> MemoryPage:
        """One page of the user's memories (category nodes are not listed)."""
        owner = owner_id(user)
        query = query or ListQuery()
        equals = {
            name: str(value)
            for name, value in (
                ("memory_type", query.memory_type),
                ("visibility", query.visibility),
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

    async def has_rows(self, user: str) -> bool:
        """Whether anything at all is stored for ``user`` (any status, categories too):
        an empty page of a user id nobody has used says so."""
        owner = owner_id(user)
        return await self._store.count(build_filter(owner=owner, node_type=None, status=None)) > 0

    async def categories(self, user: str) -> dict[str, str]:
        """The user's categories: id -> name (L0), by name."""
        owner = owner_id(user)
        rows = await self._store.scan(
            build_filter(owner=owner, node_type=NodeType.CATEGORY, status=None)
        )
        named = sorted((row.abstract or row.id, row.id) for row in rows)
        return {cid: name for name, cid in named}

    async def get(self, user: str, memory: str, *, with_vector: bool = False) -> MemoryRecord:
        """The user's memory ``memory`` (any status); :class:`NotFound` otherwise."""
        owner = owner_id(user)
        found = await self._find(owner, memory, with_vector=with_vector)
        if found is None:
            raise NotFound(f"no memory {memory!r} for this user")
        return found

    async def linked(self, user: str, record: MemoryRecord) -> list[MemoryRecord]:
        """The user's memories ``record`` links to (any status but deleted)."""
        owner = owner_id(user)
        if not record.related_ids:
            return []
        ids = list(record.related_ids)
        rows = await self._store.query(build_filter(owner=owner, ids=ids, status=None))
        order = {rid: index for index, rid in enumerate(ids)}
        return sorted(rows, key=lambda row: order.get(row.id, len(order)))

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

    async def add(self, user: str, data: MemoryInput, *, grant: Grant = ALL_USERS) -> Added:
        """Store a new memory through the decision a turn's fact takes (the write
        path's judge: a restatement is a no-op, a richer wording updates the memory
        it restates, another value of the same attribute supersedes the old one) and
        its enrichment. :class:`SharingRefused` when ``grant`` may not share it so."""
        owner = owner_id(user)
        grant.check(data.visibility, data.group_id)
        text = self._clean(data.content, "body.content")
        rid = memory_id(owner, text)
        async with self._writes.lock(owner):
            existing = await self._find(owner, rid)
            if existing is not None and existing.status == Status.ACTIVE:
                return Added(existing, Decision.NOOP)
            vector = (await self._embedder.embed([embedding_text(text)]))[0]
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
            written = await self._writer.write_row(record, topic=data.topic)
        self._metrics.admin_rows.labels(operation="add").inc()
        return Added(written.row, written.decision, written.replaced)

    async def update(
        self, user: str, memory: str, patch: MemoryPatch, *, grant: Grant = ALL_USERS
    ) -> MemoryRecord:
        """Change a memory in place (its id stays); new text is embedded again.
        :class:`SharingRefused` when the memory is, or would become, shared beyond
        what ``grant`` may share."""
        owner = owner_id(user)
        async with self._writes.lock(owner):
            current = await self._find(owner, memory, with_vector=True)
            if current is None:
                raise NotFound(f"no memory {memory!r} for this user")
            grant.check(current.visibility, current.group_id)
            changes = patch.changes()
            text = changes.pop("content", None)
            if text is not None:
                text = self._clean(text, "body.content")
            if text is not None and text != current.content:
                vector = (await self._embedder.embed([embedding_text(text)]))[0]
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
            grant.check(updated.visibility, updated.group_id)
            if updated.embedding is None:  # a row written without one: embed it now
                vector = (await self._embedder.embed([embedding_text(updated.content)]))[0]
                updated = updated.with_changes(embedding=as_vector(vector))
            # A changed visibility or group moves the row between cache units.
            self._cache.invalidate(current)
            if text is not None and text != current.content and updated.status == Status.ACTIVE:
                # New words are judged as a new fact would be: a memory they give
                # another value of is superseded by this one.
                stored = [(await self._writer.write_row(updated, edited=True)).row]
            else:
                stored = await self._writes.store(owner, [updated], self._enricher)
        self._metrics.admin_rows.labels(operation="update").inc()
        return stored_row(stored, current.id)

    async def delete(self, user: str, memory: str) -> MemoryRecord:
        """Delete one memory for good (its text at once; a hollow tombstone tells the
        other workers' caches, see :mod:`sidecar.memory.store.tombstones`); returns what
        was deleted."""
        owner = owner_id(user)
        async with self._writes.lock(owner):
            current = await self.get(owner, memory)
            await self._writes.delete([current])
        # The turn the memory came from was written, its text dropped from the
        # journal; older page images of it wait in the WAL until a checkpoint.
        journal = self._journal
        if journal is not None and journal.is_open and not await journal.truncate_wal():
            log.warning("delete: the journal's WAL is still read by another connection")
        self._metrics.admin_rows.labels(operation="delete").inc()
        return current

    async def consolidate(self, user: str) -> ConsolidationReport:
        """Merge the user's memories that state the same fact (see
        :mod:`sidecar.memory.write.upkeep.consolidation`)."""
        report = await self._consolidator.consolidate(owner_id(user))
        self._metrics.admin_rows.labels(operation="consolidate").inc(report.merged)
        return report

    async def forget(self, user: str) -> ForgetReport:
        """Delete every row the user owns (memories of any status, categories), drop
        their unwritten turns from the write journal, invalidate the caches, and
        rewrite a milvus-lite file without the deleted rows' bytes."""
        owner = owner_id(user)
        # Outside the owner's lock: a turn being written needs it to finish.
        discarded = await self._discard_turns(owner)
        async with contextlib.AsyncExitStack() as held:
            if self._tree_lock is not None:  # no evolve writes categories back meanwhile
                await held.enter_async_context(self._tree_lock(owner))
            await held.enter_async_context(self._writes.lock(owner))
            rows = await self._store.scan(build_filter(owner=owner, node_type=None, status=None))
            await self._writes.delete(rows)
            # Any writer with a turn of theirs accepted before now drops it.
            await self._writes.forgets.mark(owner)
        # No freed page of a milvus-lite file keeps their words (a server compacts).
        await self._store.scrub()
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
            "forgot a user: rows=%d journal=%s", len(rows), discarded
        )  # no user id: the request id ties it to the admin call
        return ForgetReport(owner, dict(sorted(memories.items())), categories, len(rows), discarded)

    async def _discard_turns(self, owner: str) -> DiscardedTurns | None:
        journal = self._journal
        if journal is None or not journal.is_open:
            return None
        discarded = await journal.discard_user(owner)
        deadline = time.monotonic() + FORGET_WAIT_S
        while discarded.in_progress and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # let the turn being written finish first
            discarded += await journal.discard_user(owner)
        return discarded

    def _clean(self, text: str, where: str) -> str:
        """``text`` after the write path's hygiene; a validation error when nothing
        meaningful is left."""
        cleaned = self._writes.clean(text)
        if not cleaned:
            raise ValidationFailed([(where, "has no letter or digit once cleaned")])
        return cleaned
