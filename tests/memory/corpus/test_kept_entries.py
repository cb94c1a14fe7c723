"""A snapshot gathers what the memo read of its memories in one pass (issue S, item
2): every column it reads whole (term ids, the stages' cues) equals a
pass per value, a memory whose values were not all read leaves those columns to be
read one by one, and a snapshot built from a read-ahead memo ranks exactly as one
built without a memo."""

from __future__ import annotations

import numpy as np
import pytest

from sidecar.config import RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.features import FeatureMemo, KeptEntries, kept_values
from sidecar.memory.corpus.read_ahead import ReadAhead
from sidecar.memory.corpus.rows import TERM_IDS, memo_term_ids
from sidecar.memory.read.retrieval.base import Query, SearchSpace
from sidecar.memory.read.retrieval.registry import build_retrievers, memory_readers
from sidecar.memory.records.records import MemoryRecord, Scope

DIM = 8
LINES = (
    "Melanie: I painted the lake at sunrise last Tuesday.",
    "User spent $120 on running shoes at the mall.",
    "Caroline: I'd love to visit Oslo next spring!",
    "User adopted a dog named Juniper in March.",
    "I think my sister Ana moved to Lisbon, she loves it",
    "ok thx",
    "User wants to learn the guitar someday.",
    "Jon: we played chess until 2 am, lost every game lol",
)
NAMES = (TERM_IDS, *(name for name, _ in memory_readers()))


