"""Topics for facts no LLM named one: the built-in taxonomy, by keywords and by
similarity to each topic's description (:mod:`sidecar.memory.language.topics`).

A fact's score for a topic is its cosine to the topic's description, plus
``keyword_bonus`` when one of the topic's keywords is among its (stemmed) words.
The best topic is taken when it scores at least ``min_score``; otherwise the fact
gets no topic and the category tree files it as before. The descriptions are
embedded once, on first use, with the write path's embedder.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import numpy as np

from sidecar.config import TaxonomyConfig
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.text import stem, tokens
from sidecar.memory.language.topics import BUILTIN_TOPICS, TopicSpec
from sidecar.memory.records.records import MemoryRecord
from sidecar.memory.records.vectors import Matrix


def taxonomy_topics(config: TaxonomyConfig) -> tuple[TopicSpec, ...]:
    """The built-in topics less ``without``, with ``topics`` added or replacing."""
    left_out = {name.casefold() for name in config.without}
    replaced = {name.casefold() for name in config.topics}
    topics = [
        t
        for t in BUILTIN_TOPICS
        if t.name.casefold() not in left_out and t.name.casefold() not in replaced
    ]
    topics.extend(
        TopicSpec(name, spec.description, tuple(spec.keywords))
        for name, spec in sorted(config.topics.items())
    )
    return tuple(topics)


class TopicClassifier:
    """Names the taxonomy topic of facts (one instance per process)."""

    def __init__(self, embedder: Embedder, config: TaxonomyConfig) -> None:
        self._embedder = embedder
        self._config = config
        self._topics = taxonomy_topics(config)
        self._keywords = [frozenset(stem(w.casefold()) for w in t.keywords) for t in self._topics]
        self._descriptions: Matrix | None = None
        self._embedding: asyncio.Lock | None = None

    @property
    def topics(self) -> tuple[TopicSpec, ...]:
        return self._topics

    async def classify(self, records: Sequence[MemoryRecord]) -> Mapping[str, str]:
        """Memory id -> topic name for the records (with embeddings) that fit one."""
        if not self._config.enabled or not self._topics:
            return {}
        embedded = [r for r in records if r.embedding is not None]
        if not embedded:
            return {}
        descriptions = await self._description_vectors()
        vectors = np.asarray([r.embedding for r in embedded], dtype=np.float32)
        scores = vectors @ descriptions.T
        bonus = self._config.keyword_bonus
        found: dict[str, str] = {}
        for row, record in enumerate(embedded):
            words = set(tokens(record.content))
            for column, keywords in enumerate(self._keywords):
                if words & keywords:
                    scores[row, column] += bonus
            best = int(np.argmax(scores[row]))
            if scores[row, best] >= self._config.min_score:
                found[record.id] = self._topics[best].name
        return found

    async def _description_vectors(self) -> Matrix:
        if self._descriptions is None:
            if self._embedding is None:
                self._embedding = asyncio.Lock()
            async with self._embedding:
                if self._descriptions is None:
                    vectors = await self._embedder.embed([t.description for t in self._topics])
                    self._descriptions = np.asarray(vectors, dtype=np.float32)
        return self._descriptions
