"""Retention (the per-user cap) against a real store: the score and who is pruned
in which order, constraints last, archive versus delete, the corpus cache, the
schedule and the write path that feeds it — and nothing else changes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import RetentionConfig
from sidecar.errors import StoreError
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import MemoryType, Status
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.memory.write.upkeep.retention import prune_order, retention_score
from sidecar.runtime.components import Components
from tests.memory.write.retention_support import DAY, NOW, Harness, rec
from tests.support.boot import sidecar_config

# -- the score and the order ----------------------------------------------------------


def test_score_grows_with_importance_access_and_recency() -> None:
    config = RetentionConfig()
    base = rec("a")
    assert retention_score(rec("a", importance=0.9), config, NOW) > retention_score(
        base, config, NOW
    )
    assert retention_score(rec("a", access_count=5), config, NOW) > retention_score(
        base, config, NOW
    )
    assert retention_score(rec("a", accessed_at=NOW), config, NOW) > retention_score(
        base, config, NOW
    )
    # one half-life older: the recency term halves
    older = rec("a", updated_at=NOW - 40 * DAY, created_at=NOW - 40 * DAY)
    only_recency = RetentionConfig(importance_weight=0, access_weight=0, recency_weight=1)
    assert retention_score(older, only_recency, NOW) == pytest.approx(
        retention_score(base, only_recency, NOW) / 2
    )
    # log-scaled and capped: the hundredth access counts less than the first
    access_only = RetentionConfig(importance_weight=0, access_weight=1, recency_weight=0)
    scores = [
        retention_score(rec("a", access_count=n), access_only, NOW) for n in (0, 1, 100, 10**6)
    ]
    assert scores[0] == 0
    assert scores[2] == 1
    assert scores[3] == 1
    assert scores[1] > 0.1


def test_constraints_go_last_and_ties_are_deterministic() -> None:
    config = RetentionConfig()
    rows = [
        rec("c-low", memory_type=MemoryType.CONSTRAINT, importance=0.0),
        rec("high", importance=1.0),
        rec("tie-b"),
        rec("tie-a"),
        rec("tie-old", created_at=NOW - 20 * DAY),  # same score (updated_at), older
    ]
    order = [r.id for r in prune_order(rows, config, NOW)]
    assert order == ["tie-old", "tie-a", "tie-b", "high", "c-low"]
    assert [r.id for r in prune_order(list(reversed(rows)), config, NOW)] == order


# -- pruning ----------------------------------------------------------------------------


async def test_prune_archives_the_lowest_scoring_beyond_the_cap(harness: Harness) -> None:
    h = harness
    rows = [
        h.rec("old", updated_at=NOW - 300 * DAY, created_at=NOW - 300 * DAY),
        h.rec("unimportant", importance=0.05),
        h.rec("rule", memory_type=MemoryType.CONSTRAINT, importance=0.0, updated_at=1),
        h.rec("fresh", updated_at=NOW),
        h.rec("used", access_count=40, accessed_at=NOW - DAY),
        h.rec("plain"),
    ]
    others = [h.rec(f"bob-{i}", user="bob") for i in range(8)]
    await h.store.upsert(rows + others)
    assert len(await h.corpus_ids("alice")) == 6
    before_bob = await h.rows("bob")
    originals = {r.id: r for r in await h.rows("alice")}  # as stored (float32)

    retention = h.retention(max_memories_per_user=3)
    assert await retention.prune(h.u("alice")) == 3
    assert await h.ids("alice") == {"rule", "fresh", "used"}
    archived = await h.rows("alice", Status.ARCHIVED)
    assert {h.bare(r.id) for r in archived} == {"old", "unimportant", "plain"}
    for row in archived:  # only the status and updated_at changed
        expected = originals[row.id].with_changes(status=Status.ARCHIVED, updated_at=NOW)
        assert row == expected
        assert row.embedding == expected.embedding
    for row in await h.rows("alice"):
        assert row == originals[row.id]
        assert row.embedding == originals[row.id].embedding
    assert await h.rows("bob") == before_bob  # other users untouched

    assert await h.corpus_ids("alice") == {"rule", "fresh", "used"}  # written through
    assert h.metrics.value("memory_sidecar_pruned_total", {"action": "archive"}) == 3
    assert await retention.prune(h.u("alice")) == 0  # at the cap: nothing more
    assert await h.retention(max_memories_per_user=8).prune(h.u("bob")) == 0
    assert await h.rows("bob") == before_bob


async def test_constraints_are_pruned_only_after_everything_else(harness: Harness) -> None:
    h = harness
    rows = [h.rec(f"rule-{i}", memory_type=MemoryType.CONSTRAINT, importance=0.0) for i in range(3)]
    rows += [h.rec(f"fact-{i}", importance=1.0, access_count=99, accessed_at=NOW) for i in range(3)]
    await h.store.upsert(rows)
    assert await h.retention(max_memories_per_user=2).prune(h.u("alice")) == 4
    # every fact went first, then the constraint with the lowest id (equal scores)
    assert await h.ids("alice") == {"rule-1", "rule-2"}


async def test_delete_action_removes_rows_and_invalidates_the_cache(harness: Harness) -> None:
    h = harness
    await h.store.upsert([h.rec(f"m{i}", importance=i / 10) for i in range(5)])
    assert len(await h.corpus_ids("alice")) == 5
    retention = h.retention(max_memories_per_user=2, action="delete")
    assert await retention.prune(h.u("alice")) == 3
    assert await h.ids("alice", status=None) == {"m3", "m4"}  # gone, not archived
    assert await h.corpus_ids("alice") == {"m3", "m4"}  # reloaded after the invalidation
    assert h.metrics.value("memory_sidecar_pruned_total", {"action": "delete"}) == 3


async def test_tick_checks_noted_owners_bounded_per_tick(harness: Harness) -> None:
    h = harness
    for user in ("u1", "u2", "u3"):
        await h.store.upsert([h.rec(f"{user}-{i}", user=user) for i in range(4)])
    retention = h.retention(max_memories_per_user=2, max_owners_per_tick=2)
    for user in ("u1", "u2", "u2", "u3"):
        retention.note(h.u(user))
    assert await retention.tick() == 4  # u2 (most writes), then u1 (by name)
    assert retention.pending == {h.u("u3"): 1}
    assert len(await h.ids("u3")) == 4
    assert await retention.tick() == 2
    assert retention.pending == {}
    assert await retention.tick() == 0
    assert h.retention(max_memories_per_user=2, prune_interval_s=0).pending == {}


async def test_a_failed_check_is_retried_at_the_next_tick(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness
    await h.store.upsert([h.rec(f"m{i}") for i in range(4)])
    retention = h.retention(max_memories_per_user=2)
    retention.note(h.u("alice"))

    async def down(where: Any) -> int:
        raise StoreError("down")

    with monkeypatch.context() as patch:
        patch.setattr(h.store, "count", down)
        assert await retention.tick() == 0
    assert retention.pending == {h.u("alice"): 1}
    assert await retention.tick() == 2


# -- the write path feeds the schedule -----------------------------------------------------


async def test_scheduled_pruning_of_owners_the_writer_wrote_for(
    tmp_path: Path, embedder: Embedder
) -> None:
    config = sidecar_config(
        tmp_path,
        hierarchy={"schedule_s": 0},
        retention={"max_memories_per_user": 3, "prune_interval_s": 0.05},
    )
    components = await Components.build(config, embedder=embedder)
    retention = components.write.retention
    assert retention is not None
    try:
        texts = [
            "I have a dog named Rex.",
            "Always answer in German.",
            "I play the cello.",
            "I am allergic to peanuts.",
            "I drive a blue Volvo.",
        ]
        for at, text in enumerate(texts):
            turn = Turn(user_id="w", user_text=text, assistant_text="Ok.", created_at=NOW + at)
            await components.write.writer.write_turn(turn)
        assert retention.pending == {"w": 5}
        retention.start()
        for _ in range(200):
            await asyncio.sleep(0.02)
            if components.metrics.value("memory_sidecar_pruned_total", {"action": "archive"}):
                break
        active = await components.store.query(build_filter(owner="w"))
        assert len(active) == 3
        assert any(r.memory_type == MemoryType.CONSTRAINT for r in active)
        # the two oldest non-constraint facts went (same importance and access)
        assert {r.content for r in active} == {
            "User wants the assistant to always answer in German.",
            "User is allergic to peanuts.",
            "User drives a blue Volvo.",
        }
        assert retention.pending == {}
    finally:
        await components.close()
