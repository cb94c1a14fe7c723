"""Consolidation and the history of merges: one memory per fact, nothing dropped
silently, never a near miss, never across users."""

from __future__ import annotations

from pathlib import Path

from sidecar.config import ConsolidationConfig
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import MemoryRecord, Origin, Scope, Status
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.memory.write.upkeep.consolidation import plan_merges
from sidecar.runtime.components import Components
from tests.support.boot import sidecar_config


def row(rid: str, text: str, user: str = "u", at: int = 1) -> MemoryRecord:
    return MemoryRecord(id=rid, user_id=user, content=text, created_at=at, updated_at=at)


def test_the_richest_wording_of_each_fact_is_kept() -> None:
    rows = [
        row("a", "User lives in Berlin.", at=1),
        row("b", "User is based in Berlin.", at=2),
        row("c", "User lives in Berlin, near the river in Kreuzberg.", at=3),
        row("d", "User's dog loses it during thunderstorms."),
        row("e", "User's cat loses it during thunderstorms."),  # a near miss: kept apart
        row("f", "User does not drink coffee."),
        row("g", "User drinks coffee."),  # another polarity: kept apart
    ]
    plans = plan_merges(rows)
    assert [(kept.id, sorted(r.id for r in folded)) for kept, folded in plans] == [
        ("c", ["a", "b"])
    ]


async def say(components: Components, user: str, text: str, at: int) -> None:
    turn = Turn(user_id=user, user_text=text, assistant_text="Noted.", created_at=at)
    await components.write.writer.write_turn(turn)


async def test_consolidation_merges_into_history_per_user(
    tmp_path: Path, embedder: Embedder
) -> None:
    config = sidecar_config(tmp_path, hierarchy={"enabled": False})
    components = await Components.build(config, embedder=embedder)
    try:
        rows = [
            row("m1", "User lives in Berlin.", "ana", 1).with_changes(
                excerpt="I live in Berlin.", origins=(Origin("t1", at=1),)
            ),
            row("m2", "User is based in Berlin.", "ana", 2).with_changes(
                excerpt="I'm based in Berlin.", origins=(Origin("t2", at=2),)
            ),
            row("m3", "User lives in Berlin.", "bo", 3),  # another user's: never merged
        ]
        vectors = await embedder.embed([r.content for r in rows])
        rows = [
            r.with_changes(embedding=tuple(float(x) for x in v))
            for r, v in zip(rows, vectors, strict=True)
        ]
        await components.write.writes.put(rows)
        report = await components.write.consolidator.consolidate("ana")
        assert (report.memories, report.groups, report.merged) == (2, 1, 1)
        ana = await components.store.scan(build_filter(owner="ana", status=None))
        by_id = {r.id: r for r in ana}
        assert by_id["m1"].status == Status.MERGED
        assert by_id["m1"].superseded_by == "m2"  # the later of two equally rich wordings
        assert by_id["m2"].status == Status.ACTIVE
        # The kept memory was said in both turns: its provenance is the union.
        assert [o.turn for o in by_id["m2"].origins] == ["t1", "t2"]
        assert "I live in Berlin." in by_id["m2"].excerpt
        assert "I'm based in Berlin." in by_id["m2"].excerpt
        bo = await components.store.scan(build_filter(owner="bo"))
        assert [r.id for r in bo] == ["m3"]
        # The merged memory leaves the user's corpus at once.
        corpus = await components.read.memory.cache.corpus(Scope("ana"))
        assert "m1" not in corpus.index_of
    finally:
        await components.close()


async def test_a_duplicate_fact_is_kept_as_history_not_dropped(
    tmp_path: Path, embedder: Embedder
) -> None:
    config = sidecar_config(tmp_path, hierarchy={"enabled": False})
    components = await Components.build(config, embedder=embedder)
    try:
        await say(components, "dup", "I live in Berlin.", 1)
        await say(components, "dup", "I'm based in Berlin.", 2)
        await say(components, "dup", "My cat hates thunderstorms.", 3)
        await say(components, "dup", "My dog hates thunderstorms.", 4)
        rows = await components.store.scan(build_filter(owner="dup", status=None))
        active = sorted(r.content for r in rows if r.status == Status.ACTIVE)
        assert active == [
            "User lives in Berlin.",
            "User's cat hates thunderstorms.",
            "User's dog hates thunderstorms.",
        ]
        merged = [r for r in rows if r.status == Status.MERGED]
        assert [r.content for r in merged] == ["User is based in Berlin."]
        kept = next(r for r in rows if r.content == "User lives in Berlin.")
        assert merged[0].superseded_by == kept.id
    finally:
        await components.close()


async def test_restatements_fold_into_the_richest_and_near_misses_never_do(
    embedder: Embedder,
) -> None:
    texts = {
        "r1": "User keeps bees in the back garden, two hives, and sells the honey.",
        "r2": "User keeps bees.",
        "r3": "User's bees made loads of honey this year.",
        # Near misses of one another, however similar their embeddings:
        "n1": "User's nephew lives in Toronto.",
        "n2": "User's niece lives in Toronto too.",
        "n3": "User swims on Tuesday evenings.",
        "n4": "User swims on Thursday evenings.",
        "n5": "User loves spicy food.",
        "n6": "User hates spicy food after 8pm.",
        "n7": "User listens to podcasts when driving.",
        "n8": "User listens to audiobooks when ironing.",
        "n9": "User can eat cooked tomatoes.",
        "n10": "User cannot eat raw tomatoes.",
    }
    vectors = await embedder.embed(list(texts.values()))
    rows = [
        row(rid, text).with_changes(embedding=tuple(float(x) for x in vector))
        for (rid, text), vector in zip(texts.items(), vectors, strict=True)
    ]
    plans = plan_merges(rows, ConsolidationConfig())
    folded = {r.id: kept.id for kept, others in plans for r in others}
    assert folded.get("r2") == "r1"
    assert not any(rid.startswith("n") for rid in [*folded, *folded.values()])
    # Off: only the same fact in the same words folds.
    assert plan_merges(rows, ConsolidationConfig(restate_cosine=0)) == []
    # A user with more memories than the cap is not searched for restatements.
    assert plan_merges(rows, ConsolidationConfig(restate_max_memories=len(rows) - 1)) == []
