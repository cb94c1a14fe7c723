"""The write queue's own cost per turn, without extraction: the real journal and
workers, a writer that does nothing. Turns are submitted one at a time, each after
the previous one is written, as at concurrency 1.

Prints claims per turn (and how many found nothing), the CPU time of the journal's
claims on its thread and of the whole process per turn, for ``--runs`` runs::

    .venv/bin/python -m scripts.bench_journal --turns 500 --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sidecar.config import WriteQueueConfig
from sidecar.memory.records.turns import Turn
from sidecar.memory.write.turns.journal import TurnJournal
from sidecar.memory.write.turns.journal_file import ClaimedTurn
from sidecar.memory.write.turns.queue import WriteQueue
from sidecar.metrics import Metrics


class CountingJournal(TurnJournal):
    """Counts claims, the empty ones, and their CPU time on the journal's thread
    (a completion that claims the next turn counts as a claim, with its CPU)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.claims = 0
        self.empty = 0
        self.claim_cpu_s = 0.0

    def _counted(self, started: float, claimed: list[ClaimedTurn]) -> None:
        self.claim_cpu_s += time.thread_time() - started
        self.claims += 1
        self.empty += not claimed

    def _claim_sync(self, limit: int, exclude: frozenset[str]) -> list[ClaimedTurn]:
        started = time.thread_time()
        claimed = super()._claim_sync(limit, exclude)
        self._counted(started, claimed)
        return claimed

    def _complete_claim_sync(
        self, turn_id: int, limit: int, exclude: frozenset[str]
    ) -> tuple[bool, list[ClaimedTurn]]:
        started = time.thread_time()
        done, claimed = super()._complete_claim_sync(turn_id, limit, exclude)
        self._counted(started, claimed)
        return done, claimed


class DoneWriter:
    """Writes nothing; says when a turn was handed to it."""

    def __init__(self) -> None:
        self.written = asyncio.Event()

    async def write_turn(self, turn: Turn) -> None:
        self.written.set()


async def run(turns: int, gap_s: float) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="bench-journal-"))
    config = WriteQueueConfig(journal_path=str(workdir / "journal.sqlite3"))
    journal = CountingJournal(config.journal_path, max_pending=config.max_pending)
    writer = DoneWriter()
    queue = WriteQueue(writer, config, Metrics(), journal=journal)  # type: ignore[arg-type]
    await queue.start()
    await asyncio.sleep(0.3)  # the workers' first claims
    claims, empty, claim_cpu = journal.claims, journal.empty, journal.claim_cpu_s
    cpu_started = time.process_time()
    for i in range(turns):
        writer.written.clear()
        turn = Turn(user_id=f"u{i % 10}", user_text="hi", assistant_text="hello", created_at=1)
        await queue.submit(turn)
        await writer.written.wait()
        await asyncio.sleep(gap_s)  # the next request's time
    cpu = time.process_time() - cpu_started
    await queue.close()
    return (
        f"{(journal.claims - claims) / turns:.2f} claims/turn "
        f"({(journal.empty - empty) / turns:.2f} empty), "
        f"claim CPU {1000 * (journal.claim_cpu_s - claim_cpu) / turns:.3f} ms/turn, "
        f"process CPU {1000 * cpu / turns:.3f} ms/turn"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gap-ms", type=float, default=5.0, help="pause between turns")
    args = parser.parse_args(argv)
    for number in range(1, args.runs + 1):
        print(f"run {number}: {asyncio.run(run(args.turns, args.gap_ms / 1000))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
