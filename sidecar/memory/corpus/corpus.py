"""A scope's visible memories, held in memory for retrieval.

A :class:`Corpus` is an immutable snapshot of everything one scope (user + groups)
may read: the records, their embedding matrix, a BM25 index over the scope's own
documents, resolved links and session order. Every retrieval strategy scores a
corpus; none of them needs the rest of the store, so a user's latency depends on
the size of what that user can see, not on other users' data. Corpora are built
and kept by :class:`sidecar.memory.corpus.cache.CorpusCache`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import is_
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from sidecar.memory.corpus.assembly import (
    Ints,
    active_rows,
    same_rows,
    session_order,
)
from sidecar.memory.corpus.assembly import links as resolved_links
from sidecar.memory.corpus.assembly import sources as source_rows
from sidecar.memory.corpus.bm25 import BM25Index
from sidecar.memory.corpus.carried import (
    carried_layers,
    category_matrix,
    columns_first,
    kept_entries,
    rows_after,
    same_structure,
    stage_entries,
)
from sidecar.memory.corpus.delta import (
    Layout,
    changed_layout,
    moved_sessions,
)
from sidecar.memory.corpus.derived import MemoryColumn, column_key
from sidecar.memory.corpus.features import (
    FeatureMemo,
    KeptEntries,
    MemoEntries,
    MemoryFeatures,
    Reader,
    kept_values,
)
from sidecar.memory.corpus.moves import Moves
from sidecar.memory.corpus.row_index import RowIndex
from sidecar.memory.corpus.row_matrix import RowMatrix
from sidecar.memory.corpus.rows import (
    Matrix,
)
from sidecar.memory.language.text import char_ngrams
from sidecar.memory.records.records import MemoryRecord, Status

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Corpus:
    """Immutable retrieval view of one scope. Index ``i`` is the same row everywhere."""

    #: The memories, by time: a tuple, or a list made for this snapshot alone (by
    #: a build or an update: copying it into a tuple touched every row again);
    #: never changed.
    records: Sequence[MemoryRecord]
    #: The memories' vectors, shared with the snapshots before this one
    #: (:attr:`vectors`, :meth:`vector_scores`, :meth:`vector_rows` read them).
    _matrix: RowMatrix
    bm25: BM25Index
    index_of: RowIndex
    #: Persisted links (``related_ids``) resolved to indices, both directions.
    links: tuple[tuple[int, ...], ...]
    #: Previous/next memory of the same session (by time), -1 when none.
    session_prev: npt.NDArray[np.int32]
    session_next: npt.NDArray[np.int32]
    categories: tuple[MemoryRecord, ...] = ()
    category_vectors: Matrix = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    #: What was read of each memory, shared with the snapshots before and after
    #: this one (the corpus cache's); None: read per snapshot.
    memo: FeatureMemo | None = field(default=None, repr=False, compare=False)
    #: The memo's entry of each memory, or None: looked up in the memo when read
    #: (a snapshot made from another by an update: carrying every entry cost a
    #: copy of them per update; :meth:`_entries` finds them once, when a stage
    #: first reads a whole column), or no memo.
    _features: KeptEntries | None = field(default=None, repr=False, compare=False)
    _ngrams: dict[int, frozenset[str]] = field(default_factory=dict, repr=False)
    #: Values computed from this snapshot (topic groups, category trees, link
    #: adjacency), built on first use and dropped with the snapshot.
    _derived: dict[Hashable, Any] = field(default_factory=dict, repr=False)
    #: The keys of ``_derived`` whose values read no access count or time (they
    #: survive :meth:`with_access`).
    _structural: set[Hashable] = field(default_factory=set, repr=False)
    #: Each memory's session as a code, and the codes by session id (shared by the
    #: snapshots an update makes from this one): sessions an update touches are
    #: found again, the others carried.
    _session_codes: Ints = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    _session_numbers: dict[str, int] = field(default_factory=dict, repr=False)
    #: Whether any memory names a link (``related_ids``), found or not.
    _related: bool = field(default=False, repr=False)
    #: Whether the layers shared with earlier snapshots (vector buffer, BM25 base)
    #: still hold a deleted memory's vector or postings, its removal made without
    #: folding them (:meth:`updated` with ``compact=False``; :meth:`compacted`).
    _holds_deleted: bool = field(default=False, repr=False)

    @property
    def size(self) -> int:
        return len(self.records)

    @property
    def vectors(self) -> Matrix:
        """Every memory's vector, a row each (read-only). A view of the shared rows
        where they lie in order; else a copy, made once per snapshot: scoring
        reads :meth:`vector_scores`, which copies nothing."""
        return self.derived("vectors", self._dense, structural=True)

    def _dense(self) -> Matrix:
        dense = self._matrix.dense()
        dense.flags.writeable = False
        return dense

    def vector_scores(self, vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """``vectors @ vector``."""
        return self._matrix.scores(vector)

    def vector_rows(self, indices: npt.ArrayLike) -> Matrix:
        """``vectors[indices]``."""
        return self._matrix.take(indices)

    def vector_span(self, begin: int, end: int) -> Matrix | None:
        """``vectors[begin:end]`` as a view of the shared rows where they lie in
        order, else None (read them by :meth:`vector_rows`)."""
        return self._matrix.span(begin, end)

    def derived(self, key: Hashable, build: Callable[[], T], *, structural: bool = False) -> T:
        """``build()``, computed once per snapshot and ``key``. A per-corpus value
        lives exactly as long as the corpus: a least-recently-used table of a few
        corpora would miss on every request once more users than its size take turns.
        ``structural``: the value reads no access count or time, so the snapshot
        :meth:`with_access` makes keeps it."""
        try:
            value: T = self._derived[key]
        except KeyError:
            value = self._derived[key] = build()
            if structural:
                self._structural.add(key)
        return value

    def with_access(self, rows: Mapping[int, MemoryRecord]) -> Corpus:
        """This snapshot with the memories at these indices replaced by versions that
        differ in their access counts and times only: matrices, indexes and the
        structural derived values are kept. An access flush changes a few rows of
        every unit, and rebuilding every scope's corpus after it would add a rebuild to
        each scope's next request, and hold the event loop for all of them in turn."""
        records = list(self.records)
        for index, record in rows.items():
            records[index] = record
        kept = {k: v for k, v in self._derived.items() if k in self._structural}
        return replace(self, records=records, _derived=kept, _structural=set(self._structural))

    def ngrams(self, index: int) -> frozenset[str]:
        found = self._ngrams.get(index)
        if found is None:
            found = char_ngrams(self.records[index].content)
            self._ngrams[index] = found
        return found

    def category(self, category_id: str) -> MemoryRecord | None:
        """The active category node with this id, if the corpus holds it."""
        by_id: dict[str, MemoryRecord] = self.derived(
            "category-by-id", lambda: {c.id: c for c in self.categories}, structural=True
        )
        return by_id.get(category_id)

    def read_all(self, name: str, read: Reader, start: int = 0) -> list[Any]:
        """:meth:`read` of the memories from ``start`` on, in order (a column's
        values: one loop, not a call per memory)."""
        records = self.records[start:]
        entries: Sequence[MemoryFeatures]
        if not start:
            whole = self._entries()
            if whole is None:
                return [self.read(name, i, read) for i in range(self.size)]
            kept = whole.column(name)  # a pass of kept values when not gathered
            entries = whole
        else:
            if self._features is not None:
                entries = self._features[start:]
            elif self.memo is not None and self._memo_current():
                entries = self.memo.features_of(records)  # the few appended
            else:
                return [self.read(name, i, read) for i in range(start, self.size)]
            kept = kept_values(entries, name)
        if kept is not None:
            return kept
        return [
            entry.value(name, record, read) for entry, record in zip(entries, records, strict=True)
        ]

    def _entries(self) -> KeptEntries | None:
        """The memo's entry of each memory, found once per snapshot (a snapshot
        made by an update finds them when a stage first reads a whole column: each
        column its stages read whole then comes from one gathered pass, not a
        lookup of every memory per column); None without a current memo."""
        if self._features is not None:
            return self._features
        memo = self.memo
        if memo is None or not self._memo_current():
            return None
        found: KeptEntries | None = self.derived(
            "memo-entries",
            lambda: stage_entries(memo, self.records),
            structural=True,
        )
        return found

    def read(self, name: str, index: int, read: Reader) -> Any:
        """``read(record)`` of memory ``index``, kept in the memo when the snapshot
        has one (``read`` must depend on the record's text alone, and be the only
        reader named ``name``)."""
        record = self.records[index]
        if self._features is not None:
            return self._features[index].value(name, record, read)
        memo = self.memo
        if memo is None:
            return read(record)
        entry = memo.known(record)
        if entry is None:
            if not self._memo_current():
                return read(record)  # not put back into the memo (see below)
            entry = memo.features(record)
        return entry.value(name, record, read)

    def _memo_current(self) -> bool:
        """Whether the memo was not cleared since this snapshot was made (its index
        reads the memo's vocabulary): after a forget, a snapshot still in use
        (a request begun before it) adds nothing to the memo, which would keep a
        forgotten memory's text."""
        return self.memo is not None and self.bm25.vocabulary is self.memo.vocabulary

    @classmethod
    def build(
        cls,
        rows: Sequence[MemoryRecord],
        dim: int,
        previous: Corpus | None = None,
        *,
        memo: FeatureMemo | None = None,
    ) -> Corpus:
        """A corpus from rows (any order, duplicates by id dropped): active memories
        become documents, active category nodes the hierarchy. When only scalar
        fields changed since ``previous`` (access counts, importance: same rows, text,
        vectors, links and sessions), its matrices and indexes are reused; when new
        memories only follow ``previous``'s, its vectors and BM25 postings are
        extended instead of rebuilt (a write does not cost the writer's next request a
        full rebuild, which grows with the scope's memories). ``memo``: what was read of
        each memory, kept across snapshots (:mod:`~sidecar.memory.corpus.features`).
        Where the caller knows which rows changed, :meth:`updated` does the same
        without a pass over every row."""
        memories, categories = active_rows(rows)
        if previous is not None and same_structure(
            (previous.records, previous.categories), memories, categories
        ):
            return _rescored(previous, memories, categories, memo)
        start = (
            len(previous.records)
            if previous is not None
            and len(memories) >= len(previous.records)
            and _full_matrix(previous)
            and same_rows(memories, previous.records)
            else None
        )
        sources: Ints | None = None
        if previous is not None and start is None:
            sources = (
                source_rows(previous.records, previous.index_of.plain(), memories)
                if _full_matrix(previous)
                else np.full(len(memories), -1, dtype=np.int64)
            )
        return cls._assembled(memories, categories, dim, previous, memo, start, sources, None)

    @classmethod
    def updated(
        cls,
        previous: Corpus,
        changes: Mapping[str, MemoryRecord | None],
        dim: int,
        *,
        memo: FeatureMemo | None = None,
        compact: bool = True,
    ) -> Corpus:
        """:meth:`build` of ``previous``'s rows after ``changes`` (each changed id's
        row now, None where it has none), equal to it, found from the changed rows
        alone (:mod:`~sidecar.memory.corpus.delta`): what a write costs the next
        request does not grow with the rows it left alone. A deletion folds the
        layers shared with ``previous`` so nothing of the deleted memory (its
        vector, its postings) stays in them; ``compact=False`` leaves that to
        :meth:`compacted`, off the request path (the deleted row is out of the
        snapshot either way: never scored, never returned)."""
        if not _full_matrix(previous) or previous._matrix.dim != dim:
            rows = rows_after((*previous.records, *previous.categories), changes)
            return cls.build(rows, dim, previous, memo=memo)
        # A tombstone of a row this snapshot holds (another's removes nothing here).
        deleted = any(
            row is not None and row.status == Status.DELETED and key in previous.index_of
            for key, row in changes.items()
        )
        layout = changed_layout(previous.records, previous.index_of, previous.categories, changes)
        unmoved = len(layout.sources) == previous.size and not layout.fresh
        if (
            unmoved
            and memo is previous.memo
            and len(layout.categories) == len(previous.categories)
            and all(map(is_, layout.categories, previous.categories))
        ):
            return previous  # no row it holds changed (e.g. rows of another scope)
        if (
            len(layout.sources) == previous.size
            and bool((layout.sources >= 0).all())
            and layout.categories == list(previous.categories)
            and all(
                layout.memories[i].related_ids == previous.records[i].related_ids
                and layout.memories[i].session_id == previous.records[i].session_id
                for i in layout.fresh
            )
        ):
            # Scalar fields only (the rows in place, their documents the same).
            return _rescored(previous, layout.memories, layout.categories, memo)
        return cls._assembled(
            layout.memories,
            layout.categories,
            dim,
            previous,
            memo,
            layout.start,
            None if layout.start is not None else layout.moves,
            layout,
            scrub=deleted and compact,
            holds_deleted=deleted and not compact,
        )

    def compacted(self, dim: int) -> Corpus:
        """This snapshot with the layers it shares with earlier ones folded where
        they still hold a deleted memory (:attr:`holds_deleted`): the same rows,
        scores and derived values, nothing of the deleted memory kept. Costs what a
        deletion's fold costs (every vector and posting copied once)."""
        if not self._holds_deleted:
            return self
        records = self.records
        layout = Layout(
            records,
            list(self.categories),
            None,
            Moves(np.arange(self.size, dtype=np.int64), self.size),
            [],
            frozenset(),
        )
        return Corpus._assembled(
            records, layout.categories, dim, self, self.memo, None, layout.moves, layout
        )

    @property
    def holds_deleted(self) -> bool:
        """Whether a deleted memory's vector or postings are still in the layers
        this snapshot shares (:meth:`compacted` folds them)."""
        return self._holds_deleted

    @classmethod
    def _assembled(
        cls,
        memories: Sequence[MemoryRecord],
        categories: list[MemoryRecord],
        dim: int,
        previous: Corpus | None,
        memo: FeatureMemo | None,
        start: int | None,
        sources: Ints | Moves | None,
        layout: Layout | None,
        *,
        scrub: bool = True,
        holds_deleted: bool = False,
    ) -> Corpus:
        """The corpus of these rows (made for it, kept as they are: never changed
        after): ``previous``'s extended from ``start``, remapped by ``sources``,
        else built afresh; ``layout``: how they came from
        ``previous``'s by an update (sessions and links are then carried too);
        ``scrub``: rows removed may have been deleted, so the layers shared with
        ``previous`` that hold what memories say (vector buffer, BM25 base) are
        folded and keep nothing of them (found among all rows, a removal cannot
        tell); the id index keeps the ids (not content) until its next fold.
        ``holds_deleted``: rows removed were deleted and ``scrub`` is not asked
        (:meth:`compacted` folds the layers later)."""
        moves = None
        if previous is not None and sources is not None:
            moves = Moves.of(sources, previous.size)
        features = kept_entries(
            memo,
            memories,
            updated=previous is not None
            and previous.memo is memo
            and (start is not None or moves is not None),
        )
        # What the memo read of the rows this build reads (new ones, or all).
        entries: Sequence[MemoryFeatures] | None = features
        if features is None and memo is not None:
            entries = MemoEntries(memo, memories)

        extended = previous if start is not None else None
        vectors, bm25, ngrams, moved = carried_layers(
            None if previous is None else (previous._matrix, previous.bm25, previous._ngrams),
            memories,
            dim,
            memo,
            entries,
            start,
            moves,
            fold=scrub,
        )
        index_of = (
            previous.index_of.remapped(memories, moved)
            if previous is not None and moved is not None
            else RowIndex(memories)
        )
        if previous is not None and layout is not None:
            prev, nxt, codes, touched = moved_sessions(
                memories,
                layout,
                (previous.session_prev, previous.session_next, previous._session_codes),
                previous._session_numbers,
            )
            numbers = previous._session_numbers
            if moves is not None:
                moves = moves.with_touched(touched)
        else:
            prev, nxt, codes, numbers = session_order(memories)
        if (
            previous is not None
            and layout is not None
            and not previous._related
            and not any(memories[i].related_ids for i in layout.fresh)
        ):
            links: tuple[tuple[int, ...], ...] = ((),) * len(memories)
            related = False
        else:
            links, related = resolved_links(memories, index_of)
        corpus = cls(
            records=memories,
            _matrix=vectors,
            bm25=bm25,
            index_of=index_of,
            links=links,
            session_prev=prev,
            session_next=nxt,
            categories=tuple(categories),
            category_vectors=category_matrix(
                None if previous is None else (previous.categories, previous.category_vectors),
                categories,
                dim,
            ),
            memo=memo,
            _features=features,
            _ngrams=ngrams,
            _session_codes=codes,
            _session_numbers=numbers,
            _related=related,
            # Layers shared with ``previous`` keep what it held, unless folded.
            _holds_deleted=previous is not None
            and (previous._holds_deleted or holds_deleted)
            and not (moves is not None and scrub),
        )
        if extended is not None:
            corpus._extend_derived(extended)
        elif previous is not None and moves is not None:
            corpus._remap_derived(previous, moves)
        return corpus

    def _extend_derived(self, previous: Corpus) -> None:
        """Carry ``previous``'s structural values that can follow appended memories
        (:class:`~sidecar.memory.corpus.derived.Appendable`) into this snapshot,
        which appends memories to it."""
        for key in columns_first(previous._derived, previous._structural):
            value = previous._derived.get(key)
            # The method, not isinstance of the protocol: that check reads every
            # protocol member per value, per snapshot.
            append = getattr(value, "appended", None)
            if callable(append):
                self._derived[key] = append(self)
                self._structural.add(key)

    def _remap_derived(self, previous: Corpus, sources: Moves) -> None:
        """Carry ``previous``'s structural values that can follow memories removed,
        replaced or reordered (:class:`~sidecar.memory.corpus.derived.Remappable`)
        into this snapshot, whose memory ``i`` is ``previous``'s memory
        ``sources[i]`` (-1: a new or changed one)."""
        for key in columns_first(previous._derived, previous._structural):
            value = previous._derived.get(key)
            remap = getattr(value, "remapped", None)
            if callable(remap):
                self._derived[key] = remap(self, sources)
                self._structural.add(key)

    def column(
        self, name: str, read: Callable[[MemoryRecord], Any], dtype: npt.DTypeLike
    ) -> npt.NDArray[Any]:
        """``read(record)`` of every memory, as an array (one value per memory), built
        once per snapshot and extended, not read again, when memories are only
        appended. ``read`` must depend on the record's text and times alone."""
        built: MemoryColumn = self.derived(
            ("column", name),
            lambda: MemoryColumn(column_key(name), read, np.zeros(0, dtype=dtype)).appended(self),
            structural=True,
        )
        return built.values


def _full_matrix(corpus: Corpus) -> bool:
    """Whether ``corpus`` has a vector row per memory (an update can move them)."""
    return corpus._matrix.size == len(corpus.records)


def _rescored(
    previous: Corpus,
    memories: Sequence[MemoryRecord],
    categories: list[MemoryRecord],
    memo: FeatureMemo | None,
) -> Corpus:
    """``previous`` with new versions of its rows that differ in fields its indexes
    do not read (access counts, importance): the values derived from the old
    versions go. ``memories``: an update's layout's own rows (kept as they are)."""
    return replace(
        previous,
        records=memories,
        categories=tuple(categories),
        memo=memo,
        _features=previous._features
        if previous.memo is memo
        else kept_entries(memo, memories, updated=False),
        _derived={},
        _structural=set(),
    )
