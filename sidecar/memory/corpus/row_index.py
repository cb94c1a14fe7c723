"""Memory id to its row in a corpus snapshot, carried from the snapshot before.

Every snapshot needs the id of each row to its index (links, the write path's
dedup, deep search). A dictionary of a large user's memories costs a millisecond or
more to build, and an update makes a new snapshot whose rows shift by the memories
removed before them. :class:`RowIndex` keeps the dictionary of an earlier snapshot
(the base, shared), where each of its rows went (an array) and the ids of rows added
since (a small dictionary); past a small share of added or removed rows, the next
update builds a new base.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from operator import attrgetter
from typing import TypeVar, overload

import numpy as np
import numpy.typing as npt

from sidecar.memory.corpus.moves import Moves
from sidecar.memory.records.records import MemoryRecord

Ints = npt.NDArray[np.int64]
T = TypeVar("T")

_ID = attrgetter("id")
#: Past this many ids added since the base (plus one per ``_ADDED_PER`` rows), or
#: one in ``_REMOVED_EVERY`` base rows gone, an update builds a new base: lookups
#: stay two dictionary reads, and carrying the added ids stays a few microseconds.
_ADDED_MIN = 32
_ADDED_PER = 64
_REMOVED_EVERY = 8


class RowIndex(Mapping[str, int]):
    """The rows of a snapshot by memory id (see the module docstring)."""

    __slots__ = ("_added", "_base", "_moved", "_records")

    def __init__(
        self,
        records: Sequence[MemoryRecord],
        base: dict[str, int] | None = None,
        moved: Ints | None = None,
        added: dict[str, int] | None = None,
    ) -> None:
        self._records = records
        if base is None:
            base = dict(zip(map(_ID, records), range(len(records)), strict=True))
        self._base = base
        #: Base row -> this snapshot's row (-1: gone); None: the base's rows as they are.
        self._moved = moved
        #: Ids of rows new or changed since the base (looked up first).
        self._added = added if added is not None else {}

    @overload
    def get(self, key: str, /) -> int | None: ...

    @overload
    def get(self, key: str, default: int, /) -> int: ...

    @overload
    def get(self, key: str, default: T, /) -> int | T: ...

    def get(self, key: str, default: object = None) -> object:
        row = self._added.get(key)
        if row is not None:
            return row
        row = self._base.get(key)
        if row is None:
            return default
        moved = self._moved
        if moved is None:
            return row
        row = int(moved[row])
        return default if row < 0 else row

    def __getitem__(self, key: str) -> int:
        row = self.get(key)
        if row is None:
            raise KeyError(key)
        return row

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[str]:
        return map(_ID, self._records)

    def plain(self) -> dict[str, int]:
        """The index as one dictionary (for passes that look up every row)."""
        if self._moved is None and not self._added:
            return self._base
        return dict(zip(map(_ID, self._records), range(len(self._records)), strict=True))

    def remapped(self, records: Sequence[MemoryRecord], sources: Ints | Moves) -> RowIndex:
        """The index of ``records``, whose row ``i`` is this index's row
        ``sources[i]`` (-1: a new or changed memory)."""
        moves = Moves.of(sources, len(self._records))
        new_of_old = moves.new_of_old  # [-1] reads -1
        base_rows = (
            np.arange(len(self._base), dtype=np.int64) if self._moved is None else self._moved
        )
        moved = new_of_old[base_rows]
        added = {key: int(new_of_old[row]) for key, row in self._added.items()}
        added = {key: row for key, row in added.items() if row >= 0}
        for i in moves.fresh.tolist():
            added[records[i].id] = i
        if len(added) > _ADDED_MIN + len(records) // _ADDED_PER or _REMOVED_EVERY * int(
            np.count_nonzero(moved < 0)
        ) > len(moved):
            return RowIndex(records)
        return RowIndex(records, self._base, moved, added)
