"""A snapshot's row layout from the one before and the rows that changed.

The corpus cache knows which rows a write changed (:meth:`Unit.changes_since
<sidecar.memory.corpus.units.Unit.changes_since>`). Given them, the next snapshot's
rows are the previous snapshot's with those few removed, replaced or inserted in
time order: found by lookups and binary searches, the rows moved by list and array
splices, never one Python step per row. The result is the layout
:func:`~sidecar.memory.corpus.assembly.active_rows` and
:func:`~sidecar.memory.corpus.assembly.sources` give for the whole rows (the
corpus tests compare the two).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from sidecar.memory.corpus.assembly import same_document
from sidecar.memory.corpus.moves import Moves, new_positions, runs_of
from sidecar.memory.corpus.row_index import RowIndex
from sidecar.memory.records.records import MemoryRecord, NodeType, Status

T = TypeVar("T")
Ints = npt.NDArray[np.int64]

#: Session codes given after a fresh build start here (a fresh build's codes are
#: row numbers, below it).
_NEW_SESSION = 1 << 40
_ID = attrgetter("id")


def _time_key(record: MemoryRecord) -> tuple[int, str]:
    return record.created_at, record.id


@dataclass(frozen=True, slots=True)
class Layout:
    """The next snapshot's rows: ``memories`` (by time), ``categories`` (by id);
    ``start``: they are the previous snapshot's followed by new ones from there;
    else ``sources``: memory ``i`` is the previous snapshot's ``sources[i]``, -1
    where new or changed (``moves``: the same, read once for every layer).
    ``fresh``: the rows whose record is not the previous
    snapshot's object (new, or a new version); ``sessions``: the session ids of
    rows removed, added or changed (their neighbours are found again)."""

    #: Kept by the snapshot as it is (made for it, or the rows of the one it
    #: folds): never changed.
    memories: Sequence[MemoryRecord]
    categories: list[MemoryRecord]
    start: int | None
    moves: Moves
    fresh: list[int]
    sessions: frozenset[str]

    @property
    def sources(self) -> Ints:
        return self.moves.sources


def changed_layout(
    records: Sequence[MemoryRecord],
    index_of: RowIndex,
    categories: Sequence[MemoryRecord],
    changes: Mapping[str, MemoryRecord | None],
) -> Layout:
    """The layout after ``changes`` (each changed id's row now, None where no row
    of it is visible) to the snapshot of ``records`` and ``categories``."""
    wanted, memory, category = Status.ACTIVE, NodeType.MEMORY, NodeType.CATEGORY
    category_ids = {c.id for c in categories}
    removed: list[int] = []
    replaced: dict[int, MemoryRecord] = {}
    inserted: list[MemoryRecord] = []
    new_categories: list[MemoryRecord] = []
    sessions: set[str] = set()
    categories_changed = False
    for key, row in changes.items():
        live = row if row is not None and row.status == wanted else None
        if key in category_ids:
            categories_changed = True
        if live is not None and live.node_type == category:
            categories_changed = True
            new_categories.append(live)
        j = index_of.get(key)
        if j is not None:
            old = records[j]
            if row is old:
                continue
            if live is not None and live.node_type == memory and live.created_at == old.created_at:
                replaced[j] = live
                sessions.add(old.session_id)  # its own is found with the fresh rows'
                continue
            removed.append(j)
            sessions.add(old.session_id)
        if live is not None and live.node_type == memory:
            inserted.append(live)

    size = len(records)
    keep = np.ones(size, dtype=bool)
    keep[removed] = False
    kept = np.flatnonzero(keep)
    inserted.sort(key=_time_key)
    points = [bisect_left(records, _time_key(r), key=_time_key) for r in inserted]
    at = np.searchsorted(kept, np.asarray(points, dtype=np.int64))
    sources = np.insert(kept, at, -1) if len(at) else kept
    placed = (at + np.arange(len(at))).tolist()
    new_of_old = new_positions(sources, size)
    fresh_rows: dict[int, MemoryRecord] = dict(zip(placed, inserted, strict=True))
    for j, row in replaced.items():
        i = int(new_of_old[j])
        fresh_rows[i] = row
        if not same_document(row, records[j]):
            sources[i] = -1
    moves = Moves(sources, size)
    memories = spliced(records, moves, fresh_rows)
    # Appended only: nothing removed, inserted among the old rows, changed or moved
    # to another session (an old row's context would change).
    start = (
        size
        if not removed
        and not (sources[:size] < 0).any()
        and all(row.session_id == records[j].session_id for j, row in replaced.items())
        else None
    )
    if categories_changed:
        gone = set(changes)
        chosen = [c for c in categories if c.id not in gone] + new_categories
        categories = sorted(chosen, key=_ID)
    return Layout(
        memories,
        list(categories),
        start,
        moves,
        sorted(fresh_rows),
        frozenset(sessions),
    )


def _read(sources: Ints | Moves) -> tuple[Ints, list[tuple[int, int]] | None, Moves | None]:
    if isinstance(sources, Moves):
        return sources.sources, sources.runs, sources
    return sources, runs_of(sources), None


def spliced(old: Sequence[T], moves: Ints | Moves, fresh: Mapping[int, T]) -> list[T]:
    """``old[sources[i]]`` for each ``i``, ``fresh[i]`` where ``fresh`` has ``i``
    (every -1, and rows replaced in place). Where the kept rows are a few runs in
    their old order (what an update leaves), ``old`` is copied once and the gaps
    between the runs cut out and the new rows put in, by moves of the list's
    references: each kept row is touched once (slices joined into a tuple touched
    each three times, the slice, the join and the slice freed: a cache miss each
    with many memories). Else one C-level pass. ``old`` is left as it is; the
    snapshot keeps the list as it is, never changed."""
    sources, runs, _ = _read(moves)
    out: list[T]
    if runs is None or not _in_order(sources, runs, len(old)):
        out = list(map(old.__getitem__, sources.tolist()))  # -1 reads one, replaced
    else:
        out = list(old)
        right = len(old)  # old rows from here on are placed (or cut)
        for begin, end in reversed(runs):
            first = int(sources[begin])
            if first < 0:
                out[right:right] = [fresh[i] for i in range(begin, end)]
                continue
            last = first + end - begin
            del out[last:right]
            right = first
        del out[:right]
    for i, row in fresh.items():
        out[i] = row
    return out


def _in_order(sources: Ints, runs: list[tuple[int, int]], size: int) -> bool:
    """Whether the kept runs take rows in their old order, each once."""
    right = size
    for begin, end in reversed(runs):
        first = int(sources[begin])
        if first < 0:
            continue
        if first + end - begin > right:
            return False
        right = first
    return True


def taken(values: npt.NDArray[Any], moves: Ints | Moves, fill: object = 0) -> npt.NDArray[Any]:
    """``values[sources[i]]`` for each ``i`` (rows of a 2-D array), ``fill`` where
    that is -1: by slices where there are a few runs of consecutive rows (a fancy
    index gathers rows of a few values ~10x slower). Each row is written once."""
    sources, runs, known = _read(moves)
    out = np.empty((len(sources), *values.shape[1:]), dtype=values.dtype)
    if runs is None:
        kept = known.kept if known is not None else np.flatnonzero(sources >= 0)
        fresh = known.fresh if known is not None else np.flatnonzero(sources < 0)
        out[kept] = values[sources[kept]]
        out[fresh] = fill
        return out
    for begin, end in runs:
        first = int(sources[begin])
        if first >= 0:
            out[begin:end] = values[first : first + end - begin]
        else:
            out[begin:end] = fill
    return out


def moved_sessions(
    memories: Sequence[MemoryRecord],
    layout: Layout,
    previous: tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], Ints],
    numbers: dict[str, int],
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], Ints, Ints]:
    """Session order (previous, next, session codes) after ``layout``'s update:
    carried through the moved rows, and found again for the sessions it touched
    (their rows, in order, come fourth: the only rows whose neighbours may have
    changed). ``previous``: the previous snapshot's arrays; ``numbers``: its
    session codes by id (shared; a session not seen before gets a new one)."""
    old_prev, old_next, old_codes = previous
    moves = Moves.of(layout.moves, len(old_codes))
    new_of_old = moves.new_of_old
    # Carried by slices of the few runs an update leaves (a gather of every kept
    # row's, and another of where its neighbour went, cost most of this).
    codes = taken(old_codes, moves, -1)
    for i in layout.fresh:
        sid = memories[i].session_id
        code = numbers.get(sid)
        if code is None:
            code = numbers[sid] = _NEW_SESSION + len(numbers)
        codes[i] = code
    # A fresh row reads -1 (none), and new_of_old reads -1 for -1 and removed rows.
    prev = new_of_old[taken(old_prev, moves, -1)].astype(np.int32)
    nxt = new_of_old[taken(old_next, moves, -1)].astype(np.int32)
    unnamed = numbers.get("")
    touched: list[Ints] = [np.zeros(0, dtype=np.int64)]  # a fresh row's session is one
    for sid in layout.sessions.union([memories[i].session_id for i in layout.fresh]):
        code = numbers.get(sid)
        if code is None:
            continue
        members = np.flatnonzero(codes == code)
        touched.append(members)
        prev[members] = -1
        nxt[members] = -1
        if code != unnamed and len(members) > 1:
            prev[members[1:]] = members[:-1]
            nxt[members[:-1]] = members[1:]
    # Sessions are disjoint: their rows sorted are each row once.
    return prev, nxt, codes, np.sort(np.concatenate(touched))
