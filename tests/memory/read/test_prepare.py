"""A strategy's ``prepare``: what it makes of a snapshot before any question is all
that its ranking reads of every memory whatever the question, and the ranking of a
prepared snapshot is the ranking of an unprepared one."""

from __future__ import annotations

import numpy as np
import pytest

from sidecar.config import LinkConfig, RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.retrieval.base import Query
from sidecar.memory.read.retrieval.pipeline import PipelineRetriever
from sidecar.memory.read.retrieval.registry import build_retrievers, preparer
from sidecar.memory.records.records import MemoryRecord
from tests.support.vectors import unit

DIM = 4
DAY = 86_400_000
LONG = " ".join(f"word{i}" for i in range(90))  # a transcript line past the long-line rule


def memory(rid: str, text: str, vector: tuple[float, ...], **extra: object) -> MemoryRecord:
    return MemoryRecord(id=rid, user_id="u", content=text, embedding=vector, **extra)  # type: ignore[arg-type]


MEMORIES = [
    memory(
        "q",
        "Ana: Where did you go camping with Jon last May?",
        unit(1, 0, 0, 0),
        session_id="s1",
        created_at=10 * DAY,
    ),
    memory(
        "a",
        "Jon: We went to the lake, it cost us $300 for the week.",
        unit(0, 1, 0, 0),
        session_id="s1",
        created_at=10 * DAY + 1,
    ),
    memory("l", f"assistant: {LONG}", unit(0, 0, 1, 0), session_id="s1", created_at=10 * DAY + 2),
    memory(
        "w",
        "I wish I had learned the guitar as a kid.",
        unit(0, 0, 0, 1),
        created_at=12 * DAY,
        related_ids=("f",),
    ),
    memory(
        "f",
        "I moved to Porto in March.",
        unit(1, 1, 0, 0),
        created_at=13 * DAY,
        excerpt="we moved to Porto in March",
        related_ids=("w",),
    ),
]
QUESTIONS = [
    "When did Jon go camping?",
    "How much did the lake trip cost?",
    "What did I use to want to learn?",
    "Where do I live now?",
    "what did Ana ask on 10 January?",
]


def strategies() -> list[str]:
    return [name for name, r in build_retrievers().items() if isinstance(r, PipelineRetriever)]


@pytest.mark.parametrize("strategy", strategies())
@pytest.mark.parametrize("links", [LinkConfig(), LinkConfig(session_neighbors=True)])
def test_a_prepared_snapshot_makes_nothing_more_per_memory_for_any_question(
    strategy: str, links: LinkConfig
) -> None:
    config = RetrievalConfig(strategy=strategy, links=links)
    retrievers = build_retrievers()  # one set, as the sidecar's cache and reads share
    prepare = preparer(retrievers, config)
    assert prepare is not None
    retriever = retrievers[strategy]
    assert isinstance(retriever, PipelineRetriever)
    fresh = Corpus.build(MEMORIES, DIM)
    prepared = Corpus.build(MEMORIES, DIM)
    steps = sum(1 for _ in prepare(prepared, "u"))
    made = set(prepared._derived)
    for text in QUESTIONS:
        q = Query(text, np.asarray(unit(1, 0.5, 0.2, 0), dtype=np.float32), at_ms=40 * DAY)
        expected = retriever.rank(q, fresh, config, 5, "u")
        got = retriever.rank(q, prepared, config, 5, "u")
        assert got.order == expected.order
        assert np.array_equal(got.scores, expected.scores)
    assert set(prepared._derived) == made, "a question made a per-snapshot value prepare did not"
    assert set(fresh._derived) <= made
    if strategy == "default":
        assert steps >= 3  # the loop is given back between stages


def test_nothing_is_prepared_for_a_strategy_the_store_scores() -> None:
    assert preparer(build_retrievers(), RetrievalConfig(strategy="dense-milvus")) is None


def test_an_empty_snapshot_takes_no_step() -> None:
    prepare = preparer(build_retrievers(), RetrievalConfig())
    assert prepare is not None
    assert list(prepare(Corpus.build([], DIM), "u")) == []
