"""The durable write queue with fake writers: nothing accepted is lost or written
twice, a user's turns are written one at a time in submission order while users
proceed in parallel, failures are retried on a backoff schedule and end in the
dead letters, drain/close keep what they cannot finish, and the metrics move."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import sqlite3
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import WriteQueueConfig
from sidecar.errors import InvalidInput, StoreError
from sidecar.memory.records.turns import Turn
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.memory.write.turns.queue import Doorbell, WriteQueue, backoff_delay
from sidecar.memory.write.turns.writer import WriteResult
from sidecar.metrics import Metrics


class FakeWriter:
    """Records every call; checks that no user ever has two turns in flight."""

    def __init__(
        self,
        *,
        delay_s: float = 0.0,
        fail: Callable[[Turn, int], BaseException | None] | None = None,
    ) -> None:
        self.delay_s = delay_s
        self.fail = fail
        self.calls: list[str] = []  # request ids, in call order
        self.written: defaultdict[str, list[str]] = defaultdict(list)  # user -> ids
        self.active: set[str] = set()
        self.overlaps = 0
        self.max_parallel = 0
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def write_turn(self, turn: Turn) -> WriteResult:
        if turn.user_id in self.active:
            self.overlaps += 1
        self.active.add(turn.user_id)
        self.max_parallel = max(self.max_parallel, len(self.active))
        self.entered.set()
        try:
            self.calls.append(turn.request_id)
            if self.gate is not None:
                await self.gate.wait()
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.fail is not None:
                error = self.fail(turn, self.calls.count(turn.request_id))
                if error is not None:
                    raise error
            self.written[turn.user_id].append(turn.request_id)
            return WriteResult(stored=1)
        finally:
            self.active.discard(turn.user_id)


def make_turn(user: str, n: int, text: str = "") -> Turn:
    return Turn(
        user_id=user,
        user_text=text or f"My locker number is {n}.",
        assistant_text="Noted.",
        created_at=1_700_000_000_000 + n,
        request_id=f"{user}/{n}",
    )


def config(**overrides: Any) -> WriteQueueConfig:
    values: dict[str, Any] = {
        "workers": 4,
        "poll_interval_s": 0.02,
        "retry_base_s": 0.01,
        "retry_max_s": 0.05,
        "max_attempts": 3,
        "drain_timeout_s": 5,
    }
    values.update(overrides)
    return WriteQueueConfig(**values)


PENDING_RETRY = "SELECT attempts, next_attempt_at FROM turns WHERE state = 'pending'"


class FrozenClock:
    """A wall clock that only moves when told (seconds)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def eventually(
    read: Callable[[], list[tuple[Any, ...]]], attempts: int, timeout_s: float = 5.0
) -> list[tuple[Any, ...]]:
    """``read()`` once its first row's first column equals ``attempts``."""
    for _ in range(int(timeout_s / 0.005)):
        rows = read()
        if rows and rows[0][0] == attempts:
            return rows
        await asyncio.sleep(0.005)
    raise AssertionError(f"attempt {attempts} never recorded")


def turns_metric(metrics: Metrics, outcome: str) -> float:
    return metrics.value("memory_sidecar_turns_total", {"outcome": outcome})


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "journal.sqlite3"
        self.queues: list[WriteQueue] = []

    async def start(
        self,
        writer: FakeWriter,
        *,
        rng: random.Random | None = None,
        journal: TurnJournal | None = None,
        **overrides: Any,
    ) -> tuple[WriteQueue, Metrics]:
        cfg = config(journal_path=str(self.path), **overrides)
        metrics = Metrics()
        queue = WriteQueue(writer, cfg, metrics, rng=rng, journal=journal)
        await queue.start()
        self.queues.append(queue)
        return queue, metrics

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.path)) as conn:
            return conn.execute(sql).fetchall()


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    made = Harness(tmp_path)
    yield made
    for queue in made.queues:
        await queue.close()


async def test_backoff_is_exponential_capped_and_jittered() -> None:
    def schedule(seed: int) -> list[float]:
        rng = random.Random(seed)
        return [backoff_delay(a, base_s=0.5, max_s=60, jitter=0.2, rng=rng) for a in range(1, 10)]

    delays = schedule(7)
    assert delays == schedule(7)  # seeded: deterministic
    assert delays != schedule(8)
    for attempt, delay in enumerate(delays, start=1):
        nominal = min(60.0, 0.5 * 2 ** (attempt - 1))
        assert nominal * 0.8 <= delay <= nominal
    no_jitter = [
        backoff_delay(a, base_s=0.5, max_s=60, jitter=0, rng=random.Random())
        for a in (1, 2, 3, 8, 9, 500)
    ]
    assert no_jitter == [0.5, 1.0, 2.0, 60.0, 60.0, 60.0]


