"""The durable turn journal's claims: each user's turns in acceptance order, one in
flight per user, appends on the caller's thread beside claims on the journal's,
and completions that claim the user's next turn in the same call."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from sidecar.errors import JournalError
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.memory.write.turns.journal_file import ClaimedTurn
from tests.memory.write.journal_support import Clock, row, texts, turn

# -- per-user order and one in flight per user ------------------------------------


async def test_claim_hands_out_each_users_oldest_turn_only(
    journal: TurnJournal, path: Path
) -> None:
    for user, text in [("u1", "a"), ("u1", "b"), ("u2", "c"), ("u1", "d"), ("u3", "e")]:
        await journal.append(turn(user, text))
    first = await journal.claim(10)
    assert texts(first) == ["a", "c", "e"]  # heads, oldest first; never two of u1
    assert all(c.attempt == 1 for c in first)
    assert await journal.claim(10) == []  # every user has a turn in flight
    a, c, _ = first
    assert await journal.complete(a.id)
    assert texts(await journal.claim(10)) == ["b"]
    assert await journal.complete(c.id)
    assert await journal.claim(10) == []  # u1's "b" still in flight, u2 done
    assert row(path, a.id, "state") == "done"
    counts = await journal.counts()
    assert (counts.pending, counts.in_progress, counts.done) == (1, 2, 2)


async def test_claim_respects_limit_and_excluded_users(journal: TurnJournal) -> None:
    for user in ("u1", "u2", "u3", "u4"):
        await journal.append(turn(user, user))
    assert texts(await journal.claim(2, exclude_users={"u1"})) == ["u2", "u3"]
    assert texts(await journal.claim(5, exclude_users=["u1"])) == ["u4"]
    assert texts(await journal.claim(5)) == ["u1"]


async def test_a_claim_that_finds_nothing_takes_no_write_lock(
    journal: TurnJournal, path: Path
) -> None:
    """Idle workers claim on every wake-up and poll: with nothing to claim they only
    read, so they never hold up an append (the writer process's polls share the
    file with the worker's appends)."""
    await journal.append(turn("u1", "first"))
    (claimed,) = await journal.claim(1)
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            started = asyncio.get_running_loop().time()
            assert await journal.claim(5) == []  # u1's only turn is in progress
            assert await journal.claim(5, exclude_users={"u1"}) == []
            assert asyncio.get_running_loop().time() - started < 1.0
        finally:
            other.execute("ROLLBACK")
    await journal.append(turn("u2", "second"))
    assert texts(await journal.claim(5)) == ["second"]
    assert await journal.complete(claimed.id)


async def test_an_append_does_not_wait_for_the_journal_thread(journal: TurnJournal) -> None:
    """With ``synchronous=NORMAL`` the response path's append runs on the caller's
    thread: a journal thread busy with something else does not delay it."""
    release = threading.Event()
    loop = asyncio.get_running_loop()
    busy = loop.run_in_executor(journal._executor, release.wait)  # the journal thread
    try:
        turn_id = await asyncio.wait_for(journal.append(turn("u1", "inline")), 2.0)
    finally:
        release.set()
        await busy
    assert journal.open_count == 1
    (claimed,) = await journal.claim(1)
    assert (claimed.id, claimed.turn.user_text) == (turn_id, "inline")


async def test_an_append_on_a_locked_file_waits_on_the_journal_thread(
    journal: TurnJournal, path: Path
) -> None:
    """The caller's thread never waits for a lock: while another connection holds
    the write lock the append goes to the journal thread, which waits its turn."""
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        appending = asyncio.create_task(journal.append(turn("u1", "after the lock")))
        await asyncio.sleep(0.3)
        assert not appending.done()
        other.execute("COMMIT")
        turn_id = await asyncio.wait_for(appending, 5.0)
    assert journal.open_count == 1
    assert [c.id for c in await journal.claim(5)] == [turn_id]


async def test_appends_and_claims_on_two_threads_keep_the_count(path: Path, clock: Clock) -> None:
    """Appends on the caller's thread and claims and completions on the journal
    thread, interleaved: the running count matches the file."""
    journal = TurnJournal(path, max_pending=1000, clock=clock)
    await journal.open()

    async def append_all() -> None:
        for i in range(200):
            await journal.append(turn(f"u{i % 7}", f"{i}"))
            await asyncio.sleep(0)  # an append on this thread does not yield by itself

    async def write_all() -> int:
        written = 0
        while written < 200:
            batch = await journal.claim(3)
            for item in batch:
                assert await journal.complete(item.id)
            written += len(batch)
            await asyncio.sleep(0)
        return written

    try:
        _, written = await asyncio.gather(append_all(), write_all())
        assert written == 200
        assert journal.open_count == 0
        assert (await journal.counts()).open == 0
    finally:
        await journal.close()


async def test_a_journal_that_fsyncs_appends_on_its_thread(path: Path, clock: Clock) -> None:
    """``journal_sync: full`` fsyncs every commit: never on the caller's thread."""
    journal = TurnJournal(path, max_pending=10, clock=clock, sync="full")
    await journal.open()
    try:
        assert journal._inline is None
        await journal.append(turn("u1"))
        assert journal.open_count == 1
    finally:
        await journal.close()


async def test_users_turns_come_out_in_acceptance_order(journal: TurnJournal) -> None:
    for i in range(30):
        await journal.append(turn(f"u{i % 3}", f"{i}"))
    seen: dict[str, list[int]] = {}
    while True:
        batch = await journal.claim(10)
        if not batch:
            break
        assert len({c.turn.user_id for c in batch}) == len(batch)
        for claimed in batch:
            seen.setdefault(claimed.turn.user_id, []).append(int(claimed.turn.user_text))
            await journal.complete(claimed.id)
    assert seen == {f"u{u}": list(range(u, 30, 3)) for u in range(3)}
    assert journal.open_count == 0


async def test_a_completion_claims_the_users_next_turn_in_the_same_call(
    journal: TurnJournal, path: Path
) -> None:
    for user, text in [("u1", "a"), ("u1", "b"), ("u2", "c")]:
        await journal.append(turn(user, text))
    (a,) = await journal.claim(1)
    (c,) = await journal.claim(1)
    done, claimed = await journal.complete_and_claim(a.id, 1)
    assert done
    assert texts(claimed) == ["b"]
    assert row(path, a.id, "state") == "done"
    assert row(path, a.id, "payload") is None
    assert claimed[0].attempt == 1
    assert row(path, claimed[0].id, "state") == "in_progress"
    # Users another worker is writing are skipped; nothing left is not an error.
    assert await journal.complete_and_claim(c.id, 1, exclude_users={"u1"}) == (True, [])
    done, claimed = await journal.complete_and_claim(c.id, 1)
    assert done is False
    assert claimed == []
    counts = await journal.counts()
    assert (counts.pending, counts.in_progress, counts.done) == (0, 1, 2)


async def test_a_completion_and_its_claim_happen_together_or_not_at_all(
    journal: TurnJournal, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue retries a failed completion whole: a claim that fails after the
    completion must take the completion back with it."""
    await journal.append(turn("u1", "a"))
    await journal.append(turn("u1", "b"))
    (a,) = await journal.claim(1)

    def failing_claim(*args: Any) -> list[ClaimedTurn]:
        raise sqlite3.OperationalError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(journal, "_claim_heads", failing_claim)
        with pytest.raises(JournalError):
            await journal.complete_and_claim(a.id, 1)
    assert row(path, a.id, "state") == "in_progress"  # neither half happened
    assert journal.open_count == 2
    done, claimed = await journal.complete_and_claim(a.id, 1)
    assert done
    assert texts(claimed) == ["b"]
    assert journal.open_count == 1


async def test_completed_turn_drops_its_text(journal: TurnJournal, path: Path) -> None:
    await journal.append(turn("u1", "I live in Berlin."))
    (claimed,) = await journal.claim(1)
    await journal.complete(claimed.id)
    assert row(path, claimed.id, "payload") is None
    assert await journal.complete(claimed.id) is False  # settled once only
