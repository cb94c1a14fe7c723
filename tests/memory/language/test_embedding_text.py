"""A memory's vector names the attribute it sets, so a question about the attribute
finds a fact that never uses the question's words."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.language.embedding_text import attribute_words, embedding_text
from sidecar.memory.records.records import Scope
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.runtime.components import Components
from tests.support.boot import sidecar_config


def test_only_the_users_own_attributes_are_named() -> None:
    assert embedding_text("User is a proper Glasgow local now.") == (
        "User is a proper Glasgow local now. (where User lives: home town, city)"
    )
    assert embedding_text("Teal is User's colour these days.").endswith("(User's favourite colour)")
    assert embedding_text("User's sister lives in Porto.") == "User's sister lives in Porto."
    assert embedding_text("User likes long walks.") == "User likes long walks."
    assert attribute_words(None) is None


def test_a_fact_naming_one_thing_of_a_kind_names_the_kind() -> None:
    assert embedding_text("User switched User's current account to Monzo.").endswith(
        "(User's bank)"
    )
    assert embedding_text("User moved everything over to Bitwarden.").endswith(
        "(User's password manager)"
    )


async def test_a_question_about_an_attribute_finds_the_fact_that_sets_it(
    tmp_path: Path, embedder: Embedder
) -> None:
    stated = "The removal van just left and I'm officially a Glasgow local now."
    plain, named = await embedder.embed(
        [
            "User is officially a Glasgow local now.",
            embedding_text("User is officially a Glasgow local now."),
        ]
    )
    (question,) = await embedder.embed(["Which city do I live in?"])
    assert float(np.dot(question, named)) > float(np.dot(question, plain))

    config = sidecar_config(tmp_path, hierarchy={"enabled": False})
    components = await Components.build(config, embedder=embedder)
    try:
        turn = Turn(user_id="g", user_text=stated, assistant_text="Nice!", created_at=1)
        await components.write.writer.write_turn(turn)
        (row,) = await components.store.query(build_filter(owner="g"))
        assert row.content.startswith("The removal van just left")  # the text is unchanged
        retrieval = components.config.defaults.retrieval
        (query,) = await components.read.memory.embed(["Which city do I live in?"], retrieval)
        hits = await components.read.memory.search(query, Scope("g"), retrieval)
        assert [h.record.id for h in hits] == [row.id]
    finally:
        await components.close()
