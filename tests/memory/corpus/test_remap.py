"""Removing or replacing memories moves a snapshot's indexes in place (issue S, item
1): after a supersede, a delete or a consolidation pass, the next snapshot's BM25
index, conversation context index, subjects and columns equal a fresh build's, and
only the memories whose context changed are read again."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from sidecar.config import ConversationConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.row_matrix import RowMatrix
from sidecar.memory.read.retrieval import conversation
from sidecar.memory.read.retrieval.conversation import ContextIndex, context_index
from sidecar.memory.read.retrieval.cues import Subjects, subject_share
from sidecar.memory.records.records import MemoryRecord

DIM = 8
WORDS = "tea dog oslo chess night shift ramen juniper beach painted hiking guitar".split()
SPEAKERS = ("Melanie", "Caroline", "Jon")
QUERIES = (["tea"], ["dog", "oslo", "dog"], ["juniper", "beach", "absent"], ["paint"], [])


def memories(count: int, seed: int = 3, long_every: int = 0) -> list[MemoryRecord]:
    """``long_every``: every so many memories, a line longer than ``long_lines``."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        size = 80 if long_every and i % long_every == 1 else int(rng.integers(2, 9))
        words = " ".join(rng.choice(WORDS, size=size))
        text = f"{SPEAKERS[i % 3]}: {words}" if i % 2 else f"User {words}."
        vector = rng.standard_normal(DIM)
        out.append(
            MemoryRecord(
                id=f"m{i:03d}",
                user_id="u",
                content=text,
                created_at=i,
                session_id=f"s{i // 5}",
                embedding=tuple(float(x) for x in vector / np.linalg.norm(vector)),
            )
        )
    return out


def superseded(rows: list[MemoryRecord], rng: random.Random) -> list[MemoryRecord]:
    i = rng.randrange(len(rows))
    new = rows[i].with_changes(id=f"{rows[i].id}-new", content="User drinks juniper tea now.")
    new = new.with_changes(created_at=rows[-1].created_at + 1, session_id="late")
    return [*rows[:i], *rows[i + 1 :], new]


def deleted(rows: list[MemoryRecord], rng: random.Random) -> list[MemoryRecord]:
    gone = set(rng.sample(range(len(rows)), 3))
    return [r for i, r in enumerate(rows) if i not in gone]


def consolidated(rows: list[MemoryRecord], rng: random.Random) -> list[MemoryRecord]:
    picked = rng.sample(range(len(rows)), 6)
    out = list(rows)
    for keep, drop in zip(picked[:3], picked[3:], strict=True):
        out[keep] = out[keep].with_changes(excerpt=rows[drop].content)
    return [r for i, r in enumerate(out) if i not in set(picked[3:])]


def warm(corpus: Corpus, config: ConversationConfig) -> None:
    """Build every remappable value the default pipeline reads."""
    context_index(corpus, config)
    subject_share("What did Melanie paint?", corpus)
    corpus.column("created-at", lambda r: r.created_at, np.int64)