def rows(count: int, seed: int = 5) -> list[MemoryRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        vector = rng.standard_normal(DIM)
        out.append(
            MemoryRecord(
                id=f"m{i:03d}",
                user_id="u",
                content=f"{LINES[i % len(LINES)]} ({i})" if i % 3 else LINES[i % len(LINES)],
                excerpt="and the weather was lovely" if i % 5 == 1 else "",
                embedding=tuple(float(x) for x in vector / np.linalg.norm(vector)),
                session_id=f"s{i // 6}",
                created_at=1_000 + i,
            )
        )
    return out


def read_ahead(memo: FeatureMemo, records: list[MemoryRecord]) -> None:
    ReadAhead(memo, memory_readers()).read(records)


@pytest.mark.parametrize("count", [40, 700])  # within one gathered block, and several
def test_gathered_columns_are_a_pass_per_value(count: int) -> None:
    records = rows(count)
    memo = FeatureMemo(1000)
    read_ahead(memo, records)
    entries = memo.features_of(records)
    skipped = NAMES[-1]
    kept = KeptEntries(entries, skip=frozenset({skipped}))
    for name in NAMES:
        column = kept.column(name)
        expected = kept_values(entries, name)
        assert column is not None, name
        assert expected is not None, name
        assert all(a is b for a, b in zip(column, expected, strict=True)), name
        # Handed over once; asked again, read by a pass, the same values.
        assert kept.column(name) == column
    # A name not gathered is read by its own pass.
    assert kept.column(skipped) == kept_values(entries, skipped)
    assert kept.column("never-read") is None


def test_an_entry_missing_a_value_leaves_those_columns_to_be_read() -> None:
    records = rows(12)
    memo = FeatureMemo(100)
    read_ahead(memo, records[:-1])
    late = memo.features(records[-1])  # a memory read for its term ids only
    memo_term_ids(late, records[-1], memo.vocabulary)
    entries = memo.features_of(records)
    kept = KeptEntries(entries, skip=frozenset())
    ids = kept.column(TERM_IDS)
    assert ids is not None
    assert all(a is b for a, b in zip(ids, kept_values(entries, TERM_IDS), strict=True))
    assert kept.column(memory_readers()[0][0]) is None


@pytest.mark.parametrize("read_all", [True, False])
async def test_a_snapshot_of_read_ahead_memories_ranks_as_one_without_a_memo(
    read_all: bool,
) -> None:
    """``read_all``: every memory read ahead (the gathered columns), else all but the
    last (each column read name by name)."""
    records = rows(90)
    memo = FeatureMemo(200)
    read_ahead(memo, records if read_all else records[:-1])
    with_memo = Corpus.build(records, DIM, memo=memo)
    plain = Corpus.build(records, DIM)
    config = RetrievalConfig()
    retriever = build_retrievers()["default"]
    rng = np.random.default_rng(1)
    for text in (
        "When did Melanie paint the lake?",
        "How much did I spend on shoes?",
        "Where does Ana live now?",
        "what would the user like to learn",
        "chess",
    ):
        vector = rng.standard_normal(DIM).astype(np.float32)
        query = Query(text, vector / np.linalg.norm(vector))
        found = [
            await retriever.retrieve(query, SearchSpace(Scope("u"), corpus, None, config), 10)  # type: ignore[arg-type]
            for corpus in (with_memo, plain)
        ]
        assert [(h.record.id, h.score) for h in found[0]] == [
            (h.record.id, h.score) for h in found[1]
        ]
    for name, read in memory_readers():
        assert with_memo.read_all(name, read) == plain.read_all(name, read), name
    assert np.array_equal(with_memo.vectors, plain.vectors)


def test_rows_loaded_again_with_equal_texts_find_their_entries() -> None:
    """A load gives new string objects for the same texts: the entries are found
    (the values read before are kept), and a changed text gets a new one."""
    records = rows(20)
    memo = FeatureMemo(100)
    read_ahead(memo, records)
    before = memo.features_of(records)
    again = [
        r.with_changes(content="".join(list(r.content)), excerpt="".join(list(r.excerpt)))
        for r in records
    ]
    assert all(a.content is not b.content for a, b in zip(again, records, strict=True))
    assert memo.features_of(again) == before
    edited = [*again[:4], again[4].with_changes(content="User moved to Porto."), *again[5:]]
    found = memo.features_of(edited)
    assert found[4] is not before[4]
    assert found[4].values == {}
    assert found[:4] == before[:4]
    assert found[5:] == before[5:]


def test_a_snapshot_made_by_an_update_looks_its_memories_up_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A snapshot made from the one before (appends, a supersede) finds its memo
    entries when a stage first reads a whole column, once for every column; the
    columns equal a snapshot's built without a memo."""
    records = rows(60)
    memo = FeatureMemo(200)
    read_ahead(memo, records)
    first = Corpus.build(records[:50], DIM, memo=memo)
    appended = Corpus.build(records, DIM, first, memo=memo)
    new = records[7].with_changes(id="m-new", content="User moved to Porto.", created_at=2_000)
    read_ahead(memo, [new])
    updated = Corpus.updated(appended, {records[7].id: None, new.id: new}, DIM, memo=memo)
    calls: list[int] = []
    looked_up = memo.features_of

    def counted(found: list[MemoryRecord]) -> tuple[object, ...]:
        calls.append(len(found))
        return looked_up(found)

    monkeypatch.setattr(memo, "features_of", counted)
    for corpus in (appended, updated):
        calls.clear()
        plain = Corpus.build(list(corpus.records), DIM)
        for name, read in memory_readers():
            assert corpus.read_all(name, read) == plain.read_all(name, read), name
        assert calls == [corpus.size]


def test_an_entry_keeps_the_last_record_found_to_have_its_text() -> None:
    """The rows read before are found by identity (their texts are not read again);
    a new version of a row with the same text (an access count) keeps the entry and
    becomes the record it is found by, one at a time or a snapshot's worth at once."""
    records = rows(30)
    memo = FeatureMemo(100)
    read_ahead(memo, records)
    before = memo.features_of(records)
    assert all(e.record is r for e, r in zip(before, records, strict=True))
    touched = [r.with_changes(access_count=r.access_count + 1) for r in records]
    assert memo.features_of(touched) == before
    assert all(e.record is r for e, r in zip(before, touched, strict=True))
    one = touched[3].with_changes(access_count=9)
    assert memo.features(one) is before[3]
    assert before[3].record is one
    assert memo.known(touched[3]) is before[3]  # the same text: still its entry
    edited = one.with_changes(content="User moved to Porto.")
    fresh = memo.features(edited)
    assert fresh is not before[3]
    assert fresh.record is edited
    assert fresh.values == {}
