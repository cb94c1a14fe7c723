"""The journal's file: its SQLite schema and statements, the turn states, how a turn
is encoded in a row, the lock files that give a journal one owner per role, and
merging a journal left by a worker that no longer exists into another.

Two processes, two roles (``write_queue.own_process``). The process that accepts
turns opens the file as the ``appender`` (it locks ``<path>.append.lock``) and the
process that writes them as the ``claimer`` (``<path>.lock``); an ``owner`` does both
and takes both locks. Every change runs in a ``BEGIN IMMEDIATE`` transaction, so the
two processes' changes are serialised by SQLite and a user's head stays right.
Each process's running count of unwritten turns sees only its own changes between
calls of :meth:`~sidecar.memory.write.turns.journal.TurnJournal.counts`, which
re-synchronise it from the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from sidecar.errors import JournalError
from sidecar.memory.records.turns import Turn

SyncMode = Literal["normal", "full"]

#: SQLite's in-memory database: no durability, refused unless ``allow_memory``.
MEMORY_PATH = ":memory:"
SCHEMA_VERSION = 1
PAYLOAD_VERSION = 1
#: ``last_error`` of a turn that was in progress when the process died
#: ``max_attempts`` times in a row (a turn that crashes the process).
INTERRUPTED = "Interrupted"
#: ``last_error`` of a row whose payload cannot be decoded.
CORRUPT = "CorruptTurn"

_ERROR_TYPE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,99}$")
OPEN_STATES = "('pending', 'in_progress')"

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS turns (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        user_id         TEXT    NOT NULL,
        payload         TEXT,
        state           TEXT    NOT NULL
                        CHECK (state IN ('pending', 'in_progress', 'done', 'dead')),
        -- 1 on each user's oldest unwritten (pending or in-progress) turn, else 0
        is_head         INTEGER NOT NULL DEFAULT 0,
        attempts        INTEGER NOT NULL DEFAULT 0,
        next_attempt_at INTEGER NOT NULL,
        last_error      TEXT,
        created_at      INTEGER NOT NULL,
        updated_at      INTEGER NOT NULL
    )
    """,
    # Counts per state, the oldest row of a state, pruning of done rows.
    "CREATE INDEX IF NOT EXISTS turns_state ON turns (state, id)",
    # A user's unwritten turns in acceptance order: head on append and promotion.
    f"CREATE INDEX IF NOT EXISTS turns_open ON turns (user_id, id) WHERE state IN {OPEN_STATES}",
    # The claimable heads, oldest first: a claim reads only these, however deep
    # any one user's backlog is.
    "CREATE INDEX IF NOT EXISTS turns_heads ON turns (id) WHERE is_head = 1 AND state = 'pending'",
)

CLAIM = """
    SELECT id, user_id, payload, attempts FROM turns INDEXED BY turns_heads
    WHERE is_head = 1 AND state = 'pending' AND next_attempt_at <= ?
    ORDER BY id
"""
# After a user's head is settled (done / dead), their next unwritten turn leads.
PROMOTE = f"""
    UPDATE turns SET is_head = 1
    WHERE id = (SELECT MIN(id) FROM turns WHERE user_id = ? AND state IN {OPEN_STATES})
"""

JournalRole = Literal["owner", "appender", "claimer"]
LOCKS: dict[str, tuple[str, ...]] = {
    "owner": (".lock", ".append.lock"),
    "appender": (".append.lock",),
    "claimer": (".lock",),
}


