"""A snapshot made from the previous one and the rows that changed
(:meth:`Corpus.updated`, the corpus cache's path after a write) equals one built
from all the rows: records, ids, links, sessions, vectors, categories, BM25 and the
carried context index, through random chains of appends, supersedes, deletes,
consolidations, back-dated inserts, time ties, session moves, links and category
changes."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np

from sidecar.config import ConversationConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.delta import spliced
from sidecar.memory.corpus.features import FeatureMemo
from sidecar.memory.corpus.row_index import RowIndex
from sidecar.memory.read.retrieval.conversation import context_index
from sidecar.memory.records.records import MemoryRecord, NodeType, Status
from tests.memory.corpus.test_remap import (
    DIM,
    QUERIES,
    SPEAKERS,
    consolidated,
    deleted,
    memories,
    superseded,
    warm,
)

Rows = list[MemoryRecord]
Update = Callable[[Rows, random.Random], Rows]


def changes_between(old: Rows, new: Rows) -> dict[str, MemoryRecord | None]:
    """What the cache's log holds for an update from ``old`` to ``new``."""
    before = {r.id: r for r in old}
    after = {r.id: r for r in new}
    out: dict[str, MemoryRecord | None] = {k: None for k in before if k not in after}
    out.update({k: r for k, r in after.items() if before.get(k) is not r})
    return out


def back_dated(rows: Rows, rng: random.Random) -> Rows:
    """A memory told late about an earlier time: it lands among the old ones,
    sometimes at the very time of another (a tie, ordered by id)."""
    other = rows[rng.randrange(len(rows))]
    new = other.with_changes(
        id=f"b{rng.randrange(10**6)}",
        content=f"{SPEAKERS[rng.randrange(3)]}: oslo tea at night",
        created_at=other.created_at if rng.random() < 0.5 else other.created_at - 1,
        session_id=rng.choice([other.session_id, "", "fresh"]),
    )
    return [*rows, new]


def appended(rows: Rows, rng: random.Random) -> Rows:
    last = max(rows, key=lambda r: r.created_at)
    new = last.with_changes(
        id=f"a{rng.randrange(10**6)}",
        content=f"{SPEAKERS[rng.randrange(3)]}: juniper tea in oslo",
        created_at=last.created_at + 1,
        related_ids=(rows[rng.randrange(len(rows))].id,) if rng.random() < 0.3 else (),
    )
    return [*rows, new]


def touched(rows: Rows, rng: random.Random) -> Rows:
    """Access counts only (the same documents): the indexes stay."""
    out = list(rows)
    for i in rng.sample(range(len(rows)), 3):
        out[i] = out[i].with_changes(access_count=out[i].access_count + 1)
    return out


def moved_session(rows: Rows, rng: random.Random) -> Rows:
    out = list(rows)
    i = rng.randrange(len(rows))
    out[i] = out[i].with_changes(session_id=rng.choice(["s1", "", "moved"]))
    return out


def relinked(rows: Rows, rng: random.Random) -> Rows:
    """A back-link: an old row names another (or a missing id), text unchanged."""
    out = list(rows)
    i = rng.randrange(len(rows))
    target = rng.choice([rows[rng.randrange(len(rows))].id, "missing"])
    out[i] = out[i].with_changes(related_ids=(*out[i].related_ids, target))
    return out


def retired(rows: Rows, rng: random.Random) -> Rows:
    """A row superseded in place (its status, not its presence, changes)."""
    out = list(rows)
    i = rng.randrange(len(rows))
    out[i] = out[i].with_changes(status=Status.SUPERSEDED)
    return out


def filed(rows: Rows, rng: random.Random) -> Rows:
    """A category node added, renamed or removed."""
    nodes = [r for r in rows if r.node_type == NodeType.CATEGORY]
    if nodes and rng.random() < 0.5:
        node = rng.choice(nodes)
        if rng.random() < 0.5:
            return [r for r in rows if r is not node]
        return [r.with_changes(content="Renamed") if r is node else r for r in rows]
    vector = tuple(float(x) for x in np.eye(DIM)[rng.randrange(DIM)])
    node = MemoryRecord(
        id=f"c{rng.randrange(10**6)}",
        user_id="u",
        content="Drinks",
        node_type=NodeType.CATEGORY,
        embedding=vector,
    )
    return [*rows, node]


UPDATES: tuple[Update, ...] = (
    appended,
    superseded,
    deleted,
    consolidated,
    back_dated,
    touched,
    moved_session,
    relinked,
    retired,
    filed,
)


