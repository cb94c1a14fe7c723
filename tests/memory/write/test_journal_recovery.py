"""The durable turn journal when turns fail, crash or pile up: retry scheduling,
dead letters, requeueing after a crash, the size bound, pruning and the counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.errors import JournalFull
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.memory.write.turns.journal_file import CORRUPT, INTERRUPTED, decode_turn
from tests.memory.write.journal_support import Clock, raw, row, texts, turn

# -- retries and dead letters ------------------------------------------------------


async def test_failed_turn_waits_for_its_retry_and_holds_back_its_user(
    journal: TurnJournal, clock: Clock, path: Path
) -> None:
    await journal.append(turn("u1", "a"))
    await journal.append(turn("u1", "b"))
    await journal.append(turn("u2", "c"))
    (a,) = await journal.claim(1)
    assert await journal.fail(a.id, "StoreError", journal.now_ms() + 5_000)
    assert row(path, a.id, "last_error") == "StoreError"
    assert texts(await journal.claim(10)) == ["c"]  # not "b": u1 waits for "a"
    clock.advance(4.9)
    assert await journal.claim(10) == []
    clock.advance(0.2)
    (again,) = await journal.claim(10)
    assert (again.id, again.attempt) == (a.id, 2)
    assert await journal.fail(again.id, "I live in Berlin", journal.now_ms())
    assert row(path, a.id, "last_error") == "Error"  # never content


async def test_dead_letter_keeps_the_turn_and_unblocks_the_user(
    journal: TurnJournal, path: Path
) -> None:
    await journal.append(turn("u1", "a"))
    await journal.append(turn("u1", "b"))
    (a,) = await journal.claim(1)
    assert await journal.dead(a.id, "RuntimeError")
    assert texts(await journal.claim(1)) == ["b"]
    counts = await journal.counts()
    assert (counts.dead, counts.in_progress, counts.open) == (1, 1, 1)
    assert row(path, a.id, "last_error") == "RuntimeError"
    assert decode_turn(row(path, a.id, "payload")).user_text == "a"  # for an operator


async def test_undecodable_turn_goes_to_dead_letters(journal: TurnJournal, path: Path) -> None:
    bad = await journal.append(turn("u1", "a"))
    await journal.append(turn("u1", "b"))
    with raw(path) as conn, conn:
        conn.execute("UPDATE turns SET payload = '{oops' WHERE id = ?", (bad,))
    assert texts(await journal.claim(5)) == ["b"]
    assert (row(path, bad, "state"), row(path, bad, "last_error")) == ("dead", CORRUPT)
    assert journal.open_count == 1


# -- crash recovery ----------------------------------------------------------------


async def test_turns_in_progress_at_a_crash_are_requeued(path: Path, clock: Clock) -> None:
    first = TurnJournal(path, max_pending=10, clock=clock)
    await first.open()
    await first.append(turn("u1", "a"))
    await first.append(turn("u1", "b"))
    await first.append(turn("u2", "c"))
    claimed = await first.claim(10)
    assert texts(claimed) == ["a", "c"]
    await first.close()  # in_progress stays in_progress: what a crash leaves

    second = TurnJournal(path, max_pending=10, clock=clock)
    await second.open()
    try:
        assert await second.requeue_in_progress(max_attempts=5) == (2, 0)
        again = await second.claim(10)
        assert [(c.turn.user_text, c.attempt) for c in again] == [("a", 2), ("c", 2)]
        assert [c.id for c in again] == [c.id for c in claimed]
    finally:
        await second.close()


async def test_a_turn_that_keeps_crashing_the_process_is_dead_lettered(
    path: Path, clock: Clock
) -> None:
    for attempt in (1, 2):
        journal = TurnJournal(path, max_pending=10, clock=clock)
        await journal.open()
        if attempt == 1:
            await journal.append(turn("u1", "poison"))
            await journal.append(turn("u1", "next"))
        assert await journal.requeue_in_progress(max_attempts=2) == (attempt - 1, 0)
        (claimed,) = await journal.claim(1)
        assert (claimed.turn.user_text, claimed.attempt) == ("poison", attempt)
        await journal.close()  # "crashed" while writing it
    journal = TurnJournal(path, max_pending=10, clock=clock)
    await journal.open()
    try:
        assert await journal.requeue_in_progress(max_attempts=2) == (0, 1)
        assert texts(await journal.claim(5)) == ["next"]
        with raw(path) as conn:
            assert conn.execute("SELECT last_error FROM turns WHERE state = 'dead'").fetchall() == [
                (INTERRUPTED,)
            ]
    finally:
        await journal.close()


async def test_release_returns_turns_without_counting_the_attempt(
    journal: TurnJournal,
) -> None:
    await journal.append(turn("u1", "a"))
    (a,) = await journal.claim(1)
    assert await journal.release([a.id, 999]) == 1
    (again,) = await journal.claim(1)
    assert (again.id, again.attempt) == (a.id, 1)
    await journal.append(turn("u2", "b"))
    assert texts(await journal.claim(1)) == ["b"]
    assert await journal.release() == 2  # every turn in progress
    assert texts(await journal.claim(5)) == ["a", "b"]
    assert journal.open_count == 2


async def test_heads_are_rebuilt_on_open(path: Path, clock: Clock) -> None:
    journal = TurnJournal(path, max_pending=10, clock=clock)
    await journal.open()
    for text in ("a", "b"):
        await journal.append(turn("u1", text))
    await journal.close()
    with raw(path) as conn, conn:
        conn.execute("UPDATE turns SET is_head = 1")  # damaged derived data
    journal = TurnJournal(path, max_pending=10, clock=clock)
    await journal.open()
    try:
        assert texts(await journal.claim(5)) == ["a"]
    finally:
        await journal.close()


# -- bound, pruning, counts -----------------------------------------------------------


async def test_full_journal_refuses_until_a_turn_is_written(path: Path, clock: Clock) -> None:
    journal = TurnJournal(path, max_pending=3, clock=clock)
    await journal.open()
    try:
        for i in range(3):
            await journal.append(turn(f"u{i}", f"{i}"))
        with pytest.raises(JournalFull):
            await journal.append(turn("u9", "refused"))
        claimed = await journal.claim(1)  # in progress still counts as unwritten
        with pytest.raises(JournalFull):
            await journal.append(turn("u9", "refused"))
        await journal.complete(claimed[0].id)
        await journal.append(turn("u9", "accepted"))
        assert (await journal.counts()).open == 3
    finally:
        await journal.close()


async def test_prune_keeps_the_newest_done_rows_only(
    journal: TurnJournal, clock: Clock, path: Path
) -> None:
    for i in range(10):
        await journal.append(turn(f"u{i}", f"{i}"))
    claimed = await journal.claim(10)
    for c in claimed[:8]:
        await journal.complete(c.id)
        clock.advance(60)
    await journal.dead(claimed[8].id, "StoreError")
    await journal.append(turn("u1", "pending"))
    assert await journal.prune(keep_done=5) == 3
    with raw(path) as conn:
        done = [r[0] for r in conn.execute("SELECT id FROM turns WHERE state = 'done'")]
    assert done == [c.id for c in claimed[3:8]]
    # now = t0 + 480 s; the kept rows finished at t0 + 180 ... 420: two are > 200 s old
    assert await journal.prune(keep_done=5, older_than_s=200) == 2
    assert await journal.prune(keep_done=0) == 3
    counts = await journal.counts()
    assert (counts.done, counts.dead, counts.in_progress, counts.pending) == (0, 1, 1, 1)


async def test_counts_report_the_oldest_unwritten_turn(journal: TurnJournal, clock: Clock) -> None:
    assert (await journal.counts()).oldest_open_ms is None
    start = journal.now_ms()
    await journal.append(turn("u1", "a"))
    clock.advance(10)
    await journal.append(turn("u2", "b"))
    await journal.claim(1)  # "a" in progress: still unwritten
    assert (await journal.counts()).oldest_open_ms == start
