"""The durable write queue between the response path and the write pipeline.

``submit`` stores the turn in the :class:`~sidecar.memory.write.turns.journal.TurnJournal`
(one SQLite insert, committed before it returns: on the caller's thread while the
file is free, else on the journal's thread) and wakes one idle worker; the
response path awaits only that. When ``max_pending`` turns are
unwritten the turn is shed and counted (``memory_sidecar_turns{outcome="shed"}``).

``workers`` tasks claim turns from the journal — each user's oldest unwritten
turn only, so a user's turns are written one at a time in acceptance order while
different users' turns are written in parallel — and hand each to
``writer.write_turn``. A written turn is recorded done and the worker's next turn
claimed in one journal call (one transaction, one trip to its thread). A failure
is retried with exponential backoff (with jitter) up to ``max_attempts``; then the
turn goes to the dead letters (``outcome="dead_letter"``). Any exception counts — a
:class:`SidecarError` is an expected failure, anything else a bug, logged with its
type and code location only.

At start-up the turns a crash left in progress are queued again (at-least-once;
the writer's deterministic memory ids make a second pass idempotent). ``drain``
stops accepting and waits for the journal to empty, up to a deadline: what is left
stays in the journal for the next start. ``close`` stops the workers (turns they
were writing go back to pending) and closes the journal.

With ``write_queue.own_process`` the two halves run in two processes over one
journal file: the sidecar worker's queue is the ``appender`` (it accepts turns and
keeps the gauges; ``on_accept`` tells its writer there is work), the writer's is the
``claimer`` (its workers write the turns; :meth:`WriteQueue.wake` is how it hears of
new ones, besides polling every ``poll_interval_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from sidecar.config import WriteQueueConfig
from sidecar.errors import EmbeddingError, JournalError, JournalFull, SidecarError, StoreError
from sidecar.logs import REQUEST_ID
from sidecar.memory.records.turns import Turn
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.memory.write.turns.journal_file import ClaimedTurn, JournalRole
from sidecar.memory.write.turns.writer import WriteResult
from sidecar.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds between refreshes of the journal gauges (depth, oldest age, dead letters).
GAUGE_INTERVAL_S = 1.0
#: Seconds between prunings of finished rows.
PRUNE_INTERVAL_S = 60.0


class TurnWriter(Protocol):
    async def write_turn(self, turn: Turn) -> WriteResult: ...


def backoff_delay(
    attempt: int, *, base_s: float, max_s: float, jitter: float, rng: random.Random
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1 = the first):
    ``base_s * 2**(attempt - 1)`` capped at ``max_s``, shortened by a random
    fraction of at most ``jitter`` (so many failing turns spread out, and a delay
    never exceeds the cap)."""
    exponent = min(max(attempt, 1) - 1, 62)
    delay = min(max_s, base_s * float(2**exponent))
    return delay * (1.0 - jitter * rng.random())


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    """Until ``event`` is set or ``timeout_s`` passes. (Not ``asyncio.wait_for``: on
    Python 3.11 it swallows a cancellation that arrives as the event is set, and a
    worker that misses its cancellation never stops.)"""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()


class Doorbell:
    """Wakes one waiting worker per ring (an ``asyncio.Event`` wakes them all, and all
    but one would claim nothing). A ring while nobody waits is kept, up to
    ``keep`` of them, and makes the next :meth:`wait` return at once: a turn
    accepted while a worker was claiming is not slept through."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._kept = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def ring(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._kept = min(self._keep, self._kept + 1)

    async def wait(self, timeout_s: float) -> None:
        """Until a ring or ``timeout_s`` passes."""
        if self._kept:
            self._kept -= 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await waiter
        finally:
            # Timed out or cancelled (a ring pops its waiter itself): never left
            # behind, or an idle queue's polls would pile them up.
            if not waiter.done():
                waiter.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)

    @property
    def waiting(self) -> int:
        """Workers waiting for a ring."""
        return len(self._waiters)


def _origin(exc: BaseException) -> str:
    """``file.py:123`` of the innermost frame: where a bug raised, without its message
    (which could quote content)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename.rsplit('/', 1)[-1]}:{last.lineno}"


