"""Lifts for what a question names or asks: whom it is about, the date it names,
whether it asks when or for an amount; a question that names none of them is ranked as without."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from sidecar.config import CueConfig, RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.language.when import question_spans
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.cues import date_match, lift_cues, subject_share
from sidecar.memory.read.retrieval.pipeline import PipelineRetriever
from sidecar.memory.read.retrieval.registry import build_retrievers
from sidecar.memory.records.records import MemoryRecord
from tests.support.vectors import unit

DIM = 4
SAME = unit(1, 0, 0, 0)
NOW = int(datetime(2026, 11, 27, tzinfo=UTC).timestamp() * 1000)


def at(year: int, month: int, day: int) -> int:
    return int(datetime(year, month, day, 12, tzinfo=UTC).timestamp() * 1000)


def memory(rid: str, text: str, created: int = 0) -> MemoryRecord:
    return MemoryRecord(id=rid, user_id="u", content=text, embedding=SAME, created_at=created)


def order(corpus: Corpus, text: str, cfg: RetrievalConfig | None = None) -> list[str]:
    retriever = build_retrievers()["default"]
    assert isinstance(retriever, PipelineRetriever)
    q = Query(text, np.asarray(SAME, dtype=np.float32))
    ranking = retriever.rank(q, corpus, cfg or RetrievalConfig(), 5, "u")
    return [corpus.records[i].id for i in ranking.order]


SPEAKERS = [
    memory("c", "Caroline: I painted a lake at sunrise."),
    memory("m", "Melanie: I painted a lake at sunrise."),
    memory("o", "Dr. Okafor: I painted a lake at sunrise."),
]


@pytest.mark.parametrize(
    ("question", "first"),
    [
        ("What did Melanie paint?", "m"),
        ("What did Mel paint?", "m"),  # a nickname: the name's first letters
        ("What did Okafor paint?", "o"),  # one word of the subject
        ("What did Caroline paint?", "c"),
    ],
)
def test_the_memory_about_whom_the_question_names_goes_first(question: str, first: str) -> None:
    assert order(Corpus.build(SPEAKERS, DIM), question)[0] == first


def test_subject_share_counts_each_name_the_question_says() -> None:
    corpus = Corpus.build([*SPEAKERS, memory("a", "Ana lives in Porto.")], DIM)
    share = subject_share("Did Melanie and Ana ever meet?", corpus)
    assert share is not None
    about = {corpus.records[i].id: share[i] for i in range(corpus.size)}
    assert about == {"a": 0.5, "c": 0.0, "m": 0.5, "o": 0.0}
    assert subject_share("Where does my sister live?", corpus) is None


def test_a_subject_opening_the_question_is_read_as_its_name() -> None:
    corpus = Corpus.build([*SPEAKERS, memory("w", "What: a line the speaker rule reads")], DIM)
    share = subject_share("Melanie said what about the lake?", corpus)  # names(): none
    assert share is not None
    assert share[corpus.index_of["m"]] == 1.0
    assert subject_share("What is it?", corpus) is None  # a question word is no subject


def test_a_two_letter_name_is_no_nickname() -> None:
    corpus = Corpus.build(SPEAKERS, DIM)
    share = subject_share("What did Ca paint?", corpus)
    assert share is None or not share.any()


def test_the_memory_told_on_the_named_date_goes_first() -> None:
    corpus = Corpus.build(
        [
            memory("june", "We cooked coconut ice cream.", at(2023, 6, 2)),
            memory("oct", "We cooked coconut ice cream.", at(2023, 10, 13)),
            memory("late", "We cooked coconut ice cream.", at(2023, 10, 18)),
        ],
        DIM,
    )
    assert order(corpus, "What did we cook on October 13, 2023?")[:2] == ["oct", "late"]
    assert order(corpus, "What did we cook in June?")[0] == "june"
    spans = question_spans("on October 13, 2023", NOW)
    assert date_match(spans, corpus, near_days=7).tolist() == [0.0, 1.0, 0.5]
    assert date_match(spans, corpus, near_days=0).tolist() == [0.0, 1.0, 0.0]


def test_a_question_that_asks_when_lifts_memories_that_say_when() -> None:
    corpus = Corpus.build(
        [
            memory("a-with", "I went hiking with Ana and Bo."),
            memory("b-when", "I went hiking last weekend."),
        ],
        DIM,
    )
    assert order(corpus, "When did I go hiking?")[0] == "b-when"
    without = RetrievalConfig(cues=CueConfig(when_weight=0))
    assert order(corpus, "When did I go hiking?", without)[0] == "a-with"  # a tie
    base = np.zeros(2, dtype=np.float32)
    q = Query("Did I go hiking?", np.asarray(SAME, dtype=np.float32))
    assert np.array_equal(lift_cues(base, q, corpus, CueConfig(), NOW), base)


def test_a_question_that_asks_an_amount_lifts_memories_that_state_one() -> None:
    corpus = Corpus.build(
        [
            memory("a-dated", "User loved the temples in Kyoto on 3 May 2023."),
            memory("b-amount", "User spent two weeks in Japan."),
        ],
        DIM,
    )
    base = np.zeros(2, dtype=np.float32)
    asked = Query("How long was I in Japan for?", np.asarray(SAME, dtype=np.float32))
    cues = CueConfig(amount_weight=0.1, when_weight=0)
    assert lift_cues(base, asked, corpus, cues, NOW).tolist() == pytest.approx([0.0, 0.1])
    assert order(corpus, "How long was I in Japan for?")[0] == "b-amount"
    for question in ("Where did I stay in Japan?", "How many days ago did I fly to Japan?"):
        q = Query(question, np.asarray(SAME, dtype=np.float32))
        assert np.array_equal(lift_cues(base, q, corpus, CueConfig(when_weight=0), NOW), base)


def test_a_question_about_the_past_is_not_answered_by_a_wish() -> None:
    corpus = Corpus.build(
        [
            memory("a-wish", "User is considering visiting other parts of Asia after Japan."),
            memory("b-said", "User visited the Fushimi Inari Shrine when User was in Japan."),
        ],
        DIM,
    )
    base = np.zeros(2, dtype=np.float32)
    cues = CueConfig(amount_weight=0, when_weight=0, past_weight=0.1)
    asked = Query("How long was I in Japan for?", np.asarray(SAME, dtype=np.float32))
    assert lift_cues(base, asked, corpus, cues, NOW).tolist() == pytest.approx([-0.1, 0.0])
    assert order(corpus, "How long was I in Japan for?")[0] == "b-said"
    # A question about what the user wants is answered by wishes as well.
    planning = Query("Any ideas for my trip to Japan?", np.asarray(SAME, dtype=np.float32))
    assert np.array_equal(lift_cues(base, planning, corpus, cues, NOW), base)


def test_a_question_naming_nothing_is_ranked_as_without_cues() -> None:
    corpus = Corpus.build([*SPEAKERS, memory("t", "I went hiking last weekend.")], DIM)
    base = np.asarray([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    q = Query("what do I like to paint", np.asarray(SAME, dtype=np.float32))
    assert np.array_equal(lift_cues(base, q, corpus, CueConfig(), NOW), base)


def test_an_appended_corpus_reads_only_its_new_memories(monkeypatch: pytest.MonkeyPatch) -> None:
    import sidecar.memory.read.retrieval.cues as cues

    first = Corpus.build(SPEAKERS[:2], DIM)
    question = Query("When did Melanie paint on March 3?", np.asarray(SAME, dtype=np.float32))
    base = np.zeros(2, dtype=np.float32)
    before = lift_cues(base, question, first, CueConfig(), NOW)
    read: list[str] = []

    def counted(reader: Callable[[str], Any]) -> Callable[[str], Any]:
        def wrapped(text: str) -> Any:
            read.append(text)
            return reader(text)

        return wrapped

    monkeypatch.setattr(cues, "subject", counted(cues.subject))
    monkeypatch.setattr(cues, "tells_time", counted(cues.tells_time))
    later = Corpus.build(
        [*SPEAKERS[:2], memory("z", "Melanie: I painted it last week.")], DIM, first
    )
    after = lift_cues(np.zeros(3, dtype=np.float32), question, later, CueConfig(), NOW)
    assert read == ["Melanie: I painted it last week."] * 2  # its subject, then its time
    assert after[:2].tolist() == before.tolist()
    fresh = Corpus.build(later.records, DIM)
    monkeypatch.undo()
    assert (
        after.tolist()
        == lift_cues(np.zeros(3, dtype=np.float32), question, fresh, CueConfig(), NOW).tolist()
    )
