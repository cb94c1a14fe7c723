"""The per-user category tree: filing new memories (the write path's
:class:`~sidecar.memory.write.rows.enrich.Categorizer`) and evolving the tree.

Category nodes are rows of the memory collection with ``node_type="category"``,
owned by the user (visibility ``user``): ``abstract`` is the name, ``content`` and
``overview`` the summary, ``parent_id`` the parent category ("" at the top level),
``embedding`` the normalised centroid of the category's memories (or, with
``hierarchy.embedding: summary``, the embedding of its summary). A memory's
``category_id`` and ``parent_id`` name the leaf category it is filed under.

* :meth:`Hierarchy.assign` (write path) files a memory that comes with a named
  topic under the owner's topic of that name (created on demand, deterministic id;
  see :mod:`sidecar.memory.records.categories`), and every other new memory under the owner's
  nearest leaf category when its cosine to the leaf's centroid reaches
  ``assign_threshold``, else under the owner's "general" inbox, created on demand.
  Ids are deterministic, so concurrent writers create the same row, never two.
* :meth:`Hierarchy.evolve` re-plans one owner's tree from a store snapshot
  (:mod:`sidecar.memory.write.tree.plan`: split, merge, re-file, prune, refresh)
  and writes only what changed. Category nodes are superseded, never deleted.
* :meth:`Hierarchy.start` runs ``evolve`` every ``schedule_s`` for the owners that
  got new memories since the last pass (at most ``max_owners_per_tick`` a pass).

``evolve`` re-reads the memories it moves just before writing them and changes only
their category fields, so a concurrent write's other changes (links) survive unless
they land in that short window; the next pass repairs any memory filed under a
category that ``evolve`` just superseded or split.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from sidecar.config import HierarchyBuildConfig
from sidecar.memory.corpus.cache import CorpusCache
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.categories import (
    general_id,
    general_node,
    leaves_under,
    taxonomy_id,
    taxonomy_node,
    topic_id,
    topic_name,
    topic_node,
)
from sidecar.memory.records.records import MemoryRecord, NodeType, Scope, Status, as_vector, now_ms
from sidecar.memory.records.vectors import Matrix, Vector, centroid, unit
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore
from sidecar.memory.write.rows.gateway import WriteGateway
from sidecar.memory.write.rows.locks import KeyedLocks, OwnerLock
from sidecar.memory.write.tree.plan import TreePlan, TreePlanner
from sidecar.memory.write.tree.taxonomy import TopicClassifier
from sidecar.tasks import cancel_and_wait

log = logging.getLogger(__name__)

#: A named category's id: (owner, name) -> id; and its fresh row:
#: (owner, name, centroid, now) -> row.
IdMaker = Callable[[str, str], str]
NodeMaker = Callable[[str, str, Vector, int], MemoryRecord]

_ID_BATCH = 500


@dataclass(frozen=True, slots=True)
class EvolveReport:
    """What one ``evolve`` did (counts only: no memory text)."""

    owner: str
    memories: int
    categories: int  # active after
    created: int
    updated: int  # category rows written (created included)
    superseded: int
    moved: int  # memories filed under another category
    passes: int
    seconds: float

    @property
    def changed(self) -> bool:
        return bool(self.updated or self.superseded or self.moved)


class Hierarchy:
    """Builds and maintains every owner's category tree (one per process)."""

    def __init__(
        self,
        store: MemoryStore,
        writes: WriteGateway,
        cache: CorpusCache,
        embedder: Embedder,
        config: HierarchyBuildConfig,
        *,
        tree_locks: KeyedLocks | None = None,
    ) -> None:
        self._store = store
        #: Every other writer of an owner's rows goes through it too: ``evolve``
        #: writes its plan under the owner's lock, so a turn, an admin edit or
        #: retention never interleaves with the moved rows being read and written back.
        self._writes = writes
        self._cache = cache
        self._embedder = embedder
        self._config = config
        self._taxonomy = TopicClassifier(embedder, config.taxonomy)
        #: ``evolve``'s lock per owner (across the host's workers when given so): one
        #: plan of an owner's tree at a time.
        self._locks = tree_locks or KeyedLocks()
        #: owner -> memories filed since its last evolve (only with a schedule).
        self._pending: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def config(self) -> HierarchyBuildConfig:
        return self._config

    def lock(self, owner: str) -> OwnerLock:
        """The lock ``evolve`` holds for ``owner`` (forgetting a user takes it too, so
        no category row is written back after the user's rows are gone)."""
        return self._locks.get(owner)

    @property
    def pending(self) -> dict[str, int]:
        """Owners waiting for a scheduled ``evolve`` (a copy)."""
        return dict(self._pending)

    # -- the write path ------------------------------------------------------------

    async def assign(
        self,
        owner: str,
        records: Sequence[MemoryRecord],
        topics: Mapping[str, str] | None = None,
    ) -> list[MemoryRecord]:
        """``records`` filed under categories, plus the category nodes that have to be
        created ("general", named topics). ``topics`` maps memory ids to the topic
        their writer named (the extraction LLM, an import); the others get the
        taxonomy's topic when one fits (:mod:`sidecar.memory.write.tree.taxonomy`). Those
        are filed under the owner's topic of that name (or the nearest of its
        subcategories); the rest under the nearest category. Counts and centroids
        are refreshed lazily by ``evolve``."""
        if not records:
            return []
        corpus = await self._cache.corpus(Scope(owner))
        named = {
            record.id: name
            for record in records
            if record.node_type == NodeType.MEMORY
            and record.status == Status.ACTIVE
            and (name := topic_name((topics or {}).get(record.id, "")))
        }
        unnamed = [
            r
            for r in records
            if r.id not in named and r.node_type == NodeType.MEMORY and r.status == Status.ACTIVE
        ]
        classified = await self._taxonomy.classify(unnamed) if unnamed else {}
        out: list[MemoryRecord] = []
        kinds = ((named, topic_id, topic_node), (classified, taxonomy_id, taxonomy_node))
        for names, ident, node in kinds:
            if names:
                mine = [r for r in records if r.id in names]
                out += _file_named(owner, mine, names, corpus, ident, node)
                records = [r for r in records if r.id not in names]
        filed = len(named) + len(classified)
        if filed and self._config.schedule_s > 0:
            self._pending[owner] = self._pending.get(owner, 0) + filed
        return out + (await self._assign_nearest(owner, records, corpus) if records else [])

    async def _assign_nearest(
        self, owner: str, records: Sequence[MemoryRecord], corpus: Corpus
    ) -> list[MemoryRecord]:
        gid = general_id(owner)
        categories = [c for c in corpus.categories if c.user_id == owner]
        all_new = all(r.status == Status.ACTIVE for r in records)
        if not categories and all_new and len(records) >= self._config.split_min:
            return await self._bootstrap(owner, records)
        parents = {c.parent_id for c in categories}
        leaves = [c.id for c in categories if c.id not in parents and c.id != gid]
        ids, centres = _leaf_centroids(corpus.records, corpus.vectors, owner, leaves)
        filed: list[MemoryRecord] = []
        general: list[MemoryRecord] = []
        for record in records:
            if record.node_type != NodeType.MEMORY or record.status != Status.ACTIVE:
                filed.append(record)  # e.g. the old row a new fact supersedes
                continue
            target = gid
            if record.embedding is not None and ids:
                similar = centres @ np.asarray(record.embedding, dtype=np.float32)
                best = int(np.argmax(similar))
                if similar[best] >= self._config.assign_threshold:
                    target = ids[best]
            updated = record.with_changes(category_id=target, parent_id=target)
            filed.append(updated)
            if target == gid:
                general.append(updated)
        out = list(filed)
        if general and not any(c.id == gid for c in categories):
            vectors = np.asarray(
                [r.embedding for r in general if r.embedding is not None], dtype=np.float32
            )
            if len(vectors):
                out.append(general_node(owner, centroid(vectors), now_ms()))
        if self._config.schedule_s > 0:
            self._pending[owner] = self._pending.get(owner, 0) + len(records)
        return out

    async def _bootstrap(self, owner: str, records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
        """An owner's first bulk write (an import): its tree is planned over the batch
        at once, exactly as ``evolve`` would, instead of everything waiting in
        "general". Only the batch and new category rows are returned."""
        planner = TreePlanner(owner, records, (), self._config, now_ms())
        loop = asyncio.get_running_loop()
        plan = await loop.run_in_executor(None, planner.plan)
        categories = await self._embedded(plan)
        filed = [
            r.with_changes(category_id=plan.moves[r.id], parent_id=plan.moves[r.id])
            if r.id in plan.moves
            else r
            for r in records
        ]
        if self._config.schedule_s > 0:
            self._pending[owner] = self._pending.get(owner, 0) + len(records)
        return [*filed, *categories]

    async def _embedded(self, plan: TreePlan) -> list[MemoryRecord]:
        """The plan's category rows, summaries embedded where ``embedding: summary``
        asks for it (centroids are already in place)."""
        categories = list(plan.categories)
        if not plan.needs_embedding:
            return categories
        stale = set(plan.needs_embedding)
        vectors = iter(await self._embedder.embed([c.content for c in categories if c.id in stale]))
        return [
            c.with_changes(embedding=as_vector(next(vectors))) if c.id in stale else c
            for c in categories
        ]

    # -- evolution -----------------------------------------------------------------

    async def evolve(self, owner: str) -> EvolveReport:
        """Re-plan ``owner``'s tree and write what changed (serialised per owner)."""
        async with self._locks.get(owner):
            return await self._evolve(owner)

    async def _evolve(self, owner: str) -> EvolveReport:
        started = time.perf_counter()
        rows = await self._store.scan(
            build_filter(owner=owner, node_type=None, status=Status.ACTIVE), with_vectors=True
        )
        memories = [r for r in rows if r.node_type == NodeType.MEMORY]
        categories = [r for r in rows if r.node_type == NodeType.CATEGORY]
        planner = TreePlanner(owner, memories, categories, self._config, now_ms())
        loop = asyncio.get_running_loop()
        plan = await loop.run_in_executor(None, planner.plan)
        written = await self._apply(owner, plan)
        report = EvolveReport(
            owner=owner,
            memories=len(memories),
            categories=plan.active,
            created=plan.created,
            updated=len(plan.categories),
            superseded=len(plan.superseded),
            moved=written,
            passes=plan.passes,
            seconds=round(time.perf_counter() - started, 3),
        )
        if report.changed:
            log.info(
                "hierarchy evolved: categories=%d created=%d updated=%d superseded=%d "
                "moved=%d passes=%d seconds=%.3f",
                report.categories,
                report.created,
                report.updated,
                report.superseded,
                report.moved,
                report.passes,
                report.seconds,
            )
        return report

    async def _apply(self, owner: str, plan: TreePlan) -> int:
        categories = await self._embedded(plan)
        async with self._writes.lock(owner):
            moved = await self._moved_rows(owner, plan.moves)
            # Categories first: a memory never points at a category that is not there.
            await self._writes.refile(owner, categories, moved, list(plan.superseded))
        return len(moved)

    async def _moved_rows(self, owner: str, moves: dict[str, str]) -> list[MemoryRecord]:
        """The moved memories as stored now, with only their category fields changed."""
        ids = sorted(moves)
        out: list[MemoryRecord] = []
        for start in range(0, len(ids), _ID_BATCH):
            chunk = ids[start : start + _ID_BATCH]
            current = await self._store.query(
                build_filter(owner=owner, ids=chunk, status=Status.ACTIVE),
                limit=len(chunk),
                with_vectors=True,
            )
            for record in current:
                target = moves[record.id]
                out.append(record.with_changes(category_id=target, parent_id=target))
        return out

    # -- the schedule ----------------------------------------------------------------

    async def tick(self) -> list[EvolveReport]:
        """Evolve the owners with the most new memories (bounded work per call)."""
        chosen = sorted(self._pending.items(), key=lambda kv: (-kv[1], kv[0]))
        reports: list[EvolveReport] = []
        for owner, count in chosen[: self._config.max_owners_per_tick]:
            self._pending.pop(owner, None)
            try:
                reports.append(await self.evolve(owner))
            except Exception as exc:  # the schedule must outlive any one owner's failure
                # Retried on the next tick; the error type only (no user data).
                self._pending[owner] = self._pending.get(owner, 0) + count
                log.warning("hierarchy evolve failed: %s", type(exc).__name__)
        return reports

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._config.schedule_s)
            await self.tick()

    def start(self) -> None:
        """Start the background schedule (no-op when ``schedule_s`` is 0)."""
        if self._config.schedule_s > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)


