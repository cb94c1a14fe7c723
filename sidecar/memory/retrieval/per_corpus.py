"""A small cache of values derived from a corpus snapshot (category trees, topic
groups), for the last few corpora a retriever saw."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from sidecar.memory.corpus import Corpus

T = TypeVar("T")


class PerCorpus(Generic[T]):
    """``build(corpus, user_id)`` remembered per (corpus, user). A corpus is immutable
    and kept with its value, so its ``id`` cannot be reused while the entry lives."""

    def __init__(self, build: Callable[[Corpus, str], T], keep: int = 8) -> None:
        self._build = build
        self._keep = keep
        self._seen: OrderedDict[tuple[int, str], tuple[Corpus, T]] = OrderedDict()

    def get(self, corpus: Corpus, user_id: str) -> T:
        key = (id(corpus), user_id)
        found = self._seen.get(key)
        if found is not None and found[0] is corpus:
            self._seen.move_to_end(key)
            return found[1]
        value = self._build(corpus, user_id)
        self._seen[key] = (corpus, value)
        while len(self._seen) > self._keep:
            self._seen.popitem(last=False)
        return value
