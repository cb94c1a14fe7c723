"""Write stamps: a row's older write is not applied over a newer one, whatever the
order the two arrive in; a user dropped as a whole keeps their older rows out;
stamps are forgotten after the horizon."""

from __future__ import annotations

import pytest

from sidecar.memory.corpus.write_stamps import WriteStamps
from tests.memory.corpus.test_corpus import rec


class Clock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns


def test_an_older_write_of_a_row_is_left_out_and_a_newer_one_kept() -> None:
    stamps = WriteStamps(60.0, clock_ns=Clock())
    a, b = rec("a", "alice"), rec("b", "alice")
    assert stamps.newer([a, b], 200) == [a, b]
    assert stamps.newer([a], 100) == []  # older than what was applied
    assert stamps.newer([a], 200) == [a]  # the same write again: applied
    assert stamps.newer([b, rec("c", "alice")], 300) == [b, rec("c", "alice")]
    assert stamps.newer([b], 250) == []


def test_this_process_writes_count_as_applied() -> None:
    stamps = WriteStamps(60.0, clock_ns=Clock())
    stamps.note([rec("a", "alice")], 500)
    assert stamps.newer([rec("a", "alice")], 400) == []
    assert stamps.newer([rec("b", "alice")], 400) == [rec("b", "alice")]
    stamps.note([rec("a", "alice")], 450)  # never lowered
    assert stamps.newer([rec("a", "alice")], 480) == []


def test_a_dropped_user_keeps_their_older_rows_out() -> None:
    stamps = WriteStamps(60.0, clock_ns=Clock())
    stamps.note_user("alice", 1_000)
    assert stamps.newer([rec("a", "alice"), rec("b", "bob")], 900) == [rec("b", "bob")]
    assert stamps.newer([rec("a", "alice")], 1_100) == [rec("a", "alice")]


def test_stamps_are_forgotten_after_the_horizon() -> None:
    clock = Clock()
    stamps = WriteStamps(10.0, clock_ns=clock)
    stamps.note([rec("a", "alice")], clock.ns)
    stamps.note_user("bob", clock.ns)
    clock.ns += 5 * 10**9
    stamps.note([rec("b", "alice")], clock.ns)
    assert len(stamps) == 3
    clock.ns += 6 * 10**9  # a and bob are 11 s old, b 6 s
    stamps.note([], clock.ns)
    assert len(stamps) == 1
    # Forgotten: a frame about "a" is applied again, as before any stamps.
    assert stamps.newer([rec("a", "alice")], 1) == [rec("a", "alice")]
    with pytest.raises(ValueError, match="horizon"):
        WriteStamps(0)
