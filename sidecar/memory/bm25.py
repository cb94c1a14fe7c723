"""Okapi BM25 over one scope's visible memories.

The index is built once per corpus snapshot in O(total tokens) (postings per term);
a query costs O(sum of the query terms' posting lengths) — it grows with the
user's visible corpus, never with other users' data, and never quadratically.
IDF is computed over exactly the documents the scope may see.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Postings = dict[str, tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]]


class BM25Index:
    def __init__(self, documents: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75):
        self.k1 = k1
        self.b = b
        self._set(np.zeros(0, dtype=np.float32), {}, (), documents)

    def extended(self, documents: Sequence[Sequence[str]]) -> BM25Index:
        """A new index over this one's documents followed by ``documents`` (indices
        continue from ``size``). Costs O(new tokens + touched postings + size): the
        postings of terms the new documents do not use are shared, not copied. This
        index is unchanged."""
        out = object.__new__(BM25Index)
        out.k1, out.b = self.k1, self.b
        out._set(self._lengths, self._postings, self._documents, documents)
        return out

    def _set(
        self,
        lengths: npt.NDArray[np.float32],
        postings: Postings,
        kept: tuple[list[str], ...],
        documents: Sequence[Sequence[str]],
    ) -> None:
        start = len(lengths)
        self._documents: tuple[list[str], ...] = (*kept, *(list(d) for d in documents))
        added = np.array([len(doc) for doc in documents], dtype=np.float32)
        self._lengths = np.concatenate([lengths, added]) if len(added) else lengths
        self.size = len(self._lengths)
        average = float(self._lengths.mean()) if self.size else 0.0
        self._norm = (
            self.k1 * (1 - self.b + self.b * self._lengths / average)
            if average > 0
            else np.full(self.size, self.k1, dtype=np.float32)
        )
        fresh: dict[str, tuple[list[int], list[int]]] = {}
        for index, doc in enumerate(documents, start):
            for term, count in Counter(doc).items():
                docs, counts = fresh.setdefault(term, ([], []))
                docs.append(index)
                counts.append(count)
        merged = dict(postings)
        for term, (docs, counts) in fresh.items():
            new_docs = np.asarray(docs, dtype=np.int32)
            new_counts = np.asarray(counts, dtype=np.float32)
            old = merged.get(term)
            if old is not None:
                new_docs = np.concatenate([old[0], new_docs])
                new_counts = np.concatenate([old[1], new_counts])
            merged[term] = (new_docs, new_counts)
        self._postings = merged

    def document(self, index: int) -> list[str]:
        """The tokens of document ``index`` (kept to rebuild without re-tokenising)."""
        return self._documents[index]

    def idf(self, term: str) -> float:
        posting = self._postings.get(term)
        df = 0 if posting is None else len(posting[0])
        return math.log(1 + (self.size - df + 0.5) / (df + 0.5))

    def scores(self, query: Sequence[str]) -> npt.NDArray[np.float32]:
        """BM25 score of every document for the query tokens (0 for no match)."""
        out = np.zeros(self.size, dtype=np.float32)
        for term, qtf in Counter(query).items():
            posting = self._postings.get(term)
            if posting is None:
                continue
            docs, tf = posting
            weight = self.idf(term) * qtf
            out[docs] += weight * tf * (self.k1 + 1) / (tf + self._norm[docs])
        return out

    def max_score(self, query: Sequence[str]) -> float:
        """An upper bound of any document's score for ``query`` (for normalisation)."""
        return sum(self.idf(t) * (self.k1 + 1) for t in set(query) if t in self._postings)
