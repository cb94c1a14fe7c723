"""Where a snapshot's rows came from, read once for every layer that follows them.

An update's next snapshot is the previous one's rows with a few removed, replaced
or inserted: row ``i`` is the previous snapshot's row ``sources[i]``, or -1 where
it is new or changed. Every layer carried into the new snapshot (records, memo
entries, vectors, BM25, ids, sessions, columns, the context index, subjects) reads
the same few things of ``sources``: which rows were kept, which are new, where
each old row went, and the runs of consecutive rows. :class:`Moves` finds each
once, when first asked (each is a pass over every row; found per layer they were
most of what an update cost beside the layers' own work).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Ints = npt.NDArray[np.int64]

#: Past this many runs of consecutive rows, rows move by index, not by slices.
MAX_RUNS = 64


def new_positions(
    sources: Ints,
    old_size: int,
    kept: Ints | None = None,
    runs: list[tuple[int, int]] | None = None,
) -> Ints:
    """Where each old row went, for a remap whose row ``i`` is the old
    ``sources[i]`` (-1: new): -1 for one removed; one entry more, -1, so that an old
    index of -1 ("none") reads -1 too. ``kept``: the rows of ``sources`` not -1,
    where known; ``runs``: its :func:`runs_of`, where known (the few runs an update
    leaves are placed by slices, not scattered through a gather of every row)."""
    out = np.full(old_size + 1, -1, dtype=np.int64)
    if runs is not None:
        for begin, end in runs:
            first = int(sources[begin])
            if first >= 0:
                out[first : first + end - begin] = np.arange(begin, end)
        return out
    if kept is None:
        kept = np.flatnonzero(sources >= 0)
    out[sources[kept]] = kept
    return out


def runs_of(sources: Ints) -> list[tuple[int, int]] | None:
    """``(begin, end)`` of each run of ``sources`` that is consecutive rows (or one
    -1), None past ``MAX_RUNS`` of them (then rows move by index)."""
    if not len(sources):
        return []
    breaks = np.flatnonzero((np.diff(sources) != 1) | (sources[1:] < 0) | (sources[:-1] < 0)) + 1
    if len(breaks) > MAX_RUNS:
        return None
    bounds = breaks.tolist()
    return list(zip([0, *bounds], [*bounds, len(sources)], strict=True))


def _frozen(values: Ints) -> Ints:
    values.flags.writeable = False  # shared by every layer: none may write it
    return values


class Moves:
    """Row ``i`` of a new snapshot is row ``sources[i]`` of one of ``old_size``
    rows (-1: new or changed). The arrays it gives are shared and read only."""

    __slots__ = (
        "_fresh",
        "_kept",
        "_new_of_old",
        "_runs",
        "_runs_found",
        "old_size",
        "sources",
        "touched",
    )

    def __init__(self, sources: Ints, old_size: int) -> None:
        self.sources = _frozen(np.array(sources, dtype=np.int64))
        self.old_size = old_size
        #: The new rows whose session neighbours may differ from their source's
        #: (rows of a session a row left, entered or changed in; in order); None:
        #: not known, any may.
        self.touched: Ints | None = None
        self._kept: Ints | None = None
        self._fresh: Ints | None = None
        self._new_of_old: Ints | None = None
        self._runs: list[tuple[int, int]] | None = None
        self._runs_found = False

    @classmethod
    def of(cls, sources: Moves | Sequence[int] | Ints, old_size: int) -> Moves:
        """``sources`` as moves from ``old_size`` rows (the same object if it is)."""
        if isinstance(sources, Moves):
            if sources.old_size != old_size:
                raise ValueError(f"moves from {sources.old_size} rows, not {old_size}")
            return sources
        return cls(np.asarray(sources, dtype=np.int64), old_size)

    def with_touched(self, rows: Ints) -> Moves:
        """These moves, knowing that only ``rows`` may have new session neighbours."""
        out = Moves.__new__(Moves)
        for name in Moves.__slots__:
            setattr(out, name, getattr(self, name))
        out.touched = _frozen(np.asarray(rows, dtype=np.int64))
        return out

    def __len__(self) -> int:
        return len(self.sources)

    @property
    def kept(self) -> Ints:
        """The new rows that are old ones, in order."""
        if self._kept is None:
            self._kept = _frozen(np.flatnonzero(self.sources >= 0))
        return self._kept

    @property
    def fresh(self) -> Ints:
        """The new rows that are new or changed (-1), in order."""
        if self._fresh is None:
            self._fresh = _frozen(np.flatnonzero(self.sources < 0))
        return self._fresh

    @property
    def new_of_old(self) -> Ints:
        """Where each old row went (:func:`new_positions`)."""
        if self._new_of_old is None:
            runs = self.runs
            kept = self.kept if runs is None else None
            self._new_of_old = _frozen(new_positions(self.sources, self.old_size, kept, runs))
        return self._new_of_old

    @property
    def runs(self) -> list[tuple[int, int]] | None:
        """:func:`runs_of` the sources."""
        if not self._runs_found:
            self._runs = runs_of(self.sources)
            self._runs_found = True
        return self._runs