@pytest.mark.parametrize("long_every", [0, 4])
@pytest.mark.parametrize("update", [superseded, deleted, consolidated])
def test_a_remapped_snapshot_equals_a_fresh_build(
    update: Callable[[list[MemoryRecord], random.Random], list[MemoryRecord]],
    long_every: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = ConversationConfig()
    rows = memories(40, long_every=long_every)
    old = Corpus.build(rows, DIM)
    warm(old, config)
    changed = update(rows, random.Random(7))

    read: list[int] = []
    original = conversation._weights

    def counted(corpus: Corpus, own: np.ndarray, priors: np.ndarray, decay: float):  # type: ignore[no-untyped-def]
        read.extend(own.tolist())
        return original(corpus, own, priors, decay)

    monkeypatch.setattr(conversation, "_weights", counted)
    moved = Corpus.build(changed, DIM, old)
    carried = context_index(moved, config)
    monkeypatch.undo()
    fresh = Corpus.build(changed, DIM)
    built = ContextIndex.build(fresh, config.turns, config.decay, long_lines=config.long_lines)

    assert moved.bm25 is not old.bm25
    assert old.bm25.size == len(rows)  # the previous snapshot is untouched
    assert np.array_equal(moved.vectors, fresh.vectors)
    for query in QUERIES:
        assert np.allclose(moved.bm25.scores(query), fresh.bm25.scores(query))
        assert moved.bm25.max_score(query) == pytest.approx(fresh.bm25.max_score(query))
        assert np.array_equal(carried.bm25.scores(query), built.bm25.scores(query))
    assert np.array_equal(carried.priors, built.priors)
    assert np.allclose(carried.weights, built.weights)
    assert np.array_equal(carried.sessions, built.sessions)
    assert carried.read_together == built.read_together
    # Only memories whose own text or context changed were read again (with long
    # lines, which end contexts, possibly none).
    assert len(read) < len(changed) // 2
    assert read or long_every

    subjects = moved.derived("subjects", lambda: pytest.fail("not carried over"))
    assert isinstance(subjects, Subjects)
    expected = Subjects().appended(fresh)
    assert subjects.members.keys() == expected.members.keys()
    for key, members in expected.members.items():
        assert subjects.members[key].tolist() == members.tolist()
    assert np.array_equal(
        moved.column("created-at", lambda r: r.created_at, np.int64),
        np.asarray([r.created_at for r in fresh.records]),
    )


def test_a_new_snapshot_reads_only_memories_it_has_not_seen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each memory is tokenised and read once per version of its text (issue S, item
    2), whichever snapshot reads it first; the snapshots equal ones built without."""
    from sidecar.memory.corpus import rows as rows_module
    from sidecar.memory.corpus.features import FeatureMemo

    rows = memories(30)
    memo = FeatureMemo(100)
    first = Corpus.build(rows, DIM, memo=memo)
    subject_share("What did Melanie paint?", first)
    read: list[str] = []
    original = rows_module.document

    def counted(record: MemoryRecord) -> list[str]:
        read.append(record.id)
        return original(record)

    monkeypatch.setattr(rows_module, "document", counted)
    edited = rows[3].with_changes(content="User paints juniper trees.")
    again = Corpus.build([*rows[:3], edited, *rows[4:]], DIM, memo=memo)  # no previous
    assert read == [edited.id]  # the changed one only
    plain = Corpus.build([*rows[:3], edited, *rows[4:]], DIM)
    for query in QUERIES:
        assert np.array_equal(again.bm25.scores(query), plain.bm25.scores(query))
    share = subject_share("What did Melanie paint?", again)
    assert share is not None
    assert np.array_equal(share, subject_share("What did Melanie paint?", plain))
    assert memo.forget_user("u") == 30  # one entry per memory: its latest text
    assert len(memo) == 0


def test_a_memory_re_embedded_with_the_same_text_gets_its_new_vector() -> None:
    """The memo keeps each memory's vector as a matrix row; a new vector for the same
    text (another model, a re-embed) is not read from the old row."""
    from sidecar.memory.corpus.features import FeatureMemo

    rows = memories(6)
    memo = FeatureMemo(100)
    Corpus.build(rows, DIM, memo=memo)
    moved = tuple(-x for x in rows[2].embedding or ())
    again = Corpus.build(
        [*rows[:2], rows[2].with_changes(embedding=moved), *rows[3:]], DIM, memo=memo
    )
    assert np.array_equal(again.vectors[2], np.asarray(moved, dtype=np.float32))
    assert np.array_equal(
        again.vectors[[0, 1, 3, 4, 5]], Corpus.build(rows, DIM).vectors[[0, 1, 3, 4, 5]]
    )


def test_link_adjacency_holds_links_and_session_neighbours_once() -> None:
    from sidecar.memory.read.retrieval.links import adjacency

    rows = memories(12)
    rows[4] = rows[4].with_changes(related_ids=(rows[3].id, rows[9].id))
    corpus = Corpus.build(rows, DIM)
    with_sessions = adjacency(corpus, session_neighbors=True)
    plain = adjacency(corpus, session_neighbors=False)
    for i in range(corpus.size):
        around = {int(corpus.session_prev[i]), int(corpus.session_next[i])} - {-1}
        assert plain[i] == corpus.links[i]
        assert sorted(with_sessions[i]) == sorted(set(corpus.links[i]) | around)
        assert len(set(with_sessions[i])) == len(with_sessions[i])
        assert i not in with_sessions[i]
    # 3 is linked and the previous turn (once); 4 ends its session (5 opens the next).
    assert sorted(with_sessions[4]) == [3, 9]


def test_memories_are_ordered_by_time_then_id_whatever_order_the_rows_come_in() -> None:
    rows = [r.with_changes(created_at=r.created_at // 4) for r in memories(40)]  # ties of 4
    corpus = Corpus.build(random.Random(5).sample(rows, len(rows)), DIM)
    assert [(r.created_at, r.id) for r in corpus.records] == sorted(
        (r.created_at, r.id) for r in rows
    )


def test_session_groups_are_each_sessions_first_memory() -> None:
    corpus = Corpus.build(memories(40), DIM)
    index = context_index(corpus, ConversationConfig())
    first: dict[str, int] = {}
    expected = [first.setdefault(r.session_id, i) for i, r in enumerate(corpus.records)]
    assert index.sessions.tolist() == expected


def test_snapshots_sharing_rows_read_their_own_through_appends_and_removals() -> None:
    """Matrices made one from another (and two from one: siblings) each read the
    rows they were given, whatever the others appended to the shared buffer, and
    score as their dense rows do."""
    rng = np.random.default_rng(5)
    base = rng.standard_normal((50, DIM)).astype(np.float32)
    chains = [(RowMatrix.of(base), base)]
    for step in range(120):
        parent, dense = chains[rng.integers(len(chains))]  # siblings share a parent
        keep = rng.random(len(dense)) > (0.05 if step % 3 else 0.0)
        fresh = rng.standard_normal((int(rng.integers(0, 4)), DIM)).astype(np.float32)
        sources = np.concatenate([np.flatnonzero(keep), np.full(len(fresh), -1)]).astype(np.int64)
        order = rng.permutation(len(sources)) if step % 7 == 0 else np.arange(len(sources))
        sources = sources[order]
        rows = fresh  # the new rows, in the order of their places
        expected = np.empty((len(sources), DIM), np.float32)
        expected[sources >= 0] = dense[sources[sources >= 0]]
        expected[sources < 0] = rows
        child = parent.remapped(sources, rows) if step % 5 else parent.appended(fresh)
        if step % 5 == 0:
            expected = np.concatenate([dense, fresh])
        chains.append((child, expected))
        for matrix, wanted in chains[-6:]:
            assert np.array_equal(matrix.dense(), wanted)
            vector = rng.standard_normal(DIM).astype(np.float32)
            assert np.allclose(matrix.scores(vector), wanted @ vector, atol=1e-5)
            picked = rng.integers(0, max(len(wanted), 1), size=5) % max(len(wanted), 1)
            if len(wanted):
                assert np.array_equal(matrix.take(picked), wanted[picked])


def appended(rows: list[MemoryRecord], rng: random.Random) -> list[MemoryRecord]:
    last = rows[-1]
    new = last.with_changes(
        id=f"a{rng.randrange(10**6)}",
        content=f"{SPEAKERS[rng.randrange(3)]}: juniper tea in oslo",
        created_at=last.created_at + 1,
    )
    return [*rows, new]


def test_a_chain_of_updates_equals_a_fresh_build() -> None:
    """Snapshots made one from another through appends, supersedes, deletes and
    consolidations (BM25 layered, folded now and then; sessions, links and
    priors recomputed) read as one built from the last rows alone."""
    config = ConversationConfig()
    rng = random.Random(11)
    rows = memories(60, long_every=7)
    rows[5] = rows[5].with_changes(related_ids=(rows[9].id, rows[30].id))
    corpus = Corpus.build(rows, DIM)
    for n in range(24):
        warm(corpus, config)
        rows = rng.choice([appended, superseded, deleted, consolidated])(rows, rng)
        corpus = Corpus.build(rows, DIM, corpus)
        fresh = Corpus.build(rows, DIM)
        assert [r.id for r in corpus.records] == [r.id for r in fresh.records], n
        assert corpus.links == fresh.links
        assert np.array_equal(corpus.session_prev, fresh.session_prev)
        assert np.array_equal(corpus.session_next, fresh.session_next)
        assert np.array_equal(corpus.vectors, fresh.vectors)
        carried = context_index(corpus, config)
        built = context_index(fresh, config)
        assert np.array_equal(carried.priors, built.priors)
        for query in QUERIES:
            assert np.array_equal(corpus.bm25.scores(query), fresh.bm25.scores(query))
            assert np.array_equal(carried.bm25.scores(query), built.bm25.scores(query))
