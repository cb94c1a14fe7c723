"""Memories read in their conversation: an answer scores with the question said
before it, memories of the best evidence's session rise together, and a corpus
without sessions ranks exactly as without this stage."""

from __future__ import annotations

import numpy as np
import pytest

from sidecar.config import ConversationConfig, CueConfig, RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.rows import document
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.conversation import (
    ContextIndex,
    _priors,
    _weights,
    context_index,
    lift_sessions,
    long_transcript_lines,
)
from sidecar.memory.read.retrieval.pipeline import PipelineRetriever
from sidecar.memory.read.retrieval.registry import build_retrievers
from sidecar.memory.records.records import MemoryRecord
from tests.support.vectors import unit

DIM = 4
OFF = RetrievalConfig(conversation=ConversationConfig(enabled=False), cues=CueConfig(enabled=False))


def memory(
    rid: str, text: str, vector: tuple[float, ...], session: str = "", at: int = 0
) -> MemoryRecord:
    return MemoryRecord(
        id=rid, user_id="u", content=text, embedding=vector, session_id=session, created_at=at
    )


def query(text: str, *values: float) -> Query:
    return Query(text, np.asarray(unit(*values), dtype=np.float32))


def ranked(corpus: Corpus, q: Query, cfg: RetrievalConfig) -> list[str]:
    retriever = build_retrievers()["default"]
    assert isinstance(retriever, PipelineRetriever)
    return [corpus.records[i].id for i in retriever.rank(q, corpus, cfg, 5, "u").order]


#: The question strongest, the answer second, the look-alike over the answer alone.
PICNIC_QUERY = (0.7, 0.5, 0.3, 0.0)
PICNIC = [
    memory("q", "What games did you play at the church picnic?", unit(1, 0, 0, 0), "s1", 1),
    memory("a", "Some fun ones, like charades and a scavenger hunt.", unit(0, 1, 0, 0), "s1", 2),
    memory("x", "We played board games at home on Sunday.", unit(0.6, 0, 0.8, 0), "s2", 3),
    memory("y", "The scavenger shop sells old maps.", unit(0, 0, 0, 1), "s3", 4),
]


def test_an_answer_is_read_with_the_question_before_it() -> None:
    corpus = Corpus.build(PICNIC, DIM)
    q = query("which games at the picnic", *PICNIC_QUERY)
    alone = ranked(corpus, q, OFF)
    together = ranked(corpus, q, RetrievalConfig())
    assert alone.index("a") > alone.index("x")
    assert together.index("a") < together.index("x")


def test_a_corpus_without_sessions_ranks_as_without_the_stage() -> None:
    corpus = Corpus.build([m.with_changes(session_id="") for m in PICNIC], DIM)
    q = query("which games at the picnic", *PICNIC_QUERY)
    retriever = build_retrievers()["default"]
    assert isinstance(retriever, PipelineRetriever)
    on = retriever.rank(q, corpus, RetrievalConfig(), 5, "u")
    off = retriever.rank(q, corpus, OFF, 5, "u")
    assert on.order == off.order
    assert np.array_equal(on.scores, off.scores)


def test_the_session_of_the_best_evidence_goes_first() -> None:
    corpus = Corpus.build(
        [
            memory("best", "b", unit(1, 0, 0, 0), "s1", 1),
            memory("mate", "m", unit(1, 0, 0, 0), "s1", 2),
            memory("other", "o", unit(1, 0, 0, 0), "s2", 3),
            memory("alone", "l", unit(1, 0, 0, 0), "s3", 4),
        ],
        DIM,
    )
    scores = np.asarray([0.9, 0.5, 0.5, 0.1], dtype=np.float32)
    lifted = lift_sessions(scores, corpus, ConversationConfig(session_lift=0.2))
    assert lifted[1] > lifted[2]  # equal own scores: the best memory's session first
    assert lifted[2] == np.float32(0.6)  # its own session's best is itself
    assert lift_sessions(scores, corpus, ConversationConfig(session_lift=0)) is scores


