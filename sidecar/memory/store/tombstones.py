"""Deletes that every cache sees: rows become hollow tombstones, purged later.

A row deleted outright is invisible to the other workers' and replicas' corpus
caches: their delta refreshes read the rows changed since a watermark, and a
deleted row is not there to be read, so they kept serving it until their next full
reload (``cache.full_reload_s``, ten minutes) — a forgotten user's memories still
injected by the other workers. A delete (admin delete, forget, retention's
``action: delete``) therefore overwrites each row with a **tombstone**: the same id,
owner, group and visibility (so it lands in the same cache units), status
``deleted``, no text, summaries, links, session or category, a fixed unit vector,
``updated_at`` = now (:meth:`~sidecar.memory.write.rows.gateway.WriteGateway.delete`).
This process drops the rows at once (write-through); every
other cache at its next delta refresh (``cache.ttl_s``), as it drops a superseded
row. Reads never see tombstones: :func:`~sidecar.memory.store.filters.build_filter`
leaves status ``deleted`` out unless asked. A later write of the same fact (ids
follow the text) simply overwrites its tombstone.

Changes a delta refresh cannot pick up by ``updated_at`` — rows imported with their
original times, category moves and back-links that keep a row's time — leave a
**reload marker** (:func:`mark_for_reload`): a hollow row per owner whose new
``updated_at`` makes every other cache reload that owner's rows in full at its next
refresh.

A forget also leaves a **forget marker**, a tombstone of its own with a fixed id per
owner (:func:`forget_marker_id`) and the time of the forget. Every writer reads it
before storing a turn (:func:`forgotten_since`) and drops a turn accepted before
the forget: another worker's queue, a turn in flight during a forget from the CLI,
a replica's backlog — none of them brings the forgotten memories back. Where one
process is the store's only writer, :class:`ForgetMarkers` keeps what it read and
wrote per owner, so a turn costs no store read for an owner seen before.

:func:`purge` deletes tombstones older than ``cache.full_reload_s`` twice over (by
then every cache has reloaded in full since the delete); retention's schedule runs
it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import replace

from sidecar.memory.records.records import (
    RELOAD_MARKER,
    MemoryRecord,
    Status,
    as_vector,
    now_ms,
)
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.protocol import Store


def tombstone(record: MemoryRecord, dim: int, now: int) -> MemoryRecord:
    """The hollow row that replaces ``record``: nothing of its content survives."""
    return MemoryRecord(
        id=record.id,
        user_id=record.user_id,
        content="",
        embedding=as_vector((1.0,) + (0.0,) * (dim - 1)),
        group_id=record.group_id,
        visibility=record.visibility,
        node_type=record.node_type,
        memory_type=record.memory_type,
        status=Status.DELETED,
        importance=0.0,
        confidence=0.0,
        created_at=record.created_at,
        updated_at=max(now, record.updated_at),
    )


def forget_marker_id(owner: str) -> str:
    """The id of ``owner``'s forget marker (never a memory's: those start with "m")."""
    return "f" + hashlib.sha256(f"{owner}\x00forget".encode()).hexdigest()[:31]


def reload_marker_id(owner: str) -> str:
    """The id of ``owner``'s reload marker."""
    return "r" + hashlib.sha256(f"{owner}\x00reload".encode()).hexdigest()[:31]


async def _mark(store: Store, owner: str, marker_id: str, source: str) -> int:
    """Upsert ``owner``'s marker ``marker_id``: a tombstone of no memory, dated now."""
    now = now_ms()
    blank = MemoryRecord(id=marker_id, user_id=owner, content="", created_at=now)
    await store.upsert([replace(tombstone(blank, store.dim, now), source=source)])
    return now


async def mark_forgotten(store: Store, owner: str) -> int:
    """Record that ``owner`` was forgotten now (see the module docstring); the time."""
    return await _mark(store, owner, forget_marker_id(owner), "forget")


async def mark_for_reload(store: Store, owner: str) -> int:
    """Tell every other cache to reload ``owner``'s rows in full at its next refresh
    (after writes that keep ``updated_at``); the time."""
    return await _mark(store, owner, reload_marker_id(owner), RELOAD_MARKER)


async def forgotten_since(store: Store, owner: str) -> int | None:
    """When ``owner`` was last forgotten (epoch ms), if a marker says so."""
    rows = await store.query(
        build_filter(
            owner=owner, ids=[forget_marker_id(owner)], node_type=None, status=Status.DELETED
        ),
        limit=1,
        strong=True,  # a forget by another process just now counts
    )
    return rows[0].updated_at if rows else None


class ForgetMarkers:
    """The forget markers as the write path and the admin API use them.

    ``remember``: this process is the store's only writer (a milvus-lite file it
    holds open, one worker, no writer processes), so a marker changes only through
    :meth:`mark` here; what was read or marked is kept for the last ``capacity``
    owners and a turn of an owner seen before costs no store read. Otherwise
    (several workers, a Milvus server that replicas share) any of them may forget,
    and every :meth:`since` reads the store.
    """

    def __init__(self, store: Store, *, remember: bool, capacity: int = 100_000) -> None:
        self._store = store
        self._remember = remember
        self._capacity = capacity
        #: owner -> when last forgotten (None: never), most recently used last.
        self._known: OrderedDict[str, int | None] = OrderedDict()

    async def since(self, owner: str) -> int | None:
        """When ``owner`` was last forgotten (epoch ms), if ever."""
        if self._remember and owner in self._known:
            self._known.move_to_end(owner)
            return self._known[owner]
        found = await forgotten_since(self._store, owner)
        self._keep(owner, found)
        return found

    async def mark(self, owner: str) -> int:
        """Record that ``owner`` is forgotten as of now; the time."""
        self._known.pop(owner, None)  # unknown while the marker is being written
        at = await mark_forgotten(self._store, owner)
        self._keep(owner, at)
        return at

    def _keep(self, owner: str, at: int | None) -> None:
        if not self._remember:
            return
        self._known[owner] = at
        self._known.move_to_end(owner)
        while len(self._known) > self._capacity:
            self._known.popitem(last=False)


async def purge(store: Store, older_than_ms: int) -> int:
    """Delete the tombstones written more than ``older_than_ms`` ago; how many."""
    where = build_filter(
        node_type=None,
        status=Status.DELETED,
        updated_before=now_ms() - older_than_ms,
    )
    expired = await store.count(where)
    if expired:
        await store.delete(where)
    return expired
