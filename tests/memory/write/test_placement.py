"""Attributes by the question they answer (issue O, item 1): a change told as an
event supersedes the earlier state of the same attribute, found by its questions
where no slot rule reads it; another person's change, a new hobby, a fact of
another attribute never do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.changes import changes
from sidecar.memory.language.embedding_text import embedding_text
from sidecar.memory.records.records import Status
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.memory.write.turns.placement import AttributePlacer
from sidecar.runtime.components import Components
from tests.support.boot import sidecar_config

NEAR = {"min_score": 0.4, "margin": 0.05}


async def placed(embedder: Embedder, text: str) -> str | None:
    vector = np.asarray(await embedder.embed([embedding_text(text)]), dtype=np.float32)
    [where] = await AttributePlacer(embedder).place([text], vector, **NEAR)
    return where.attribute


@pytest.mark.parametrize(
    ("fact", "attribute"),
    [
        ("User transferred to Imperial for the rest of User's degree.", "school"),
        ("User traded in the Civic for an e-bike, no more car for User.", "car"),
        ("User and others just closed on a house in Denver.", "residence"),
        ("User lives in Leeds.", "residence"),  # the slot rule's
    ],
)
async def test_a_fact_falls_in_the_attribute_whose_questions_it_answers(
    embedder: Embedder, fact: str, attribute: str
) -> None:
    assert await placed(embedder, fact) == attribute


async def test_a_fact_near_no_question_is_not_placed(embedder: Embedder) -> None:
    assert await placed(embedder, "User left Accenture.") is None
    assert await placed(embedder, "User loves the smell of rain.") is None


def test_a_change_is_told_by_its_cues_or_an_event() -> None:
    assert changes("User sold the corolla and got a Tesla.")
    assert changes("User handed in User's notice at Deloitte.")
    assert not changes("User drives a Honda Civic.")


async def stored(components: Components, user: str, *said: str) -> dict[str, Status]:
    for day, text in enumerate(said):
        turn = Turn(
            user_id=user,
            user_text=text,
            assistant_text="Okay.",
            created_at=1_700_000_000_000 + day * 86_400_000,
        )
        await components.write.writer.write_turn(turn)
    rows = await components.store.query(build_filter(owner=user, status=None))
    return {r.content: r.status for r in rows}


async def test_changes_told_as_events_supersede_and_others_do_not(
    tmp_path: Path, embedder: Embedder
) -> None:
    config = sidecar_config(tmp_path, hierarchy={"schedule_s": 0})
    components = await Components.build(config, embedder=embedder)
    try:
        rows = await stored(
            components, "cara", "I drive a Honda Civic.", "Traded in the Civic for an e-bike!"
        )
        assert rows["User drives a Honda Civic."] == Status.SUPERSEDED
        rows = await stored(
            components, "dev", "I'm a nurse.", "Left nursing last year, I'm a software tester now."
        )
        assert rows["User is a nurse."] == Status.SUPERSEDED
        # Another person's move, a new hobby, a change of another attribute: no.
        rows = await stored(
            components, "eli", "I live in Porto.", "My sister just moved to Lisbon."
        )
        assert rows["User lives in Porto."] == Status.ACTIVE
        rows = await stored(
            components, "fay", "I play the guitar.", "I started learning the cello."
        )
        assert rows["User plays the guitar."] == Status.ACTIVE
        rows = await stored(components, "gus", "I live in Leeds.", "I started a new job at Stripe.")
        assert rows["User lives in Leeds."] == Status.ACTIVE
    finally:
        await components.close()
