"""A cold index's term ids laid end to end (:func:`flat_ids`) are the documents'
ids in order, whatever the arrays given: joined bytes for contiguous int32 arrays,
a concatenation otherwise; and a scan's postings are the sorted table's."""

from __future__ import annotations

import numpy as np
import pytest

from sidecar.memory.corpus.bm25 import BM25Index
from sidecar.memory.corpus.term_scan import TermScan, flat_ids


def documents(count: int, seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.integers(0, 40, size=int(rng.integers(0, 30)), dtype=np.int32) for _ in range(count)
    ]


@pytest.mark.parametrize("count", [0, 1, 7, 500])
def test_flat_ids_are_the_documents_ids_in_order(count: int) -> None:
    ids = documents(count)
    total = sum(len(d) for d in ids)
    flat = flat_ids(ids, total)
    assert flat.dtype == np.int32
    expected = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)
    assert np.array_equal(flat, expected)


def test_arrays_that_are_not_contiguous_int32_are_concatenated() -> None:
    ids = documents(20)
    total = sum(len(d) for d in ids)
    expected = np.concatenate(ids)
    strided = [np.repeat(d, 2)[::2] for d in ids]  # views with a stride of two ids
    assert not all(d.flags.c_contiguous for d in strided if len(d) > 1)
    assert np.array_equal(flat_ids(strided, total), expected)
    wide = [d.astype(np.int64) for d in ids]  # twice the bytes per id
    assert np.array_equal(flat_ids(wide, total), expected)
    assert np.array_equal(flat_ids([d.tolist() for d in ids], total), expected)


def test_a_scan_gives_the_tables_postings() -> None:
    ids = documents(300)
    vocabulary = {f"t{i}": i for i in range(40)}
    scanned = BM25Index(None, ids=ids, vocabulary=vocabulary)
    assert isinstance(scanned._scan, TermScan)
    table = BM25Index(None, ids=ids, vocabulary=vocabulary)
    table.build_table()
    for term in [*vocabulary, "never-said"]:
        docs_a, tf_a = scanned.postings(term)
        docs_b, tf_b = table.postings(term)
        order = np.argsort(docs_b)
        assert np.array_equal(docs_a, docs_b[order]), term
        assert np.array_equal(tf_a, tf_b[order]), term
