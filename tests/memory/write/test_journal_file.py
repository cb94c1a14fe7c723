"""The durable turn journal's file: the turn format, durability (close/reopen and
kill -9), and who may open it (the process lock, an appender and a claimer
sharing it, in-memory only on request, closed and unusable paths)."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sidecar.errors import JournalError, JournalFull
from sidecar.memory.records.turns import Turn
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.memory.write.turns.journal_file import decode_turn, encode_turn, error_type
from tests.memory.write.journal_support import Clock, raw, texts, turn

REPO_ROOT = Path(__file__).resolve().parents[2]


def file_mode(path: Path) -> int:
    return path.stat().st_mode


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


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
        message_index=4,
        refs=("msg-1", "msg-2"),
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
        from sidecar.memory.write.turns.journal import TurnJournal
        from sidecar.memory.records.turns import Turn

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
        from sidecar.memory.write.turns.journal import TurnJournal
        from sidecar.memory.records.turns import Turn

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
