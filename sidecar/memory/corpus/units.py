"""Cache units: the parts a scope's corpus is merged from — one user's own rows, one
group's shared rows, all public rows — and the store filter that loads each (the
one visibility rule, :func:`sidecar.memory.store.filters.build_filter`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sidecar.memory.records.records import (
    AccessStat,
    MemoryRecord,
    Scope,
    Status,
    Visibility,
    merge_access,
    now_ms,
)
from sidecar.memory.store.filters import Filter, build_filter
from sidecar.memory.store.protocol import Store


@dataclass(slots=True)
class Unit:
    rows: tuple[MemoryRecord, ...]
    loaded_at: float  # last refresh (full or delta)
    seq: int  # unique per load: corpora built from it are keyed by it
    full_at: float = 0.0  # last full load (deletions are only seen by those)
    max_updated: int = 0  # newest updated_at seen: delta refreshes start there
    #: Wall clock (epoch ms) when its last load started: rows written after it have
    #: a later updated_at (up to the writers' clock skew).
    loaded_wall_ms: int = field(default_factory=now_ms)
    #: Each row's index in ``rows``, for the ``rows`` tuple it was built from
    #: (:meth:`positions`).
    _positions: dict[str, int] = field(default_factory=dict)
    _positions_of: tuple[MemoryRecord, ...] | None = None
    #: The latest changes to ``rows``: (seq before, seq after, each changed id's row
    #: after; one not active, or None, where the unit no longer holds it), so a
    #: corpus built at an earlier seq is brought up to date from the changed rows
    #: alone.
    log: tuple[tuple[int, int, Mapping[str, MemoryRecord | None]], ...] = ()

    def changed(
        self,
        rows: tuple[MemoryRecord, ...],
        seq: int,
        changes: Mapping[str, MemoryRecord | None],
        *,
        in_place: bool = False,
    ) -> None:
        """``rows`` (at ``seq``) are these rows after ``changes``; ``in_place``: new
        versions of the same rows in their places (:meth:`replace_rows`)."""
        self.log = logged(self, seq, changes)
        if in_place:
            self.replace_rows(rows)
        else:
            self.rows = rows
        self.seq = seq

    def changes_since(self, seq: int) -> dict[str, MemoryRecord | None] | None:
        """Each id changed since ``seq`` with its row now (not active, or None: not
        held), or None when the log does not reach back to ``seq``."""
        out: dict[str, MemoryRecord | None] = {}
        at = seq
        for before, after, changes in self.log:
            if after <= seq:
                continue
            if before != at:
                return None
            out.update(changes)
            at = after
        return out if at == self.seq else None

    def positions(self) -> dict[str, int]:
        """Row id -> index in ``rows``; built once per ``rows`` tuple (a dict of str
        to int: the collector does not track it)."""
        if self._positions_of is not self.rows:
            self._positions = {row.id: i for i, row in enumerate(self.rows)}
            self._positions_of = self.rows
        return self._positions

    def replace_rows(self, rows: tuple[MemoryRecord, ...]) -> None:
        """New versions of the same rows, each in its place (the ids unchanged): the
        positions index stays valid."""
        self.rows = rows
        self._positions_of = rows


def logged(
    unit: Unit, seq: int, changes: Mapping[str, MemoryRecord | None]
) -> tuple[tuple[int, int, Mapping[str, MemoryRecord | None]], ...]:
    """``unit``'s log with ``changes`` (its rows at ``seq``) after it."""
    return (*unit.log[-(_LOG - 1) :], (unit.seq, seq, changes))


def held_rows(updates: Mapping[str, MemoryRecord]) -> dict[str, MemoryRecord | None]:
    """A log entry for rows written: each one's row (one no longer active leaves
    the unit; a tombstone says it was deleted: :meth:`Corpus.updated
    <sidecar.memory.corpus.corpus.Corpus.updated>` then keeps nothing of it)."""
    return dict(updates)


#: Changes a unit remembers (a corpus older than them is built from all rows).
_LOG = 8


def same_version(cached: dict[str, MemoryRecord], row: MemoryRecord) -> bool:
    old = cached.get(row.id)
    return (
        old is not None
        and old.updated_at == row.updated_at
        and old.status == row.status
        and old.access_count == row.access_count
        and old.content == row.content
        # Changes that keep updated_at: links (another writer's back-link), filing.
        and old.related_ids == row.related_ids
        and old.category_id == row.category_id
        and old.parent_id == row.parent_id
    )


def held(
    units: Mapping[str, Unit], row: MemoryRecord, index: dict[str, dict[str, MemoryRecord]]
) -> bool:
    """Every cached unit ``row`` belongs to has it in this version (or, for a row no
    longer active, no longer has it). ``index``: the units' rows by id, filled as
    needed."""
    for key in units_of(row):
        unit = units.get(key)
        if unit is None:
            continue
        rows = index.get(key)
        if rows is None:
            rows = index[key] = {r.id: r for r in unit.rows}
        if row.status != Status.ACTIVE:
            if row.id in rows:
                return False
        elif not same_version(rows, row):
            return False
    return True


