"""A memory as a corpus snapshot reads it: its BM25 document, its term ids and its
vector as a row of the matrix, each read once per memory and kept in its memo entry
(:class:`~sidecar.memory.corpus.features.MemoryFeatures`), so a new snapshot of
memories read before converts and tokenises nothing."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, is_, itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from sidecar.memory.corpus.bm25 import TermIds, term_ids
from sidecar.memory.corpus.features import KeptEntries, MemoryFeatures, kept_values
from sidecar.memory.language.embedding_text import changed_words
from sidecar.memory.language.text import tokens
from sidecar.memory.records.records import MemoryRecord

Matrix = npt.NDArray[np.float32]


def document(record: MemoryRecord) -> list[str]:
    """A memory's BM25 document: its fact and what was said (its excerpt) — one
    value, two keys, so a question worded like the conversation finds the fact —
    and, for a change told as an event, the words of the attribute it changes (as
    its vector has them: :func:`~sidecar.memory.language.embedding_text.changed_words`),
    so "Where do I work?" finds "User handed in User's notice at Deloitte, starting
    at KPMG" by its words too."""
    parts = [record.content]
    if record.excerpt:
        parts.append(record.excerpt)
    changed = changed_words(record.content)
    if changed:
        parts.append(changed)
    return tokens("\n".join(parts)) if len(parts) > 1 else tokens(record.content)


#: The memo's names for a memory's BM25 document, its term ids and its vector.
DOCUMENT = "document"
TERM_IDS = "term-ids"
VECTOR = "vector"


def document_tokens(record: MemoryRecord) -> tuple[str, ...]:
    # Tuples of strings, not lists: the cyclic GC does not track them.
    return tuple(document(record))


def matrix(
    records: Sequence[MemoryRecord],
    dim: int,
    features: Sequence[MemoryFeatures] | None = None,
    positions: Sequence[int] | None = None,
    *,
    room: int = 0,
) -> Matrix:
    """The embeddings of the records (those at ``positions``, default all) as rows,
    zeros where one is missing; each vector converted once, kept in its memory's
    ``features`` when given (tuples of Python floats convert at about 10 µs a row:
    most of a cold snapshot's cost). ``room``: that many rows more after them, not
    written (a buffer later rows are appended to in place)."""
    at = range(len(records)) if positions is None else positions
    if not at:
        return np.zeros((room, dim), dtype=np.float32)
    if features is not None:
        rows = _kept_rows(features, records, at)
        if rows is None:
            rows = [memo_vector(features[i], records[i], dim) for i in at]
        # One concatenation of the rows, not a stack (which views each row as a
        # matrix of one first): half the time.
        out = np.empty((len(rows) + room, dim), dtype=np.float32)
        np.concatenate(rows, out=out.reshape(-1)[: len(rows) * dim])
        return out
    if room:
        written = matrix(records, dim, None, positions)
        out = np.empty((len(written) + room, dim), dtype=np.float32)
        out[: len(written)] = written
        return out
    chosen = [records[i] for i in at]
    if all(r.embedding is not None and len(r.embedding) == dim for r in chosen):
        # Python floats convert to float64 several times faster than to float32,
        # and the cast gives the same float32 values.
        return np.array([r.embedding for r in chosen], dtype=np.float64).astype(np.float32)
    zeroed = np.zeros((len(chosen), dim), dtype=np.float32)
    for i, record in enumerate(chosen):
        if record.embedding is not None:
            zeroed[i] = record.embedding
    return zeroed


def memo_term_ids(
    features: MemoryFeatures, record: MemoryRecord, vocabulary: dict[str, int]
) -> TermIds:
    """The memory's BM25 document as term ids of ``vocabulary``, kept in its entry."""
    ids: TermIds | None = features.values.get(TERM_IDS)
    if ids is None:
        tokens = features.value(DOCUMENT, record, document_tokens)
        ids = features.values[TERM_IDS] = term_ids(vocabulary, tokens)
    return ids


def memo_term_ids_of(
    features: Sequence[MemoryFeatures],
    records: Sequence[MemoryRecord],
    positions: Sequence[int],
    vocabulary: dict[str, int],
) -> list[TermIds]:
    """:func:`memo_term_ids` of the memories at ``positions``: one C-level pass
    when each was read before."""
    kept: list[TermIds] | None = _kept(features, positions, TERM_IDS)
    if kept is not None:
        return kept
    return [memo_term_ids(features[i], records[i], vocabulary) for i in positions]


def _kept_rows(
    features: Sequence[MemoryFeatures], records: Sequence[MemoryRecord], positions: Sequence[int]
) -> list[npt.NDArray[np.float32]] | None:
    """The kept matrix rows of the memories at ``positions`` when each has one of
    its very vector (one C-level pass), else None."""
    kept: list[Vector] | None = _kept(features, positions, VECTOR)
    if kept is None:
        return None
    stored = map(_STORED, kept)
    if not all(map(is_, stored, map(_EMBEDDING, map(records.__getitem__, positions)))):
        return None
    return list(map(_ROW, kept))


def _kept(
    features: Sequence[MemoryFeatures], positions: Sequence[int], name: str
) -> list[Any] | None:
    """The kept value ``name`` of the memories at ``positions`` when each has it
    (a snapshot's gathered column where they are all of its memories), else None."""
    if isinstance(features, KeptEntries) and positions == range(len(features)):
        return features.column(name)
    return kept_values(list(map(features.__getitem__, positions)), name)


_STORED, _ROW = itemgetter(0), itemgetter(1)
_EMBEDDING = attrgetter("embedding")


def memo_vector(
    features: MemoryFeatures, record: MemoryRecord, dim: int
) -> npt.NDArray[np.float32]:
    """The memory's vector as a float32 row, kept in its entry while it is the
    stored one."""
    kept: Vector | None = features.values.get(VECTOR)
    if kept is None or not _same_vector(kept, record):
        kept = features.values[VECTOR] = _row(record, dim)
    return kept[1]


#: A memory's vector as stored (its tuple) and as a row of the matrix.
Vector = tuple[tuple[float, ...] | None, npt.NDArray[np.float32]]


def _row(record: MemoryRecord, dim: int) -> Vector:
    embedding = record.embedding
    if embedding is None or len(embedding) != dim:
        return embedding, np.zeros(dim, dtype=np.float32)
    return embedding, np.asarray(embedding, dtype=np.float64).astype(np.float32)


def _same_vector(kept: Vector, record: MemoryRecord) -> bool:
    """Whether the kept row is of the record's vector (a memory re-embedded with
    the same text has another)."""
    stored = kept[0]
    return stored is record.embedding or stored == record.embedding
