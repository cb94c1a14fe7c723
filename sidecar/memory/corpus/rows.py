"""A memory as a corpus snapshot reads it: its vector as a row of the matrix, its
BM25 document as term ids, read once per memory and kept in its memo entry
(:class:`~sidecar.memory.corpus.features.MemoryFeatures`), so a new snapshot of
memories read before tokenises nothing."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from sidecar.memory.corpus.bm25 import TermIds, term_ids
from sidecar.memory.corpus.features import KeptEntries, MemoryFeatures, kept_values
from sidecar.memory.language.embedding_text import changed_words
from sidecar.memory.language.text import tokens
from sidecar.memory.records.embeddings import stacked
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


#: The memo's name for a memory's BM25 document as term ids.
TERM_IDS = "term-ids"


def matrix(
    records: Sequence[MemoryRecord],
    dim: int,
    positions: Sequence[int] | None = None,
    *,
    room: int = 0,
) -> Matrix:
    """The float32 matrix of the records' vectors (those at ``positions``), with
    zeros where one is missing or of another dimension; ``room``: that many zeroed
    rows more after them (a buffer later rows are appended to in place). Packed
    vectors (:class:`~sidecar.memory.records.embeddings.Embedding`) join into it in
    one copy: nothing is converted per memory."""
    chosen = records if positions is None else [records[i] for i in positions]
    embeddings = list(map(_EMBEDDING, chosen))
    if not embeddings:
        return np.zeros((room, dim), dtype=np.float32)
    try:
        return stacked(embeddings, room, dim=dim)
    except (AttributeError, ValueError):  # a memory without a vector, or another length
        pass
    out = np.zeros((len(embeddings) + room, dim), dtype=np.float32)
    for i, embedding in enumerate(embeddings):
        if embedding is not None and len(embedding) == dim:
            out[i] = embedding.array()
    return out


def memo_term_ids(
    features: MemoryFeatures, record: MemoryRecord, vocabulary: dict[str, int]
) -> TermIds:
    """The memory's BM25 document as term ids of ``vocabulary``, kept in its entry
    (its tokens are not: about six times the ids' memory for a long turn, and read
    again only for an index on another vocabulary, made after a forget)."""
    ids: TermIds | None = features.values.get(TERM_IDS)
    if ids is None:
        ids = features.values[TERM_IDS] = term_ids(vocabulary, document(record))
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


def _kept(
    features: Sequence[MemoryFeatures], positions: Sequence[int], name: str
) -> list[Any] | None:
    """The kept value ``name`` of the memories at ``positions`` when each has it
    (a snapshot's gathered column where they are all of its memories), else None."""
    if isinstance(features, KeptEntries) and positions == range(len(features)):
        return features.column(name)
    return kept_values(list(map(features.__getitem__, positions)), name)


_EMBEDDING = attrgetter("embedding")
