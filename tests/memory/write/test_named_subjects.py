"""Facts about the people and things in the user's life, without an LLM: "Ana just
moved to Porto." is kept when the user's own facts name Ana ("My sister is Ana."),
dropped (and counted) when they do not, and a question about the sister then finds
both facts through the entity link between them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.heuristics import extract_heuristic
from sidecar.memory.records.records import Scope
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.runtime.components import Components
from tests.support.boot import sidecar_config


def test_the_heuristics_propose_facts_about_named_subjects() -> None:
    (fact,) = extract_heuristic("Ana just moved to Porto!", max_facts=3)
    assert (fact.text, fact.about) == ("Ana just moved to Porto.", "Ana")
    (fact,) = extract_heuristic("Piotr retired from teaching maths.", max_facts=3)
    assert fact.about == "Piotr"
    (mine,) = extract_heuristic("My sister is Ana.", max_facts=3)
    assert (mine.text, mine.about) == ("User's sister is Ana.", "")
    # About the user after all, a state of the moment, or no name: as before.
    assert [f.about for f in extract_heuristic("Ana is visiting me next week.", max_facts=3)] == [
        ""
    ]
    assert extract_heuristic("Ana is tired today.", max_facts=3) == []
    assert extract_heuristic("Monday was rough.", max_facts=3) == []


@pytest.fixture
async def components(tmp_path: Path, embedder: Embedder) -> AsyncIterator[Components]:
    config = sidecar_config(tmp_path, hierarchy={"schedule_s": 0})
    built = await Components.build(config, embedder=embedder)
    yield built
    await built.close()


async def say(components: Components, user: str, text: str, at: int) -> None:
    turn = Turn(user_id=user, user_text=text, assistant_text="Noted.", created_at=at)
    await components.write.writer.write_turn(turn)


async def test_a_fact_about_someone_the_user_named_is_kept_and_found_through_them(
    components: Components,
) -> None:
    await say(components, "u", "My sister is Ana.", 1)
    await say(components, "u", "Ana just moved to Porto.", 2)
    await say(components, "u", "Paris is lovely in spring.", 3)  # nobody the user named
    await say(components, "u", "My dad is Piotr. Piotr retired from teaching maths.", 4)
    rows = {r.content for r in await components.store.query(build_filter(owner="u"))}
    assert rows == {
        "User's sister is Ana.",
        "Ana just moved to Porto.",
        "User's dad is Piotr.",
        "Piotr retired from teaching maths.",
    }
    dropped = components.metrics.value(
        "memory_sidecar_facts_total", {"decision": "dropped_unknown_subject"}
    )
    assert dropped == 1
    retrieval = components.config.defaults.retrieval
    (query,) = await components.read.memory.embed(["Where does my sister live now?"], retrieval)
    hits = await components.read.memory.search(query, Scope("u"), retrieval)
    found = [h.record.content for h in hits]
    assert {"User's sister is Ana.", "Ana just moved to Porto."} <= set(found[:3])


async def test_another_users_named_people_do_not_count(components: Components) -> None:
    await say(components, "a", "My sister is Ana.", 1)
    await say(components, "b", "Ana just moved to Porto.", 2)
    assert await components.store.query(build_filter(owner="b")) == []


async def test_a_move_of_the_users_never_replaces_one_of_someone_elses(
    components: Components,
) -> None:
    await say(components, "u", "My sister is Ana.", 1)
    await say(components, "u", "Ana just moved to Porto.", 2)
    await say(components, "u", "I just moved to Porto too.", 3)
    rows = {r.content for r in await components.store.query(build_filter(owner="u"))}
    assert "Ana just moved to Porto." in rows
    assert "User's sister is Ana." in rows
    assert any(r.startswith("User") and "Porto" in r for r in rows)