def assert_same(corpus: Corpus, fresh: Corpus, note: object) -> None:
    assert [r.id for r in corpus.records] == [r.id for r in fresh.records], note
    assert all(a is b for a, b in zip(corpus.records, fresh.records, strict=True)), note
    assert [c.id for c in corpus.categories] == [c.id for c in fresh.categories], note
    assert dict(corpus.index_of.items()) == dict(fresh.index_of.items()), note
    for record in corpus.records:
        assert corpus.index_of[record.id] == fresh.index_of[record.id], note
    assert "absent" not in corpus.index_of
    assert corpus.links == fresh.links, note
    assert np.array_equal(corpus.session_prev, fresh.session_prev), note
    assert np.array_equal(corpus.session_next, fresh.session_next), note
    assert np.array_equal(corpus.vectors, fresh.vectors), note
    assert np.array_equal(corpus.category_vectors, fresh.category_vectors), note
    for query in QUERIES:
        assert np.array_equal(corpus.bm25.scores(query), fresh.bm25.scores(query)), note


def test_a_chain_of_updates_told_as_changes_equals_a_fresh_build() -> None:
    config = ConversationConfig()
    for seed in range(6):
        rng = random.Random(seed)
        memo = FeatureMemo(10_000)
        rows: Rows = memories(50, seed=seed, long_every=7)
        rows[5] = rows[5].with_changes(related_ids=(rows[9].id,)) if seed % 2 else rows[5]
        corpus = Corpus.build(rows, DIM, memo=memo)
        for n in range(30):
            if rng.random() < 0.7:
                warm(corpus, config)
            update = rng.choice(UPDATES)
            new_rows = update(rows, rng)
            corpus = Corpus.updated(corpus, changes_between(rows, new_rows), DIM, memo=memo)
            rows = new_rows
            fresh = Corpus.build(rows, DIM, memo=FeatureMemo(10_000))
            note = (seed, n, update.__name__)
            assert_same(corpus, fresh, note)
            carried = context_index(corpus, config)
            built = context_index(fresh, config)
            assert np.array_equal(carried.priors, built.priors), note
            assert np.array_equal(carried.sessions, built.sessions), note
            assert np.allclose(carried.weights, built.weights), note
            for query in QUERIES:
                assert np.array_equal(carried.bm25.scores(query), built.bm25.scores(query)), note


def test_a_deletion_left_to_compaction_serves_the_same_then_keeps_nothing_of_it() -> None:
    """``compact=False``: the deleted row is out of the snapshot at once (it equals
    a fresh build) while the shared layers still hold its vector and postings,
    through later updates; :meth:`Corpus.compacted` folds them, and still equals a
    fresh build, its carried context index too."""
    config = ConversationConfig()
    rng = random.Random(5)
    memo = FeatureMemo(10_000)
    rows: Rows = memories(60, seed=4, long_every=7)
    corpus = Corpus.build(rows, DIM, memo=memo)
    warm(corpus, config)
    gone = rows[17]
    corpus = Corpus.updated(
        corpus, {gone.id: gone.with_changes(status=Status.DELETED)}, DIM, memo=memo, compact=False
    )
    rows = [r for r in rows if r is not gone]
    assert corpus.holds_deleted
    assert_same(corpus, Corpus.build(rows, DIM), "deleted, not compacted")
    for update in (appended, superseded):  # the layers stay shared: still held
        warm(corpus, config)
        new_rows = update(rows, rng)
        corpus = Corpus.updated(corpus, changes_between(rows, new_rows), DIM, memo=memo)
        rows = new_rows
        assert corpus.holds_deleted, update.__name__
    warm(corpus, config)
    deleted_vector = np.asarray(gone.embedding, np.float32)
    shared = corpus._matrix._buffer.data[: corpus._matrix._end]
    assert any(np.array_equal(row, deleted_vector) for row in shared)  # not yet folded
    compacted = corpus.compacted(DIM)
    assert not compacted.holds_deleted
    fresh = Corpus.build(rows, DIM, memo=FeatureMemo(10_000))
    assert_same(compacted, fresh, "compacted")
    carried, built = context_index(compacted, config), context_index(fresh, config)
    assert np.array_equal(carried.priors, built.priors)
    assert np.array_equal(carried.sessions, built.sessions)
    assert np.allclose(carried.weights, built.weights)
    for query in QUERIES:
        assert np.array_equal(carried.bm25.scores(query), built.bm25.scores(query))
    held = compacted._matrix._buffer.data[: compacted._matrix._end]
    assert len(held) == compacted.size
    assert not any(np.array_equal(row, deleted_vector) for row in held)
    assert compacted.bm25._moved is None  # one table: the deleted postings gone
    assert compacted.compacted(DIM) is compacted