class WriteQueue:
    """See the module docstring. ``journal`` defaults to one at
    ``config.journal_path``; ``rng`` draws the retry jitter (seed it for a
    deterministic schedule). Nothing touches the disk before :meth:`start`."""

    def __init__(
        self,
        writer: TurnWriter,
        config: WriteQueueConfig,
        metrics: Metrics,
        *,
        journal: TurnJournal | None = None,
        rng: random.Random | None = None,
        role: JournalRole = "owner",
        on_accept: Callable[[], None] | None = None,
        bell: Doorbell | None = None,
    ) -> None:
        self._writer = writer
        self._config = config
        self._metrics = metrics
        self._journal = journal or TurnJournal(
            config.journal_path,
            max_pending=config.max_pending,
            sync=config.journal_sync,
            role=role,
        )
        self._on_accept = on_accept
        self._rng = rng or random.Random()
        self._workers: list[asyncio.Task[None]] = []
        self._maintenance: asyncio.Task[None] | None = None
        self._accepting = False
        # Rung by submit (and by another process's submit, over the relay, when the
        # bell is shared with a relay client): one idle worker looks for work. A
        # worker that settles a turn looks again itself.
        self._bell = bell or Doorbell(keep=config.workers)
        # Set whenever a turn is settled: wait_idle re-checks the depth.
        self._progress = asyncio.Event()
        # Journal id -> user id of the turns this process is writing now.
        self._in_flight: dict[int, str] = {}
        # Appends on their way to the journal (not idle while any is).
        self._appending = 0

    @property
    def journal(self) -> TurnJournal:
        return self._journal

    @property
    def writes(self) -> bool:
        """Whether this process writes the turns (not only accepts them)."""
        return self._journal.role != "appender"

    @property
    def accepts(self) -> bool:
        """Whether this process accepts turns (not only writes them)."""
        return self._journal.role != "claimer"

    def wake(self) -> None:
        """Another process accepted a turn: an idle worker looks for work now."""
        self._bell.ring()

    @property
    def depth(self) -> int:
        """Turns accepted and not yet written (pending + in progress)."""
        return self._journal.open_count if self._journal.is_open else 0

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        """Open the journal, queue again what a crash left in progress, start the
        workers; then accept turns."""
        if self._maintenance is not None:
            return
        await self._journal.open()
        try:
            # Only the process that writes turns may requeue them: while it runs, an
            # in-progress turn is its own.
            requeued, dead = (
                await self._journal.requeue_in_progress(self._config.max_attempts)
                if self.writes
                else (0, 0)
            )
            counts = await self._journal.counts()
        except BaseException:
            await self._journal.close()
            raise
        if requeued:
            self._metrics.turns.labels(outcome="requeued").inc(requeued)
        if dead:
            self._metrics.turns.labels(outcome="dead_letter").inc(dead)
        self._set_gauges(counts.open, counts.oldest_open_ms, counts.dead)
        log.info(
            "write journal open: %d turns to write (%d were in progress when the last run "
            "ended, %d of them given up after %d attempts), %d dead letters",
            counts.open,
            requeued + dead,
            dead,
            self._config.max_attempts,
            counts.dead,
        )
        self._accepting = self.accepts
        if self.writes:
            self._workers = [
                asyncio.create_task(self._work(), name=f"write-worker-{i}")
                for i in range(self._config.workers)
            ]
        self._maintenance = asyncio.create_task(self._maintain(), name="write-journal-upkeep")

    async def submit(self, turn: Turn) -> bool:
        """Store ``turn`` durably for writing; True once it is in the journal. False
        (and counted) when shed, shutting down, or the journal failed. The append
        finishes even if the caller is cancelled meanwhile."""
        if not self._accepting:
            self._metrics.turns.labels(outcome="rejected_shutdown").inc()
            return False
        return await asyncio.shield(self._append(turn))

    async def _append(self, turn: Turn) -> bool:
        started = time.perf_counter()
        self._appending += 1
        try:
            await self._journal.append(turn)
        except JournalFull:
            self._metrics.turns.labels(outcome="shed").inc()
            log.warning(
                "write journal full (%d unwritten turns); turn shed request_id=%s",
                self._journal.max_pending,
                turn.request_id,
            )
            return False
        except JournalError as exc:
            self._metrics.turns.labels(outcome="journal_error").inc()
            log.error("write journal append failed: %s request_id=%s", exc, turn.request_id)
            return False
        finally:
            self._appending -= 1
            self._progress.set()
            self._metrics.journal_seconds.labels(operation="append").observe(
                time.perf_counter() - started
            )
        self._metrics.turns.labels(outcome="accepted").inc()
        self._metrics.queue_depth.set(self.depth)
        self._bell.ring()
        if self._on_accept is not None:
            self._on_accept()
        return True

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every accepted turn is written or given up (True), or the
        timeout passes (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        # With another process on the journal its changes are read from the file.
        poll_s = 0.05 if self._journal.shared else 0.25
        while True:
            self._progress.clear()
            if self._journal.shared and self._journal.is_open:
                with contextlib.suppress(JournalError):  # then as of the last read
                    await self._journal.counts()
            # In-flight turns count until their worker has finished with them (the
            # journal may already say done while the worker still counts the turn).
            if self.depth == 0 and self._appending == 0 and not self._in_flight:
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            # Woken by every settled turn; the cap re-checks after anything missed.
            await _wait(self._progress, min(remaining, poll_s))

    async def drain(self, timeout_s: float | None = None) -> bool:
        """Stop accepting; wait for the journal to empty (True) or the deadline —
        then what is left stays in the journal for the next start (False)."""
        self._accepting = False
        if not self.writes:
            return True  # what was accepted is in the journal, for the writer
        deadline = self._config.drain_timeout_s if timeout_s is None else timeout_s
        if await self.wait_idle(deadline):
            return True
        log.warning(
            "drain deadline passed: %d turns stay in the write journal for the next start",
            self.depth,
        )
        return False

    async def close(self) -> None:
        """Stop the workers (the turns they were writing go back to pending) and
        close the journal."""
        self._accepting = False
        tasks = [*self._workers, *([self._maintenance] if self._maintenance else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._workers = []
        self._maintenance = None
        if not self._journal.is_open:
            return
        if self.writes:
            # Every turn in progress is this process's (one claimer per file): those
            # its workers were writing, and one a completion had just claimed when
            # its worker was cancelled.
            try:
                released = await self._journal.release()
            except JournalError as exc:  # they are requeued at the next start anyway
                log.warning("releasing interrupted turns failed: %s", type(exc).__name__)
            else:
                if released:
                    log.info("%d turns being written were put back for the next start", released)
        await self._journal.close()

    # -- workers --------------------------------------------------------------------

    async def _work(self) -> None:
        failures = 0
        # What the last completion claimed (it looked for work, so an empty list
        # means: wait for a ring); None: claim anew.
        claimed: list[ClaimedTurn] | None = None
        while True:
            if claimed is None:
                try:
                    claimed = await self._journal.claim(1, self._in_flight.values())
                except JournalError as exc:
                    failures += 1
                    log.error("write journal claim failed: %s", exc)
                    await asyncio.sleep(self._retry_delay(failures))
                    continue
                failures = 0
            if not claimed:
                # A turn accepted after that look rings (a ring nobody waits for is
                # kept): it is not slept through.
                await self._bell.wait(self._config.poll_interval_s)
                claimed = None
                continue
            item, *rest = claimed
            after = await self._process(item)
            claimed = rest + after if after is not None else (rest or None)

    async def _process(self, item: ClaimedTurn) -> list[ClaimedTurn] | None:
        """Write ``item`` and record the outcome. Written: what its completion claimed
        in the same journal call (maybe nothing); not written: None."""
        self._in_flight[item.id] = item.turn.user_id
        # The turn's log lines carry the id of the request it came from.
        token = REQUEST_ID.set(item.turn.request_id or f"journal-{item.id}")
        claimed: list[ClaimedTurn] | None = None
        try:
            try:
                await self._writer.write_turn(item.turn)
            except Exception as exc:  # every failure is retried, then dead-lettered
                await self._failed(item, exc)
            else:
                # The user's next turn is claimable once this one is done: claim it
                # (or another user's) with the completion. Users the other workers
                # are writing are skipped, as in every claim.
                others = [user for turn_id, user in self._in_flight.items() if turn_id != item.id]
                _, claimed = await self._settle(
                    "complete", lambda: self._journal.complete_and_claim(item.id, 1, others)
                )
                self._metrics.turns.labels(outcome="written").inc()
        finally:
            REQUEST_ID.reset(token)
            self._in_flight.pop(item.id, None)
            self._metrics.queue_depth.set(self.depth)
            self._progress.set()
        return claimed

    async def _failed(self, item: ClaimedTurn, exc: Exception) -> None:
        kind = type(exc).__name__
        # A SidecarError is an expected failure (store down, LLM timeout); anything
        # else is a bug: say where, never what (a message could quote content).
        where = "" if isinstance(exc, SidecarError) else f" (bug at {_origin(exc)})"
        attempts = self._config.max_attempts
        # The store or the model being down is not the turn's fault: it waits (with
        # capped backoff) for as long as the outage lasts instead of being given up.
        outage = isinstance(exc, StoreError | EmbeddingError)
        if item.attempt >= attempts and not outage:
            await self._settle("dead", lambda: self._journal.dead(item.id, kind))
            self._metrics.turns.labels(outcome="dead_letter").inc()
            self._metrics.dead_letters.inc()
            log.error(
                "writing turn failed %d times, last: %s%s; moved to dead letters "
                "journal_id=%d request_id=%s",
                item.attempt,
                kind,
                where,
                item.id,
                item.turn.request_id,
            )
            return
        delay = self._retry_delay(item.attempt)
        retry_at = self._journal.now_ms() + int(delay * 1000)
        await self._settle("fail", lambda: self._journal.fail(item.id, kind, retry_at))
        self._metrics.turns.labels(outcome="retried").inc()
        log.warning(
            "writing turn failed (attempt %d of %d): %s%s; retry in %.2fs "
            "journal_id=%d request_id=%s",
            item.attempt,
            attempts,
            kind,
            where,
            delay,
            item.id,
            item.turn.request_id,
        )

    def _retry_delay(self, attempt: int) -> float:
        return backoff_delay(
            attempt,
            base_s=self._config.retry_base_s,
            max_s=self._config.retry_max_s,
            jitter=self._config.retry_jitter,
            rng=self._rng,
        )

    async def _settle(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        """Record a turn's outcome, retrying while the journal fails: until it is
        recorded the turn stays in progress (and its user's next turns wait)."""
        failures = 0
        while True:
            started = time.perf_counter()
            try:
                return await call()
            except JournalError as exc:
                failures += 1
                log.error("write journal %s failed: %s; retrying", operation, exc)
                await asyncio.sleep(self._retry_delay(failures))
            finally:
                self._metrics.journal_seconds.labels(operation=operation).observe(
                    time.perf_counter() - started
                )

    # -- upkeep ---------------------------------------------------------------------

    async def _maintain(self) -> None:
        last_prune = float("-inf")  # prune soon after start, then every interval
        while True:
            await asyncio.sleep(GAUGE_INTERVAL_S)
            try:
                counts = await self._journal.counts()
                self._set_gauges(counts.open, counts.oldest_open_ms, counts.dead)
                if self.writes and time.monotonic() - last_prune >= PRUNE_INTERVAL_S:
                    last_prune = time.monotonic()
                    await self._journal.prune(self._config.keep_done)
            except JournalError as exc:
                log.warning("write journal upkeep failed: %s", exc)

    def _set_gauges(self, depth: int, oldest_ms: int | None, dead: int) -> None:
        self._metrics.queue_depth.set(depth)
        age = 0.0 if oldest_ms is None else max(0.0, (self._journal.now_ms() - oldest_ms) / 1000)
        self._metrics.queue_oldest.set(age)
        self._metrics.dead_letters.set(dead)
