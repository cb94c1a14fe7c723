"""The write path under concurrency and LLM faults: nothing lost, nothing duplicated.

Turns with overlapping facts are written concurrently for one user and for many;
every distinct fact must end up stored exactly once per user. Then the real queue
(journal + workers) runs against a mock LLM that is down, too slow or talks
garbage: extraction falls back to the heuristics and every turn's facts are stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from e2e.mock_llm import MockLLM
from sidecar.config import config_from_mapping
from sidecar.memory.embedding.protocol import Embedder
from sidecar.memory.records.records import Scope, normalize_text
from sidecar.memory.records.turns import Turn
from sidecar.memory.store.filters import build_filter
from sidecar.runtime.components import Components

#: Distinct facts (pairwise cosine < 0.41 with MiniLM: never dedup candidates of
#: each other) -> what both the heuristics and the mock LLM store for them.
FACTS = {
    "I have a dog named Rex.": "User has a dog named Rex.",
    "I play the cello.": "User plays the cello.",
    "I am allergic to peanuts.": "User is allergic to peanuts.",
    "I drive a blue Volvo.": "User drives a blue Volvo.",
    "I was born in 1990.": "User was born in 1990.",
    "My sister is called Ana.": "User's sister is called Ana.",
    "I work as a nurse.": "User works as a nurse.",
    "I live in Lisbon.": "User lives in Lisbon.",
    "I collect vintage stamps.": "User collects vintage stamps.",
    "I speak fluent Japanese.": "User speaks fluent Japanese.",
    "My favourite food is ramen.": "User's favourite food is ramen.",
    "I run marathons every spring.": "User runs marathons every spring.",
    "I studied chemistry at university.": "User studied chemistry at university.",
    "I never drink coffee after noon.": "User never drinks coffee after noon.",
}
SENTENCES = sorted(FACTS)
BASE_MS = 1_700_000_000_000


async def build(tmp: Path, embedder: Embedder, **document: Any) -> Components:
    doc: dict[str, Any] = {
        "store": {"uri": str(tmp / "concurrency.db")},
        "admin": {"enabled": False},
        "hierarchy": {"schedule_s": 0},
        "retention": {"prune_interval_s": 0},
        "write_queue": {
            "journal_path": str(tmp / "journal.sqlite3"),
            "workers": 4,
            "poll_interval_s": 0.02,
        },
    }
    doc.update(document)
    return await Components.build(config_from_mapping(doc, env={}), embedder=embedder)


def make_turn(user: str, n: int, sentences: list[str]) -> Turn:
    return Turn(
        user_id=user,
        user_text=" ".join(sentences),
        assistant_text="Noted.",
        created_at=BASE_MS + n,
        request_id=f"{user}/{n}",
    )


def plan(users: list[str], turns_per_user: int, seed: int) -> list[Turn]:
    """Turns of two or three facts each, drawn with repeats from the pool, in a
    shuffled global order."""
    rng = random.Random(seed)
    turns = [
        make_turn(user, n, rng.sample(SENTENCES, rng.choice((2, 3))))
        for user in users
        for n in range(turns_per_user)
    ]
    rng.shuffle(turns)
    return turns


def stated(turns: list[Turn]) -> dict[str, set[str]]:
    """user -> the facts their turns stated (as stored)."""
    out: dict[str, set[str]] = {}
    for turn in turns:
        for sentence in SENTENCES:
            if sentence in turn.user_text:
                out.setdefault(turn.user_id, set()).add(FACTS[sentence])
    return out


async def assert_stored_exactly_once(components: Components, expected: dict[str, set[str]]) -> None:
    for user, facts in expected.items():
        rows = await components.store.query(build_filter(owner=user), limit=1000)
        contents = Counter(r.content for r in rows)
        assert set(contents) == facts, user  # nothing lost, nothing foreign
        assert max(contents.values()) == 1, user  # nothing twice
        normalized = Counter(normalize_text(r.content) for r in rows)
        assert max(normalized.values()) == 1, user
        assert len({r.id for r in rows}) == len(rows)
        everything = await components.store.query(build_filter(owner=user, status=None))
        assert len(everything) == len(rows), user  # and nothing superseded on the way


@pytest.mark.parametrize("with_llm", [False, True])
async def test_concurrent_turns_of_one_user(
    tmp_path: Path, embedder: Embedder, mock_llm: MockLLM, with_llm: bool
) -> None:
    llm = {"llm": {"base_url": mock_llm.base_url}} if with_llm else {}
    components = await build(tmp_path, embedder, **llm)
    try:
        turns = plan(["solo"], 30, seed=11)
        results = await asyncio.gather(*(components.write.writer.write_turn(t) for t in turns))
        expected = stated(turns)
        await assert_stored_exactly_once(components, expected)
        facts = sum(len([s for s in SENTENCES if s in t.user_text]) for t in turns)
        assert sum(r.stored for r in results) == len(expected["solo"])
        assert sum(r.duplicates for r in results) == facts - len(expected["solo"])
        assert sum(r.updated + r.superseded for r in results) == 0
        if with_llm:
            assert mock_llm.stats()["tasks"].get("extract", 0) == 30
    finally:
        await components.close()


@contextlib.asynccontextmanager
async def two_workers(
    tmp: Path, embedder: Embedder, **document: Any
) -> AsyncIterator[tuple[Components, Components]]:
    """Two sidecar workers' components on one embedded store server, as the
    supervisor wires them (``server.workers: 2``: host locks, their own journals)."""
    from milvus_lite.server_manager import server_manager_instance

    workers = {"server": {"port": 50100, "workers": 2}}
    first = await build(tmp, embedder, **workers, **document)
    try:
        uri = server_manager_instance.start_and_get_uri(str(tmp / "concurrency.db"))
        second = await build(
            tmp,
            embedder,
            **workers,
            **document,
            store={"uri": uri},
            write_queue={"journal_path": str(tmp / "journal.w1.sqlite3")},
        )
        try:
            yield first, second
        finally:
            await second.close()
    finally:
        await first.close()


async def test_two_workers_writing_one_user_judge_each_fact_new_once(
    tmp_path: Path, embedder: Embedder
) -> None:
    """server.workers: two sidecar processes (here two Components on one embedded
    store server, as the supervisor wires them) write one user's turns at once, each
    from a corpus snapshot taken before any of them. The host's owner locks and the
    delta read before judging make every fact 'new' exactly once across both."""
    async with two_workers(tmp_path, embedder) as (first, second):
        for components in (first, second):  # both hold a snapshot without the facts
            await components.read.memory.cache.corpus(Scope("solo"))
        turns = plan(["solo"], 30, seed=13)
        results = await asyncio.gather(
            *(
                (first if i % 2 else second).write.writer.write_turn(turn)
                for i, turn in enumerate(turns)
            )
        )
        expected = stated(turns)
        await assert_stored_exactly_once(first, expected)
        assert sum(r.stored for r in results) == len(expected["solo"])
        assert sum(r.updated + r.superseded for r in results) == 0


async def test_a_back_link_written_by_another_worker_is_kept(
    tmp_path: Path, embedder: Embedder
) -> None:
    """Worker B links its new memory to one worker A wrote (a back-link on A's row).
    When A next links another memory to that row, it starts from the row as stored
    (links included), not from its own older copy: both back-links survive."""
    async with two_workers(tmp_path, embedder, enrichment={"link_threshold": 0.6}) as (
        first,
        second,
    ):
        for components in (first, second):
            await components.read.memory.cache.corpus(Scope("owner"))
        await first.write.writer.write_turn(make_turn("owner", 1, ["I have a dog named Rex."]))
        await second.write.writer.write_turn(
            make_turn("owner", 2, ["My dog Rex loves to swim in the lake."])
        )
        await first.write.writer.write_turn(
            make_turn("owner", 3, ["I take Rex to the vet every spring."])
        )
        rows = {r.content: r for r in await first.store.query(build_filter(owner="owner"))}
        assert len(rows) == 3  # nothing judged a duplicate or superseded
        rex = rows["User has a dog named Rex."]
        assert set(rex.related_ids) == {
            rows["User's dog Rex loves to swim in the lake."].id,
            rows["User takes Rex to the vet every spring."].id,
        }


async def test_a_turn_written_late_reaches_the_other_workers_retrieval(
    tmp_path: Path, embedder: Embedder
) -> None:
    """A turn accepted long ago (a backlog, LLM retries) and written now is picked up
    by the other worker's next delta refresh: its rows carry the time they were
    written, not only the turn's."""
    async with two_workers(tmp_path, embedder) as (first, second):
        cache = second.read.memory.cache
        await cache.corpus(Scope("late"))
        await cache.refresh()  # the watermark is now; the turn below is 2023's
        turn = make_turn("late", 1, ["I play the cello."])
        assert (await first.write.writer.write_turn(turn)).stored == 1
        await cache.refresh()
        [row] = (await cache.corpus(Scope("late"))).records
        assert row.content == "User plays the cello."
        assert row.created_at == turn.created_at < row.updated_at


async def test_two_workers_evolve_one_owners_tree_one_at_a_time(
    tmp_path: Path, embedder: Embedder
) -> None:
    async with two_workers(tmp_path, embedder) as (first, second):
        assert first.write.hierarchy is not None
        assert second.write.hierarchy is not None
        async with first.write.hierarchy.lock("owner"):
            evolving = asyncio.create_task(second.write.hierarchy.evolve("owner"))
            await asyncio.sleep(0.3)
            assert not evolving.done()  # the other worker's tree lock holds it
        assert not (await asyncio.wait_for(evolving, 30)).changed  # nothing to plan
        other = asyncio.create_task(second.write.hierarchy.evolve("another owner"))
        async with first.write.hierarchy.lock("owner"):
            await asyncio.wait_for(other, 30)  # other owners are not held up
        assert open_lock_files(tmp_path) > 0
    assert open_lock_files(tmp_path) == 0  # closed with their components


def open_lock_files(directory: Path) -> int:
    """This process's open descriptors on host lock files (``owner-locks/``,
    ``tree-locks/``) under ``directory``."""
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            count += target.startswith(str(directory)) and "-locks/" in target
    return count


async def test_concurrent_turns_of_many_users(tmp_path: Path, embedder: Embedder) -> None:
    components = await build(tmp_path, embedder)
    try:
        users = [f"user-{u:02d}" for u in range(20)]
        turns = plan(users, 5, seed=12)
        assert len(turns) == 100
        await asyncio.gather(*(components.write.writer.write_turn(t) for t in turns))
        await assert_stored_exactly_once(components, stated(turns))
    finally:
        await components.close()


FAULTS: dict[str, tuple[dict[str, Any], str]] = {
    "down": ({"fail_tasks": True}, "http_error"),
    "slow": ({"task_latency_ms": 600}, "timeout"),  # llm.timeout_s is 0.2
    "garbage": ({"garbage_tasks": True}, "bad_output"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_llm_faults_fall_back_to_heuristics_through_the_queue(
    tmp_path: Path, embedder: Embedder, mock_llm: MockLLM, fault: str
) -> None:
    knobs, outcome = FAULTS[fault]
    mock_llm.configure(**knobs)
    components = await build(
        tmp_path, embedder, llm={"base_url": mock_llm.base_url, "timeout_s": 0.2}
    )
    await components.write.queue.start()
    try:
        turns = plan([f"f-{u}" for u in range(4)], 3, seed=13)
        assert all(await asyncio.gather(*(components.write.queue.submit(t) for t in turns)))
        assert await components.write.queue.wait_idle(30)
        await assert_stored_exactly_once(components, stated(turns))
        metrics = components.metrics
        count = len(turns)
        assert metrics.value("memory_sidecar_turns_total", {"outcome": "written"}) == count
        assert metrics.value("memory_sidecar_turns_total", {"outcome": "retried"}) == 0
        failed = {"extractor": "llm", "outcome": "failed"}
        assert metrics.value("memory_sidecar_extractions_total", failed) == count
        fallback = {"extractor": "heuristic", "outcome": "ok"}
        assert metrics.value("memory_sidecar_extractions_total", fallback) == count
        calls = {"task": "extract", "outcome": outcome}
        assert metrics.value("memory_sidecar_llm_calls_total", calls) == count
        assert metrics.value("memory_sidecar_llm_seconds_count", {"task": "extract"}) == count
        ok = {"task": "extract", "outcome": "ok"}
        assert metrics.value("memory_sidecar_llm_calls_total", ok) == 0
    finally:
        await components.close()
