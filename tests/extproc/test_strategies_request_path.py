"""Every retrieval strategy, end to end through the request path (the gRPC
processor), on memories the write path stored: its hierarchy built by the write
path's categorizer and evolve step, its links persisted and read back by a fresh
process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from sidecar.config import SidecarConfig
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.read.retrieval.registry import STRATEGY_NAMES
from sidecar.memory.records.records import MemoryRecord, NodeType, Scope, memory_id
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.memory.write.rows.bulk import bulk_load
from sidecar.runtime.components import Components
from sidecar.runtime.server import Sidecar
from tests.extproc.calls import injected_block
from tests.support.boot import running_sidecar, sidecar_config

USER = "strategist"
GARDENER = "gardener"
#: Stored with the named topic "garden" (as the extraction LLM would file them).
GARDEN = (
    "User grows heirloom tomatoes in raised beds.",
    "The compost heap sits behind the shed.",
    "Aphids keep attacking the climbing roses.",
    "User waters the seedlings at dawn.",
)
OTHER = (
    "User's sister lives in Lisbon.",
    "User drives a blue hatchback.",
    "User is allergic to penicillin.",
    "User plays chess on Tuesdays.",
)

TURNS = [
    # cooking
    "I bake sourdough bread every Sunday. I love making fresh pasta by hand.",
    "My favourite recipe is a slow cooked tomato sauce. I cook risotto with saffron.",
    "I always bake cinnamon rolls for birthdays. I make pizza dough with a long rise.",
    "I roast vegetables with rosemary. I cook curry with coconut milk on Fridays.",
    # hiking
    "I hike in the Alps every summer. My favourite trail climbs to a glacier lake.",
    "I carry a lightweight tent on mountain hikes. I hiked the Pacific Crest Trail in 2019.",
    "I love hiking above the tree line. My hiking boots are from a small Italian maker.",
    "I plan a hut to hut trek in the Dolomites. I hike with trekking poles on steep descents.",
    # work
    "I work as a nurse in the cardiology ward. My night shifts start at nine.",
    "I am studying for a critical care certificate. My ward manager is called Priya.",
    "I work twelve hour shifts at the hospital. I train new nurses on the cardiac monitors.",
    "I chair the nursing safety committee. My hospital is the city general hospital.",
]


def make_config(tmp: Path) -> SidecarConfig:
    return sidecar_config(
        tmp,
        hierarchy={"schedule_s": 0, "split_min": 8},
        enrichment={"link_threshold": 0.55},
        profiles={name: {"retrieval": {"strategy": name}} for name in STRATEGY_NAMES},
    )


@pytest.fixture(scope="module")
async def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("strategies")


@pytest.fixture(scope="module")
async def written(workdir: Path, embedder: Embedder) -> dict[str, Any]:
    """Memories stored by the write path, then the process "restarts"."""
    components = await Components.build(make_config(workdir), embedder=embedder)
    try:
        for i, text in enumerate(TURNS):
            turn = Turn(
                user_id=USER,
                user_text=text,
                assistant_text="Noted.",
                created_at=1_700_000_000_000 + i * 1000,
                session_id=f"s{i // 4}",
            )
            await components.write.writer.write_turn(turn)
        assert components.write.hierarchy is not None
        await components.write.hierarchy.evolve(USER)
        rows = await components.store.query(build_filter(owner=USER, node_type=None))
        garden = [
            MemoryRecord(id=memory_id(GARDENER, t), user_id=GARDENER, content=t, created_at=1)
            for t in (*GARDEN, *OTHER)
        ]
        await bulk_load(
            garden,
            embedder=embedder,
            enricher=components.write.enricher,
            writes=components.write.writes,
            topics={r.id: "Garden" for r in garden if r.content in GARDEN},
        )
    finally:
        await components.close()
    return {"rows": rows}


@pytest.fixture(scope="module")
async def sidecar(
    workdir: Path, written: dict[str, Any], embedder: Embedder
) -> AsyncIterator[Sidecar]:
    """A fresh process over what ``written`` stored (``channel`` reaches it)."""
    async with running_sidecar(make_config(workdir), embedder) as server:
        for user in (USER, GARDENER):  # warm, as after a first request
            await server.components.read.memory.cache.corpus(Scope(user))
        yield server


def test_the_write_path_built_a_hierarchy_and_links(written: dict[str, Any]) -> None:
    rows = written["rows"]
    categories = [r for r in rows if r.node_type == NodeType.CATEGORY]
    memories = [r for r in rows if r.node_type == NodeType.MEMORY]
    assert len(memories) >= 20
    assert len({r.id for r in categories if r.status == "active"}) >= 2
    assert all(m.category_id for m in memories)
    assert sum(1 for m in memories if m.related_ids) >= 2


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
async def test_every_strategy_injects_through_the_request_path(
    channel: grpc.aio.Channel, strategy: str
) -> None:
    block = await injected_block(channel, strategy, "When do I bake sourdough bread?", USER)
    assert "<memory>" in block, strategy
    assert "sourdough" in block.lower(), (strategy, block)


async def test_members_of_a_named_topic_are_injected_together(
    channel: grpc.aio.Channel,
) -> None:
    question = "How are my heirloom tomatoes doing in the raised beds?"
    block = await injected_block(channel, "default", question, GARDENER)
    assert all(fact.rstrip(".") in block for fact in GARDEN), block
    assert not any(fact.rstrip(".") in block for fact in OTHER), block
    assert block.count("(Garden)") == len(GARDEN), block  # labelled with the topic's name


async def test_links_persisted_by_one_process_are_followed_by_another(
    workdir: Path, written: dict[str, Any], embedder: Embedder
) -> None:
    """A fresh process reads the persisted related_ids and follows them (session
    neighbours off, so only persisted links count)."""
    components = await Components.build(make_config(workdir), embedder=embedder)
    try:
        base = components.config.defaults.retrieval
        links = base.links.model_copy(update={"session_neighbors": False, "max_share": 1.0})
        config = base.model_copy(
            update={"strategy": "linked", "links": links, "threshold": 0.45, "top_k": 8}
        )
        scope = Scope(USER)
        found_link = False
        for text in TURNS:
            (query,) = await components.read.memory.embed([text.split(".")[0]], config)
            hits = await components.read.memory.search(query, scope, config)
            direct = {h.record.id: h.record for h in hits if h.via == "direct"}
            for hit in hits:
                if hit.via == "link":
                    assert any(
                        hit.record.id in r.related_ids or r.id in hit.record.related_ids
                        for r in direct.values()
                    )
                    found_link = True
        assert found_link
    finally:
        await components.close()
