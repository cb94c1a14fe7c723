"""BM25 over joined documents (a memory with the ones said before it) scores as an
index built over the joined texts does, though nothing is indexed twice."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from sidecar.memory.corpus import bm25
from sidecar.memory.corpus.bm25 import BM25Index

WORDS = "tea dog oslo chess night shift ramen juniper beach tea dog".split()


def documents(count: int, seed: int) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    return [list(rng.choice(WORDS, size=int(rng.integers(0, 7)))) for _ in range(count)]


def session_priors(count: int, turns: int, session: int) -> np.ndarray:
    """Each document's previous ones in its session (``session`` documents each),
    newest first, -1 past the session's start."""
    priors = np.full((count, turns), -1, dtype=np.int64)
    for i in range(count):
        for t in range(turns):
            j = i - t - 1
            if j >= 0 and j // session == i // session:
                priors[i, t] = j
    return priors


@pytest.mark.parametrize(("turns", "session", "seed"), [(1, 3, 1), (2, 5, 2), (3, 4, 3), (2, 1, 4)])
def test_joined_scores_equal_an_index_of_the_joined_texts(
    turns: int, session: int, seed: int
) -> None:
    docs = documents(37, seed)
    priors = session_priors(len(docs), turns, session)
    joined_texts = [
        [*docs[i], *(w for j in priors[i] if j >= 0 for w in docs[j])] for i in range(len(docs))
    ]
    built = BM25Index(joined_texts)
    joined = BM25Index(docs).joined(priors)
    queries = (["tea"], ["dog", "oslo", "dog"], ["juniper", "beach", "absent"], [], ["x"])
    for query in (*queries, *queries):  # asked again: from the terms' kept postings
        assert np.array_equal(joined.scores(query), built.scores(query)), query


def test_an_index_without_priors_joins_nothing() -> None:
    docs = documents(12, 5)
    index = BM25Index(docs)
    alone = index.joined(np.full((len(docs), 2), -1, dtype=np.int64))
    assert np.array_equal(alone.scores(["tea", "dog"]), index.scores(["tea", "dog"]))


def _one_term_joined(joined: bm25.JoinedBM25, term: str) -> tuple[np.ndarray, np.ndarray]:
    """A term's joined postings counted over the whole corpus, in document order:
    the reference each term's postings must equal bit for bit (in any order)."""
    docs, tf = joined._parts.postings(term)
    if not len(docs) or not joined._followers:
        return docs, tf
    into = np.concatenate([docs, *(f[docs] for f in joined._followers)])
    reached = into >= 0
    if joined._shares is not None:
        counts = np.concatenate([tf, *(tf * sh[docs] for sh in joined._shares)])[reached]
    else:
        counts = np.tile(tf, len(joined._followers) + 1)[reached]
    summed = np.bincount(into[reached], weights=counts, minlength=joined.size)
    found = np.flatnonzero(summed)
    return found, summed[found].astype(np.float32)


@pytest.mark.parametrize("capped", [False, True])
@pytest.mark.parametrize(("seed", "session", "empty"), [(1, 4, 0.0), (2, 4, 0.3), (3, 2, 0.0)])
def test_a_questions_terms_joined_together_equal_each_joined_alone(
    seed: int, session: int, empty: float, capped: bool
) -> None:
    """Each of a question's terms is joined from its own postings; its postings
    (documents, counts, dtypes) equal a count over the whole corpus, and the
    scores are the ones it gets asked alone. ``empty``: a share of the documents
    without a word (a prior of an empty line adds a count of 0)."""
    docs = documents(53, seed)
    rng = np.random.default_rng(seed)
    docs = [[] if rng.random() < empty else doc for doc in docs]
    priors = session_priors(len(docs), 2, session)
    index = BM25Index(docs)
    terms = ["dog", "absent", "tea", "juniper", "night", "x", "oslo"]
    together = index.joined(priors, capped=capped)._joined_many(terms)
    reference = index.joined(priors, capped=capped)
    for term, (found, tf) in zip(terms, together, strict=True):
        want, want_tf = _one_term_joined(reference, term)
        order = np.argsort(found)
        assert np.array_equal(found[order], want), term
        assert np.array_equal(tf[order], want_tf), term
        assert (found.dtype, tf.dtype) == (want.dtype, want_tf.dtype), term
    one_by_one = index.joined(priors, capped=capped)
    for term in terms:  # each asked alone: no batch
        one_by_one.scores([term])
    batched = index.joined(priors, capped=capped)
    query = ["tea", "dog", "oslo", "dog", "absent", "beach"]
    assert np.array_equal(batched.scores(query), one_by_one.scores(query))


def test_scores_add_the_terms_as_the_per_term_loop_does() -> None:
    """Every term's shares are added at once, each in float32 as the per-term loop
    computes and adds it: the same scores, bit for bit, whatever the counts."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        size = int(rng.integers(1, 200))
        table: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for t in range(int(rng.integers(0, 8))):
            held = rng.choice(size, int(rng.integers(0, size + 1)), replace=False)
            counts = rng.integers(1, 20, len(held)) * (rng.random() + 0.1)
            table[f"t{t}"] = (held.astype(np.int64), counts.astype(np.float32))
        norm = (rng.random(size) * 3 + 0.1).astype(np.float32)
        query = [f"t{int(x)}" for x in rng.integers(0, 10, int(rng.integers(0, 9)))]

        def postings(
            term: str, table: dict[str, tuple[np.ndarray, np.ndarray]] = table
        ) -> tuple[np.ndarray, np.ndarray]:
            return table.get(term, (bm25.NO_DOCS, bm25.NO_COUNTS))

        want = np.zeros(size, dtype=np.float32)
        for term, qtf in Counter(query).items():
            held, tf = postings(term)
            if len(held):
                weight = bm25._idf(size, len(held)) * qtf
                want[held] += weight * tf * (1.2 + 1) / (tf + norm[held])
        got = bm25._scores(query, size, 1.2, norm, postings)
        assert got.dtype == np.float32
        assert np.array_equal(got, want), query
