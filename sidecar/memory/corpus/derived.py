"""Values derived from a corpus snapshot that follow it through updates: a
column of per-memory values read from each record (:class:`MemoryColumn`), and
the protocols a derived value implements to be carried into the next snapshot
instead of built again (:class:`Appendable`, :class:`Remappable`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from sidecar.memory.corpus.delta import taken
from sidecar.memory.corpus.moves import Moves
from sidecar.memory.records.records import MemoryRecord


class Snapshot(Protocol):
    """What a derived value reads of a corpus snapshot
    (:class:`~sidecar.memory.corpus.corpus.Corpus`)."""

    @property
    def size(self) -> int: ...

    def read_all(
        self, name: str, read: Callable[[MemoryRecord], Any], start: int = 0
    ) -> list[Any]: ...

    def read(self, name: str, index: int, read: Callable[[MemoryRecord], Any]) -> Any: ...


def column_key(name: str) -> str:
    """The memo's name for the values of column ``name``
    (:meth:`~sidecar.memory.corpus.corpus.Corpus.column`)."""
    return f"column:{name}"


@runtime_checkable
class Appendable(Protocol):
    """A per-corpus value that can be brought up to date when memories are only
    appended (cheaper than building it again for the new snapshot)."""

    def appended(self, corpus: Snapshot) -> Appendable: ...


@runtime_checkable
class Remappable(Protocol):
    """A per-corpus value that can follow memories removed, replaced or reordered:
    memory ``i`` of the new snapshot is memory ``sources[i]`` of the old, or new
    where that is -1 (:class:`~sidecar.memory.corpus.moves.Moves`; cheaper than
    building it again; the result must equal a fresh build)."""

    def remapped(self, corpus: Snapshot, sources: Moves) -> Remappable: ...


@dataclass(frozen=True, slots=True)
class MemoryColumn:
    """A value per memory read from its record
    (:meth:`~sidecar.memory.corpus.corpus.Corpus.column`)."""

    name: str
    read: Callable[[MemoryRecord], Any]
    values: npt.NDArray[Any]

    def appended(self, corpus: Snapshot) -> MemoryColumn:
        """This column for ``corpus``, which holds its memories followed by new ones:
        only the new ones are read."""
        start = len(self.values)
        tail = np.asarray(
            corpus.read_all(self.name, self.read, start),
            dtype=self.values.dtype,
        )
        return MemoryColumn(self.name, self.read, np.concatenate([self.values, tail]))

    def remapped(self, corpus: Snapshot, sources: Moves) -> MemoryColumn:
        """This column for ``corpus`` (see :class:`Remappable`): only the new or
        changed memories are read."""
        values = taken(self.values, sources)
        for i in sources.fresh.tolist():
            values[i] = corpus.read(self.name, i, self.read)
        return MemoryColumn(self.name, self.read, values)
