"""Taxonomy topics for facts no LLM named one: by keywords and by similarity to the
topic descriptions (the packaged MiniLM), conservative when nothing fits."""

from __future__ import annotations

import pytest

from sidecar.config import TaxonomyConfig, TaxonomyTopic
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import MemoryRecord
from sidecar.memory.write.tree.taxonomy import TopicClassifier, taxonomy_topics
from tests.support.fakes import FakeEmbedder


async def facts(embedder: Embedder, *texts: str) -> list[MemoryRecord]:
    vectors = await embedder.embed(list(texts))
    return [
        MemoryRecord(id=f"m{i}", user_id="u", content=t, embedding=tuple(map(float, v)))
        for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
    ]


@pytest.mark.parametrize(
    ("text", "topic"),
    [
        ("User is allergic to penicillin.", "health"),
        ("User's sister is Ana.", "family"),
        ("User works at Helix Labs.", "work"),
        ("User's dog is called Biscuit.", "pets"),
        ("User lives in Leeds.", "home"),
        ("User enjoys cooking Thai curries.", "food"),
        ("User went to Lisbon on holiday last year.", "travel"),
        ("User watches football on Saturdays.", "hobbies"),
    ],
)
async def test_facts_are_filed_under_the_topic_they_are_about(
    embedder: Embedder, text: str, topic: str
) -> None:
    classifier = TopicClassifier(embedder, TaxonomyConfig())
    found = await classifier.classify(await facts(embedder, text))
    assert found == {"m0": topic}


async def test_a_fact_that_fits_no_topic_gets_none(embedder: Embedder) -> None:
    classifier = TopicClassifier(embedder, TaxonomyConfig())
    assert await classifier.classify(await facts(embedder, "Denver is on Mountain Time.")) == {}


async def test_off_files_nothing(embedder: Embedder) -> None:
    classifier = TopicClassifier(embedder, TaxonomyConfig(enabled=False))
    assert await classifier.classify(await facts(embedder, "User's sister is Ana.")) == {}


async def test_topics_can_be_added_replaced_and_left_out(embedder: Embedder) -> None:
    config = TaxonomyConfig(
        topics={
            "gardening": TaxonomyTopic(
                description="gardening, plants, allotments and growing vegetables",
                keywords=["allotment", "tomatoes"],
            )
        },
        without=["home"],
    )
    names = [t.name for t in taxonomy_topics(config)]
    assert "gardening" in names
    assert "home" not in names
    classifier = TopicClassifier(embedder, config)
    found = await classifier.classify(await facts(embedder, "User grows tomatoes on an allotment."))
    assert found == {"m0": "gardening"}


async def test_descriptions_are_embedded_once() -> None:
    embedder = FakeEmbedder(16)
    classifier = TopicClassifier(embedder, TaxonomyConfig(min_score=-1))
    for _ in range(3):
        await classifier.classify(await facts(embedder, "User likes tea."))
    descriptions = [call for call in embedder.calls if len(call) == len(classifier.topics)]
    assert len(descriptions) == 1
