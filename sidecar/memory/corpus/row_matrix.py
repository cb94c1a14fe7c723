"""A snapshot's memory vectors, shared with the snapshots before it.

A large user's matrix is megabytes (10k memories x 384 floats: 15 MB), and every
write makes a new snapshot: copying it per snapshot was the largest single cost of
the next request after a write. :class:`RowMatrix` keeps the rows in a buffer with
room to grow, shared by the snapshots made one from another: an appended memory's
row is written after the last row in use (the older snapshots never read past their
own end; two snapshots made from one write one after the other), and a removed or
moved memory only changes which buffer row each snapshot row reads (an index
array). Scoring multiplies the buffer and picks the snapshot's rows from the result;
past one dead row in ``FOLD_EVERY``, an update copies the live rows into a new
buffer.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from sidecar.memory.corpus.moves import Moves, runs_of

Matrix = npt.NDArray[np.float32]
Ints = npt.NDArray[np.int64]

#: An update copies the live rows into a new buffer once more than one buffer row in
#: this many is dead (removed or replaced memories).
FOLD_EVERY = 8
#: A new buffer has room for this share more rows (appends then write in place).
_GROWTH = 1.25
_MIN_ROOM = 16


def room_for(size: int) -> int:
    """The rows a new buffer of ``size`` rows leaves free after them."""
    return int(size * (_GROWTH - 1)) + _MIN_ROOM


class _Buffer:
    """Rows, the first ``used`` of them written. A snapshot's new rows go after
    the last one written, whichever snapshot wrote it (rows a snapshot does not
    read are dead to it: another snapshot's, made from the same one)."""

    __slots__ = ("data", "lock", "used")

    def __init__(self, data: Matrix, used: int) -> None:
        self.data = data
        self.used = used
        self.lock = threading.Lock()

    @classmethod
    def gathered(cls, data: Matrix, at: Ints, room: int) -> _Buffer:
        """A buffer of ``data``'s rows ``at``, in order, and ``room`` rows free:
        copied by slices where they lie in a few runs (a fold after a deletion
        or two), else gathered; one copy either way."""
        size = len(at)
        out = np.empty((size + room, data.shape[1]), dtype=np.float32)
        runs = runs_of(at)
        if runs is None:
            np.take(data, at, axis=0, out=out[:size])
        else:
            for begin, end in runs:
                first = int(at[begin])
                out[begin:end] = data[first : first + end - begin]
        return cls(out, size)

    def append(self, rows: Matrix) -> int:
        """Write ``rows`` after the last row written; where the first went. A full
        buffer grows like a list: its rows are copied into a larger array, which
        every snapshot sharing the buffer then reads (their rows are the same)."""
        count = len(rows)
        with self.lock:
            start = self.used
            if start + count > len(self.data):
                grown = np.empty(
                    (int((start + count) * _GROWTH) + _MIN_ROOM, self.data.shape[1]),
                    dtype=np.float32,
                )
                grown[:start] = self.data[:start]
                self.data = grown
            self.data[start : start + count] = rows
            self.used = start + count
            return start


class RowMatrix:
    """The vectors of a snapshot's memories (see the module docstring): row ``i``
    is buffer row ``rows[i]`` (buffer row ``i`` where ``rows`` is None)."""

    __slots__ = ("_buffer", "_end", "_rows", "dim", "size")

    def __init__(self, buffer: _Buffer, end: int, rows: Ints | None, dim: int) -> None:
        #: Buffer rows ``0 .. end`` hold every row this matrix reads.
        self._buffer = buffer
        self._end = end
        self._rows = rows
        self.dim = dim
        self.size = end if rows is None else len(rows)

    @classmethod
    def of(cls, rows: Matrix) -> RowMatrix:
        """A matrix of these rows (held as they are: no room to append in place)."""
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        return cls(_Buffer(rows, len(rows)), len(rows), None, rows.shape[1])

    @classmethod
    def in_buffer(cls, data: Matrix, size: int) -> RowMatrix:
        """A matrix of ``data``'s first ``size`` rows, the others room to append in
        place (a fresh build's: else the first write after it copies every row)."""
        return cls(_Buffer(data, size), size, None, data.shape[1])

    def dense(self) -> Matrix:
        """The rows as one matrix (a view when they lie in order, else a copy)."""
        data = self._buffer.data
        return data[: self._end] if self._rows is None else data[self._rows]

    def scores(self, vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """``dense() @ vector`` without copying the rows."""
        out: npt.NDArray[np.float32] = self._buffer.data[: self._end] @ vector
        return out if self._rows is None else out[self._rows]

    def take(self, indices: npt.ArrayLike) -> Matrix:
        """``dense()[indices]`` without copying the other rows."""
        at = np.asarray(indices, dtype=np.int64)
        return self._buffer.data[at if self._rows is None else self._rows[at]]

    def span(self, begin: int, end: int) -> Matrix | None:
        """Rows ``begin .. end`` as a view where they lie in order in the buffer
        (a fresh build's), else None (:meth:`take` copies them)."""
        if self._rows is not None:
            return None
        return self._buffer.data[begin : min(end, self._end)]

    def appended(self, rows: Matrix) -> RowMatrix:
        """This matrix followed by ``rows``."""
        if not len(rows):
            return self
        return self.remapped(
            np.concatenate(
                [
                    np.arange(self.size, dtype=np.int64),
                    np.full(len(rows), -1, dtype=np.int64),
                ]
            ),
            rows,
        )

    def remapped(self, sources: Ints | Moves, rows: Matrix, *, fold: bool = False) -> RowMatrix:
        """The matrix whose row ``i`` is this one's ``sources[i]``, the rows of
        ``rows`` in order where that is -1. ``fold``: in a buffer of its own (no row
        it does not hold is kept: a deleted memory's vector)."""
        moves = Moves.of(sources, self.size)
        at = np.empty(len(moves), dtype=np.int64)
        kept = moves.kept
        at[kept] = moves.sources[kept] if self._rows is None else self._rows[moves.sources[kept]]
        size, count = len(moves), len(rows)
        buffer, end = self._buffer, self._end
        if count:
            start = buffer.append(rows)
            at[moves.fresh] = np.arange(start, start + count, dtype=np.int64)
            end = start + count
        elif size:
            end = int(at.max()) + 1
        else:
            end = 0
        if fold or FOLD_EVERY * (end - size) > end:
            # Asked, or too many rows read for nothing: the live ones, in order, in
            # a new buffer.
            folded = _Buffer.gathered(buffer.data, at, room_for(size))
            return RowMatrix(folded, size, None, self.dim)
        in_order = end == size and bool((at == np.arange(size)).all())
        return RowMatrix(buffer, end, None if in_order else at, self.dim)
