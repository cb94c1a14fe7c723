"""Okapi BM25 over one scope's visible memories.

The index is a compressed posting table: for every (term, document) pair its term
frequency, sorted by term then document, with each term's slice found through an
offsets array. Building it is O(total tokens) (one dictionary lookup per token, the
rest vectorised); appending documents merges their pairs in without touching the
old documents' tokens, removing or replacing some moves the others' postings
(:meth:`BM25Index.remapped`), and documents joined from an index's (each memory
with the ones said before it) are scored from that index's postings
(:class:`JoinedBM25`): nothing is indexed twice. A query costs O(sum of the
query terms' posting lengths). It grows with the user's visible corpus, never with
other users' data, and never quadratically. IDF is computed over exactly the
documents the scope may see.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from sidecar.memory.corpus.moves import Moves
from sidecar.memory.corpus.term_scan import NO_COUNTS, NO_DOCS, TermScan, flat_ids
from sidecar.memory.corpus.term_scan import TermIds as TermIds

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float32]
Documents = Sequence[Sequence[str]]


class BM25Index:
    """``documents``: each document's tokens; ``vocabulary``: term ids shared with
    other indexes (the corpus cache's, so a memory's tokens are looked up once,
    :mod:`~sidecar.memory.corpus.features`); ``ids``: each document's term ids in
    it, given instead of its tokens (``documents`` may then be None). An index
    reads only the ids its documents have: the shared vocabulary may grow. It keeps
    no token: postings and lengths only.

    An update (:meth:`extended`, :meth:`remapped`) makes a layered index: the base
    postings, shared with the index before, read through where each base document
    went, and a small table of the added documents' postings. A query term reads
    both, so an update moves the added postings and one array the size of the
    corpus instead of every posting; once the layer or the removed documents pass
    ``1 / FOLD_EVERY`` of the base, the next update folds them into a new base."""

    #: The documents' term ids, where the posting table is left to scans.
    _scan: TermScan | None

    def __init__(
        self,
        documents: Documents | None,
        *,
        k1: float = 1.2,
        b: float = 0.75,
        vocabulary: dict[str, int] | None = None,
        ids: Sequence[TermIds] | None = None,
    ):
        self.k1 = k1
        self.b = b
        vocab = {} if vocabulary is None else vocabulary
        added = _parts(documents, ids)
        lengths = _lengths(added)
        if ids is not None:
            # Read once per memory already: the table is sorted when first needed,
            # each asked term scanned until then (term_scan).
            self._based(vocab, NO_DOCS, NO_DOCS, NO_COUNTS, lengths)
            self._scan = TermScan(ids, lengths)
            return
        width = max(len(lengths), 1)
        positions = np.arange(len(lengths))
        keys, counts = _counted(vocab, added, positions, width, ids=False)
        self._based(vocab, keys // width, keys % width, counts, lengths)

    def build_table(self) -> None:
        """Sort the posting table now, where it was left to scans: before an update
        made from this index needs it, off the request path (the corpus cache's
        readying). A no-op once sorted."""
        scan = self._scan
        if scan is None:
            return
        width = max(self.size, 1)
        keys, counts = _counted(self._vocab, scan.ids, np.arange(self.size), width, ids=True)
        self._based(self._vocab, keys // width, keys % width, counts, self._lengths)

    def _like(self) -> BM25Index:
        out = object.__new__(BM25Index)
        out.k1, out.b = self.k1, self.b
        return out

    def extended(
        self, documents: Documents | None, ids: Sequence[TermIds] | None = None
    ) -> BM25Index:
        """A new index over this one's documents followed by ``documents`` (indices
        continue from ``size``); the old documents are not tokenised or counted
        again. This index is unchanged."""
        added = len(_parts(documents, ids))
        sources = np.concatenate(
            [np.arange(self.size, dtype=np.int64), np.full(added, -1, dtype=np.int64)]
        )
        return self.remapped(sources, documents, ids)

    def remapped(
        self,
        sources: Sequence[int] | Ints | Moves,
        documents: Documents | None,
        ids: Sequence[TermIds] | None = None,
        *,
        fold: bool = False,
    ) -> BM25Index:
        """A new index whose document ``i`` is this one's document ``sources[i]``,
        or, where ``sources[i]`` is -1, the next of ``documents`` (memories removed,
        replaced or added: a supersede, a delete, a consolidation pass). The kept
        documents' postings are not counted again, and the result scores as a fresh
        build over the same documents does. This index is unchanged. ``fold``: one
        table of its own (no posting of a removed document is kept: a deleted
        memory's words)."""
        self.build_table()
        moves = Moves.of(sources, self.size)
        size = len(moves)
        source = moves.sources
        kept = moves.kept
        new_of_old = moves.new_of_old
        fresh = moves.fresh
        added = _parts(documents, ids)
        if len(fresh) != len(added):
            raise ValueError("one document per new position (-1) is needed")
        lengths = np.empty(size, dtype=np.float32)
        lengths[kept] = self._lengths[source[kept]]
        lengths[fresh] = _lengths(added)
        width = max(size, 1)
        keys, counts = _counted(self._vocab, added, fresh, width, ids=ids is not None)
        # Where each base document went (-1: removed), one entry more reading -1.
        if self._moved is None:
            moved = np.append(new_of_old[: self._base_size], -1)
        else:
            moved = new_of_old[self._moved]
        # The layer: the kept documents' added postings, moved, and the new ones'.
        alive = new_of_old[self._layer_docs] >= 0
        layer_keys = np.concatenate(
            [self._layer_terms[alive] * width + new_of_old[self._layer_docs[alive]], keys]
        )
        layer_tf = np.concatenate([self._layer_tf[alive], counts])
        removed = int(np.count_nonzero(moved[:-1] < 0))
        out = self._like()
        if (
            not fold
            and FOLD_EVERY * len(layer_keys) <= len(self._terms)
            and FOLD_EVERY * removed <= self._base_size
        ):
            order = np.argsort(layer_keys, kind="stable")
            layer_keys, layer_tf = layer_keys[order], layer_tf[order]
            out._based(
                self._vocab,
                self._terms,
                self._docs,
                self._tf,
                lengths,
                self._base_size,
                (self._present, self._offsets),
            )
            out._moved = moved
            out._layer_terms, out._layer_docs = np.divmod(layer_keys, width)
            out._layer_tf = layer_tf
            out._index_layer()
            return out
        out._folded(self, moved, layer_keys, layer_tf, lengths)
        return out

    def _folded(
        self, base: BM25Index, moved: Ints, keys: Ints, tf: Floats, lengths: Floats
    ) -> None:
        """Set this index to ``base``'s postings where ``moved`` takes them and the
        layer's (``keys``: term * size + document, any order), one sorted table."""
        width = max(len(lengths), 1)
        alive = moved[base._docs] >= 0
        terms = base._terms[alive]
        docs = moved[base._docs[alive]]
        kept_tf = base._tf[alive]
        kept = moved[:-1][moved[:-1] >= 0]
        order = np.argsort(keys, kind="stable")
        keys, tf = keys[order], tf[order]
        if len(kept) < 2 or bool((kept[1:] > kept[:-1]).all()):
            # Base documents in their old order (a removal, a replacement, an
            # append): the moved postings are still sorted, and the layer's, one
            # sorted run, are inserted where they go; no sort of every posting.
            at = np.searchsorted(terms * width + docs, keys)
            self._based(
                base._vocab,
                np.insert(terms, at, keys // width),
                np.insert(docs, at, keys % width),
                np.insert(kept_tf, at, tf),
                lengths,
            )
            return
        keys = np.concatenate([terms * width + docs, keys])
        tf = np.concatenate([kept_tf, tf])
        order = np.argsort(keys, kind="stable")
        keys, tf = keys[order], tf[order]
        self._based(base._vocab, keys // width, keys % width, tf, lengths)

    def joined(self, priors: Ints, *, capped: bool = False) -> JoinedBM25:
        """BM25 over documents joined from this index's: document ``i`` followed by
        its ``priors[i]`` (-1: none), scored as an index of the joined texts would
        score them, from this index's postings at query time (:class:`JoinedBM25`).
        A document is the prior of at most one document per position (a memory's
        priors are the ones before it in its session). ``capped``: a prior longer
        than the document counts as that many tokens (its counts scaled down)."""
        return JoinedBM25(self, priors, capped=capped)

    def _based(
        self,
        vocab: dict[str, int],
        terms: Ints,
        docs: Ints,
        tf: Floats,
        lengths: Floats,
        base_size: int | None = None,
        slices: tuple[Ints, Ints] | None = None,
    ) -> None:
        """Set this index to base postings sorted by term then document (``docs``
        numbered as ``base_size`` base documents, default the index's), and no
        layer. ``slices``: the postings' :func:`_term_slices`, where another index
        already found them (an update shares its base)."""
        self.size = len(lengths)
        self._lengths = lengths
        self._norm = _length_norms(lengths, self.k1, self.b)
        self._vocab = vocab
        self._terms = terms
        self._docs = docs
        self._tf = tf.astype(np.float32, copy=False)
        self._base_size = self.size if base_size is None else base_size
        #: Where each base document is (-1: removed; one entry more reading -1);
        #: None: where it was, the base being this index's first documents.
        self._moved: Ints | None = None
        empty = np.zeros(0, dtype=np.int64)
        self._layer_terms, self._layer_docs = empty, empty
        self._layer_tf = np.zeros(0, dtype=np.float32)
        #: Each asked term's postings read through the layers.
        self._read = _TermPostings(self.size)
        self._present, self._offsets = _term_slices(terms) if slices is None else slices
        self._layer_present, self._layer_offsets = _term_slices(empty)
        self._scan = None  # set last: a reader that sees it unset sees the table

    def _index_layer(self) -> None:
        self._layer_present, self._layer_offsets = _term_slices(self._layer_terms)

    @property
    def vocabulary(self) -> dict[str, int]:
        """The term ids this index reads (shared with others made from it)."""
        return self._vocab

    @property
    def lengths(self) -> Floats:
        """How many tokens each document has (read only)."""
        view = self._lengths.view()
        view.flags.writeable = False
        return view

    def postings(self, term: str) -> tuple[Ints, Floats]:
        """The documents holding ``term`` (each once, in no set order) and its count
        in each."""
        if self._scan is not None:
            return self._read.get(term, self._scanned)
        if self._moved is None and not len(self._layer_terms):
            return self._base_postings(term)
        return self._read.get(term, self._layered_postings)

    def _scanned(self, term: str) -> tuple[Ints, Floats]:
        """``term``'s postings by a scan, or from the table once enough terms were
        scanned to pay for sorting it."""
        scan = self._scan
        if scan is None or scan.scans >= SCANS_BEFORE_TABLE:
            self.build_table()
            return self._base_postings(term)
        tid = self._vocab.get(term)
        if tid is None:
            return NO_DOCS, NO_COUNTS
        return scan.postings(tid)

    def _base_postings(self, term: str) -> tuple[Ints, Floats]:
        """The base table's postings of ``term`` (documents numbered as the base's)."""
        tid = self._vocab.get(term)
        if tid is None:
            return NO_DOCS, NO_COUNTS
        start, end = _slice(self._present, self._offsets, tid)
        return self._docs[start:end], self._tf[start:end]

    def _layered_postings(self, term: str) -> tuple[Ints, Floats]:
        """``term``'s base postings where their documents went, and the layer's."""
        docs, tf = self._base_postings(term)
        if self._moved is not None:
            where = self._moved[docs]
            alive = where >= 0
            docs, tf = where[alive], tf[alive]
        tid = self._vocab.get(term)
        if tid is None:
            return docs, tf
        start, end = _slice(self._layer_present, self._layer_offsets, tid)
        if start < end:
            docs = np.concatenate([docs, self._layer_docs[start:end]])
            tf = np.concatenate([tf, self._layer_tf[start:end]])
        return docs, tf

    def idf(self, term: str) -> float:
        df = len(self.postings(term)[0])
        return _idf(self.size, df)

    def scores(self, query: Sequence[str]) -> npt.NDArray[np.float32]:
        """BM25 score of every document for the query tokens (0 for no match)."""
        return _scores(query, self.size, self.k1, self._norm, self.postings)

    def max_score(self, query: Sequence[str]) -> float:
        """An upper bound of any document's score for ``query`` (for normalisation)."""
        return self._best({t: len(self.postings(t)[0]) for t in set(query)})

    def scored(self, query: Sequence[str]) -> tuple[npt.NDArray[np.float32], float]:
        """(:meth:`scores`, :meth:`max_score`) of ``query``, each term's postings
        looked up once for both."""
        found = {term: self.postings(term) for term in set(query)}
        scores = _scores(query, self.size, self.k1, self._norm, found.__getitem__)
        return scores, self._best({term: len(docs) for term, (docs, _) in found.items()})

    def _best(self, frequencies: dict[str, int]) -> float:
        """The highest score a document could have for terms of these document
        frequencies (summed in the dictionary's order)."""
        return sum(_idf(self.size, df) * (self.k1 + 1) for df in frequencies.values() if df > 0)


#: Terms an index built afresh answers by scans (:mod:`~sidecar.memory.corpus.term_scan`)
#: before it sorts its table (a few questions' terms): a scan costs a thirtieth to a
#: hundred-and-fiftieth of the sort, from a few hundred memories to tens of
#: thousands, so the scans before it cost at most about one sort.
SCANS_BEFORE_TABLE = 32

#: An update folds an index's layer into its base once the layer's postings (or
#: the removed base documents) are more than 1 / this of the base's.
FOLD_EVERY = 8


def _idf(size: int, df: int) -> float:
    return math.log(1 + (size - df + 0.5) / (df + 0.5))


def _scores(
    query: Sequence[str],
    size: int,
    k1: float,
    norm: Floats,
    postings: Callable[[str], tuple[Ints, Floats]],
) -> Floats:
    """BM25 score of every one of ``size`` documents for the query tokens, from
    each term's postings and the documents' length norms."""
    out = np.zeros(size, dtype=np.float32)
    found = [(qtf, *postings(term)) for term, qtf in Counter(query).items()]
    found = [(qtf, docs, tf) for qtf, docs, tf in found if len(docs)]
    if not found:
        return out
    # Every term at once: each posting's share in float32 as a term alone computes
    # it (the weight a float32 like any Python float beside a float32 array), added
    # in term order, so every document's sum is the per-term loop's, bit for bit.
    docs = np.concatenate([d for _, d, _ in found])
    tf = np.concatenate([t for _, _, t in found])
    weights = np.repeat(
        np.asarray([_idf(size, len(d)) * qtf for qtf, d, _ in found], dtype=np.float32),
        [len(d) for _, d, _ in found],
    )
    np.add.at(out, docs, weights * tf * np.float32(k1 + 1) / (tf + norm[docs]))
    return out


class _TermPostings:
    """Each asked term's postings, made when first asked (a user's questions share
    words) and kept with the index; all dropped at once when they hold more than
    ``_KEPT_PER_DOCUMENT`` entries per document."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._found: dict[str, tuple[Ints, Floats]] = {}
        self._kept = 0

    def get(self, term: str, make: Callable[[str], tuple[Ints, Floats]]) -> tuple[Ints, Floats]:
        found = self._found.get(term)
        if found is None:
            found = make(term)
            self.put(term, found)
        return found

    def missing(self, terms: Iterable[str]) -> list[str]:
        """Those of ``terms`` not kept, each once, in order."""
        return [term for term in dict.fromkeys(terms) if term not in self._found]

    def put(self, term: str, found: tuple[Ints, Floats]) -> None:
        self._kept += len(found[0])
        if self._kept > _KEPT_PER_DOCUMENT * max(self._size, 1024):
            self._found.clear()
            self._kept = len(found[0])
        self._found[term] = found


def _term_slices(terms: Ints) -> tuple[Ints, Ints]:
    """Each term of sorted postings, and where its slice starts (one more: the end)."""
    starts = np.flatnonzero(np.concatenate([[True], terms[1:] != terms[:-1]]))
    starts = starts[: len(terms)]  # none when there are no postings
    return terms[starts], np.append(starts, len(terms)).astype(np.int64)


def _slice(present: Ints, offsets: Ints, tid: int) -> tuple[int, int]:
    """(start, end) of term ``tid``'s postings ((0, 0) when it has none)."""
    k = int(np.searchsorted(present, tid))
    if k == len(present) or present[k] != tid:
        return 0, 0
    return int(offsets[k]), int(offsets[k + 1])


def term_ids(vocab: dict[str, int], document: Sequence[str]) -> TermIds:
    """``document``'s tokens as term ids (32-bit: kept per memory by the corpus
    cache's memo); new terms are added to ``vocab``."""
    lookup = vocab.setdefault
    return np.fromiter((lookup(t, len(vocab)) for t in document), np.int32, len(document))


#: How many joined postings per document a :class:`JoinedBM25` keeps for the
#: terms it was asked (a few times the joined postings of a typical question).
_KEPT_PER_DOCUMENT = 4


def _length_norms(lengths: Floats, k1: float, b: float) -> Floats:
    """``k1 * (1 - b + b * length / average length)`` of every document."""
    # ndarray.mean's arithmetic (the sum in the array's type, divided by the count
    # as an integer, cast back) without its checks, a third of a small index's norms.
    average = (
        float(lengths.dtype.type(np.add.reduce(lengths) / np.intp(len(lengths))))
        if len(lengths)
        else 0.0
    )
    if average <= 0:
        return np.full(len(lengths), k1, dtype=np.float32)
    norms: Floats = k1 * (1 - b + b * lengths / average)
    return norms


def _parts(
    documents: Documents | None, ids: Sequence[TermIds] | None
) -> Documents | Sequence[TermIds]:
    """What is counted of new documents: their term ids when given, else tokens."""
    if ids is not None:
        return ids
    if documents is None:
        raise ValueError("documents or their term ids are needed")
    return documents


def _lengths(parts: Documents | Sequence[TermIds]) -> Floats:
    return np.fromiter(map(len, parts), np.float32, len(parts))


def _counted(
    vocab: dict[str, int],
    parts: Documents | Sequence[TermIds],
    positions: npt.ArrayLike,
    width: int,
    *,
    ids: bool,
) -> tuple[Ints, Floats]:
    """Documents as sorted (term * ``width`` + position) keys with their counts:
    ``parts`` are their term ids (``ids``), or their tokens (looked up; new terms
    are added to ``vocab``)."""
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    if ids and parts:
        terms = flat_ids(cast(Sequence[TermIds], parts), int(lengths.sum())).astype(np.int64)
    else:
        lookup = vocab.setdefault
        terms = np.fromiter(
            (lookup(t, len(vocab)) for doc in parts for t in doc),
            np.int64,
            int(lengths.sum()),
        )
    docs = np.repeat(np.asarray(positions, dtype=np.int64), lengths)
    keys, counts = np.unique(terms * width + docs, return_counts=True)
    return keys, counts.astype(np.float32)


class JoinedBM25:
    """BM25 over joined documents (:meth:`BM25Index.joined`), read from the parts'
    index when a query comes: a term's count in a joined document is the sum of its
    counts in the parts, its document frequency the number of joined documents
    holding it. Nothing is indexed twice, so a new snapshot (a cold build, an
    update) costs a few array operations over its documents instead of moving a
    joined posting table, and the scores are the ones an index built over the
    joined texts gives (the same arithmetic, in the same order). ``capped``: each
    prior weighs at most as much as the document it is joined to, its counts and
    length scaled by ``min(1, own length / its length)``, so a long answer said
    before a short line does not drown the line's own words."""

    def __init__(self, parts: BM25Index, priors: Ints, *, capped: bool = False) -> None:
        self._parts = parts
        self.size = parts.size
        self.k1, self.b = parts.k1, parts.b
        lengths = parts._lengths.copy()
        #: Per prior position t: the joined document that takes each part as its
        #: t-th prior (-1: none), one entry more so that -1 reads -1.
        self._followers: list[Ints] = []
        #: Per prior position t, when capped: the share of each part's counts its
        #: follower takes in.
        self._shares: list[Floats] | None = [] if capped else None
        own = parts._lengths
        for t in range(priors.shape[1]):
            column = priors[:, t]
            has = np.flatnonzero(column >= 0)
            before = column[has]
            follower = np.full(self.size + 1, -1, dtype=np.int64)
            follower[before] = has
            self._followers.append(follower)
            part = own[before]
            if self._shares is not None:
                share = np.zeros(self.size + 1, dtype=np.float32)
                scale = np.minimum(1.0, own[has] / np.maximum(part, 1.0), dtype=np.float32)
                share[before] = scale
                self._shares.append(share)
                part = part * scale
            lengths[has] += part
        self._lengths = lengths
        self._norm = _length_norms(lengths, self.k1, self.b)
        #: Each asked term's joined postings.
        self._postings = _TermPostings(self.size)

    def scores(self, query: Sequence[str]) -> npt.NDArray[np.float32]:
        """BM25 score of every joined document for the query tokens (0: no match)."""
        asked = self._postings.missing(query)
        for term, found in zip(asked, self._joined_many(asked), strict=True):
            self._postings.put(term, found)
        return _scores(
            query,
            self.size,
            self.k1,
            self._norm,
            lambda term: self._postings.get(term, self._joined_postings),
        )

    def _joined_postings(self, term: str) -> tuple[Ints, Floats]:
        """The joined documents holding ``term``, and its count in each."""
        return self._joined_many([term])[0]

    def _joined_many(self, terms: Sequence[str]) -> list[tuple[Ints, Floats]]:
        """Each of ``terms``' joined documents and its count in each (in no set
        order): a term's documents, then those that take one of them as a prior."""
        found = [self._parts.postings(term) for term in terms]
        if not self._followers:
            return found
        shares = self._shares if self._shares is not None else [None] * len(self._followers)
        for k, (docs, tf) in enumerate(found):
            if len(docs):
                found[k] = self._joined_term(docs, tf, shares)
        return found

    def _joined_term(
        self, docs: Ints, tf: Floats, shares: Sequence[Floats | None]
    ) -> tuple[Ints, Floats]:
        """One term's joined postings from its own (``docs``, ``tf``). Each joined
        document's count is summed in float64 in the order its parts come (its own,
        then each prior's: uncapped, integers, exact), as a count over the joined
        texts sums it; a term none of whose documents is a prior keeps its own
        postings. Only the term's postings and the documents they reach are read,
        not the corpus (most memories of a long conversation have no prior)."""
        taken: list[tuple[Ints, Floats]] = []
        for follower, share in zip(self._followers, shares, strict=True):
            into = follower[docs]
            hit = np.flatnonzero(into >= 0)
            if len(hit):
                counts = tf[hit] if share is None else tf[hit] * share[docs[hit]]
                taken.append((into[hit], counts))
        if not taken:
            return docs, tf
        summed = np.zeros(self.size, dtype=np.float64)
        summed[docs] = tf
        seen = np.zeros(self.size, dtype=np.bool_)
        seen[docs] = True
        joined = [docs]
        for into, counts in taken:
            # A document takes at most one prior per position: ``into`` holds
            # each once, so the fancy add adds each count once, in this order.
            summed[into] += counts
            new = into[~seen[into]]
            seen[new] = True
            joined.append(new)
        out = np.concatenate(joined)
        totals = summed[out]
        held = totals > 0  # a share of 0 (an empty line) holds nothing
        if not held.all():
            out, totals = out[held], totals[held]
        return out, totals.astype(np.float32)
