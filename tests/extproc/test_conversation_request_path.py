"""Conversation context and question cues through the request path (the gRPC
processor): an answer stored after its question is injected for a question about
it, and a question naming a date gets what was said on that day — the profile
without them does neither."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from sidecar.config import SidecarConfig
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import MemoryRecord, Scope, memory_id
from sidecar.memory.write.rows.bulk import bulk_load
from sidecar.runtime.components import Components
from sidecar.runtime.server import Sidecar
from tests.extproc.calls import injected_block
from tests.support.boot import running_sidecar, sidecar_config

USER = "transcripts"


def at(day: str, minute: int = 0) -> int:
    when = datetime.fromisoformat(day).replace(tzinfo=UTC)
    return int(when.timestamp() * 1000) + minute * 60_000


#: (session, day, text): a transcript imported line by line.
LINES = [
    ("picnic", "2023-07-17", "Maria: Last weekend I had a picnic with friends from church."),
    ("picnic", "2023-07-17", "John: Looks fun! What games did you all play?"),
    ("picnic", "2023-07-17", "Maria: Some fun ones, like charades and a scavenger hunt."),
    ("chess", "2023-05-02", "John: I play chess at the club every Tuesday."),
    ("chess", "2023-05-02", "Maria: My brother collects old board games."),
    ("chess", "2023-05-02", "John: We played cards at the church hall once."),
    ("cooking", "2023-06-01", "Maria: I made coconut ice cream with my niece."),
    ("cooking2", "2023-11-09", "Maria: I made coconut ice cream for the shelter."),
]


def make_config(tmp: Path) -> SidecarConfig:
    plain = {"conversation": {"enabled": False}, "cues": {"enabled": False}, "top_k": 3}
    return sidecar_config(
        tmp,
        profiles={"in-context": {"retrieval": {"top_k": 3}}, "plain": {"retrieval": plain}},
    )


@pytest.fixture(scope="module")
async def sidecar(
    tmp_path_factory: pytest.TempPathFactory, embedder: Embedder
) -> AsyncIterator[Sidecar]:
    workdir = tmp_path_factory.mktemp("conversation")
    components = await Components.build(make_config(workdir), embedder=embedder)
    try:
        rows = [
            MemoryRecord(
                id=memory_id(USER, text),
                user_id=USER,
                content=text,
                session_id=session,
                created_at=at(day, i),
                updated_at=at(day, i),
            )
            for i, (session, day, text) in enumerate(LINES)
        ]
        await bulk_load(
            rows,
            embedder=embedder,
            enricher=components.write.enricher,
            writes=components.write.writes,
        )
    finally:
        await components.close()
    async with running_sidecar(make_config(workdir), embedder) as server:
        await server.components.read.memory.cache.corpus(Scope(USER))
        yield server


async def test_an_answer_is_injected_with_the_question_it_answers(
    sidecar: Sidecar, channel: grpc.aio.Channel
) -> None:
    question = "What games did Maria play at the church picnic?"
    assert "charades" in await injected_block(channel, "in-context", question, USER)
    assert "charades" not in await injected_block(channel, "plain", question, USER)


async def test_a_named_date_brings_what_was_said_that_day(
    sidecar: Sidecar, channel: grpc.aio.Channel
) -> None:
    question = "Who did Maria make coconut ice cream for on 9 November, 2023?"
    block = await injected_block(channel, "in-context", question, USER)
    assert block.index("for the shelter") < block.index("with my niece"), block
