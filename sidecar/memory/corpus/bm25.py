"""Okapi BM25 over one scope's visible memories.

The index is a compressed posting table: for every (term, document) pair its term
frequency, sorted by term then document, with each term's slice found through an
offsets array. Building it is O(total tokens) (one dictionary lookup per token, the
rest vectorised); appending documents merges their pairs in without touching the
old documents' tokens, and removing or replacing some moves the others' postings
(:meth:`BM25Index.remapped`); a query costs O(sum of the query terms' posting
lengths). It
grows with the user's visible corpus, never with other users' data, and never
quadratically. IDF is computed over exactly the documents the scope may see.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]


class BM25Index:
    def __init__(self, documents: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75):
        self.k1 = k1
        self.b = b
        empty = np.zeros(0, dtype=np.int64)
        self._set((), {}, empty, empty, np.zeros(0, dtype=np.float32), documents)

    def extended(self, documents: Sequence[Sequence[str]]) -> BM25Index:
        """A new index over this one's documents followed by ``documents`` (indices
        continue from ``size``); the old documents are not tokenised or counted
        again. This index is unchanged."""
        out = object.__new__(BM25Index)
        out.k1, out.b = self.k1, self.b
        out._set(self._documents, self._vocab, self._terms, self._docs, self._tf, documents)
        return out

    def remapped(self, sources: Sequence[int], documents: Sequence[Sequence[str]]) -> BM25Index:
        """A new index whose document ``i`` is this one's document ``sources[i]``,
        or, where ``sources[i]`` is -1, the next of ``documents`` (memories removed,
        replaced or added: a supersede, a delete, a consolidation pass). The kept
        documents' postings are moved, not counted again, and the result scores as a
        fresh build over the same documents does. This index is unchanged."""
        size = len(sources)
        source = np.asarray(sources, dtype=np.int64)
        new_of_old = np.full(self.size + 1, -1, dtype=np.int64)  # index -1: none
        kept = np.flatnonzero(source >= 0)
        new_of_old[source[kept]] = kept
        alive = new_of_old[self._docs] >= 0
        fresh = np.flatnonzero(source < 0)
        if len(fresh) != len(documents):
            raise ValueError("one document per new position (-1) is needed")
        added = [tuple(doc) for doc in documents]
        out = object.__new__(BM25Index)
        out.k1, out.b = self.k1, self.b
        merged: list[tuple[str, ...]] = [()] * size
        for i in kept.tolist():
            merged[i] = self._documents[int(source[i])]
        for i, doc in zip(fresh.tolist(), added, strict=True):
            merged[i] = doc
        out._documents = tuple(merged)
        out.size = size
        vocab = dict(self._vocab) if added else self._vocab
        lookup = vocab.setdefault
        new_terms = np.fromiter(
            (lookup(t, len(vocab)) for doc in added for t in doc),
            np.int64,
            sum(len(doc) for doc in added),
        )
        new_docs = np.repeat(fresh, np.fromiter((len(d) for d in added), np.int64, len(added)))
        width = max(size, 1)
        keys, counts = np.unique(new_terms * width + new_docs, return_counts=True)
        old_keys = self._terms[alive] * width + new_of_old[self._docs[alive]]
        keys = np.concatenate([old_keys, keys])
        tf = np.concatenate([self._tf[alive], counts.astype(np.float32)])
        # The moved postings keep their order unless documents were reordered, and
        # the added ones are one sorted run: a stable sort merges them.
        order = np.argsort(keys, kind="stable")
        keys, tf = keys[order], tf[order]
        out._vocab = vocab
        out._terms = keys // width
        out._docs = keys % width
        out._tf = tf.astype(np.float32)
        out._offsets = np.searchsorted(out._terms, np.arange(len(vocab) + 1))
        out._norm = out._length_norms()
        return out

    def _length_norms(self) -> npt.NDArray[np.float32]:
        """``k1 * (1 - b + b * length / average length)`` of every document."""
        lengths = np.fromiter((len(d) for d in self._documents), np.float32, self.size)
        average = float(lengths.mean()) if self.size else 0.0
        if average <= 0:
            return np.full(self.size, self.k1, dtype=np.float32)
        norms: npt.NDArray[np.float32] = self.k1 * (1 - self.b + self.b * lengths / average)
        return norms

    def _set(
        self,
        kept: tuple[tuple[str, ...], ...],
        vocab: dict[str, int],
        terms: Ints,
        docs: Ints,
        tf: npt.NDArray[np.float32],
        documents: Sequence[Sequence[str]],
    ) -> None:
        start = len(kept)
        # Tuples of strings, not lists: the cyclic GC stops tracking them, and a full
        # collection then need not walk every cached document's tokens.
        added = tuple(tuple(doc) for doc in documents)
        self._documents: tuple[tuple[str, ...], ...] = (*kept, *added)
        self.size = len(self._documents)
        self._norm = self._length_norms()
        self._vocab = dict(vocab) if added else vocab
        lookup = self._vocab.setdefault
        new_terms = np.fromiter(
            (lookup(t, len(self._vocab)) for doc in added for t in doc),
            np.int64,
            sum(len(doc) for doc in added),
        )
        new_docs = np.repeat(
            np.arange(start, self.size, dtype=np.int64),
            np.fromiter((len(doc) for doc in added), np.int64, len(added)),
        )
        # (term, document) pairs counted: a key orders them by term, then document.
        width = max(self.size, 1)
        keys, counts = np.unique(new_terms * width + new_docs, return_counts=True)
        if len(terms):
            old_keys = terms * width + docs
            keys = np.concatenate([old_keys, keys])
            counts = np.concatenate([tf, counts.astype(np.float32)])
            order = np.argsort(keys, kind="stable")
            keys, counts = keys[order], counts[order]
        self._terms = keys // width
        self._docs = keys % width
        self._tf = counts.astype(np.float32)
        self._offsets = np.searchsorted(self._terms, np.arange(len(self._vocab) + 1))

    def document(self, index: int) -> tuple[str, ...]:
        """The tokens of document ``index`` (kept to rebuild without re-tokenising)."""
        return self._documents[index]

    def _df(self, term: str) -> tuple[int, int]:
        """(start, end) of ``term``'s postings ((0, 0) when unknown)."""
        tid = self._vocab.get(term)
        if tid is None:
            return 0, 0
        return int(self._offsets[tid]), int(self._offsets[tid + 1])

    def idf(self, term: str) -> float:
        start, end = self._df(term)
        df = end - start
        return math.log(1 + (self.size - df + 0.5) / (df + 0.5))

    def scores(self, query: Sequence[str]) -> npt.NDArray[np.float32]:
        """BM25 score of every document for the query tokens (0 for no match)."""
        out = np.zeros(self.size, dtype=np.float32)
        for term, qtf in Counter(query).items():
            start, end = self._df(term)
            if start == end:
                continue
            docs = self._docs[start:end]
            tf = self._tf[start:end]
            weight = self.idf(term) * qtf
            out[docs] += weight * tf * (self.k1 + 1) / (tf + self._norm[docs])
        return out

    def max_score(self, query: Sequence[str]) -> float:
        """An upper bound of any document's score for ``query`` (for normalisation)."""
        return sum(self.idf(t) * (self.k1 + 1) for t in set(query) if self._df(t)[1] > 0)
