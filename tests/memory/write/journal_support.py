"""Helpers of the turn journal's tests: a settable clock, a turn, and a plain
second connection to the journal's file to read (or damage) its rows. The
fixtures built on them are in ``conftest.py`` beside this module.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from sidecar.memory.records.turns import Turn
from sidecar.memory.write.turns.journal_file import ClaimedTurn


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


@contextmanager
def raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A second, plain connection to the file (WAL readers never block)."""
    with closing(sqlite3.connect(path)) as conn:
        yield conn


def row(path: Path, turn_id: int, column: str) -> Any:
    with raw(path) as conn:
        return conn.execute(f"SELECT {column} FROM turns WHERE id = ?", (turn_id,)).fetchone()[0]


def texts(claimed: list[ClaimedTurn]) -> list[str]:
    return [c.turn.user_text for c in claimed]
