"""What a new snapshot takes from the one before it, and the checks that decide it.

:class:`~sidecar.memory.corpus.corpus.Corpus` builds a snapshot afresh, or from
the previous one (rows appended, or moved: :mod:`~sidecar.memory.corpus.moves`).
These helpers say whether the previous snapshot's layers still hold (same rows,
same vectors) and carry them: vectors, the category matrix, memo entries, carried
derived values first by kind.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from operator import is_
from typing import Any

import numpy as np

from sidecar.memory.corpus.assembly import same_document
from sidecar.memory.corpus.bm25 import BM25Index, TermIds
from sidecar.memory.corpus.derived import MemoryColumn
from sidecar.memory.corpus.features import FeatureMemo, KeptEntries, MemoryFeatures
from sidecar.memory.corpus.moves import Moves
from sidecar.memory.corpus.row_matrix import RowMatrix, room_for
from sidecar.memory.corpus.rows import (
    TERM_IDS,
    Matrix,
    document,
    matrix,
    memo_term_ids_of,
)
from sidecar.memory.records.records import MemoryRecord


def columns_first(
    derived: Mapping[Hashable, Any], structural: Iterable[Hashable]
) -> list[Hashable]:
    """A snapshot's ``structural`` keys of its ``derived`` values, its columns
    first: a value carried into the next snapshot may read a column there (the
    context index reads who said each line), which is then carried, not read again
    from every memory."""
    return sorted(structural, key=lambda key: not isinstance(derived.get(key), MemoryColumn))


def category_matrix(
    old: tuple[Sequence[MemoryRecord], Matrix] | None,
    categories: Sequence[MemoryRecord],
    dim: int,
) -> Matrix:
    """The categories' vectors, ``old``'s matrix (its categories and their vectors)
    when they are the same rows."""
    if (
        old is not None
        and len(old[0]) == len(categories)
        and all(
            new.id == prev.id and new.embedding is prev.embedding
            for new, prev in zip(categories, old[0], strict=True)
        )
    ):
        return old[1]
    return matrix(categories, dim)


def reused_vectors(
    old: RowMatrix,
    memories: Sequence[MemoryRecord],
    dim: int,
    sources: Moves,
    *,
    fold: bool = False,
) -> RowMatrix:
    """The vectors of ``memories``: ``old``'s rows where ``sources`` has one (not
    copied: :mod:`~sidecar.memory.corpus.row_matrix`; ``fold``: copied into a new
    buffer), the others' joined from their records."""
    if old.dim != dim:
        return RowMatrix.of(matrix(memories, dim))
    fresh = sources.fresh.tolist()
    return old.remapped(sources, matrix(memories, dim, fresh), fold=fold)


def same_structure(
    old: tuple[Sequence[MemoryRecord], Sequence[MemoryRecord]],
    memories: Sequence[MemoryRecord],
    categories: Sequence[MemoryRecord],
) -> bool:
    """Whether the vectors, BM25 index, links and session order of ``old`` (a
    snapshot's memories and categories) hold for these rows (in this order): only
    fields the indexes do not read may differ."""
    old_memories, old_categories = old
    if len(old_memories) != len(memories) or len(old_categories) != len(categories):
        return False
    for new_rows, old_rows in ((memories, old_memories), (categories, old_categories)):
        if all(map(is_, new_rows, old_rows)):
            continue
        for new, prev in zip(new_rows, old_rows, strict=True):
            if new is not prev and not (
                same_document(new, prev)
                and new.related_ids == prev.related_ids
                and new.session_id == prev.session_id
            ):
                return False
    return True


#: A snapshot built afresh gathers every value its entries hold.
_NOT_GATHERED: frozenset[str] = frozenset()


def kept_entries(
    memo: FeatureMemo | None, memories: Sequence[MemoryRecord], *, updated: bool
) -> KeptEntries | None:
    """The memo's entry of each memory, to keep with a snapshot built afresh; None
    for one ``updated`` from a snapshot on the same memo (its entries are looked
    up when read) or without a memo."""
    if memo is None or updated:
        return None
    return KeptEntries(memo.features_of(memories), skip=_NOT_GATHERED)


