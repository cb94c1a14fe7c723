"""BM25 over joined documents (a memory with the ones said before it) scores as an
index built over the joined texts does, though nothing is indexed twice."""

from __future__ import annotations

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


@pytest.mark.parametrize("counted_up_to", [0, 1_000_000])
@pytest.mark.parametrize(("turns", "session", "seed"), [(1, 3, 1), (2, 5, 2), (3, 4, 3), (2, 1, 4)])
def test_joined_scores_equal_an_index_of_the_joined_texts(
    turns: int, session: int, seed: int, counted_up_to: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``counted_up_to``: a rare term's joined postings sorted, or counted over the
    corpus."""
    monkeypatch.setattr(bm25, "_COUNTED_UP_TO", counted_up_to)
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