def test_changes_to_rows_no_snapshot_holds_leave_it_as_it_was() -> None:
    rows = memories(10)
    corpus = Corpus.build(rows, DIM)
    gone = rows[0].with_changes(id="never-seen", status=Status.SUPERSEDED)
    same = Corpus.updated(corpus, {"never-seen": gone, "also-never": None}, DIM)
    assert same is corpus  # its derived values stay
    assert_same(same, Corpus.build(rows, DIM), "nothing")
    deleted = Corpus.updated(corpus, {"x": gone.with_changes(status=Status.DELETED)}, DIM)
    assert_same(deleted, Corpus.build(rows, DIM), "a deletion is built from all rows")
    late = rows[-1].with_changes(id="late", created_at=rows[-1].created_at + 1)
    changes = {"x": gone.with_changes(status=Status.DELETED), "late": late}
    appended = Corpus.updated(corpus, changes, DIM, compact=False)
    assert not appended.holds_deleted  # the tombstone removed nothing here: nothing to fold
    assert_same(appended, Corpus.build([*rows, late], DIM), "a stranger's tombstone")


def test_an_update_of_an_empty_snapshot_is_a_build() -> None:
    empty = Corpus.build([], DIM)
    rows = memories(4)
    corpus = Corpus.updated(empty, {r.id: r for r in rows}, DIM)
    assert_same(corpus, Corpus.build(rows, DIM), "from empty")


def test_a_splice_equals_a_gather() -> None:
    """Every -1 takes its fresh row, and so does a kept row replaced in place (a new
    version of the same document), whether the kept rows are runs in their old
    order (rows cut out and put in: an update), runs out of order or repeated, or
    past the runs a splice takes (a gather)."""
    rng = np.random.default_rng(0)
    for _ in range(600):
        old: Sequence[int] = tuple(range(200)) if rng.random() < 0.5 else list(range(200))
        size = int(rng.integers(0, 120))
        shape = rng.random()
        if shape < 0.25:  # repeated rows, runs out of order
            sources = np.sort(rng.choice(np.arange(-1, 100), size=size)).astype(np.int64)
        elif shape < 0.5:  # rows replaced in place
            sources = np.arange(size, dtype=np.int64)
            if size:
                sources[rng.integers(0, size, size=3)] = -1
        else:  # rows removed and inserted, the kept ones in order, as an update
            kept = np.sort(rng.choice(200, size=min(size, 200), replace=False))
            sources = kept.astype(np.int64)
            for _ in range(int(rng.integers(0, 6))):
                sources = np.insert(sources, int(rng.integers(0, len(sources) + 1)), -1)
            if shape > 0.9 and len(sources) > 1:  # two runs swapped
                cut = int(rng.integers(1, len(sources)))
                sources = np.concatenate([sources[cut:], sources[:cut]])
        size = len(sources)
        fresh = {i: -100 - i for i, s in enumerate(sources.tolist()) if s < 0}
        if size and rng.random() < 0.5:
            fresh.update({int(i): -1000 - int(i) for i in rng.integers(0, size, size=3)})
        expected = [fresh[i] if i in fresh else old[s] for i, s in enumerate(sources.tolist())]
        before = list(old)
        assert spliced(old, sources, fresh) == expected
        assert list(old) == before  # the rows it was made from are left as they were


def test_the_row_index_folds_into_a_new_base_and_reads_the_same() -> None:
    rows = memories(200)
    index = RowIndex(rows)
    rng = random.Random(3)
    for _ in range(60):
        i = rng.randrange(len(rows))
        gone = rows[i].id
        rows = [*rows[:i], *rows[i + 1 :], rows[i].with_changes(id=f"{gone}x")]
        sources = np.arange(len(rows), dtype=np.int64)
        sources[i:-1] += 1
        sources[-1] = -1
        index = index.remapped(rows, sources)
        assert dict(index.items()) == {r.id: k for k, r in enumerate(rows)}
        assert index.get(gone) is None
        assert gone not in index


def test_a_fresh_build_leaves_room_so_the_next_write_copies_no_vector() -> None:
    rows = memories(40)
    corpus = Corpus.build(rows, DIM)
    new = rows[-1].with_changes(id="late", created_at=rows[-1].created_at + 1)
    after = Corpus.updated(corpus, {"late": new}, DIM)
    assert after._matrix._buffer is corpus._matrix._buffer  # written in place
    assert np.array_equal(corpus.vectors, Corpus.build(rows, DIM).vectors)
    assert_same(after, Corpus.build([*rows, new], DIM), "appended in place")
