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
            self._flat = (
                np.concatenate(list(self.ids)).astype(np.int32, copy=False)
                if len(self.ids)
                else np.zeros(0, dtype=np.int32)
            )
            self._ends = np.cumsum(self._lengths, dtype=np.int64)
        self.scans += 1
        hits = np.flatnonzero(self._flat == tid)
        if not len(hits):
            return NO_DOCS, NO_COUNTS
        # Token p is in the document whose end is the first past p.
        docs = np.searchsorted(self._ends, hits, side="right").astype(np.int64)
        first = np.flatnonzero(np.concatenate(([True], docs[1:] != docs[:-1])))
        counts = np.diff(np.append(first, len(docs)))
        return docs[first], counts.astype(np.float32)
