"""A record's embedding is packed float32 (:class:`Embedding`): the values Milvus
stores, a read-only sequence of Python floats to callers, an eighth of the memory of
a tuple of floats, and a snapshot's matrix is one join of the rows' bytes."""

from __future__ import annotations

import math
import pickle
import tracemalloc

import numpy as np
import pytest

from sidecar.memory.corpus.rows import matrix
from sidecar.memory.records.embeddings import Embedding, stacked
from sidecar.memory.records.records import MemoryRecord, as_vector
from sidecar.memory.store.schema import record_to_row, row_to_record

DIM = 384


def unit_vectors(count: int, dim: int = DIM, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, dim))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def test_an_embedding_holds_the_float32_values_it_was_given() -> None:
    vector = unit_vectors(1)[0]
    for given in (vector, vector.tolist(), tuple(vector.tolist()), vector.astype(np.float64)):
        embedding = Embedding(given)
        assert len(embedding) == DIM
        assert embedding.raw == vector.astype("<f4").tobytes()
        assert embedding.tolist() == vector.tolist()
        assert list(embedding) == vector.tolist()
        assert all(type(x) is float for x in embedding)
        assert embedding[5] == float(vector[5])
        assert embedding[-1] == float(vector[-1])
        assert embedding[2:6] == Embedding(vector[2:6])
        assert np.array_equal(np.asarray(embedding), vector)
        assert np.asarray(embedding, dtype=np.float64).dtype == np.float64
    # Python floats round to float32 as numpy rounds them.
    assert Embedding([0.1, 1 / 3]).tolist() == np.asarray([0.1, 1 / 3], np.float32).tolist()
    assert Embedding([1, 2]).tolist() == [1.0, 2.0]
    assert Embedding(x / 2 for x in range(3)).tolist() == [0.0, 0.5, 1.0]
    assert Embedding([1e40, -1e40]).tolist() == [math.inf, -math.inf]
    assert math.isnan(Embedding([math.nan])[0])
    assert len(Embedding([])) == 0
    assert not Embedding([])


def test_an_embedding_refuses_what_is_not_a_vector() -> None:
    with pytest.raises(ValueError, match="one dimension"):
        Embedding(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="could not convert"):
        Embedding(["a", "b"])
    with pytest.raises(ValueError, match="whole float32"):
        Embedding.from_bytes(b"\x00" * 7)


def test_equality_and_hash_follow_the_bytes() -> None:
    a, b = unit_vectors(2)
    first, again, other = Embedding(a), Embedding(a.tolist()), Embedding(b)
    assert first == again
    assert hash(first) == hash(again)
    assert first != other
    assert first == tuple(a.tolist())
    assert first == a.tolist()
    assert first != tuple(a.tolist())[:-1]
    assert first != a.tobytes()  # bytes are not a vector
    assert Embedding([0.0]) != Embedding([-0.0])  # "is this the stored vector"
    assert len({first, again, other}) == 2


def test_an_embedding_is_immutable_and_survives_a_pickle() -> None:
    embedding = Embedding(unit_vectors(1)[0])
    with pytest.raises(AttributeError):
        embedding.raw = b""  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        embedding.array()[0] = 1.0  # a read-only view of the bytes
    copy = np.asarray(embedding, copy=True)
    copy[0] = 9.0
    assert embedding[0] != 9.0
    restored = pickle.loads(pickle.dumps(embedding))
    assert restored == embedding
    assert type(restored) is Embedding
    assert Embedding.from_bytes(embedding.raw) == embedding
    assert as_vector(embedding) is embedding
    assert repr(embedding) == f"Embedding(dim={DIM})"


def test_a_record_packs_any_vector_it_is_given() -> None:
    vector = unit_vectors(1)[0]
    record = MemoryRecord(id="m", user_id="u", content="x", embedding=tuple(vector.tolist()))  # type: ignore[arg-type]
    assert type(record.embedding) is Embedding
    assert record.embedding == as_vector(vector)
    changed = record.with_changes(importance=0.9)
    assert changed.embedding is record.embedding  # not packed again
    assert record == MemoryRecord(id="m", user_id="u", content="x", embedding=as_vector(vector))
    assert MemoryRecord(id="m", user_id="u", content="x").embedding is None


def test_a_records_embedding_costs_its_float32_values() -> None:
    """A 384-component tuple of Python floats took about 12 KB; packed, 1.5 KB and
    the object around it."""
    vectors = [v.tolist() for v in unit_vectors(200)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = [
            MemoryRecord(id="m", user_id="u", content="x", embedding=v)  # type: ignore[arg-type]
            for v in vectors
        ]
        per_row = (tracemalloc.get_traced_memory()[0] - before) / len(held)
    finally:
        tracemalloc.stop()
    assert DIM * 4 <= per_row < DIM * 4 + 512


def test_stacked_rows_are_one_writable_matrix() -> None:
    vectors = unit_vectors(5)
    embeddings = [Embedding(v) for v in vectors]
    rows = stacked(embeddings, room=2)
    assert rows.shape == (7, DIM)
    assert rows.dtype == np.float32
    assert rows.flags.writeable
    assert np.array_equal(rows[:5], vectors)
    assert not rows[5:].any()
    with pytest.raises(ValueError, match="different lengths"):
        stacked([embeddings[0], Embedding(vectors[1][:-1])])


def test_a_snapshots_matrix_zeroes_a_missing_or_foreign_vector() -> None:
    vectors = unit_vectors(4)
    records = [
        MemoryRecord(id=f"m{i}", user_id="u", content="x", embedding=as_vector(v))
        for i, v in enumerate(vectors)
    ]
    records[1] = records[1].with_changes(embedding=None)
    records[2] = records[2].with_changes(embedding=as_vector(vectors[2][:8]))
    full = matrix(records, DIM, room=1)
    assert full.shape == (5, DIM)
    assert np.array_equal(full[0], vectors[0])
    assert np.array_equal(full[3], vectors[3])
    assert not full[1].any()
    assert not full[2].any()
    assert not full[4].any()
    some = matrix(records, DIM, [3, 0])
    assert np.array_equal(some, vectors[[3, 0]])
    whole = [r for i, r in enumerate(records) if i in (0, 3)]
    assert np.array_equal(matrix(whole, DIM), vectors[[0, 3]])


def test_a_stored_row_gives_back_the_same_vector() -> None:
    vector = unit_vectors(1)[0]
    record = MemoryRecord(id="m", user_id="u", content="x", embedding=as_vector(vector))
    row = record_to_row(record)
    assert row["embedding"] == vector.tolist()  # what the Milvus client packs
    assert all(type(x) is float for x in row["embedding"])
    assert row_to_record(row).embedding == record.embedding
