"""The durable turn journal: an accepted turn is on disk before the response phase
that accepted it returns, and stays there until it is written or given up on.

Storage is one SQLite file in WAL mode, one row per turn::

    pending ──claim──▶ in_progress ──complete──▶ done   (payload cleared, pruned later)
       ▲                   │
       └──fail(retry_at)───┤
                           └──────dead──────▶ dead   (payload kept for an operator)

Durability (docs/design/write-journal.md). With ``journal_sync: normal`` (the
default) a commit is written to the WAL without an fsync: when
:meth:`TurnJournal.append` returns the row survives the death of the *process*
(kill -9, an OOM kill), not a power loss before the next checkpoint.
``journal_sync: full`` fsyncs every commit, at the cost of one fsync per accepted
turn on the response path.

Per-user order. A user's turns are written one at a time in acceptance order:
:meth:`TurnJournal.claim` only hands out a user's *head* — their oldest turn that
is pending or in progress (``is_head = 1``, kept in the same transactions that
change states, and recomputed from scratch at every open) — and only while it is
pending and due. So a user never has two turns in flight, a turn waiting for its
retry holds back that user's later turns (not other users'), and different users
are written in parallel. A claim reads only the claimable heads (a partial
index), so its cost does not grow with one user's backlog.

At-least-once, idempotent. ``in_progress`` rows left by a crash go back to
``pending`` at the next start (:meth:`TurnJournal.requeue_in_progress`), so a turn
may be processed twice (never concurrently, never out of its user's order). The
second pass is idempotent: the writer's memory ids are deterministic
(``memory_id(user, text)``), so it upserts the same rows instead of adding copies,
and its facts meet their own first-pass copies (near-identical: no-op) — the
stored facts are the same as with exactly-once processing.

Threading. Every SQLite call runs on the journal's own thread, but the response
path's append, which is first tried on the caller's thread on a second connection
that never waits for a lock (the hop to the journal thread costs more than the
insert); a busy file sends it to the journal thread. One process owns a journal
file at a time (an exclusive ``flock`` on ``<path>.lock``); a second sidecar on the
same file refuses to start.

No turn content ever reaches a log line or ``last_error`` (an exception *type*).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sidecar.errors import JournalError, JournalFull
from sidecar.memory.records.turns import Turn
from sidecar.memory.write.turns.journal_file import (
    CORRUPT,
    INTERRUPTED,
    LOCKS,
    MEMORY_PATH,
    OPEN_STATES,
    PROMOTE,
    ClaimedTurn,
    DiscardedTurns,
    JournalCounts,
    JournalRole,
    SyncMode,
    TurnState,
    busy,
    connect,
    connect_inline,
    count_open,
    decode_turn,
    due_heads,
    encode_turn,
    error_type,
    lock_file,
    transaction,
    truncate_wal,
)

log = logging.getLogger(__name__)


T = TypeVar("T")


class TurnJournal:
    """The durable queue storage; see the module docstring. Open it before use
    (:meth:`open`), close it when done; all methods but the properties are
    coroutines and run their SQLite work on the journal's own thread."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_pending: int,
        sync: SyncMode = "normal",
        clock: Callable[[], float] = time.time,
        allow_memory: bool = False,
        role: JournalRole = "owner",
    ) -> None:
        self._path = str(path)
        if not self._path:
            raise JournalError("journal path is empty")
        if self._path == MEMORY_PATH and not allow_memory:
            raise JournalError("an in-memory journal is not durable; give a file path")
        if max_pending < 1:
            raise JournalError("max_pending must be at least 1")
        self._max_pending = max_pending
        self._sync = sync
        self._role = role
        self._clock = clock
        self._executor: ThreadPoolExecutor | None = None
        # Touched only on the journal thread (the connection is bound to it).
        self._conn: sqlite3.Connection | None = None
        # The caller's thread's append connection (see the module docstring); None
        # where appends always go to the journal thread.
        self._inline: sqlite3.Connection | None = None
        self._lock_fds: list[int] = []
        # Unwritten turns (pending + in progress); changed under ``_count_lock``: by
        # the journal thread, and by appends on the caller's thread.
        self._open = 0
        self._count_lock = threading.Lock()
        # Turns retired by the journal thread's open transaction (None outside one):
        # they leave ``_open`` when it commits, never when it rolls back.
        self._retired: int | None = None

    # -- properties -----------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._path

    @property
    def role(self) -> JournalRole:
        return self._role

    @property
    def shared(self) -> bool:
        """Whether another process changes this file too (appender or claimer)."""
        return self._role != "owner"

    @property
    def is_open(self) -> bool:
        return self._executor is not None

    @property
    def open_count(self) -> int:
        """Turns accepted and not yet written (pending + in progress); with two
        processes on the file, as of the last :meth:`counts` plus this one's changes."""
        return max(0, self._open)

    @property
    def max_pending(self) -> int:
        return self._max_pending

    def now_ms(self) -> int:
        """The journal's clock (epoch milliseconds): due times are compared to it."""
        return int(self._clock() * 1000)

    # -- lifecycle ------------------------------------------------------------------

    async def open(self) -> None:
        """Create or open the file, take the process lock, check the schema."""
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal")
        try:
            await self._call("open", self._open_sync)
        except BaseException:
            await self._shutdown()
            raise

    async def close(self) -> None:
        """Close SQLite and release the process lock (idempotent)."""
        await self._shutdown()

    async def _shutdown(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            loop = asyncio.get_running_loop()
            # Anything still queued on the thread finishes first (FIFO); then the
            # connection is closed there, where it was opened.
            await loop.run_in_executor(executor, self._close_sync)
            executor.shutdown(wait=True)

    def _open_sync(self) -> None:
        target = self._path
        if self._path != MEMORY_PATH:
            path = Path(self._path).expanduser()
            target = str(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            for suffix in LOCKS[self._role]:
                self._lock_fds.append(lock_file(path, suffix))
            # The journal holds conversation text: owner-only, like the -wal/-shm
            # files SQLite creates with the database file's mode.
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        conn: sqlite3.Connection | None = None
        try:
            conn = connect(target, self._path, self._sync)
            self._open = count_open(conn)
            if self._sync == "normal" and self._path != MEMORY_PATH:
                self._inline = connect_inline(target)
        except BaseException:
            if conn is not None:
                conn.close()
            self._release_lock()
            raise
        self._conn = conn

    def _close_sync(self) -> None:
        inline, self._inline = self._inline, None
        if inline is not None:
            inline.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        self._release_lock()

    def _release_lock(self) -> None:
        fds, self._lock_fds = self._lock_fds, []
        for fd in fds:
            os.close(fd)  # releases the flock

    # -- the one thread boundary ----------------------------------------------------

    async def _call(self, operation: str, fn: Callable[..., T], *args: Any) -> T:
        executor = self._executor
        if executor is None:
            raise JournalError(f"journal {operation}: the journal is not open")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(executor, fn, *args)
        except (sqlite3.Error, OSError) as exc:
            # SQLite's and the OS's messages name the failure ("database or disk is
            # full", a path), never bound values: safe to carry.
            raise JournalError(f"journal {operation} failed: {type(exc).__name__}: {exc}") from exc

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise JournalError("the journal is not open")
        return self._conn

    # -- operations -----------------------------------------------------------------

    async def append(self, turn: Turn) -> int:
        """Store ``turn`` as pending; committed before this returns. Its id.

        Raises :class:`JournalFull` when ``max_pending`` turns are unwritten.
        """
        if self._inline is not None and self._executor is not None:
            try:
                row_id = self._append_inline(self._inline, turn)
            except (sqlite3.Error, OSError) as exc:
                raise JournalError(f"journal append failed: {type(exc).__name__}: {exc}") from exc
            if row_id is not None:
                return row_id
        return await self._call("append", self._append_sync, turn)

    def _append_inline(self, conn: sqlite3.Connection, turn: Turn) -> int | None:
        """The append on the caller's thread; None when the file or the count is
        busy (the caller then appends on the journal thread)."""
        if not self._count_lock.acquire(blocking=False):
            return None
        try:
            try:
                with transaction(conn):
                    row_id = self._insert(conn, turn)
            except sqlite3.OperationalError as exc:
                if busy(exc):  # at BEGIN: nothing was written
                    return None
                raise
            self._open += 1
            return row_id
        finally:
            self._count_lock.release()

    def _append_sync(self, turn: Turn) -> int:
        conn = self._connection()
        # IMMEDIATE: the head test reads the file as of the write lock, even while
        # another process settles this user's turns.
        with self._count_lock:
            with transaction(conn):
                row_id = self._insert(conn, turn)
            self._open += 1
        return row_id

    def _insert(self, conn: sqlite3.Connection, turn: Turn) -> int:
        """Insert ``turn`` as pending, inside the caller's transaction."""
        if self._open >= self._max_pending:
            raise JournalFull(f"the journal holds {self._open} unwritten turns")
        now = self.now_ms()
        cursor = conn.execute(
            "INSERT INTO turns (user_id, payload, state, is_head, attempts, next_attempt_at,"
            " created_at, updated_at) VALUES (?1, ?2, 'pending', NOT EXISTS (SELECT 1 FROM"
            f" turns WHERE user_id = ?1 AND state IN {OPEN_STATES}), 0, ?3, ?3, ?3)",
            (turn.user_id, encode_turn(turn), now),
        )
        row_id = cursor.lastrowid
        assert row_id is not None
        return row_id

    def _count(self, delta: int) -> None:
        """Change the running count of unwritten turns."""
        with self._count_lock:
            self._open += delta

    async def claim(self, limit: int, exclude_users: Collection[str] = ()) -> list[ClaimedTurn]:
        """Up to ``limit`` due turns, oldest first, now ``in_progress`` — each the
        oldest unwritten turn of its user (so at most one per user, and none for a
        user whose head is in progress or waiting for its retry). ``exclude_users``:
        users to skip besides (those this process is writing)."""
        if limit < 1:
            return []
        return await self._call("claim", self._claim_sync, limit, frozenset(exclude_users))

    def _claim_sync(self, limit: int, exclude: frozenset[str]) -> list[ClaimedTurn]:
        conn = self._connection()
        now = self.now_ms()
        # Most claims find nothing (an idle worker woken by another's turn, a poll):
        # look without the write lock first. A head that appears after the look is
        # claimed at the next wake-up, which its append causes.
        if not due_heads(conn, now, 1, exclude):
            return []
        with self._retiring(conn):
            return self._claim_heads(conn, now, limit, exclude)

    def _claim_heads(
        self, conn: sqlite3.Connection, now: int, limit: int, exclude: frozenset[str]
    ) -> list[ClaimedTurn]:
        """Claim up to ``limit`` due heads, inside the caller's transaction."""
        claimed: list[ClaimedTurn] = []
        retired = True
        while retired and len(claimed) < limit:  # a dead-lettered head promotes the next
            retired = False
            for row_id, user_id, payload, attempts in due_heads(
                conn, now, limit - len(claimed), exclude
            ):
                try:
                    if payload is None:
                        raise ValueError("pending turn without a payload")
                    turn = decode_turn(payload)
                except ValueError:
                    self._retire(conn, row_id, user_id, TurnState.DEAD, CORRUPT, now)
                    log.error("journal turn %d cannot be decoded; moved to dead letters", row_id)
                    retired = True
                    continue
                conn.execute(
                    "UPDATE turns SET state = 'in_progress', attempts = attempts + 1,"
                    " updated_at = ? WHERE id = ?",
                    (now, row_id),
                )
                claimed.append(ClaimedTurn(row_id, turn, attempts + 1))
        return claimed

    async def complete(self, turn_id: int) -> bool:
        """``in_progress`` -> ``done`` (the payload is dropped). False if the row was
        not in progress."""
        return await self._call("complete", self._complete_sync, turn_id)

    def _complete_sync(self, turn_id: int) -> bool:
        conn = self._connection()
        with self._retiring(conn):
            return self._settle(conn, turn_id, TurnState.DONE, None)

    async def complete_and_claim(
        self, turn_id: int, limit: int, exclude_users: Collection[str] = ()
    ) -> tuple[bool, list[ClaimedTurn]]:
        """:meth:`complete`, then :meth:`claim`, in one transaction and one trip to
        the journal's thread: a worker that has written a turn looks for its next
        one (often the same user's, which the completion made the head) without a
        second hop. Both happen or neither does."""
        return await self._call(
            "complete", self._complete_claim_sync, turn_id, limit, frozenset(exclude_users)
        )

    def _complete_claim_sync(
        self, turn_id: int, limit: int, exclude: frozenset[str]
    ) -> tuple[bool, list[ClaimedTurn]]:
        conn = self._connection()
        with self._retiring(conn):
            done = self._settle(conn, turn_id, TurnState.DONE, None)
            claimed = self._claim_heads(conn, self.now_ms(), limit, exclude) if limit > 0 else []
        return done, claimed

    async def fail(self, turn_id: int, error: str, retry_at_ms: int) -> bool:
        """``in_progress`` -> ``pending``, due again at ``retry_at_ms`` (journal
        clock); ``error`` is an exception type name."""
        return await self._call("fail", self._fail_sync, turn_id, error_type(error), retry_at_ms)

    def _fail_sync(self, turn_id: int, error: str, retry_at_ms: int) -> bool:
        conn = self._connection()
        with transaction(conn):
            cursor = conn.execute(
                "UPDATE turns SET state = 'pending', next_attempt_at = ?, last_error = ?,"
                " updated_at = ? WHERE id = ? AND state = 'in_progress'",
                (retry_at_ms, error, self.now_ms(), turn_id),
            )
        return cursor.rowcount == 1

    async def dead(self, turn_id: int, error: str) -> bool:
        """``in_progress`` -> ``dead`` (kept, with its payload, for an operator)."""
        return await self._call("dead", self._dead_sync, turn_id, error_type(error))

    def _dead_sync(self, turn_id: int, error: str) -> bool:
        conn = self._connection()
        with self._retiring(conn):
            return self._settle(conn, turn_id, TurnState.DEAD, error)

    def _settle(
        self, conn: sqlite3.Connection, turn_id: int, state: TurnState, error: str | None
    ) -> bool:
        row = conn.execute(
            "SELECT user_id FROM turns WHERE id = ? AND state = 'in_progress'", (turn_id,)
        ).fetchone()
        if row is None:
            return False
        self._retire(conn, turn_id, str(row[0]), state, error, self.now_ms())
        return True

    def _retire(
        self,
        conn: sqlite3.Connection,
        turn_id: int,
        user_id: str,
        state: TurnState,
        error: str | None,
        now: int,
    ) -> None:
        """An unwritten turn becomes done (payload dropped) or dead; the user's next
        unwritten turn becomes their head. Inside the caller's transaction."""
        conn.execute(
            "UPDATE turns SET state = ?, is_head = 0, last_error = ?, updated_at = ?,"
            " payload = CASE WHEN ? = 'done' THEN NULL ELSE payload END WHERE id = ?",
            (state.value, error, now, state.value, turn_id),
        )
        conn.execute(PROMOTE, (user_id,))
        if self._retired is None:
            raise RuntimeError("_retire outside _retiring")
        self._retired += 1

    @contextlib.contextmanager
    def _retiring(self, conn: sqlite3.Connection) -> Iterator[None]:
        """A write transaction that may retire turns (:meth:`_retire`): they leave the
        count of unwritten turns once it commits; a rollback leaves the count as the
        file has it (the caller retries the whole transaction)."""
        self._retired = 0
        try:
            with transaction(conn):
                yield
            self._count(-self._retired)
        finally:
            self._retired = None

    async def release(self, turn_ids: Collection[int] | None = None) -> int:
        """``in_progress`` -> ``pending`` without counting the attempt (a graceful
        shutdown interrupted them): ``turn_ids``, or every turn in progress (only for
        the process that claims from this file, once none of its workers is writing).
        The number released."""
        ids = None if turn_ids is None else tuple(turn_ids)
        return await self._call("release", self._release_sync, ids)

    def _release_sync(self, turn_ids: tuple[int, ...] | None) -> int:
        conn = self._connection()
        now = self.now_ms()
        release = (
            "UPDATE turns SET state = 'pending', attempts = MAX(attempts - 1, 0),"
            " next_attempt_at = ?, updated_at = ? WHERE state = 'in_progress'"
        )
        with transaction(conn):
            if turn_ids is None:
                return int(conn.execute(release, (now, now)).rowcount)
            released = 0
            for turn_id in turn_ids:
                released += conn.execute(release + " AND id = ?", (now, now, turn_id)).rowcount
        return released

    async def requeue_in_progress(self, max_attempts: int) -> tuple[int, int]:
        """At start-up: turns a crash left ``in_progress`` go back to ``pending``
        (at-least-once) — except those that were already on their last attempt,
        which go to ``dead`` (a turn that kills the process must not loop forever).
        Returns ``(requeued, dead)``."""
        return await self._call("requeue", self._requeue_sync, max_attempts)

    def _requeue_sync(self, max_attempts: int) -> tuple[int, int]:
        conn = self._connection()
        now = self.now_ms()
        with self._retiring(conn):
            doomed = conn.execute(
                "SELECT id, user_id FROM turns WHERE state = 'in_progress' AND attempts >= ?",
                (max_attempts,),
            ).fetchall()
            for turn_id, user_id in doomed:
                self._retire(conn, int(turn_id), str(user_id), TurnState.DEAD, INTERRUPTED, now)
            requeued = conn.execute(
                "UPDATE turns SET state = 'pending', next_attempt_at = ?, updated_at = ?"
                " WHERE state = 'in_progress'",
                (now, now),
            ).rowcount
        return requeued, len(doomed)

    async def discard_user(self, user_id: str) -> DiscardedTurns:
        """Forget a user's turns: delete their pending, dead and done rows (their
        conversation text with them). A turn being written right now is left to
        finish."""
        return await self._call("discard_user", self._discard_user_sync, user_id)

    def _discard_user_sync(self, user_id: str) -> DiscardedTurns:
        conn = self._connection()
        with transaction(conn):
            pending, done = conn.execute(
                "SELECT COALESCE(SUM(state = 'pending'), 0), COALESCE(SUM(state = 'done'), 0)"
                " FROM turns WHERE user_id = ?",
                (user_id,),
            ).fetchone()
            # An in-progress row is its user's head; with it gone nothing is left to
            # promote, so the heads stay consistent.
            deleted = conn.execute(
                "DELETE FROM turns WHERE user_id = ? AND state <> 'in_progress'", (user_id,)
            ).rowcount
            in_progress = conn.execute(
                "SELECT COUNT(*) FROM turns WHERE user_id = ? AND state = 'in_progress'",
                (user_id,),
            ).fetchone()[0]
        self._count(-int(pending))
        if deleted and not truncate_wal(conn):
            log.warning("forget: the journal's WAL is still read by another connection")
        return DiscardedTurns(int(deleted) - int(done), int(done), int(in_progress))

    async def truncate_wal(self) -> bool:
        """Checkpoint the WAL into the database file and truncate it, so that turn
        text dropped from the database (written turns lose it, ``secure_delete``
        zeroes it) is no longer in the WAL's older page images either: after a
        memory is deleted. False when another connection still reads the WAL."""
        return await self._call("truncate_wal", lambda: truncate_wal(self._connection()))

    async def counts(self) -> JournalCounts:
        """Rows per state and the oldest unwritten turn's time."""
        return await self._call("counts", self._counts_sync)

    def _counts_sync(self) -> JournalCounts:
        conn = self._connection()
        by_state = {
            str(state): int(n)
            for state, n in conn.execute("SELECT state, COUNT(*) FROM turns GROUP BY state")
        }
        # Acceptance order is id order: the oldest unwritten turn has the lowest id.
        oldest = conn.execute(
            "SELECT created_at FROM turns WHERE id = (SELECT MIN(m) FROM ("
            " SELECT MIN(id) AS m FROM turns WHERE state = 'pending'"
            " UNION ALL SELECT MIN(id) FROM turns WHERE state = 'in_progress'))"
        ).fetchone()
        oldest = None if oldest is None else oldest[0]
        counts = JournalCounts(
            pending=by_state.get(TurnState.PENDING, 0),
            in_progress=by_state.get(TurnState.IN_PROGRESS, 0),
            done=by_state.get(TurnState.DONE, 0),
            dead=by_state.get(TurnState.DEAD, 0),
            oldest_open_ms=None if oldest is None else int(oldest),
        )
        with self._count_lock:
            self._open = counts.open  # re-synchronise the running count
        return counts

    async def prune(self, keep_done: int, older_than_s: float | None = None) -> int:
        """Delete ``done`` rows beyond the newest ``keep_done``, and (when given)
        those finished more than ``older_than_s`` ago. The number deleted. Pending,
        in-progress and dead rows are never pruned."""
        return await self._call("prune", self._prune_sync, max(0, keep_done), older_than_s)

    def _prune_sync(self, keep_done: int, older_than_s: float | None) -> int:
        conn = self._connection()
        with transaction(conn):
            deleted = conn.execute(
                "DELETE FROM turns WHERE state = 'done' AND id <= COALESCE("
                "(SELECT id FROM turns WHERE state = 'done' ORDER BY id DESC LIMIT 1 OFFSET ?),"
                " -1)",
                (keep_done,),
            ).rowcount
            if older_than_s is not None:
                cutoff = self.now_ms() - int(older_than_s * 1000)
                deleted += conn.execute(
                    "DELETE FROM turns WHERE state = 'done' AND updated_at < ?", (cutoff,)
                ).rowcount
        return deleted