async def test_200_turns_of_20_users_are_each_written_once_in_user_order(
    harness: Harness,
) -> None:
    writer = FakeWriter(delay_s=0.002)
    queue, metrics = await harness.start(writer, workers=8)
    users = [f"user-{u:02d}" for u in range(20)]

    async def one_user(user: str) -> list[bool]:
        # a user's turns arrive one after another; users arrive concurrently
        return [await queue.submit(make_turn(user, n)) for n in range(10)]

    accepted = await asyncio.gather(*(one_user(u) for u in users))
    assert all(all(flags) for flags in accepted)
    assert await queue.wait_idle(30)

    assert Counter(writer.calls) == Counter({f"{u}/{n}": 1 for u in users for n in range(10)})
    assert dict(writer.written) == {u: [f"{u}/{n}" for n in range(10)] for u in users}
    assert writer.overlaps == 0  # never two turns of one user at once
    assert writer.max_parallel > 1  # different users interleave
    assert turns_metric(metrics, "accepted") == 200
    assert turns_metric(metrics, "written") == 200
    assert metrics.value("memory_sidecar_write_queue_depth") == 0
    assert (await queue.journal.counts()).done == 200
    assert metrics.value("memory_sidecar_journal_seconds_count", {"operation": "append"}) == 200


async def test_all_submitted_at_once_are_written_once(harness: Harness) -> None:
    writer = FakeWriter()
    queue, _ = await harness.start(writer, workers=5)
    turns = [make_turn(f"u{i % 7}", i) for i in range(140)]
    assert all(await asyncio.gather(*(queue.submit(t) for t in turns)))
    assert await queue.wait_idle(30)
    assert sorted(writer.calls) == sorted(t.request_id for t in turns)
    assert writer.overlaps == 0
    # per user, in journal (acceptance) order
    order = [r[0] for r in harness.rows("SELECT id FROM turns ORDER BY id")]
    assert len(order) == 140
    for user, written in writer.written.items():
        numbers = [int(r.split("/")[1]) for r in written]
        assert len(numbers) == 20, user


