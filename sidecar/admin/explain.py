"""Injections explained, as the admin API and the console show them: the kept
entries of :class:`~sidecar.memory.read.injections.InjectionLog` with each memory
read back from the store.

A memory is shown when the user may read it now (the store's read rule, for the
user and the groups the request read as). One deleted, or no longer shared with the
user, since it was injected shows as its id and "gone".
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.errors import SidecarError
from sidecar.memory.read.injections import InjectedMemory, Injection, InjectionLog
from sidecar.memory.records.records import MemoryRecord, Scope
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.milvus import MemoryStore


class ExplainOff(SidecarError):
    """No route profile keeps its injections explained (``injection.explain_last``)."""


@dataclass(frozen=True, slots=True)
class ExplainedMemory:
    """One injected memory and, while the user may still read it, its row."""

    why: InjectedMemory
    record: MemoryRecord | None


@dataclass(frozen=True, slots=True)
class Explained:
    injection: Injection
    memories: tuple[ExplainedMemory, ...]


class Explanations:
    """Reads one process's :class:`InjectionLog` for the admin API and console."""

    def __init__(self, store: MemoryStore, log: InjectionLog | None) -> None:
        self._store = store
        self._log = log

    @property
    def enabled(self) -> bool:
        return self._log is not None

    def recent(self, user: str) -> list[Injection]:
        """The user's kept injections, newest first."""
        if self._log is None:
            raise ExplainOff("no profile keeps injections (injection.explain_last)")
        return self._log.recent(user)

    async def explain(self, user: str, request_id: str) -> Explained | None:
        """The injection of ``request_id`` for ``user`` with its memories (None:
        not kept, or another user's request)."""
        if self._log is None:
            raise ExplainOff("no profile keeps injections (injection.explain_last)")
        injection = self._log.find(user, request_id)
        if injection is None:
            return None
        ids = [m.id for m in injection.memories]
        readable = build_filter(scope=Scope(user, injection.groups), ids=ids, status=None)
        by_id = {row.id: row for row in await self._store.query(readable, limit=len(ids))}
        return Explained(
            injection,
            tuple(ExplainedMemory(m, by_id.get(m.id)) for m in injection.memories),
        )
