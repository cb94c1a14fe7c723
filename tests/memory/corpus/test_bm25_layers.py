"""A BM25 index after a chain of updates scores exactly as a fresh build over the
same documents (issue S, item 1): appends, removals, replacements and reorders
leave the base postings where they are and read them through a layer until the
layer folds, and no order of these may change a score by a bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sidecar.memory.corpus import bm25
from sidecar.memory.corpus.bm25 import BM25Index

WORDS = "tea dog oslo chess night shift ramen juniper beach paint hike guitar".split()
QUERIES = (
    ["tea"],
    ["dog", "oslo", "dog"],
    ["juniper", "beach", "absent"],
    ["paint", "paint", "hike", "tea", "ramen"],
    [],
)


def document(rng: random.Random) -> list[str]:
    return [rng.choice(WORDS) for _ in range(rng.randint(1, 12))]


def step(
    documents: list[list[str]], rng: random.Random
) -> tuple[list[int], list[list[str]], list[list[str]]]:
    """One random update: (sources, added documents, the documents after it)."""
    size = len(documents)
    kind = rng.choice(["append", "remove", "replace", "supersede", "reorder"])
    order = list(range(size))
    if kind == "remove" and size > 2:
        for gone in rng.sample(order, rng.randint(1, 3)):
            order.remove(gone)
    elif kind == "replace" and size:
        order[rng.randrange(size)] = -1
    elif kind == "supersede" and size:
        order.pop(rng.randrange(size))
        order.append(-1)
    elif kind == "reorder" and size > 3:
        i, j = rng.sample(range(size), 2)
        order[i], order[j] = order[j], order[i]
    if kind == "append" or not order:
        order.extend([-1] * rng.randint(1, 4))
    added = [document(rng) for j in order if j < 0]
    fresh = iter(added)
    after = [documents[j] if j >= 0 else next(fresh) for j in order]
    return order, added, after


def same_scores(index: BM25Index, documents: list[list[str]]) -> None:
    fresh = BM25Index(documents)
    assert index.size == fresh.size
    assert np.array_equal(index.lengths, fresh.lengths)
    for query in QUERIES:
        assert np.array_equal(index.scores(query), fresh.scores(query))
        assert index.max_score(query) == fresh.max_score(query)
        both = index.scored(query)  # the two at once, each term looked up once
        assert np.array_equal(both[0], fresh.scores(query))
        assert both[1] == fresh.max_score(query)
        for term in set(query):
            assert index.idf(term) == fresh.idf(term)
    priors = np.full((len(documents), 2), -1, dtype=np.int64)
    priors[1:, 0] = np.arange(len(documents) - 1)
    priors[2:, 1] = np.arange(len(documents) - 2)
    for capped in (False, True):
        joined, built = index.joined(priors, capped=capped), fresh.joined(priors, capped=capped)
        for query in QUERIES:
            assert np.array_equal(joined.scores(query), built.scores(query))


@pytest.mark.parametrize("fold_every", [1, 8, 1_000_000])
@pytest.mark.parametrize("seed", range(4))
def test_a_chain_of_updates_scores_as_a_fresh_build(
    seed: int, fold_every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fold_every``: fold at every update, now and then, or never."""
    monkeypatch.setattr(bm25, "FOLD_EVERY", fold_every)
    rng = random.Random(seed)
    documents = [document(rng) for _ in range(rng.randint(0, 30))]
    index = BM25Index(documents)
    for _ in range(40):
        before = index
        scores_before = [before.scores(q) for q in QUERIES]
        sources, added, documents = step(documents, rng)
        index = index.remapped(sources, added)
        same_scores(index, documents)
        # The index it was made from still scores as it did.
        for query, scores in zip(QUERIES, scores_before, strict=True):
            assert np.array_equal(before.scores(query), scores)


def test_appends_share_the_base_postings_until_the_layer_folds() -> None:
    rng = random.Random(5)
    documents = [document(rng) for _ in range(200)]
    index = BM25Index(documents)
    base = index._terms
    appended = index
    for _ in range(3):
        new = [document(rng)]
        appended = appended.extended(new)
        documents.append(new[0])
    assert appended._terms is base  # not moved: three short documents are a layer
    same_scores(appended, documents)
    while appended._terms is base:
        new = [document(rng) for _ in range(10)]
        appended = appended.extended(new)
        documents.extend(new)
    assert appended._moved is None  # folded
    assert not len(appended._layer_terms)
    same_scores(appended, documents)


def test_term_ids_layer_like_tokens() -> None:
    """An index on a shared vocabulary, updated with term ids, scores as tokens do."""
    rng = random.Random(9)
    vocabulary: dict[str, int] = {}
    documents = [document(rng) for _ in range(20)]
    ids = [bm25.term_ids(vocabulary, d) for d in documents]
    index = BM25Index(None, vocabulary=vocabulary, ids=ids)
    for _ in range(10):
        sources, added, documents = step(documents, rng)
        index = index.remapped(sources, None, [bm25.term_ids(vocabulary, d) for d in added])
        same_scores(index, documents)


@pytest.mark.parametrize("seed", range(3))
def test_a_cold_index_answers_by_scans_until_its_table_is_needed(seed: int) -> None:
    """An index of term ids (a cold snapshot's) sorts no table for its questions:
    each asked term is scanned, with the postings and scores a sorted table gives;
    the table is sorted for an update made from it, or when asked to."""
    rng = random.Random(seed)
    vocabulary: dict[str, int] = {}
    documents = [document(rng) for _ in range(rng.randint(0, 40))]
    documents[len(documents) // 2 :] = [[], *documents[len(documents) // 2 + 1 :]]
    ids = [bm25.term_ids(vocabulary, d) for d in documents]
    tokens = BM25Index(documents)
    cold = BM25Index(None, vocabulary=vocabulary, ids=ids)
    same_scores(cold, documents)
    assert cold._scan is not None  # answered by scans
    assert not len(cold._terms)
    for term in {*WORDS, "absent"}:
        for a, b in zip(cold.postings(term), tokens.postings(term), strict=True):
            assert np.array_equal(a, b), term
    sources, added, after = step(documents, rng)
    updated = BM25Index(None, vocabulary=vocabulary, ids=ids).remapped(
        sources, None, [bm25.term_ids(vocabulary, d) for d in added]
    )
    same_scores(updated, after)
    cold.build_table()
    assert cold._scan is None
    same_scores(cold, documents)
    cold.build_table()  # once sorted, a no-op
    same_scores(cold, documents)


def test_a_cold_index_sorts_its_table_once_it_scanned_enough_terms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bm25, "SCANS_BEFORE_TABLE", 3)
    rng = random.Random(4)
    vocabulary: dict[str, int] = {}
    documents = [document(rng) for _ in range(20)]
    cold = BM25Index(
        None, vocabulary=vocabulary, ids=[bm25.term_ids(vocabulary, d) for d in documents]
    )
    cold.scores(["tea", "dog", "oslo"])
    assert cold._scan is not None
    cold.scores(["tea", "dog"])  # asked before: no scan
    assert cold._scan is not None
    cold.scores(["chess"])
    assert cold._scan is None
    same_scores(cold, documents)