def _file_named(
    owner: str,
    records: Sequence[MemoryRecord],
    named: Mapping[str, str],
    corpus: Corpus,
    ident: IdMaker,
    node: NodeMaker,
) -> list[MemoryRecord]:
    """``records`` filed under their named categories (topics, or the taxonomy's):
    the category row itself, or the nearest leaf under it once ``evolve`` has split
    it; new category rows (made by ``node``) appended."""
    existing = {c.id: c for c in corpus.categories if c.user_id == owner}
    children: dict[str, list[str]] = {}
    for category in existing.values():
        children.setdefault(category.parent_id, []).append(category.id)
    by_topic: dict[str, list[MemoryRecord]] = {}
    names: dict[str, str] = {}
    for record in records:
        tid = ident(owner, named[record.id])
        by_topic.setdefault(tid, []).append(record)
        names.setdefault(tid, named[record.id])
    out: list[MemoryRecord] = []
    now = now_ms()
    for tid in sorted(by_topic):
        members = by_topic[tid]
        leaves = leaves_under(tid, children) if tid in existing else []
        ids, centres = _leaf_centroids(corpus.records, corpus.vectors, owner, leaves)
        for record in members:
            target = tid
            if ids and record.embedding is not None:
                similar = centres @ np.asarray(record.embedding, dtype=np.float32)
                target = ids[int(np.argmax(similar))]
            out.append(record.with_changes(category_id=target, parent_id=target))
        if tid not in existing:
            vectors = np.asarray(
                [r.embedding for r in members if r.embedding is not None], dtype=np.float32
            )
            if len(vectors):
                out.append(node(owner, names[tid], centroid(vectors), now))
    return out


def _leaf_centroids(
    records: Sequence[MemoryRecord], vectors: Matrix, owner: str, leaves: list[str]
) -> tuple[list[str], Matrix]:
    """Leaves with at least one member, and the centroids of their members."""
    slot = {cid: i for i, cid in enumerate(leaves)}
    sums = np.zeros((len(leaves), vectors.shape[1] if vectors.ndim == 2 else 0), np.float64)
    counts = np.zeros(len(leaves), dtype=np.int64)
    for index, record in enumerate(records):
        i = slot.get(record.category_id)
        if i is not None and record.user_id == owner:
            sums[i] += vectors[index]
            counts[i] += 1
    keep = [i for i in range(len(leaves)) if counts[i] > 0]
    if not keep:
        return [], np.zeros((0, 0), np.float32)
    return [leaves[i] for i in keep], np.stack([unit(sums[i]) for i in keep])
