"""Every memory records the turns it was made from and the words of them that carry
it; restatements, updates and consolidation keep the union, supersession keeps each
row's own, export/import carries them and forget removes them (issue N)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import MemoryRecord, Origin, Status, merge_origins
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.runtime.components import Components
from tests.support.boot import sidecar_config

#: Tuesday, 30 May 2023, noon UTC.
SAID = int(datetime(2023, 5, 30, 12, tzinfo=UTC).timestamp() * 1000)
DAY = 86_400_000


async def build(tmp: Path, embedder: Embedder) -> Components:
    config = sidecar_config(tmp, hierarchy={"schedule_s": 0})
    return await Components.build(config, embedder=embedder)


async def say(
    components: Components, user: str, text: str, at: int, *, turn: str, reply: str = "Noted."
) -> None:
    said = Turn(
        user_id=user,
        user_text=text,
        assistant_text=reply,
        created_at=at,
        request_id=turn,
        session_id=f"s-{turn}",
        message_index=2,
        refs=(f"{turn}:u", f"{turn}:a"),
    )
    await components.write.writer.write_turn(said)


async def rows(components: Components, user: str) -> list[MemoryRecord]:
    return await components.store.query(build_filter(owner=user, status=None))


async def test_a_memory_records_its_turn_and_what_was_said(
    tmp_path: Path, embedder: Embedder
) -> None:
    components = await build(tmp_path, embedder)
    try:
        said = "Honestly the commute is brutal! I live in Leeds."
        await say(components, "ana", said, SAID, turn="t1")
        stored = {r.content: r for r in await rows(components, "ana")}
        home = stored["User lives in Leeds."]
        assert home.origins == (
            Origin("t1", session="s-t1", message=2, refs=("t1:u", "t1:a"), at=SAID),
        )
        assert home.excerpt == said
    finally:
        await components.close()


async def test_restating_merging_and_superseding_keep_the_turns(
    tmp_path: Path, embedder: Embedder
) -> None:
    components = await build(tmp_path, embedder)
    try:
        await say(components, "bo", "I live in Berlin.", SAID, turn="t1")
        await say(components, "bo", "I'm living in Berlin these days.", SAID + DAY, turn="t2")
        (home,) = [r for r in await rows(components, "bo") if r.status == Status.ACTIVE]
        assert [o.turn for o in home.origins] == ["t1", "t2"]  # the union
        assert "I live in Berlin." in home.excerpt
        assert "I'm living in Berlin these days." in home.excerpt

        await say(components, "bo", "I moved to Lisbon.", SAID + 2 * DAY, turn="t3")
        everything = {r.content: r for r in await rows(components, "bo")}
        old = everything[home.content]
        assert old.status == Status.SUPERSEDED
        assert [o.turn for o in old.origins] == ["t1", "t2"]  # its own, kept
        new = next(r for r in everything.values() if r.status == Status.ACTIVE)
        assert [o.turn for o in new.origins] == ["t3"]
    finally:
        await components.close()


async def test_a_relative_date_is_stored_absolute(tmp_path: Path, embedder: Embedder) -> None:
    components = await build(tmp_path, embedder)
    try:
        await say(components, "cy", "I ran my first half marathon yesterday!", SAID, turn="t1")
        (memory,) = await rows(components, "cy")
        # Quoted as said, the date it means beside the word.
        assert (
            memory.content == 'User said: "I ran my first half marathon yesterday (29 May 2023)!"'
        )
        assert memory.excerpt == "I ran my first half marathon yesterday!"

        await say(components, "cy", "I moved to Leeds last month.", SAID, turn="t2")
        moved = next(r for r in await rows(components, "cy") if "Leeds" in r.content)
        assert moved.content == "User moved to Leeds in April 2023."
    finally:
        await components.close()


async def test_a_turn_without_a_fact_still_leaves_what_was_said(
    tmp_path: Path, embedder: Embedder
) -> None:
    components = await build(tmp_path, embedder)
    try:
        answer = "1. Mississippi Studios 2. Doug Fir Lounge " + "and more venues. " * 30
        await say(
            components,
            "di",
            "Any indie venues in Portland you'd suggest?",
            SAID,
            turn="t1",
            reply=answer,
        )
        await say(components, "di", "thanks!!", SAID + 1, turn="t2")
        (asked,) = await rows(components, "di")
        assert asked.content == 'User asked: "Any indie venues in Portland you\'d suggest?"'
        assert "Doug Fir Lounge" in asked.excerpt
        assert [o.turn for o in asked.origins] == ["t1"]
        metrics = components.metrics
        assert metrics.value("memory_sidecar_turns_without_memory_total") == 1
    finally:
        await components.close()


async def test_export_and_import_carry_provenance_and_forget_removes_it(
    tmp_path: Path, embedder: Embedder
) -> None:
    components = await build(tmp_path, embedder)
    try:
        await say(components, "ed", "My sister Ana lives in Porto.", SAID, turn="t1")
        admin = components.memory_admin()
        lines = [line async for line in admin.export("ed")]
        exported = [json.loads(line) for line in lines]
        memory = next(e for e in exported if e["node_type"] == "memory")
        assert memory["provenance"][0]["turn"] == "t1"
        assert memory["provenance"][0]["refs"] == ["t1:u", "t1:a"]
        assert memory["excerpt"] == "My sister Ana lives in Porto."

        await admin.forget("ed")
        left = await components.store.query(build_filter(owner="ed", status=None))
        assert all(not r.excerpt and not r.origins for r in left)

        await admin.import_lines("ed", lines)  # restored as it was
        (copied,) = [
            r
            for r in await components.store.query(build_filter(owner="ed"))
            if r.node_type == "memory"
        ]
        assert copied.origins[0].refs == ("t1:u", "t1:a")
        assert copied.excerpt == "My sister Ana lives in Porto."
    finally:
        await components.close()


def test_origins_merge_as_a_union_oldest_first_and_capped() -> None:
    a = tuple(Origin(f"t{i}", at=i) for i in range(3))
    b = (Origin("t1", at=1), Origin("t9", at=9))
    assert [o.turn for o in merge_origins(b, a)] == ["t0", "t1", "t2", "t9"]
    many = tuple(Origin(f"t{i:02}", at=i) for i in range(30))
    capped = merge_origins(many, cap=5)
    assert [o.turn for o in capped] == ["t00", "t26", "t27", "t28", "t29"]


async def test_a_quote_is_never_replaced_by_another(tmp_path: Path, embedder: Embedder) -> None:
    """'User asked: "…jobs for seniors"' is a record of what was asked, not a job: a
    later request about another job neither supersedes nor absorbs it, and
    consolidation folds no request."""
    components = await build(tmp_path, embedder)
    try:
        answer = "1. Tutor 2. Transcriptionist 3. Remote bookkeeper " + "and more. " * 40
        await say(components, "fa", "Brainstorm work from home jobs for seniors", SAID, turn="t1",
                  reply=answer)  # fmt: skip
        await say(components, "fa", "How do I land a job at the UN as a logistician?",
                  SAID + DAY, turn="t2", reply=answer)  # fmt: skip
        await say(components, "fa", "Brainstorm work from home jobs for seniors", SAID + 2 * DAY,
                  turn="t3", reply=answer)  # fmt: skip
        active = [r for r in await rows(components, "fa") if r.status == Status.ACTIVE]
        by_text = {r.content: r for r in active}
        assert set(by_text) == {
            'User asked: "Brainstorm work from home jobs for seniors"',
            'User asked: "How do I land a job at the UN as a logistician?"',
        }
        again = by_text['User asked: "Brainstorm work from home jobs for seniors"']
        assert [o.turn for o in again.origins] == ["t1", "t3"]  # asked twice, one memory
        report = await components.write.consolidator.consolidate("fa")
        assert report.merged == 0
    finally:
        await components.close()
