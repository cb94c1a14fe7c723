"""A memory's embedding as a record holds it: :class:`Embedding`, an immutable
sequence of float32 components packed in one ``bytes``.

Why not a tuple of Python floats: a 384-component tuple takes about 12 KB (a float
object per component), eight times the 1.5 KB of its float32 values; the corpus
cache holds up to ``cache.max_rows`` records, and every pass over a snapshot's
records walks that memory. Packed, a snapshot's matrix is one join of the rows'
bytes instead of a conversion of every component, and the vector costs the same
as the float32 values Milvus stores (so nothing is lost: rows come back from the
store, the relay and an export as float32)."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any, SupportsIndex, overload

import numpy as np
import numpy.typing as npt

#: Components are little-endian float32, whatever the host's byte order: the bytes
#: travel (relay frames, pickles between processes).
DTYPE = np.dtype("<f4")
#: Bytes of one component.
ITEM_BYTES = DTYPE.itemsize


class Embedding(Sequence[float]):
    """An embedding vector: ``len`` components, read as Python floats by index or
    iteration, as a read-only float32 array by :meth:`array` / ``np.asarray``.

    Equal to another :class:`Embedding` with the same bytes (so ``0.0`` and ``-0.0``
    differ, and a NaN equals itself: the question asked of vectors here is "is this
    the stored one"), and to a tuple or list of the same float values. Hashed by its
    bytes."""

    __slots__ = ("raw",)

    #: The components as little-endian float32 bytes.
    raw: bytes

    def __init__(self, values: Iterable[float] | npt.ArrayLike) -> None:
        object.__setattr__(self, "raw", _pack(values))

    @classmethod
    def from_bytes(cls, raw: bytes) -> Embedding:
        """The embedding whose little-endian float32 components are ``raw``."""
        if len(raw) % ITEM_BYTES:
            raise ValueError(f"{len(raw)} bytes are not whole float32 components")
        made = cls.__new__(cls)
        object.__setattr__(made, "raw", bytes(raw))
        return made

    def array(self) -> npt.NDArray[np.float32]:
        """The components as a read-only float32 array (a view of the bytes)."""
        return np.frombuffer(self.raw, dtype=DTYPE)

    def tolist(self) -> list[float]:
        """The components as Python floats (what the Milvus client packs)."""
        values: list[float] = self.array().tolist()
        return values

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> npt.NDArray[Any]:
        array = self.array()
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)
        return array.copy() if copy else array

    def __len__(self) -> int:
        return len(self.raw) // ITEM_BYTES

    @overload
    def __getitem__(self, index: SupportsIndex) -> float: ...

    @overload
    def __getitem__(self, index: slice) -> Embedding: ...

    def __getitem__(self, index: SupportsIndex | slice) -> float | Embedding:
        if isinstance(index, slice):
            return Embedding(self.array()[index])
        return float(self.array()[index])

    def __iter__(self) -> Iterator[float]:
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        if type(other) is Embedding:  # not isinstance: an ABC's check is slow
            return self.raw == other.raw
        if isinstance(other, tuple | list):
            return len(other) == len(self) and self.tolist() == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.raw)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("an Embedding is immutable")

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return (Embedding.from_bytes, (self.raw,))

    def __repr__(self) -> str:  # a vector's values say nothing to a reader
        return f"Embedding(dim={len(self)})"


def stacked(
    embeddings: Sequence[Embedding], room: int = 0, *, dim: int | None = None
) -> npt.NDArray[np.float32]:
    """The rows ``embeddings`` as a writable float32 matrix, and ``room`` zeroed rows
    after them: their bytes joined into one buffer the matrix views (one copy).
    ``ValueError`` if one has another length than the first (or than ``dim``)."""
    raws = list(map(_RAW, embeddings))
    width = (len(raws[0]) if raws else 0) if dim is None else dim * ITEM_BYTES
    if not all(map(width.__eq__, map(len, raws))):
        raise ValueError("embeddings of different lengths")
    shape = (len(raws) + room, width // ITEM_BYTES)
    if room:
        raws.append(bytes(room * width))
    return np.frombuffer(bytearray().join(raws), dtype=DTYPE).reshape(shape)


_RAW = attrgetter("raw")


def _pack(values: Iterable[float] | npt.ArrayLike) -> bytes:
    """``values`` as little-endian float32 bytes: a sequence of numbers through one
    ``struct.pack`` (several times faster than numpy's conversion of a list of Python
    floats, with the same rounding), anything else by numpy's cast."""
    if isinstance(values, Iterator):  # a generator: numpy would see one object
        values = list(values)
    if isinstance(values, list | tuple):
        try:
            return struct.pack(f"<{len(values)}f", *values)
        except (struct.error, OverflowError, TypeError):
            pass  # not numbers, or beyond float32's range (numpy's cast gives inf)
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"a vector has one dimension, not {array.ndim}")
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(array, dtype=DTYPE).tobytes()
