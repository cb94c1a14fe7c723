"""What the request path keeps for questions asked again: query vectors by user and
exact text (:class:`QueryVectorCache`), and rankings per scope snapshot
(:class:`RecentRankings`).

A chat client sends the same latest user message again and again: every round trip
of an agent's tool loop carries the conversation up to the user's message unchanged,
and clients retry. Each of those would run the embedding model for a vector it has
already computed, and on CPU that embedding is most of what the request path costs.
The model is fixed for the life of the process, so a cached vector is the one the
model would return: exactly with ``onnx-int8``, which embeds every text on its own,
and up to float noise with the backends that pad a batch to its longest text.

Keys are a digest of the user and the text, so no text is kept, and one user's
queries never answer another's (a hit's timing says nothing about what someone else
asked). ``ttl_s`` bounds how long a query leaves a trace in memory.

A ranking depends on the query, the strategy and its settings, and the scope's
corpus — an immutable snapshot replaced by every change to what the scope can see.
:class:`RecentRankings` lives on the snapshot (``Corpus.derived``), so a change
drops every ranking made from the old one, and a question asked again while nothing
changed gets the same memories without ranking them. What could differ is the
re-rank's recency, by at most the TTL on a 30-day half-life.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from sidecar.config import EmbeddingConfig, RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.read.ttl_cache import TtlCache, digest_key
from sidecar.memory.records.records import Hit

Vector = npt.NDArray[np.float32]


class QueryVectorCache:
    def __init__(
        self, max_entries: int, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._max_entries = max_entries
        self._ttl_s = ttl_s
        self._vectors: TtlCache[Vector] = TtlCache(clock)

    @classmethod
    def from_config(cls, config: EmbeddingConfig) -> QueryVectorCache | None:
        """The configured cache; ``None`` when it is off (no entries or no TTL)."""
        if config.query_cache_entries < 1 or config.query_cache_ttl_s <= 0:
            return None
        return cls(config.query_cache_entries, config.query_cache_ttl_s)

    def __len__(self) -> int:
        return len(self._vectors)

    def get(self, user: str, text: str) -> Vector | None:
        return self._vectors.get(digest_key(user, text))

    def put(self, user: str, text: str, vector: Vector) -> None:
        """Keep a read-only copy of ``vector`` (a caller cannot change a cached one)."""
        kept = np.array(vector, dtype=np.float32, copy=True)
        kept.setflags(write=False)
        self._vectors.put(
            digest_key(user, text),
            kept,
            ttl_s=self._ttl_s,
            max_entries=self._max_entries,
            owner=digest_key(user),
        )

    def forget(self, user: str) -> int:
        """Drop every vector cached for ``user`` (the admin API's forget); how many."""
        return self._vectors.drop_owner(digest_key(user))


class RecentRankings:
    """One scope snapshot's latest rankings by strategy, k and query text, each with
    the settings object it was ranked with (compared by identity: the entry holds
    it, so no other settings object can take its ``id``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._rankings: TtlCache[tuple[RetrievalConfig, tuple[Hit, ...]]] = TtlCache(clock)

    @staticmethod
    def of(corpus: Corpus) -> RecentRankings:
        """The snapshot's own (made on first use, dropped with the snapshot)."""
        return corpus.derived("request-rankings", RecentRankings)

    def get(
        self, strategy: str, top_k: int, text: str, config: RetrievalConfig
    ) -> list[Hit] | None:
        entry = self._rankings.get(_ranking_key(strategy, top_k, text, config))
        if entry is None or entry[0] is not config:
            return None
        return list(entry[1])

    def put(
        self, strategy: str, top_k: int, text: str, config: RetrievalConfig, hits: list[Hit]
    ) -> None:
        self._rankings.put(
            _ranking_key(strategy, top_k, text, config),
            (config, tuple(hits)),
            ttl_s=config.ranking_cache_ttl_s,
            max_entries=config.ranking_cache_entries,
        )


def _ranking_key(strategy: str, top_k: int, text: str, config: RetrievalConfig) -> str:
    return digest_key(strategy, str(top_k), str(id(config)), text)
