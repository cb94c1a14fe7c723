"""A turn's facts never say "you" once stored: the assistant is named, a request to
it is cut off, a bare reply to it leaves no fact (issue O, item 5)."""

from __future__ import annotations

from pathlib import Path

from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.runtime.components import Components
from tests.support.boot import sidecar_config


async def stored(components: Components, user: str, text: str) -> list[str]:
    turn = Turn(user_id=user, user_text=text, assistant_text="Noted.", created_at=1_700_000_000_000)
    await components.write.writer.write_turn(turn)
    rows = await components.store.query(build_filter(owner=user))
    return sorted(r.content for r in rows)


async def test_facts_name_the_assistant_and_drop_what_only_speaks_to_it(
    tmp_path: Path, embedder: Embedder
) -> None:
    config = sidecar_config(tmp_path, hierarchy={"schedule_s": 0})
    components = await Components.build(config, embedder=embedder)
    try:
        assert await stored(components, "ana", "I like it when you use bullet points.") == [
            "User likes it when the assistant uses bullet points."
        ]
        facts = await stored(
            components,
            "bo",
            "I'm planning a trip to Miami and I was wondering if you could recommend hotels.",
        )
        assert facts == ["User is planning a trip to Miami."]
        said = await stored(components, "cy", "Thanks, I really appreciate your help!")
        assert all("you" not in fact.split() for fact in said)
        every = [
            *await stored(components, "di", "Honestly you never know until you try, right?"),
            *await stored(components, "di", "I think your summaries are way too long."),
        ]
        assert all(not {"you", "your"} & set(fact.lower().split()) for fact in every), every
    finally:
        await components.close()