class TurnState(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    DONE = "done"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class ClaimedTurn:
    """A turn handed to a worker: now ``in_progress`` until settled."""

    id: int
    turn: Turn
    #: This attempt's number: 1 for the first try.
    attempt: int


@dataclass(frozen=True, slots=True)
class JournalCounts:
    pending: int = 0
    in_progress: int = 0
    done: int = 0
    dead: int = 0
    #: ``created_at`` (epoch ms) of the oldest unwritten turn; None when none.
    oldest_open_ms: int | None = None

    @property
    def open(self) -> int:
        """Turns not yet written: pending + in progress."""
        return self.pending + self.in_progress


def encode_turn(turn: Turn) -> str:
    """Every :class:`Turn` field as JSON (tuples as lists), with a format version."""
    data: dict[str, Any] = {"v": PAYLOAD_VERSION}
    for spec in dataclasses.fields(Turn):
        value = getattr(turn, spec.name)
        data[spec.name] = list(value) if isinstance(value, tuple) else value
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def decode_turn(payload: str) -> Turn:
    """The inverse of :func:`encode_turn`; ValueError for anything else. Fields
    missing from an older payload take their defaults; unknown ones are ignored."""
    data = json.loads(payload)
    if not isinstance(data, dict):
        raise ValueError("turn payload is not an object")
    kwargs: dict[str, Any] = {}
    for spec in dataclasses.fields(Turn):
        if spec.name in data:
            value = data[spec.name]
            kwargs[spec.name] = tuple(value) if isinstance(value, list) else value
    try:
        turn = Turn(**kwargs)
    except TypeError as exc:
        raise ValueError("turn payload lacks a required field") from exc
    texts = (turn.user_id, turn.user_text, turn.assistant_text, turn.profile, turn.session_id)
    if (
        not all(isinstance(t, str) for t in texts)
        or not isinstance(turn.request_id, str)
        or not isinstance(turn.created_at, int)
        or not all(isinstance(g, str) for g in turn.group_ids)
        or not isinstance(turn.message_index, int)
        or not all(isinstance(r, str) for r in turn.refs)
    ):
        raise ValueError("turn payload has a field of the wrong type")
    return turn


def error_type(name: str) -> str:
    """``name`` if it looks like an exception type name, else ``"Error"``: the one
    thing ``last_error`` may hold (never a message, which could quote content)."""
    return name if _ERROR_TYPE.match(name) else "Error"


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # left open, every later transaction would fail
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise


def busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused because another connection holds the lock."""
    return getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def lock_file(path: Path, suffix: str = ".lock") -> int:
    """An exclusive, non-blocking ``flock`` on ``<path><suffix>``; its descriptor."""
    lock_path = path.with_name(path.name + suffix)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise JournalError(f"journal {path} is in use by another process") from exc
    return fd


def ensure_schema(conn: sqlite3.Connection, path: str) -> None:
    """Create the tables (inside the caller's transaction); refuse a newer schema."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise JournalError(
            f"journal {path} has schema version {version}; "
            f"this sidecar knows up to {SCHEMA_VERSION}"
        )
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")


def adopt_journal(target: Path, source: Path) -> int:
    """Copy every turn of ``source`` not yet done (unwritten ones as pending, dead
    letters as they are) into ``target``, in their order, after ``target``'s own;
    the number of unwritten turns copied. Both files must be free (their locks are
    taken). The copy commits before the caller removes ``source``: a crash between
    the two copies the turns again next time, which the idempotent writer absorbs.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    locks = [lock_file(f, suffix) for f in (target, source) for suffix in LOCKS["owner"]]
    try:
        os.close(os.open(target, os.O_RDWR | os.O_CREAT, 0o600))
        conn = sqlite3.connect(str(target), isolation_level=None, timeout=5.0)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("ATTACH DATABASE ? AS stray", (str(source),))
            has_turns = conn.execute(
                "SELECT 1 FROM stray.sqlite_master WHERE type = 'table' AND name = 'turns'"
            ).fetchone()
            if has_turns is None:
                return 0
            with transaction(conn):
                ensure_schema(conn, str(target))
                cursor = conn.execute(
                    "INSERT INTO main.turns (user_id, payload, state, is_head, attempts,"
                    " next_attempt_at, last_error, created_at, updated_at)"
                    " SELECT user_id, payload,"
                    " CASE state WHEN 'dead' THEN 'dead' ELSE 'pending' END, 0, attempts,"
                    " next_attempt_at, last_error, created_at, updated_at"
                    " FROM stray.turns WHERE state <> 'done' ORDER BY id"
                )
                copied = cursor.rowcount
                dead = conn.execute(
                    "SELECT COUNT(*) FROM stray.turns WHERE state = 'dead'"
                ).fetchone()[0]
            return int(copied) - int(dead)
        finally:
            conn.close()
    finally:
        for fd in locks:
            os.close(fd)


def connect(target: str, path: str, sync: SyncMode) -> sqlite3.Connection:
    """The journal thread's connection to ``target`` (the file, or ``:memory:``): WAL
    mode, the configured sync, this version's schema, and every user's head rebuilt
    (heads are derived data, whatever state the file is in)."""
    conn = sqlite3.connect(target, isolation_level=None, timeout=5.0)
    try:
        mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
        if path != MEMORY_PATH and mode != "wal":
            raise JournalError(f"SQLite did not switch {path} to WAL mode ({mode})")
        conn.execute(f"PRAGMA synchronous={'FULL' if sync == 'full' else 'NORMAL'}")
        # A deleted turn's text is overwritten, not left in a free page: forgetting a
        # user must not leave their words in the file.
        conn.execute("PRAGMA secure_delete=ON")
        with transaction(conn):
            ensure_schema(conn, path)
            conn.execute("UPDATE turns SET is_head = 0 WHERE is_head <> 0")
            conn.execute(
                "UPDATE turns SET is_head = 1 WHERE id IN (SELECT MIN(id) FROM turns"
                f" WHERE state IN {OPEN_STATES} GROUP BY user_id)"
            )
    except BaseException:
        conn.close()
        raise
    return conn


def connect_inline(target: str) -> sqlite3.Connection:
    """The append connection of the caller's thread: fails at once when the file
    is locked (``timeout=0``) and leaves checkpoints to the journal thread's
    connection, which commits after every claim and completion anyway."""
    inline = sqlite3.connect(target, isolation_level=None, timeout=0, check_same_thread=False)
    try:
        inline.execute("PRAGMA synchronous=NORMAL")
        inline.execute("PRAGMA wal_autocheckpoint=0")
    except BaseException:
        inline.close()
        raise
    return inline


def count_open(conn: sqlite3.Connection) -> int:
    row = conn.execute(f"SELECT COUNT(*) FROM turns WHERE state IN {OPEN_STATES}").fetchone()
    return int(row[0])


def due_heads(
    conn: sqlite3.Connection, now: int, limit: int, exclude: frozenset[str]
) -> list[tuple[int, str, str | None, int]]:
    """Up to ``limit`` due pending heads of users not in ``exclude``, oldest first."""
    heads: list[tuple[int, str, str | None, int]] = []
    cursor = conn.execute(CLAIM, (now,))
    try:
        for row in cursor:
            if row[1] in exclude:
                continue
            heads.append((int(row[0]), str(row[1]), row[2], int(row[3])))
            if len(heads) >= limit:
                break
    finally:
        cursor.close()
    return heads


def truncate_wal(conn: sqlite3.Connection, attempts: int = 50) -> bool:
    """Checkpoint the WAL into the file and truncate it to zero bytes, so no older
    page version (a forgotten turn's text) stays in it; retried while another
    connection still reads an older snapshot. Whether it was truncated."""
    for _ in range(attempts):
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if not busy:
            return True
        time.sleep(0.01)
    return False


@dataclasses.dataclass(frozen=True, slots=True)
class DiscardedTurns:
    """What forgetting a user took from the journal."""

    #: Turns not yet written (pending, or given up as dead letters): lost on purpose.
    unwritten: int = 0
    #: Turns already written: only their text, kept a while for recovery, went.
    written: int = 0
    #: Turns being written at that moment (left to finish; normally 0).
    in_progress: int = 0

    def __add__(self, other: DiscardedTurns) -> DiscardedTurns:
        return DiscardedTurns(
            self.unwritten + other.unwritten, self.written + other.written, other.in_progress
        )