#: What the entries of a snapshot made by an update do not gather: its postings came
#: with the snapshot before, so only the stages' values are read whole.
_NOT_GATHERED_AFTER_UPDATE = frozenset({TERM_IDS})


def stage_entries(memo: FeatureMemo, memories: Sequence[MemoryRecord]) -> KeptEntries:
    """The memo's entry of each memory of a snapshot made by an update, for the
    columns its stages read whole."""
    return KeptEntries(memo.features_of(memories), skip=_NOT_GATHERED_AFTER_UPDATE)


def indexed_terms(
    memo: FeatureMemo | None,
    entries: Sequence[MemoryFeatures] | None,
    memories: Sequence[MemoryRecord],
    positions: Sequence[int],
    into: BM25Index | None,
) -> tuple[list[Sequence[str]] | None, list[TermIds] | None]:
    """What an index counts of the memories at ``positions``: their term ids from
    the memo (``entries``: its entry of each memory), for an index on its
    vocabulary (read once per memory), else their tokens (for ``into``, an index
    on another vocabulary)."""
    if (
        memo is None
        or entries is None
        or (into is not None and into.vocabulary is not memo.vocabulary)
    ):
        return [document(memories[i]) for i in positions], None
    return None, memo_term_ids_of(entries, memories, positions, memo.vocabulary)


def rows_after(
    rows: Sequence[MemoryRecord], changes: Mapping[str, MemoryRecord | None]
) -> list[MemoryRecord]:
    """``rows`` with ``changes`` applied (for a full build)."""
    kept = [r for r in rows if r.id not in changes]
    return [*kept, *(r for r in changes.values() if r is not None)]


def carried_layers(
    previous: tuple[RowMatrix, BM25Index, dict[int, frozenset[str]]] | None,
    memories: Sequence[MemoryRecord],
    dim: int,
    memo: FeatureMemo | None,
    entries: Sequence[MemoryFeatures] | None,
    start: int | None,
    moves: Moves | None,
    *,
    fold: bool,
) -> tuple[RowMatrix, BM25Index, dict[int, frozenset[str]], Moves | None]:
    """The vectors, BM25 index and n-grams of ``memories``, and how their rows came
    from ``previous``'s (its vectors, index and n-grams): appended from ``start``,
    moved by ``moves``, else built afresh (no moves). ``fold``: as for
    :meth:`RowMatrix.remapped` and :meth:`BM25Index.remapped`."""
    if previous is not None and start is not None:
        # New memories after the old ones (the usual write): reuse the old rows'
        # vectors, BM25 postings and n-grams; links and sessions are recomputed
        # (back-links change old rows' related_ids).
        old_vectors, old_bm25, old_ngrams = previous
        tail = range(start, len(memories))
        moved = Moves(
            np.concatenate(
                [np.arange(start, dtype=np.int64), np.full(len(tail), -1, dtype=np.int64)]
            ),
            old_bm25.size,
        )
        return (
            old_vectors.appended(matrix(memories, dim, tail)),
            old_bm25.extended(*indexed_terms(memo, entries, memories, tail, old_bm25)),
            dict(old_ngrams),
            moved,
        )
    if previous is not None and moves is not None:
        # Rows removed, replaced or reordered (a supersede, a delete, a
        # consolidation pass, a delta refresh): the vectors, tokens and postings
        # of every row the previous corpus had move to their new places.
        old_vectors, old_bm25, _ = previous
        changed = moves.fresh.tolist()
        return (
            reused_vectors(old_vectors, memories, dim, moves, fold=fold),
            old_bm25.remapped(
                moves, *indexed_terms(memo, entries, memories, changed, old_bm25), fold=fold
            ),
            {},
            moves,
        )
    size = len(memories)
    documents, ids = indexed_terms(memo, entries, memories, range(size), None)
    return (
        RowMatrix.in_buffer(matrix(memories, dim, room=room_for(size)), size),
        BM25Index(documents, vocabulary=memo.vocabulary if memo is not None else None, ids=ids),
        {},
        None,
    )