class CountingJournal(TurnJournal):
    """Counts the trips to the journal's thread, by operation."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trips: Counter[str] = Counter()

    async def _call(self, operation: str, fn: Callable[..., Any], *args: Any) -> Any:
        self.trips[operation] += 1
        return await super()._call(operation, fn, *args)


async def test_a_written_turn_is_completed_and_the_next_claimed_in_one_trip(
    harness: Harness,
) -> None:
    """A backlog is worked off with one journal trip per turn: each completion
    claims the next turn, so the worker claims on its own only to start."""
    journal = CountingJournal(harness.path, max_pending=100)
    writer = FakeWriter()
    writer.gate = asyncio.Event()  # hold the first turn until the backlog is in
    # No polls within the test: every claim counted is one the queue chose to make.
    queue, metrics = await harness.start(writer, journal=journal, workers=1, poll_interval_s=10)
    for n in range(10):
        assert await queue.submit(make_turn("u1", n))
    await writer.entered.wait()
    claims_before = journal.trips["claim"]
    writer.gate.set()
    assert await queue.wait_idle(10)
    assert writer.written["u1"] == [f"u1/{n}" for n in range(10)]
    assert journal.trips["complete"] == 10
    # At most the wake-ups of the appends that came while the first turn was held.
    assert journal.trips["claim"] - claims_before <= 1
    assert turns_metric(metrics, "written") == 10
    assert (await queue.journal.counts()).done == 10


async def test_failures_are_retried_then_written_without_blocking_others(
    harness: Harness,
) -> None:
    def flaky(turn: Turn, call: int) -> BaseException | None:
        return StoreError("milvus down") if turn.request_id == "u1/0" and call <= 2 else None

    writer = FakeWriter(fail=flaky)
    queue, metrics = await harness.start(writer, retry_base_s=0.05, retry_max_s=0.2)
    for turn in (make_turn("u1", 0), make_turn("u1", 1), make_turn("u2", 0)):
        assert await queue.submit(turn)
    assert await queue.wait_idle(10)
    assert writer.calls.count("u1/0") == 3
    assert writer.written["u1"] == ["u1/0", "u1/1"]  # u1's next turn waited for the retry
    assert writer.calls.index("u2/0") < writer.calls.index("u1/1")  # u2 did not wait
    assert turns_metric(metrics, "retried") == 2
    assert turns_metric(metrics, "written") == 3
    assert turns_metric(metrics, "dead_letter") == 0


async def test_retry_schedule_follows_the_seeded_backoff(harness: Harness) -> None:
    clock = FrozenClock()
    journal = TurnJournal(harness.path, max_pending=10, clock=clock)
    writer = FakeWriter(fail=lambda turn, call: InvalidInput("rejected"))
    queue, metrics = await harness.start(
        writer,
        journal=journal,
        rng=random.Random(42),
        max_attempts=4,
        retry_base_s=1.0,
        retry_max_s=3.0,
        retry_jitter=0.5,
    )
    same_seed = random.Random(42)
    expected = [
        int(backoff_delay(a, base_s=1.0, max_s=3.0, jitter=0.5, rng=same_seed) * 1000)
        for a in (1, 2, 3)
    ]
    assert await queue.submit(make_turn("u1", 0))
    delays: list[int] = []
    for attempt in (1, 2, 3):
        rows = await eventually(lambda: harness.rows(PENDING_RETRY), attempt)
        delays.append(rows[0][1] - journal.now_ms())
        assert len(writer.calls) == attempt
        await asyncio.sleep(0.05)  # not due yet: nobody retries early
        assert len(writer.calls) == attempt
        clock.now += rows[0][1] / 1000 - clock.now  # jump to the due time
    assert await queue.wait_idle(5)
    assert delays == expected
    assert 500 <= expected[0] <= 1000
    assert 1000 <= expected[1] <= 2000
    assert 1500 <= expected[2] <= 3000  # capped at retry_max_s
    assert writer.calls == ["u1/0"] * 4
    assert turns_metric(metrics, "dead_letter") == 1


async def test_a_store_outage_never_dead_letters_a_turn(harness: Harness) -> None:
    # Down for the first 6 attempts (beyond max_attempts), then back.
    writer = FakeWriter(fail=lambda turn, call: StoreError("down") if call <= 6 else None)
    queue, metrics = await harness.start(
        writer, max_attempts=2, retry_base_s=0.01, retry_max_s=0.02
    )
    assert await queue.submit(make_turn("u1", 0))
    assert await queue.wait_idle(10)
    assert writer.written["u1"] == ["u1/0"]
    assert turns_metric(metrics, "dead_letter") == 0
    assert turns_metric(metrics, "retried") == 6


async def test_a_bug_goes_to_dead_letters_without_content_in_logs(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "My PIN is 4711."

    def buggy(turn: Turn, call: int) -> BaseException | None:
        return KeyError(turn.user_text) if turn.request_id == "u1/0" else None

    writer = FakeWriter(fail=buggy)
    queue, metrics = await harness.start(writer, max_attempts=3)
    caplog.set_level(logging.DEBUG, logger="sidecar")
    assert await queue.submit(make_turn("u1", 0, secret))
    assert await queue.submit(make_turn("u1", 1))
    assert await queue.wait_idle(10)
    assert writer.calls.count("u1/0") == 3
    assert writer.written["u1"] == ["u1/1"]  # the user moves on after the dead letter
    assert turns_metric(metrics, "retried") == 2
    assert turns_metric(metrics, "dead_letter") == 1
    assert metrics.value("memory_sidecar_write_queue_dead_letters") == 1
    assert harness.rows("SELECT state, last_error, attempts FROM turns WHERE id = 1") == [
        ("dead", "KeyError", 3)
    ]
    assert "KeyError" in caplog.text
    assert "test_write_queue.py:" in caplog.text  # where the bug raised
    assert "4711" not in caplog.text


async def test_full_journal_sheds_and_counts(harness: Harness) -> None:
    writer = FakeWriter()
    writer.gate = asyncio.Event()  # nothing gets written
    queue, metrics = await harness.start(writer, max_pending=3)
    results = [await queue.submit(make_turn(f"u{i}", i)) for i in range(5)]
    assert results == [True, True, True, False, False]
    assert turns_metric(metrics, "shed") == 2
    assert metrics.value("memory_sidecar_write_queue_depth") == 3
    writer.gate.set()
    assert await queue.wait_idle(5)
    assert await queue.submit(make_turn("u9", 9))


async def test_drain_waits_then_refuses_new_turns(harness: Harness) -> None:
    writer = FakeWriter(delay_s=0.02)
    queue, metrics = await harness.start(writer, workers=2)
    for i in range(10):
        assert await queue.submit(make_turn(f"u{i % 3}", i))
    assert await queue.drain(10)
    assert len(writer.calls) == 10
    assert not await queue.submit(make_turn("u1", 99))
    assert turns_metric(metrics, "rejected_shutdown") == 1


async def test_drain_deadline_leaves_turns_for_the_next_start(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    blocked = FakeWriter()
    blocked.gate = asyncio.Event()
    queue, _ = await harness.start(blocked, workers=2)
    for i in range(6):
        assert await queue.submit(make_turn(f"u{i % 2}", i))
    await blocked.entered.wait()
    caplog.set_level(logging.INFO, logger="sidecar")
    assert not await queue.drain(0.1)
    assert "6 turns stay in the write journal" in caplog.text
    await queue.close()
    assert "2 turns being written were put back" in caplog.text
    # released, not failed: the interrupted attempt is not counted
    assert harness.rows("SELECT state, attempts FROM turns ORDER BY id") == [("pending", 0)] * 6

    writer = FakeWriter()
    queue2, metrics = await harness.start(writer)
    assert await queue2.wait_idle(5)
    assert dict(writer.written) == {
        "u0": ["u0/0", "u0/2", "u0/4"],
        "u1": ["u1/1", "u1/3", "u1/5"],
    }
    assert turns_metric(metrics, "requeued") == 0  # nothing was left in progress


async def test_close_puts_back_a_turn_claimed_for_a_worker_it_stopped(harness: Harness) -> None:
    """A completion claims the worker's next turn in the same journal call; a worker
    cancelled in that call never starts the turn. ``close`` puts back every turn in
    progress, not only those its workers were writing."""
    blocked = FakeWriter()
    blocked.gate = asyncio.Event()
    queue, _ = await harness.start(blocked, workers=1)
    assert await queue.submit(make_turn("u1", 0))
    await blocked.entered.wait()
    assert await queue.submit(make_turn("u2", 1))
    # As a completion's claim would: in progress, but no worker writes it.
    assert len(await queue.journal.claim(1, exclude_users={"u1"})) == 1
    await queue.close()
    assert harness.rows("SELECT state, attempts FROM turns ORDER BY id") == [("pending", 0)] * 2

    writer = FakeWriter()
    queue2, metrics = await harness.start(writer)
    assert await queue2.wait_idle(5)
    assert sorted(writer.calls) == ["u1/0", "u2/1"]
    assert turns_metric(metrics, "requeued") == 0


async def test_turns_left_in_progress_by_a_crash_are_written_at_start(harness: Harness) -> None:
    journal = TurnJournal(harness.path, max_pending=10)
    await journal.open()
    for i in range(3):
        await journal.append(make_turn("u1", i))
    await journal.claim(1)  # "u1/0" in progress when the process "died"
    await journal.close()

    writer = FakeWriter()
    queue, metrics = await harness.start(writer)
    assert await queue.wait_idle(5)
    assert writer.written["u1"] == ["u1/0", "u1/1", "u1/2"]
    assert turns_metric(metrics, "requeued") == 1


async def test_cancelled_submit_still_lands_in_the_journal(harness: Harness) -> None:
    writer = FakeWriter()
    queue, metrics = await harness.start(writer)
    task = asyncio.create_task(queue.submit(make_turn("u1", 0)))
    await asyncio.sleep(0)  # the append is on its way to the journal thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await queue.wait_idle(5)
    assert writer.calls == ["u1/0"]
    assert turns_metric(metrics, "accepted") == 1


async def test_oldest_age_gauge_and_depth(harness: Harness) -> None:
    writer = FakeWriter()
    writer.gate = asyncio.Event()
    queue, metrics = await harness.start(writer)
    for i in range(4):
        await queue.submit(make_turn("u1", i))
    assert metrics.value("memory_sidecar_write_queue_depth") == 4
    assert queue.depth == 4
    await asyncio.sleep(1.3)  # one upkeep tick
    assert metrics.value("memory_sidecar_write_queue_oldest_seconds") >= 1.0
    writer.gate.set()
    assert await queue.wait_idle(5)
    assert metrics.value("memory_sidecar_write_queue_depth") == 0


async def test_nothing_touches_the_disk_before_start(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "journal.sqlite3"
    queue = WriteQueue(FakeWriter(), config(journal_path=str(path)), Metrics())
    assert queue.depth == 0
    assert not await queue.submit(make_turn("u1", 0))
    assert await queue.wait_idle(0.1)
    await queue.close()
    assert not path.parent.exists()


# -- two processes' halves (write_queue.own_process) ----------------------------------


async def test_an_appender_accepts_and_a_claimer_writes(harness: Harness) -> None:
    """The worker's queue (appender) only journals and wakes its writer; the
    writer's queue (claimer) writes every turn once, in user order; the appender's
    drain leaves the turns to the writer and its wait_idle sees the writer's
    progress in the file."""
    cfg = config(journal_path=str(harness.path), poll_interval_s=5.0)
    never = FakeWriter()
    writer = FakeWriter()
    writing = WriteQueue(writer, cfg, Metrics(), role="claimer")
    accepting_metrics = Metrics()
    accepting = WriteQueue(never, cfg, accepting_metrics, role="appender", on_accept=writing.wake)
    harness.queues += [accepting, writing]
    await accepting.start()
    await writing.start()
    assert (accepting.accepts, accepting.writes) == (True, False)
    assert (writing.accepts, writing.writes) == (False, True)

    for n in range(30):
        assert await accepting.submit(make_turn(f"u{n % 3}", n))
    # Woken by on_accept, not by its 5-second poll.
    assert await accepting.wait_idle(4.0)
    assert never.calls == []
    assert sorted(len(ids) for ids in writer.written.values()) == [10, 10, 10]
    for user, ids in writer.written.items():
        assert ids == [f"{user}/{n}" for n in range(30) if f"u{n % 3}" == user]
    assert writer.overlaps == 0
    assert turns_metric(accepting_metrics, "accepted") == 30

    writer.gate = asyncio.Event()  # the writer stalls: the worker's drain does not wait
    assert await accepting.submit(make_turn("u9", 99))
    assert await accepting.drain(timeout_s=0.1)
    assert not await accepting.submit(make_turn("u9", 100))  # stopped accepting
    assert harness.rows("SELECT COUNT(*) FROM turns WHERE state <> 'done'") == [(1,)]
    writer.gate.set()
    assert await writing.drain(timeout_s=4.0)
    assert writer.written["u9"] == ["u9/99"]


async def test_a_restarted_claimer_takes_back_what_its_predecessor_left(
    harness: Harness,
) -> None:
    """A writer killed mid-turn leaves it in progress; the next writer requeues and
    writes it, while the worker kept accepting."""
    cfg = config(journal_path=str(harness.path))
    accepting = WriteQueue(FakeWriter(), cfg, Metrics(), role="appender")
    harness.queues.append(accepting)
    await accepting.start()
    stuck = FakeWriter()
    stuck.gate = asyncio.Event()
    first = WriteQueue(stuck, cfg, Metrics(), role="claimer")
    await first.start()
    assert await accepting.submit(make_turn("u1", 1))
    first.wake()
    await asyncio.wait_for(stuck.entered.wait(), 4.0)
    # Its journal goes away without settling the turn (as when the process dies).
    await first.journal.close()
    await first.close()
    assert harness.rows("SELECT state FROM turns") == [("in_progress",)]
    assert await accepting.submit(make_turn("u1", 2))

    writer = FakeWriter()
    second = WriteQueue(writer, cfg, Metrics(), role="claimer")
    harness.queues.append(second)
    await second.start()
    assert await second.wait_idle(4.0)
    assert writer.written["u1"] == ["u1/1", "u1/2"]


async def test_a_ring_wakes_one_waiting_worker() -> None:
    bell = Doorbell(keep=2)
    woken: list[int] = []

    async def worker(n: int) -> None:
        await bell.wait(5.0)
        woken.append(n)

    tasks = [asyncio.create_task(worker(n)) for n in range(2)]
    await asyncio.sleep(0.01)
    bell.ring()
    await asyncio.sleep(0.01)
    assert len(woken) == 1  # the other still sleeps
    bell.ring()
    await asyncio.gather(*tasks)
    assert sorted(woken) == [0, 1]


async def test_rings_while_nobody_waits_are_kept_up_to_a_bound() -> None:
    bell = Doorbell(keep=2)
    for _ in range(5):
        bell.ring()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await bell.wait(5.0)
    await bell.wait(5.0)  # two kept rings: both return at once
    assert loop.time() - started < 1.0
    await bell.wait(0.05)  # the third times out
    assert loop.time() - started >= 0.05


async def test_waits_that_time_out_leave_nothing_behind() -> None:
    """Idle workers poll all day: their expired waits must not pile up."""
    bell = Doorbell(keep=2)
    for _ in range(20):
        await bell.wait(0.001)
    assert bell.waiting == 0
    waiting = asyncio.create_task(bell.wait(5.0))
    await asyncio.sleep(0.01)
    assert bell.waiting == 1
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert bell.waiting == 0
