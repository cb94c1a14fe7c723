"""The durable turn journal: durability (close/reopen and kill -9), per-user order,
one turn in flight per user, retry scheduling, dead letters, crash requeue, the
size bound, pruning and the process lock."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

from sidecar.errors import JournalError, JournalFull
from sidecar.memory.model.turns import Turn
from sidecar.memory.write.journal import TurnJournal
from sidecar.memory.write.journal_file import (
    CORRUPT,
    INTERRUPTED,
    ClaimedTurn,
    decode_turn,
    encode_turn,
    error_type,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


class Clock:
    """A settable wall clock (seconds)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def turn(user: str, text: str = "I like tea.", **extra: Any) -> Turn:
    return Turn(
        user_id=user,
        user_text=text,
        assistant_text="Noted.",
        created_at=1_700_000_000_000,
        request_id=text,
        **extra,
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "journal.sqlite3"


@pytest.fixture
async def journal(path: Path, clock: Clock) -> AsyncIterator[TurnJournal]:
    opened = TurnJournal(path, max_pending=100, clock=clock)
    await opened.open()
    yield opened
    await opened.close()


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A second, plain connection to the file (WAL readers never block)."""
    with closing(sqlite3.connect(path)) as conn:
        yield conn


def row(path: Path, turn_id: int, column: str) -> Any:
    with raw(path) as conn:
        return conn.execute(f"SELECT {column} FROM turns WHERE id = ?", (turn_id,)).fetchone()[0]


def file_mode(path: Path) -> int:
    return path.stat().st_mode


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def texts(claimed: list[ClaimedTurn]) -> list[str]:
    return [c.turn.user_text for c in claimed]


# -- serialisation ----------------------------------------------------------------


def test_turn_round_trips_every_field() -> None:
    full = Turn(
        user_id="u-1",
        user_text="Ich wohne in München. 🏔",
        assistant_text="Schön!",
        created_at=1_700_000_123_456,
        group_ids=("team-a", "team-b"),
        request_id="req-9",
        profile="readonly",
        session_id="s-3",
    )
    for spec in dataclasses.fields(Turn):  # a new field must be set above, too
        assert getattr(full, spec.name) != spec.default, spec.name
    assert decode_turn(encode_turn(full)) == full


@pytest.mark.parametrize(
    "payload",
    [
        "not json",
        "[1, 2]",
        '{"user_id": "u"}',
        '{"user_id": 1, "user_text": "a", "assistant_text": "b", "created_at": 1}',
        '{"user_id": "u", "user_text": "a", "assistant_text": "b", "created_at": "1"}',
    ],
)
def test_decode_rejects_what_encode_never_writes(payload: str) -> None:
    with pytest.raises(ValueError, match=r".+"):
        decode_turn(payload)


def test_error_type_keeps_type_names_only() -> None:
    assert error_type("StoreError") == "StoreError"
    assert error_type("pymilvus.MilvusException") == "pymilvus.MilvusException"
    assert error_type("I live in Berlin") == "Error"
    assert error_type("x" * 200) == "Error"


# -- durability ----------------------------------------------------------------------


async def test_appended_turns_survive_close_and_reopen(path: Path, clock: Clock) -> None:
    first = TurnJournal(path, max_pending=10, clock=clock)
    await first.open()
    ids = [await first.append(turn("u1", f"fact {i}")) for i in range(3)]
    await first.close()

    second = TurnJournal(path, max_pending=10, clock=clock)
    await second.open()
    try:
        counts = await second.counts()
        assert (counts.pending, counts.open, second.open_count) == (3, 3, 3)
        claimed = await second.claim(5)
        assert [c.id for c in claimed] == ids[:1]  # one user: only the head
        assert claimed[0].turn == turn("u1", "fact 0")
    finally:
        await second.close()


async def test_appended_turns_survive_kill_9(tmp_path: Path) -> None:
    """A child appends turns, printing each id once append returned, then SIGKILLs
    itself: every printed id is pending after reopening."""
    path = tmp_path / "journal.sqlite3"
    script = textwrap.dedent(
        f"""
        import asyncio, os, signal
        from sidecar.memory.write.journal import TurnJournal
        from sidecar.memory.model.turns import Turn

        async def main():
            journal = TurnJournal({str(path)!r}, max_pending=1000)
            await journal.open()
            for i in range(200):
                turn = Turn(user_id=f"u{{i % 7}}", user_text=f"My locker is {{i}}.",
                            assistant_text="Noted.", created_at=i)
                print(await journal.append(turn), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        asyncio.run(main())
        """
    )
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    printed = [int(line) for line in done.stdout.decode().split()]
    assert len(printed) == 200
    assert (tmp_path / "journal.sqlite3-wal").exists()  # WAL mode, not closed cleanly

    journal = TurnJournal(path, max_pending=1000)
    await journal.open()
    try:
        assert (await journal.counts()).pending == 200
        with raw(path) as conn:
            stored = {
                turn_id: decode_turn(payload)
                for turn_id, payload in conn.execute(
                    "SELECT id, payload FROM turns WHERE state = 'pending'"
                )
            }
        assert sorted(stored) == printed
        assert stored[printed[13]].user_text == "My locker is 13."
    finally:
        await journal.close()


async def test_journal_file_is_owner_only(journal: TurnJournal, path: Path) -> None:
    await journal.append(turn("u1"))
    assert file_mode(path) & 0o077 == 0


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


# -- ownership ------------------------------------------------------------------------


async def test_one_process_owns_a_journal_file(journal: TurnJournal, path: Path) -> None:
    other = TurnJournal(path, max_pending=10)
    with pytest.raises(JournalError, match="in use"):
        await other.open()
    assert not other.is_open
    await journal.close()
    await other.open()
    await other.close()


async def test_an_appender_and_a_claimer_share_a_file_and_exclude_the_rest(path: Path) -> None:
    appender = TurnJournal(path, max_pending=10, role="appender")
    claimer = TurnJournal(path, max_pending=10, role="claimer")
    await appender.open()
    await claimer.open()
    try:
        for role in ("owner", "appender", "claimer"):
            with pytest.raises(JournalError, match="in use"):
                await TurnJournal(path, max_pending=10, role=role).open()  # type: ignore[arg-type]
        assert (appender.shared, claimer.shared) == (True, True)
    finally:
        await appender.close()
        await claimer.close()
    owner = TurnJournal(path, max_pending=10)
    await owner.open()
    assert not owner.shared
    await owner.close()


async def test_the_claimer_writes_what_the_appender_accepts(path: Path, clock: Clock) -> None:
    appender = TurnJournal(path, max_pending=3, role="appender", clock=clock)
    claimer = TurnJournal(path, max_pending=3, role="claimer", clock=clock)
    await appender.open()
    await claimer.open()
    try:
        await appender.append(turn("u1", "a"))
        await appender.append(turn("u1", "b"))
        await appender.append(turn("u2", "c"))
        with pytest.raises(JournalFull):
            await appender.append(turn("u3", "d"))
        first = await claimer.claim(10)
        assert texts(first) == ["a", "c"]  # one head per user, across the processes
        assert await claimer.claim(10) == []
        for claimed in first:
            assert await claimer.complete(claimed.id)
        assert texts(await claimer.claim(10)) == ["b"]
        # The appender learns of the claimer's progress from the file.
        assert appender.open_count == 3
        assert (await appender.counts()).open == 1
        assert appender.open_count == 1
        await appender.append(turn("u3", "d"))  # room again
    finally:
        await appender.close()
        await claimer.close()


async def test_two_processes_on_one_journal_write_every_turn_once_in_order(
    path: Path,
) -> None:
    """Another process appends 300 turns of 6 users as fast as it can while this one
    claims and completes them: every turn is claimed exactly once, each user's in
    acceptance order, never two of a user's at once."""
    script = textwrap.dedent(
        f"""
        import asyncio
        from sidecar.memory.write.journal import TurnJournal
        from sidecar.memory.model.turns import Turn

        async def main():
            journal = TurnJournal({str(path)!r}, max_pending=10_000, role="appender")
            await journal.open()
            for n in range(300):
                user = f"u{{n % 6}}"
                await journal.append(Turn(user_id=user, user_text=str(n),
                    assistant_text="ok", created_at=n, request_id=str(n)))
            await journal.close()

        asyncio.run(main())
        """
    )
    claimer = TurnJournal(path, max_pending=10_000, role="claimer")
    await claimer.open()
    appending = asyncio.create_task(
        asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", script],
            cwd=REPO_ROOT,
            capture_output=True,
            timeout=60,
        )
    )
    seen: list[int] = []
    try:
        while not appending.done() or (await claimer.counts()).open:
            claimed = await claimer.claim(4)
            users = [c.turn.user_id for c in claimed]
            assert len(users) == len(set(users))  # never two of a user's at once
            for item in claimed:
                seen.append(int(item.turn.user_text))
                assert await claimer.complete(item.id)
            if not claimed:
                await asyncio.sleep(0.005)
        done = await appending
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    finally:
        await claimer.close()
    assert sorted(seen) == list(range(300))
    for user in range(6):
        mine = [n for n in seen if n % 6 == user]
        assert mine == sorted(mine)


async def test_in_memory_journal_only_when_asked_for(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match="not durable"):
        TurnJournal(":memory:", max_pending=10)
    journal = TurnJournal(":memory:", max_pending=10, allow_memory=True)
    await journal.open()
    try:
        await journal.append(turn("u1"))
        assert journal.open_count == 1
    finally:
        await journal.close()
    assert not listing(tmp_path)


async def test_closed_journal_raises_journal_error(path: Path) -> None:
    journal = TurnJournal(path, max_pending=10)
    with pytest.raises(JournalError, match="not open"):
        await journal.append(turn("u1"))
    await journal.open()
    await journal.close()
    await journal.close()  # idempotent
    assert listing(path.parent) == [
        "journal.sqlite3",
        "journal.sqlite3.append.lock",
        "journal.sqlite3.lock",
    ]


async def test_unusable_path_raises_journal_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    journal = TurnJournal(blocker / "journal.sqlite3", max_pending=10)
    with pytest.raises(JournalError, match="open failed"):
        await journal.open()
    assert not journal.is_open