def test_an_appended_corpus_extends_its_context_index(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ConversationConfig()
    first = Corpus.build(PICNIC[:2], DIM)
    context_index(first, config)
    fresh = ContextIndex.build(Corpus.build(PICNIC, DIM), config.turns, config.decay)
    built: list[Corpus] = []
    original = ContextIndex.build

    def counted(corpus: Corpus, turns: int, decay: float) -> ContextIndex:
        built.append(corpus)
        return original(corpus, turns, decay)

    monkeypatch.setattr(ContextIndex, "build", counted)
    later = Corpus.build([*PICNIC[:2], *PICNIC[2:]], DIM, previous=first)
    carried = context_index(later, config)
    assert built == []  # extended from the previous snapshot's, not built again
    assert len(carried.priors) == 4
    assert np.array_equal(carried.priors, fresh.priors)
    assert np.allclose(carried.weights, fresh.weights)
    assert np.array_equal(carried.sessions, fresh.sessions)
    terms = ["game", "picnic", "scaveng"]
    assert np.allclose(carried.bm25.scores(terms), fresh.bm25.scores(terms))
    # The question is the answer's prior; memories of other sessions have none.
    assert carried.priors[:, 0].tolist() == [-1, 0, -1, -1]


def test_context_cosine_is_the_joined_vectors_cosine() -> None:
    corpus = Corpus.build(PICNIC, DIM)
    index = context_index(corpus, ConversationConfig(turns=2, decay=0.5))
    q = np.asarray(unit(0.3, 0.7, 0.2, 0.1), dtype=np.float32)
    own = corpus.vectors @ q
    lengths = [max(len(document(corpus.records[i])), 1) for i in range(2)]
    joined = lengths[1] * corpus.vectors[1] + lengths[0] * corpus.vectors[0]
    expected = float(joined @ q / np.linalg.norm(joined))
    assert abs(index.cosine(own)[1] - expected) < 1e-6
    assert abs(index.cosine(own)[0] - own[0]) < 1e-6  # no prior: its own cosine


def test_a_memory_that_keeps_its_words_is_scored_alone() -> None:
    """A fact with its excerpt (what the write path extracts from a turn) already
    carries its conversation: the facts stored before it in the session change
    nothing of its score, while a bare line beside it is still read with its priors."""
    facts = [m.with_changes(excerpt=f"said: {m.content}") for m in PICNIC]
    corpus = Corpus.build(facts, DIM)
    q = query("which games at the picnic", *PICNIC_QUERY)
    retriever = build_retrievers()["default"]
    assert isinstance(retriever, PipelineRetriever)
    on = retriever.rank(q, corpus, RetrievalConfig(cues=CueConfig(enabled=False)), 5, "u")
    no_context = RetrievalConfig(
        conversation=ConversationConfig(weight=0.0), cues=CueConfig(enabled=False)
    )
    off = retriever.rank(q, corpus, no_context, 5, "u")
    assert on.order == off.order
    mixed = Corpus.build([facts[0], PICNIC[1], *facts[2:]], DIM)
    with_line = ranked(mixed, q, RetrievalConfig())
    assert with_line.index("a") < with_line.index("x")


def test_a_line_is_read_with_what_it_replies_to_not_with_its_own_speakers() -> None:
    """One user's consecutive requests to an assistant each stand alone; an answer to
    someone else's line reads with it; facts (no speaker) keep their priors."""
    rows = [
        memory("u1", "user: Any tips for the marathon in Lisbon?", unit(1, 0, 0, 0), "s", 1),
        memory("a1", "assistant: Hydrate, and taper the last week.", unit(0, 1, 0, 0), "s", 2),
        memory("u2", "user: I adopted a beagle called Rex.", unit(0, 0, 1, 0), "s", 3),
        memory("u3", "user: Also, what wine goes with fish?", unit(0, 0, 0, 1), "s", 4),
        memory("f1", "User lives in Porto.", unit(1, 1, 0, 0), "t", 5),
        memory("f2", "User works as a nurse.", unit(0, 1, 1, 0), "t", 6),
    ]
    corpus = Corpus.build(rows, DIM)
    index = context_index(corpus, ConversationConfig())
    priors = {corpus.records[i].id: index.priors[i].tolist() for i in range(corpus.size)}
    at = corpus.index_of
    assert priors["a1"] == [at["u1"], -1]  # the answer reads with the question
    assert priors["u2"] == [at["a1"], at["u1"]]  # a reply to the assistant
    assert priors["u3"] == [-1, -1]  # the user again: read alone
    assert priors["f2"] == [at["f1"], -1]  # no speaker: as before
    every = context_index(corpus, ConversationConfig(replies_only=False))
    assert every.priors[at["u3"]].tolist() == [at["u2"], at["a1"]]


def test_a_long_prior_does_not_drown_a_short_lines_words() -> None:
    """Capped, a prior's BM25 counts weigh at most as the line's own: the short line
    after a long answer keeps its own words' weight; priors no longer than the line
    score exactly as uncapped."""
    long_answer = "assistant: " + " ".join(f"word{i} tip" for i in range(60))
    rows = [
        memory("a", long_answer, unit(1, 0, 0, 0), "s", 1),
        memory("u", "user: my beagle Rex", unit(0, 1, 0, 0), "s", 2),
        memory("b", "assistant: beagle food tips", unit(0, 0, 1, 0), "t", 3),
        memory("v", "user: beagle walks daily please", unit(0, 0, 0, 1), "t", 4),
    ]
    corpus = Corpus.build(rows, DIM)
    # The long answer read as a prior (a longer one would stand alone: long_lines).
    capped = context_index(corpus, ConversationConfig(cap_prior_words=True, long_lines=0)).bm25
    plain = context_index(corpus, ConversationConfig(cap_prior_words=False, long_lines=0)).bm25
    u = corpus.index_of["u"]
    assert capped.scores(["beagle"])[u] > plain.scores(["beagle"])[u]
    # Priors no longer than their lines: the same joined documents either way.
    short = Corpus.build(rows[2:], DIM)
    for terms in (["beagle"], ["beagle", "walk"], ["food", "tip"]):
        assert np.array_equal(
            context_index(short, ConversationConfig(cap_prior_words=True)).bm25.scores(terms),
            context_index(short, ConversationConfig(cap_prior_words=False)).bm25.scores(terms),
        )


LONG = "assistant: " + " ".join(f"step{i} detail" for i in range(40))  # 80 tokens


def long_line_rows() -> list[MemoryRecord]:
    return [
        memory("u1", "user: Any tips for the marathon in Lisbon?", unit(1, 0, 0, 0), "s", 1),
        memory("a1", LONG, unit(0, 1, 0, 0), "s", 2),
        memory("u2", "user: Thanks, I will taper then.", unit(0, 0, 1, 0), "s", 3),
        memory("b1", "assistant: Good luck!", unit(0, 0, 0, 1), "s", 4),
        memory("u3", "user: I run in Porto too.", unit(1, 1, 0, 0), "s", 5),
    ]


def test_a_long_line_stands_alone_in_its_conversation() -> None:
    """A transcript line longer than ``long_lines`` has no priors and is no line's
    prior; the lines around it keep theirs."""
    corpus = Corpus.build(long_line_rows(), DIM)
    at = corpus.index_of
    index = context_index(corpus, ConversationConfig(long_lines=64))
    priors = {corpus.records[i].id: index.priors[i].tolist() for i in range(corpus.size)}
    assert priors["a1"] == [-1, -1]  # the long answer reads alone
    assert priors["u2"] == [-1, -1]  # and is not the reply's prior
    assert priors["b1"] == [at["u2"], -1]  # short lines still read together
    assert priors["u3"] == [at["b1"], at["u2"]]
    unlimited = context_index(corpus, ConversationConfig(long_lines=0))
    assert unlimited.priors[at["a1"]].tolist() == [at["u1"], -1]
    assert unlimited.priors[at["u2"]].tolist() == [at["a1"], at["u1"]]


def test_a_long_line_neither_lifts_its_session_nor_rises_with_it() -> None:
    corpus = Corpus.build(long_line_rows(), DIM)
    at = corpus.index_of
    scores = np.asarray([0.1, 0.9, 0.3, 0.2, 0.1], dtype=np.float32)
    lifted = lift_sessions(scores, corpus, ConversationConfig(long_lines=64, session_lift=0.5))
    assert lifted[at["a1"]] == scores[at["a1"]]  # the long line takes no lift
    # The short lines rise by half the best short line's score, not the long one's.
    assert np.allclose(lifted[at["u2"]], 0.3 + 0.5 * 0.3)
    plain = lift_sessions(scores, corpus, ConversationConfig(long_lines=0, session_lift=0.5))
    assert np.allclose(plain[at["u2"]], 0.3 + 0.5 * 0.9)


def test_a_corpus_of_long_lines_only_is_lifted_by_nothing() -> None:
    rows = [memory(f"a{i}", LONG, unit(1, 0, 0, 0), "s", i) for i in range(3)]
    corpus = Corpus.build(rows, DIM)
    scores = np.asarray([0.5, 0.4, 0.3], dtype=np.float32)
    lifted = lift_sessions(scores, corpus, ConversationConfig(long_lines=64))
    assert np.array_equal(lifted, scores)


def test_a_fact_that_keeps_a_long_turn_is_no_long_line() -> None:
    """The rule is for lines as said: a fact the write path made from a turn (its
    excerpt) keeps its lift and links however long the turn was."""
    made = memory("f", 'User asked: "Which dish first?"', unit(1, 0, 0, 0), "s", 1)
    corpus = Corpus.build([made.with_changes(excerpt=LONG), *long_line_rows()], DIM)
    long = long_transcript_lines(corpus, 64)
    assert long is not None
    assert not long[corpus.index_of["f"]]
    assert long[corpus.index_of["a1"]]


def test_context_weights_are_the_same_read_in_place_or_gathered() -> None:
    """A fresh snapshot's weights read its rows in place, memories without priors
    their own vector alone; an update's gather them. Each memory's weights are the
    same either way, to the bit, and those of the joined vectors' norms."""
    rng = np.random.default_rng(7)
    words = "picnic games charades hunt maps church sunday board".split()
    rows = [
        MemoryRecord(
            id=f"m{i}",
            user_id="u",
            content=" ".join(rng.choice(words, size=3 + i % 5)),
            embedding=tuple(rng.normal(size=DIM).tolist()),
            session_id=f"s{i % 6}" if i % 4 else "",  # a quarter without a session
            created_at=i,
        )
        for i in range(48)
    ]
    corpus = Corpus.build(rows, DIM)
    priors = _priors(corpus, 2)
    assert 0 < int((priors[:, 0] >= 0).sum()) < corpus.size  # some alone, some not
    every = np.arange(corpus.size, dtype=np.int64)
    whole = _weights(corpus, every, priors, 0.5)
    for part in (every[::2], every[1::3], every[10:20]):
        assert whole[part].tobytes() == _weights(corpus, part, priors[part], 0.5).tobytes()
    lengths = np.maximum(corpus.bm25.lengths, 1.0)
    for i in range(corpus.size):
        joined = lengths[i] * corpus.vectors[i]
        for t, p in enumerate(priors[i]):
            if p >= 0:
                joined = joined + 0.5**t * lengths[p] * corpus.vectors[p]
        assert abs(float(whole[i, 0]) - lengths[i] / np.linalg.norm(joined)) < 1e-5
