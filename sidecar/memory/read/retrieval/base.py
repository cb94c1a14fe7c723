"""The retrieval contract every strategy implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from sidecar.config import RetrievalConfig
from sidecar.memory.model.records import Hit, Scope
from sidecar.memory.model.text import char_ngrams, tokens
from sidecar.memory.read.corpus import Corpus
from sidecar.memory.store.protocol import Store


@dataclass(frozen=True, slots=True)
class Query:
    """A search query: its text, (normalised) embedding and lexical forms, computed once."""

    text: str = field(repr=False)
    vector: npt.NDArray[np.float32] = field(repr=False)

    @property
    def tokens(self) -> list[str]:
        return tokens(self.text)

    @property
    def ngrams(self) -> frozenset[str]:
        return char_ngrams(self.text)


@dataclass(frozen=True, slots=True)
class SearchContext:
    """Everything a strategy may use for one query: the scope, its visible corpus,
    the store (for store-side strategies) and the profile's retrieval settings."""

    scope: Scope
    corpus: Corpus
    store: Store
    config: RetrievalConfig


class Retriever(Protocol):
    """Finds the memories the context's scope may read that best match ``query``,
    best first, at most ``top_k``, each with its evidence in ``Hit.signals``."""

    name: str

    async def retrieve(self, query: Query, ctx: SearchContext, top_k: int) -> list[Hit]: ...
