"""A term's postings found by scanning its documents' term ids.

A :class:`~sidecar.memory.corpus.bm25.BM25Index` built afresh (a cold snapshot: a
scope loaded, or evicted and loaded again) does not sort every posting before its
first question. It answers each asked term by one pass over the documents' term
ids, laid end to end once, and sorts its table only when something needs all of it:
an update made from it, or the corpus cache readying the snapshot off the request
path (:mod:`~sidecar.memory.corpus.warming`), or once it scanned as many terms as
sorting costs (:data:`~sidecar.memory.corpus.bm25.SCANS_BEFORE_TABLE`). A question
asks a handful of terms; the table sorts every token of every memory.

The postings are the ones the table gives: each document holding the term once, in
increasing order, with its count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]
TermIds = npt.NDArray[np.int32]

#: No postings: no documents, no counts (one pair, shared by every empty answer).
NO_DOCS = np.zeros(0, dtype=np.int64)
NO_COUNTS = np.zeros(0, dtype=np.float32)


class TermScan:
    """The postings of ``ids`` (each document's term ids) read by a scan per term.
    The documents' ids are joined into one array at the first scan."""

    def __init__(self, ids: Sequence[TermIds], lengths: Floats) -> None:
        self.ids = ids
        self._lengths = lengths
        self._flat: TermIds | None = None
        self._ends: Ints | None = None
        #: Terms scanned so far.
        self.scans = 0

    def postings(self, tid: int) -> tuple[Ints, Floats]:
        """The documents holding term ``tid`` (increasing) and its count in each."""
        if self._flat is None or self._ends is None:
            self._ends = np.cumsum(self._lengths, dtype=np.int64)
            self._flat = flat_ids(self.ids, int(self._ends[-1]) if len(self._ends) else 0)
        self.scans += 1
        hits = np.flatnonzero(self._flat == tid)
        if not len(hits):
            return NO_DOCS, NO_COUNTS
        # Token p is in the document whose end is the first past p.
        docs = np.searchsorted(self._ends, hits, side="right").astype(np.int64)
        first = np.flatnonzero(np.concatenate(([True], docs[1:] != docs[:-1])))
        counts = np.diff(np.append(first, len(docs)))
        return docs[first], counts.astype(np.float32)


def flat_ids(ids: Sequence[TermIds], count: int) -> TermIds:
    """The documents' term ids (``count`` in all) laid end to end, as int32: their
    bytes joined, one copy (about half of ``np.concatenate``'s time over thousands
    of small arrays, whose type it resolves one by one), or concatenated where one
    is not a contiguous array of int32 (the joined bytes are then not ``count`` ids)."""
    if not len(ids):
        return np.zeros(0, dtype=np.int32)
    try:
        joined = b"".join(cast(Sequence[bytes], ids))
    except (BufferError, TypeError):  # not contiguous, or not an array
        joined = b""
    if len(joined) == count * _ID_BYTES:
        return np.frombuffer(joined, dtype=np.int32)
    return np.concatenate(list(ids)).astype(np.int32, copy=False)


_ID_BYTES = np.dtype(np.int32).itemsize
