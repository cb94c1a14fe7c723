"""Consolidation: one memory per fact.

The dedup judge sees a new fact's nearest memories only; facts stated in different
words over many turns, or written by several workers at once, can still end up in
several memories. Consolidation groups a user's active memories that state the same
fact (:func:`~sidecar.memory.language.facts.equivalent`: the same slot, value and
polarity, or the same content words, names, numbers and polarity), keeps the
richest wording of each group — most content words, then the longest text, then the
oldest — and turns the others into ``merged`` rows that point at it
(``superseded_by``): its history, never injected, never judged against. Two facts
that differ in a name, number, polarity or a slot's value are never one group, and
a group never spans users.

It runs on demand (``sidecar memories consolidate``, the admin API) and every
``consolidation.interval_s`` for the users written for since the last pass, under
each user's write lock, through the write gateway (so every cache sees it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sidecar.config import ConsolidationConfig
from sidecar.errors import SidecarError
from sidecar.memory.language.facts import FactShape, contrasts, restates, shape
from sidecar.memory.language.said import ASKED, SAID
from sidecar.memory.records.records import MemoryRecord, Status, now_ms
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.protocol import Store
from sidecar.memory.write.rows.gateway import NotedOwners, WriteGateway
from sidecar.metrics import Metrics
from sidecar.tasks import cancel_and_wait

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConsolidationReport:
    user: str
    #: Active memories before.
    memories: int
    #: Groups of two or more memories that stated one fact.
    groups: int
    #: Memories folded into another (now ``merged``).
    merged: int


def fact_key(fact: FactShape) -> tuple[object, ...]:
    """Memories with one key state the same fact."""
    if fact.slot is not None and fact.value is not None:
        return ("slot", fact.slot, fact.value, fact.negated)
    return ("words", fact.signature, fact.entities, fact.negated)


def _richness(record: MemoryRecord) -> tuple[bool, int, int, int, str]:
    """Best first: a fact before a quote of what was said, then the wording that says
    most."""
    fact = shape(record.content)
    return (
        record.source == SAID,
        -len(fact.signature),
        -len(record.content),
        record.created_at,
        record.id,
    )


Plan = tuple[MemoryRecord, list[MemoryRecord]]


def plan_merges(
    records: Sequence[MemoryRecord], config: ConsolidationConfig | None = None
) -> list[Plan]:
    """Each group of active memories that state one fact: the memory kept and the
    ones folded into it (groups of one are left out).

    First by :func:`fact_key` (the same fact in other words); then, with
    ``config.restate_cosine`` > 0, a memory whose embedding is that similar to a
    richer one and that says little more than it (:func:`restates`) joins it, when
    it is no near miss of any memory already in the group."""
    groups: dict[tuple[object, ...], list[MemoryRecord]] = {}
    for record in records:
        # A request asked is no fact to fold; a quote of a statement may restate one.
        if record.status != Status.ACTIVE or not record.content or record.source == ASKED:
            continue
        # Only memories shared alike merge: folding a private memory into a shared one
        # (or the reverse) would change what other users see.
        groups.setdefault((_sharing(record), fact_key(shape(record.content))), []).append(record)
    ranked_groups = [sorted(members, key=_richness) for members in groups.values()]
    if config is not None and config.restate_cosine > 0:
        ranked_groups = _restatements(ranked_groups, config)
    plans = [(ranked[0], ranked[1:]) for ranked in ranked_groups if len(ranked) > 1]
    plans.sort(key=lambda plan: plan[0].id)
    return plans


def _restatements(
    groups: list[list[MemoryRecord]], config: ConsolidationConfig
) -> list[list[MemoryRecord]]:
    """Groups joined greedily, richest first: each group's kept memory joins the
    first richer group whose kept memory it restates (see :func:`plan_merges`).
    Similarities are one matrix-vector product per group; a user with more than
    ``config.restate_max_memories`` groups is left as it is (the pass is quadratic)."""
    if len(groups) > config.restate_max_memories:
        return groups
    ordered = sorted(groups, key=lambda g: _richness(g[0]))
    dim = next((len(g[0].embedding) for g in ordered if g[0].embedding), 0)
    kept_vectors = np.zeros((len(ordered), dim), dtype=np.float32)
    joined: list[list[MemoryRecord]] = []
    for group in ordered:
        head, vector = group[0], _unit(group[0], dim)
        into = None
        if vector is not None and joined:
            similar = kept_vectors[: len(joined)] @ vector
            fact = shape(head.content)
            for j in np.flatnonzero(similar >= config.restate_cosine):
                members = joined[int(j)]
                if _sharing(members[0]) != _sharing(head):
                    continue
                if restates(shape(members[0].content), fact, config.restate_novelty) and not any(
                    contrasts(shape(m.content), fact) for m in members
                ):
                    into = members
                    break
        if into is None:
            if vector is not None:
                kept_vectors[len(joined)] = vector
            joined.append(list(group))
        else:
            into.extend(group)
    return joined


def _sharing(record: MemoryRecord) -> tuple[str, str]:
    return str(record.visibility), record.group_id


def _unit(record: MemoryRecord, dim: int) -> npt.NDArray[np.float32] | None:
    if not record.embedding or len(record.embedding) != dim:
        return None
    vector = np.asarray(record.embedding, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else None


def scheduled(config: ConsolidationConfig) -> bool:
    """Whether consolidation runs on a schedule (else only on demand)."""
    return config.enabled and config.interval_s > 0


class Consolidator:
    """See the module docstring (one per process)."""

    def __init__(
        self,
        store: Store,
        writes: WriteGateway,
        config: ConsolidationConfig,
        metrics: Metrics,
        *,
        noted: NotedOwners | None = None,
    ) -> None:
        self._store = store
        self._writes = writes
        self._config = config
        self._metrics = metrics
        self._noted = noted or NotedOwners(scheduled=scheduled(config))
        self._pending = self._noted.counts
        self._task: asyncio.Task[None] | None = None

    async def consolidate(self, owner: str) -> ConsolidationReport:
        """Merge ``owner``'s memories that state the same fact."""
        async with self._writes.lock(owner):
            rows = await self._store.scan(build_filter(owner=owner), with_vectors=True)
            plans = plan_merges(rows, self._config)
            now = now_ms()
            folded = [
                other.with_changes(
                    status=Status.MERGED,
                    superseded_by=kept.id,
                    updated_at=max(now, other.updated_at),
                )
                for kept, others in plans
                for other in others
            ]
            # The kept memory was said in the folded ones' turns too.
            kept_rows = [kept.absorbing(*others) for kept, others in plans]
            changed = [
                row for row, (kept, _) in zip(kept_rows, plans, strict=True) if row is not kept
            ]
            if folded:
                await self._writes.put([*changed, *folded])
        self._metrics.consolidated.inc(len(folded))
        return ConsolidationReport(owner, len(rows), len(plans), len(folded))

    async def tick(self) -> int:
        """Consolidate the owners with the most writes since their last pass (at most
        ``max_owners_per_tick``); the memories merged in all."""
        chosen = sorted(self._pending.items(), key=lambda kv: (-kv[1], kv[0]))
        total = 0
        for owner, count in chosen[: self._config.max_owners_per_tick]:
            self._pending.pop(owner, None)
            try:
                total += (await self.consolidate(owner)).merged
            except SidecarError as exc:  # the next pass tries again
                self._pending[owner] = self._pending.get(owner, 0) + count
                log.warning("consolidation failed: %s", type(exc).__name__)
        return total

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._config.interval_s)
            await self.tick()

    def start(self) -> None:
        """Start the schedule (no-op when disabled or ``interval_s`` is 0)."""
        if scheduled(self._config) and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="consolidation")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
