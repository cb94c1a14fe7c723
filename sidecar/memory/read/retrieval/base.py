"""The retrieval contract every strategy implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import numpy as np
import numpy.typing as npt

from sidecar.config import RetrievalConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.language.text import char_ngrams, tokens
from sidecar.memory.records.records import Hit, Scope, now_ms
from sidecar.memory.store.protocol import Store


class Stage(StrEnum):
    """A ranking stage whose score a hit's signals record when it changed the score
    (the names the console, the admin API and ``sidecar eval`` show)."""

    FUSED = "fused"
    CONTEXT = "context"
    CUES = "cues"
    SESSION = "session"
    TOPIC = "topic"
    LINKS = "links"
    RERANK = "rerank"

    @property
    def meaning(self) -> str:
        """What the stage's score says, in a few words."""
        return _STAGE_MEANINGS[self]


_STAGE_MEANINGS = {
    Stage.FUSED: "the signals weighted together",
    Stage.CONTEXT: "read with the memories said before it",
    Stage.CUES: "whom and when the question names",
    Stage.SESSION: "its conversation's best score",
    Stage.TOPIC: "the user's named topics",
    Stage.LINKS: "support from linked memories",
    Stage.RERANK: "similarity, salience and confidence",
}


@dataclass(frozen=True, slots=True)
class Query:
    """A search query: its text, (normalised) embedding and lexical forms, computed once."""

    text: str = field(repr=False)
    vector: npt.NDArray[np.float32] = field(repr=False)
    #: When it is asked (epoch ms; 0: now): what "last week" and recency are counted
    #: from. A replayed conversation asks at its own time.
    at_ms: int = 0

    @property
    def now_ms(self) -> int:
        return self.at_ms or now_ms()

    @property
    def tokens(self) -> list[str]:
        return tokens(self.text)

    @property
    def ngrams(self) -> frozenset[str]:
        return char_ngrams(self.text)


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """Everything a strategy may use for one query: the scope, its visible corpus,
    the store (for store-side strategies) and the profile's retrieval settings."""

    scope: Scope
    corpus: Corpus
    store: Store
    config: RetrievalConfig


class Retriever(Protocol):
    """Finds the memories the search space's scope may read that best match ``query``,
    best first, at most ``top_k``, each with its evidence in ``Hit.signals``."""

    name: str

    async def retrieve(self, query: Query, space: SearchSpace, top_k: int) -> list[Hit]: ...
