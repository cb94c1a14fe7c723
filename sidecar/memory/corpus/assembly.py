"""How a corpus snapshot's rows are laid out: which rows are its memories and
categories, their order, their links and sessions, and which of them the previous
snapshot already held.

Each is one pass over a scope's rows, and a write makes a new snapshot, so a large
user's next request pays every pass: they run as C-level iteration (``map``,
``zip``, numpy) wherever the per-row work is a lookup, and a Python loop visits
only the few rows that need one (linked memories, rows that are not the previous
snapshot's objects)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress, count, repeat
from operator import attrgetter, is_, not_

import numpy as np
import numpy.typing as npt

from sidecar.memory.records.records import MemoryRecord, NodeType, Status

Ints = npt.NDArray[np.int64]

_ID = attrgetter("id")
_CREATED = attrgetter("created_at")
_RELATED = attrgetter("related_ids")
_SESSION = attrgetter("session_id")


def active_rows(rows: Sequence[MemoryRecord]) -> tuple[list[MemoryRecord], list[MemoryRecord]]:
    """The active memories (by time: :func:`by_time`) and active category nodes (by
    id) of ``rows``, the first row of an id kept where an id repeats."""
    if len(set(map(_ID, rows))) != len(rows):
        unique: dict[str, MemoryRecord] = {}
        for row in rows:
            unique.setdefault(row.id, row)
        rows = list(unique.values())
    # By identity first, far faster than by value, and true of the usual rows (a
    # cache unit holds active memories); by value where a row is not.
    # The members in locals: reading one from its enum class costs as much again.
    wanted, kind = Status.ACTIVE, NodeType.MEMORY
    active = [r for r in rows if r.status is wanted]
    if len(active) < len(rows):
        active = [r for r in rows if r.status == wanted]
    memories = [r for r in active if r.node_type is kind]
    if len(memories) < len(active):
        memories = [r for r in active if r.node_type == kind]
    categories = (
        sorted((r for r in active if r.node_type == NodeType.CATEGORY), key=_ID)
        if len(memories) < len(active)
        else []
    )
    return by_time(memories), categories


def by_time(records: list[MemoryRecord]) -> list[MemoryRecord]:
    """``records`` sorted by (``created_at``, ``id``): by time with numpy (a sort of
    tuples was most of a large snapshot's build), then ties, which are rare, by id.
    Rows already in time order (a snapshot's rows and the newest after them) are
    not moved."""
    times = np.fromiter(map(_CREATED, records), np.int64, len(records))
    if bool((times[1:] >= times[:-1]).all()):
        out = records
    else:
        order = np.argsort(times, kind="stable")
        out = [records[i] for i in order.tolist()]
        times = times[order]
    tied = np.flatnonzero(times[1:] == times[:-1])
    if len(tied):
        out = list(out) if out is records else out
        starts = tied[np.concatenate([[True], np.diff(tied) != 1])].tolist()
        ends = (tied[np.concatenate([np.diff(tied) != 1, [True]])] + 2).tolist()
        for start, end in zip(starts, ends, strict=True):
            out[start:end] = sorted(out[start:end], key=_ID)
    return out


def same_document(new: MemoryRecord, prev: MemoryRecord) -> bool:
    """Same id, text and vector: its matrix row and BM25 tokens can be reused."""
    return new is prev or (
        new.id == prev.id
        and new.content == prev.content
        and new.excerpt == prev.excerpt
        and (new.embedding is prev.embedding or new.embedding == prev.embedding)
    )


def same_rows(new: Sequence[MemoryRecord], old: Sequence[MemoryRecord]) -> bool:
    """Whether ``new`` starts with ``old``'s documents (:func:`same_document`) in
    their sessions (a row moved to another session changes its neighbours'
    context), comparing by identity first (most rows are the very objects)."""
    if all(map(is_, new, old)):
        return True
    return all(map(_same_place, new, old))


def _same_place(new: MemoryRecord, prev: MemoryRecord) -> bool:
    return new is prev or (same_document(new, prev) and new.session_id == prev.session_id)


def sources(
    old_records: Sequence[MemoryRecord],
    old_index: dict[str, int],
    memories: Sequence[MemoryRecord],
) -> Ints:
    """Each memory's index among ``old_records`` when it has the same text and
    vector there (-1 otherwise): its matrix row, postings and memo entry can be
    moved."""
    found = list(map(old_index.get, map(_ID, memories), repeat(-1)))
    if not old_records:
        return np.full(len(found), -1, dtype=np.int64)
    out = np.fromiter(found, np.int64, len(found))
    # -1 reads the last old record: never the same object as a memory not found.
    olds = map(old_records.__getitem__, found)
    for i in compress(count(), map(not_, map(is_, memories, olds))):
        j = found[i]
        if j >= 0 and not same_document(memories[i], old_records[j]):
            out[i] = -1
    return out


def links(
    memories: Sequence[MemoryRecord], index_of: Mapping[str, int]
) -> tuple[tuple[tuple[int, ...], ...], bool]:
    """Each memory's persisted links (``related_ids``) resolved to indices, both
    directions, sorted; and whether any memory names one (found or not). Sets only
    for the memories with links: one per memory was most of a large snapshot's
    allocations (and the collections they set off)."""
    linked: dict[int, set[int]] = {}
    naming = list(compress(count(), map(_RELATED, memories)))
    for i in naming:
        for other in memories[i].related_ids:
            j = index_of.get(other)
            if j is not None and j != i:
                linked.setdefault(i, set()).add(j)
                linked.setdefault(j, set()).add(i)
    out: list[tuple[int, ...]] = [()] * len(memories)
    for i, found in linked.items():
        out[i] = tuple(sorted(found))
    return tuple(out), bool(naming)


def session_order(
    memories: Sequence[MemoryRecord],
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], Ints, dict[str, int]]:
    """The previous and next memory of each memory's session, in corpus order (-1:
    none, or no session); each memory's session code and the codes by session id
    (an update carries them: :func:`~sidecar.memory.corpus.delta.moved_sessions`)."""
    size = len(memories)
    prev = np.full(size, -1, dtype=np.int32)
    nxt = np.full(size, -1, dtype=np.int32)
    numbers: dict[str, int] = {}
    # A session's number is the counter's value when it was first seen.
    codes = np.fromiter(map(numbers.setdefault, map(_SESSION, memories), count()), np.int64, size)
    if size < 2:
        return prev, nxt, codes, numbers
    order = np.argsort(codes, kind="stable")  # each session's memories in corpus order
    ordered = codes[order]
    same = ordered[1:] == ordered[:-1]
    unnamed = numbers.get("")
    if unnamed is not None:
        same &= ordered[1:] != unnamed
    before, after = order[:-1][same], order[1:][same]
    prev[after] = before
    nxt[before] = after
    return prev, nxt, codes, numbers
