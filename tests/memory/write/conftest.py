"""Fixtures of the write path's tests that several test modules share.

The turn journal's tests (``test_journal_*.py``) share a settable clock, the
journal's file path and an open journal on it; their helpers are in
``journal_support.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sidecar.memory.write.journal import TurnJournal
from tests.memory.write.journal_support import Clock


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
