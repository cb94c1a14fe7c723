"""Values derived from a corpus snapshot (category trees, topic groups), kept on the
snapshot itself: built on first use, dropped when the corpus is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from sidecar.memory.corpus.corpus import Corpus

T = TypeVar("T")


class PerCorpus(Generic[T]):
    """``build(corpus, user_id)`` computed once per (corpus, user) for this owner.
    ``build`` must read no access count or time (the value is structural: see
    :meth:`Corpus.derived`)."""

    def __init__(self, build: Callable[[Corpus, str], T]) -> None:
        self._build = build

    def get(self, corpus: Corpus, user_id: str) -> T:
        return corpus.derived(
            (self, user_id), lambda: self._build(corpus, user_id), structural=True
        )
