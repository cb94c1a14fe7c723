"""Owner locks across the processes of one host (server.workers). Two HostLocks
objects on one directory hold different descriptors, which flock excludes exactly
as it excludes two processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sidecar.config import config_from_mapping
from sidecar.memory.write.rows.locks import HostLocks, KeyedLocks, host_locks_for


async def test_a_second_holder_waits_for_the_first(tmp_path: Path) -> None:
    first, second = HostLocks(tmp_path), HostLocks(tmp_path)
    order: list[str] = []
    try:
        async with first.hold("alice"):
            waiting = asyncio.create_task(hold_and_note(second, "alice", order))
            await asyncio.sleep(0.1)
            assert not waiting.done()  # another "process" holds alice's bucket
            order.append("first done")
        await waiting
        assert order == ["first done", "second"]
    finally:
        first.close()
        second.close()


async def hold_and_note(locks: HostLocks, owner: str, order: list[str]) -> None:
    async with locks.hold(owner):
        order.append("second")


async def test_owners_in_other_buckets_do_not_wait(tmp_path: Path) -> None:
    first, second = HostLocks(tmp_path, buckets=64), HostLocks(tmp_path, buckets=64)
    other = next(f"user-{i}" for i in range(100) if first.bucket(f"user-{i}") != first.bucket("a"))
    try:
        async with first.hold("a"):
            await asyncio.wait_for(hold_and_note(second, other, []), timeout=1.0)
    finally:
        first.close()
        second.close()


async def test_one_holder_per_bucket_inside_a_process(tmp_path: Path) -> None:
    locks = HostLocks(tmp_path, buckets=1)  # every owner in the same bucket
    other = HostLocks(tmp_path, buckets=1)
    try:
        async with locks.hold("a"):
            # A second owner of this process waits for the bucket (flock alone would
            # let the same descriptor in twice and drop the lock at the first release).
            inner = asyncio.create_task(hold_and_note(locks, "b", []))
            await asyncio.sleep(0.05)
            assert not inner.done()
        await inner
        await asyncio.wait_for(hold_and_note(other, "c", []), timeout=1.0)  # released
    finally:
        locks.close()
        other.close()


async def test_a_cancelled_waiter_leaves_no_lock_behind(tmp_path: Path) -> None:
    first, second, third = HostLocks(tmp_path), HostLocks(tmp_path), HostLocks(tmp_path)
    try:
        async with first.hold("alice"):
            waiting = asyncio.create_task(hold_and_note(second, "alice", []))
            await asyncio.sleep(0.05)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        await asyncio.wait_for(hold_and_note(third, "alice", []), timeout=1.0)
        await asyncio.wait_for(hold_and_note(second, "alice", []), timeout=1.0)
    finally:
        for locks in (first, second, third):
            locks.close()


def test_only_several_workers_get_host_locks(tmp_path: Path) -> None:
    journal = str(tmp_path / "data" / "journal.sqlite3")
    one = config_from_mapping({"write_queue": {"journal_path": journal}}, env={})
    assert host_locks_for(one) is None
    several = config_from_mapping(
        {"server": {"port": 50100, "workers": 3}, "write_queue": {"journal_path": journal}},
        env={},
    )
    locks = host_locks_for(several)
    assert locks is not None
    locks.close()
    assert (tmp_path / "data" / "owner-locks").is_dir()


async def test_owner_locks_of_two_workers_exclude_each_other(tmp_path: Path) -> None:
    # What Components.build wires with server.workers > 1: the writer, retention,
    # access flushes and admin edits all take KeyedLocks.get(owner).
    first = KeyedLocks(HostLocks(tmp_path))
    second = KeyedLocks(HostLocks(tmp_path))
    order: list[str] = []

    async def take(locks: KeyedLocks, name: str) -> None:
        async with locks.get("alice"):
            order.append(name)

    async with first.get("alice"):
        waiting = asyncio.create_task(take(second, "second"))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        order.append("first")
    await waiting
    assert order == ["first", "second"]
    assert isinstance(KeyedLocks().get("alice"), asyncio.Lock)  # one worker: as before