def access_applied(
    units: Mapping[str, Unit], flushed: Mapping[str, Sequence[AccessStat]], seq: int
) -> tuple[int, dict[str, int], dict[str, MemoryRecord]]:
    """Flushed access counts and times (by unit key) applied to the cached ``units``
    in place: each changed unit takes the next seq after ``seq``. Returns the last
    seq given, each changed unit's seq before, and the new rows by id (counts and
    times changed only). Only the flushed rows are visited."""
    before: dict[str, int] = {}
    merged_rows: dict[str, MemoryRecord] = {}
    for key in sorted(flushed):
        unit = units.get(key)
        if unit is None:
            continue
        positions = unit.positions()
        rows: list[MemoryRecord] | None = None
        for stat in flushed[key]:
            position = positions.get(stat.id)
            if position is None:
                continue
            row = unit.rows[position] if rows is None else rows[position]
            merged = merge_access(row, stat)
            if merged is not row:
                if rows is None:
                    rows = list(unit.rows)
                rows[position] = merged
                merged_rows[stat.id] = merged
        if rows is not None:
            before[key] = unit.seq
            seq += 1
            changes = {
                row.id: row for row, was in zip(rows, unit.rows, strict=True) if row is not was
            }
            unit.changed(tuple(rows), seq, changes, in_place=True)
    return seq, before, merged_rows


@dataclass(frozen=True, slots=True)
class Fetched:
    """A unit read from the store: the unit, the rows it brought in, the ids it
    found deleted, and whether it was a delta of the unit before."""

    unit: Unit
    new: Sequence[MemoryRecord]
    deleted: list[str] = field(default_factory=list)
    delta: bool = False


async def fetched_unit(
    store: Store, key: str, old: Unit | None, seq: int, full_reload_s: float
) -> Fetched:
    """Unit ``key`` at ``seq``: a full load, or — when ``old`` had a full load within
    ``full_reload_s`` — ``old`` with the rows changed since (milvus-lite returns full
    rows with their vectors slowly; a delta costs a filtered scan)."""
    now = time.monotonic()
    wall = now_ms()
    if old is None or now - old.full_at >= full_reload_s:
        rows = await store.scan(unit_filter(key), with_vectors=True)
        active = tuple(r for r in rows if r.status == Status.ACTIVE)
        newest = max((r.updated_at for r in rows), default=0)
        return Fetched(Unit(active, now, seq, now, newest, wall), active)
    # Rows written in the same millisecond as the newest one seen are re-read.
    changed = await store.scan(unit_filter(key, updated_since=old.max_updated), with_vectors=True)
    if not changed:
        unchanged = Unit(old.rows, now, old.seq, old.full_at, old.max_updated, wall)
        unchanged.log = old.log
        return Fetched(unchanged, (), delta=True)
    updates = {r.id: r for r in changed}
    deleted = [k for k, r in updates.items() if r.status == Status.DELETED]
    kept = [r for r in old.rows if r.id not in updates]
    fresh = [r for r in updates.values() if r.status == Status.ACTIVE]
    newest = max(old.max_updated, *(r.updated_at for r in changed))
    unit = Unit((*kept, *fresh), now, seq, old.full_at, newest, wall)
    unit.log = logged(old, seq, held_rows(updates))
    return Fetched(unit, fresh, deleted, delta=True)


#: The start of a user's own unit's key.
_USER = "user:"


def user_unit(user_id: str) -> str:
    """The key of the cache unit of ``user_id``'s own rows."""
    return f"{_USER}{user_id}"


def unit_keys(scope: Scope) -> list[str]:
    """The cache units whose union is exactly what ``scope`` may read."""
    keys = [user_unit(scope.user_id), "public"]
    keys.extend(f"group:{g}" for g in scope.group_ids)
    return keys


def keys_user(keys: Sequence[str]) -> str:
    """The user of the scope whose :func:`unit_keys` are ``keys``."""
    return keys[0].removeprefix(_USER)


def units_of(record: MemoryRecord) -> list[str]:
    """The cache units a stored row belongs to (mirrors :func:`unit_filter`)."""
    keys = [user_unit(record.user_id)]
    if record.group_id and record.visibility in (Visibility.GROUP, Visibility.PUBLIC):
        keys.append(f"group:{record.group_id}")
    if record.visibility == Visibility.PUBLIC:
        keys.append("public")
    return keys


def unit_filter(key: str, *, updated_since: int | None = None) -> Filter:
    """Rows of a unit: active ones for a full load; for a delta refresh every row
    changed since ``updated_since`` (superseded ones included, so they leave)."""
    kind, _, value = key.partition(":")
    delta = updated_since is not None  # deleted rows too, so they leave
    status = None if delta else Status.ACTIVE
    if kind == "user":
        return build_filter(
            owner=value, node_type=None, status=status, updated_since=updated_since, deleted=delta
        )
    if kind == "group":
        return build_filter(
            equals={"group_id": value},
            node_type=None,
            status=status,
            visibilities=(Visibility.GROUP, Visibility.PUBLIC),
            updated_since=updated_since,
            deleted=delta,
        )
    return build_filter(
        equals={"visibility": Visibility.PUBLIC},
        node_type=None,
        status=status,
        updated_since=updated_since,
        deleted=delta,
    )


def scope_changes(
    units: Sequence[Unit], versions: tuple[int, ...]
) -> dict[str, MemoryRecord | None] | None:
    """The rows a scope sees now in place of those it saw when its units were at
    ``versions`` (each changed id's first active row across the units; where none
    holds it, the changed unit's row, not active, or None), when one unit changed
    and its log reaches back that far; else None (the corpus is built from all the
    rows)."""
    moved = [
        k for k, (unit, seq) in enumerate(zip(units, versions, strict=True)) if unit.seq != seq
    ]
    if len(units) != len(versions) or len(moved) != 1:
        return None
    changed = units[moved[0]].changes_since(versions[moved[0]])
    if changed is None:
        return None
    out: dict[str, MemoryRecord | None] = {}
    for key, row in changed.items():
        held = row if row is not None and row.status == Status.ACTIVE else None
        seen: MemoryRecord | None = None
        for k, unit in enumerate(units):
            if k == moved[0]:
                seen = held
            else:
                position = unit.positions().get(key)
                seen = None if position is None else unit.rows[position]
            if seen is not None:
                break
        out[key] = seen if seen is not None else row
    return out
