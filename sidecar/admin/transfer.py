"""Exporting a user's rows as JSON lines and importing them back (``GET/POST
/v1/users/{user}/export|import``, ``sidecar memories export|import``).

An export holds everything an import needs to restore the rows as they were: ids,
links, categories, statuses, times and, optionally, the vectors with the model that
made them. An import validates every line before anything is written, applies the
write path's hygiene to memory text, and stores the rows through the write gateway
(:func:`~sidecar.memory.write.rows.bulk.bulk_load`): categories first, then memories
already filed under one (links and abstracts only), then unfiled memories through
the write path's categorizer.

A line with an ``id`` or a time restores that row as it was (an export's lines
all have both). A memory line with neither is a new fact, said now (a file written
by hand): it takes the decision a turn's fact takes
(:meth:`~sidecar.memory.write.turns.writer.MemoryWriter.write_row`) — a restatement
stores nothing, a richer wording updates, another value of the same attribute
supersedes the old memory — after the restored rows, in the file's order.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from pydantic import ValidationError

from sidecar.admin.models import MemoryLine, ValidationFailed, memory_json, validation_errors
from sidecar.config import SidecarConfig
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.batches import chunks
from sidecar.memory.records.embeddings import Embedding
from sidecar.memory.records.records import (
    MemoryRecord,
    NodeType,
    Status,
    as_vector,
    content_hash,
    memory_id,
    now_ms,
)
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.migrate import fill_embeddings
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.store.tombstones import mark_for_reload
from sidecar.memory.write.rows.bulk import bulk_load
from sidecar.memory.write.rows.enrich import Enricher
from sidecar.memory.write.rows.gateway import WriteGateway
from sidecar.memory.write.turns.dedup import Decision
from sidecar.memory.write.turns.writer import MemoryWriter
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

#: Most import problems reported (the rest are counted).
MAX_IMPORT_ERRORS = 50
_ID_BATCH = 500


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
    #: New facts (memory lines without an id or a time) by the decision each took: add,
    #: update, supersede, noop.
    decisions: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Parsed:
    records: list[MemoryRecord] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    dropped: int = 0
    #: Ids of the new facts: active memory lines without an id or a time.
    new: set[str] = field(default_factory=set)
    #: New facts that repeat an earlier line's word for word (no-ops).
    restated: int = 0

    def error(self, path: str, message: str) -> None:
        if len(self.errors) < MAX_IMPORT_ERRORS:
            self.errors.append((path, message))
        else:
            self.dropped += 1


class MemoryTransfer:
    """Export and import one owner's rows (the owner id is validated by the caller)."""

    def __init__(
        self,
        *,
        config: SidecarConfig,
        store: MemoryStore,
        embedder: Embedder,
        writes: WriteGateway,
        enricher: Enricher,
        linker: Enricher,
        writer: MemoryWriter,
        metrics: Metrics,
    ) -> None:
        self._config = config
        self._store = store
        self._embedder = embedder
        self._writes = writes
        #: The write path's enricher (abstract, links, category).
        self._enricher = enricher
        #: For rows that are already filed under a category: links and abstracts.
        self._linker = linker
        #: New facts take a turn's decision.
        self._writer = writer
        self._metrics = metrics

    @property
    def embedding_model(self) -> str:
        return self._config.embedding.model

    async def export(self, owner: str, *, embeddings: bool = False) -> AsyncIterator[str]:
        """Every row the user owns as JSON lines (categories first, then memories,
        oldest first): everything :meth:`import_lines` needs to restore them."""
        rows = await self._store.scan(
            build_filter(owner=owner, node_type=None, status=None), with_vectors=embeddings
        )
        rows.sort(key=lambda r: (r.node_type != NodeType.CATEGORY, r.created_at, r.id))
        model = self.embedding_model if embeddings else None
        for record in rows:
            line = memory_json(record, embedding=embeddings, model=model)
            yield json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n"

    async def import_lines(
        self, owner: str, lines: Iterable[str | bytes], *, reembed: bool = False
    ) -> ImportReport:
        """Validate every line first (nothing is written when any is invalid: a
        :class:`ValidationFailed` lists them as ``line N.field``), then store the
        rows with their ids through the bulk loader and the write path's enrichment.
        Rows without a usable vector are embedded."""
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
            restored = [r for r in memories if r.id not in parsed.new]
            new = [r for r in memories if r.id in parsed.new]
            filed = [r for r in restored if r.category_id]
            unfiled = [r for r in restored if not r.category_id]
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
            decisions = await self._judged(owner, new)
            if parsed.restated:
                decisions["noop"] = decisions.get("noop", 0) + parsed.restated
            written += sum(n for decision, n in decisions.items() if decision != "noop")
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
            decisions,
        )

    async def _judged(self, owner: str, facts: list[MemoryRecord]) -> dict[str, int]:
        """Write the new facts, in order, each through a turn's decision; one the
        owner's active memory already says word for word is a no-op."""
        decisions: dict[str, int] = {}
        if not facts:
            return decisions
        held: set[str] = set()
        for batch in chunks([r.id for r in facts], _ID_BATCH):
            rows = await self._store.query(build_filter(ids=batch, owner=owner), limit=len(batch))
            held.update(r.id for r in rows)
        for record in sorted(facts, key=lambda r: r.created_at):
            if record.id in held:
                decision = Decision.NOOP.value
            else:
                decision = (await self._writer.write_row(record)).decision.value
            decisions[decision] = decisions.get(decision, 0) + 1
        return decisions

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
                if line.id is None and record.id in parsed.new:
                    parsed.restated += 1  # a new fact said twice, word for word
                else:
                    parsed.error(f"{where}.id", f"repeats line {ids[record.id]}")
                continue
            ids[record.id] = number
            if (
                line.id is None
                and line.created_at is None
                and line.updated_at is None
                and record.node_type == NodeType.MEMORY
                and record.status == Status.ACTIVE
                and not record.superseded_by
            ):
                parsed.new.add(record.id)
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


def _unit(vector: tuple[float, ...]) -> Embedding:
    """``vector`` L2-normalised (as retrieval expects); unit vectors are kept as is."""
    array = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(array))
    if norm == 0.0 or abs(norm - 1.0) < 1e-4:
        return as_vector(array)
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
        excerpt=line.excerpt,
        origins=tuple(o.origin() for o in line.provenance),
    )
