"""The store contract: what the read and write sides ask of the memory store.

:class:`~sidecar.memory.store.milvus.MemoryStore` is the one the sidecar runs; the
tests' in-memory fake stands in for it where Milvus' own behaviour is not what a
test is about. Every read and delete takes a :class:`Filter` from
:func:`~sidecar.memory.store.filters.build_filter` (or ``ids_filter``): no other
expression reaches a store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from sidecar.memory.records.records import AccessStat, Hit, MemoryRecord
from sidecar.memory.store.filters import Filter


class Store(Protocol):
    """Memory rows (and category nodes) by id, their vectors and access counts.

    Reads return records oldest first (ties by id), without vectors unless asked
    for, with their access rows merged in (the higher count and later time win).
    """

    @property
    def dim(self) -> int:
        """The vectors' dimension."""
        ...

    async def upsert(self, records: Sequence[MemoryRecord]) -> None:
        """Insert or replace rows by id (every record carries its vector)."""
        ...

    async def delete(self, where: Filter) -> None:
        """Remove the rows matching ``where`` for good, and their access rows."""
        ...

    async def search(
        self,
        vector: Sequence[float] | npt.NDArray[np.float32],
        *,
        where: Filter,
        limit: int,
        strong: bool = False,
    ) -> list[Hit]:
        """Cosine nearest neighbours among rows matching ``where``, best first
        (``strong``: read-your-writes consistency)."""
        ...

    async def search_text(self, text: str, *, where: Filter, limit: int) -> list[Hit]:
        """Full-text (BM25) matches of ``text`` among rows matching ``where``."""
        ...

    async def query(
        self,
        where: Filter,
        *,
        limit: int = 1000,
        offset: int = 0,
        with_vectors: bool = False,
        strong: bool = False,
    ) -> list[MemoryRecord]:
        """One page (``offset``, ``limit``) of the rows matching ``where``
        (``strong``: read-your-writes consistency, and other writers' writes)."""
        ...

    async def scan(
        self,
        where: Filter,
        *,
        with_vectors: bool = False,
        batch_size: int = 1000,
        strong: bool = False,
    ) -> list[MemoryRecord]:
        """Every row matching ``where`` (``strong``: as for :meth:`query`)."""
        ...

    async def owners(self, where: Filter, *, limit: int = 1000) -> dict[str, str]:
        """The rows matching ``where``: id -> owner."""
        ...

    async def count(self, where: Filter) -> int:
        """How many rows match ``where``."""
        ...

    async def read_access(self, ids: Sequence[str]) -> dict[str, AccessStat]:
        """The access rows of those of ``ids`` that have one (read-your-writes)."""
        ...

    async def write_access(self, stats: Sequence[AccessStat]) -> None:
        """Insert or replace the access rows of ``stats`` (by memory id)."""
        ...
