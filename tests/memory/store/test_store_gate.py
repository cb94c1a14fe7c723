"""The milvus-lite store gate: reads share it, an upsert holds its owners' shares
alone, other owners pass, a read of anyone's rows waits for every upsert, holders
come in turn, a holder that never lets go costs a StoreError, not a hung thread;
another process's hold counts like a thread's. Against the real engine:
tests/memory/store/test_store.py."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sidecar.config import StoreConfig
from sidecar.errors import StoreError
from sidecar.memory.records.records import Scope
from sidecar.memory.store.filters import build_filter
from sidecar.memory.store.gate import StoreGate


def hold_in_thread(
    gate: StoreGate,
    owners: list[str] | None,
    *,
    exclusive: bool,
    log: list[str],
    name: str,
    release: threading.Event,
) -> threading.Thread:
    def run() -> None:
        with gate.held(owners, exclusive=exclusive):
            log.append(f"{name} in")
            release.wait(5)
            log.append(f"{name} out")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def other_bucket(gate: StoreGate, owner: str) -> str:
    return next(f"user-{i}" for i in range(1000) if gate.bucket(f"user-{i}") != gate.bucket(owner))


def test_reads_share_the_gate(tmp_path: Path) -> None:
    gate = StoreGate(tmp_path / "g", timeout_s=5)
    log: list[str] = []
    release = threading.Event()
    first = hold_in_thread(gate, ["alice"], exclusive=False, log=log, name="r1", release=release)
    wait_for(lambda: "r1 in" in log)
    with gate.held(None, exclusive=False):  # while r1 still holds alice's share
        log.append("r2 in")
    release.set()
    first.join()
    assert log == ["r1 in", "r2 in", "r1 out"]


def test_an_upsert_waits_for_reads_and_reads_wait_for_it(tmp_path: Path) -> None:
    waits: list[str] = []
    gate = StoreGate(tmp_path / "g", timeout_s=5, waited=lambda mode, s: waits.append(mode))
    log: list[str] = []
    reading = threading.Event()
    reader = hold_in_thread(gate, ["alice"], exclusive=False, log=log, name="read", release=reading)
    wait_for(lambda: "read in" in log)
    writing = threading.Event()
    writer = hold_in_thread(
        gate, ["alice"], exclusive=True, log=log, name="upsert", release=writing
    )
    time.sleep(0.05)
    assert log == ["read in"]  # the upsert waits for the read
    later = threading.Event()
    late_reader = hold_in_thread(gate, None, exclusive=False, log=log, name="late", release=later)
    time.sleep(0.05)
    assert log == ["read in"]  # a read that came after the upsert does not overtake it
    reading.set()
    wait_for(lambda: "upsert in" in log)
    time.sleep(0.05)
    assert "late in" not in log  # nor reads the row half upserted
    writing.set()
    later.set()
    for thread in (reader, writer, late_reader):
        thread.join()
    assert log == ["read in", "read out", "upsert in", "upsert out", "late in", "late out"]
    assert waits == ["upsert", "read"]


def test_other_owners_pass_and_a_read_of_anyone_waits(tmp_path: Path) -> None:
    gate = StoreGate(tmp_path / "g", timeout_s=5)
    bob = other_bucket(gate, "alice")
    log: list[str] = []
    release = threading.Event()
    writer = hold_in_thread(gate, ["alice"], exclusive=True, log=log, name="alice", release=release)
    wait_for(lambda: "alice in" in log)
    with gate.held([bob], exclusive=False):  # bob's rows: no wait
        log.append("read bob")
    with gate.held([bob], exclusive=True):
        log.append("upsert bob")
    anyone = hold_in_thread(gate, None, exclusive=False, log=log, name="anyone", release=release)
    time.sleep(0.05)
    assert log == ["alice in", "read bob", "upsert bob"]  # anyone's rows include alice's
    release.set()
    writer.join()
    anyone.join()
    assert log[3:] == ["alice out", "anyone in", "anyone out"]


def test_a_holder_that_never_lets_go_costs_a_store_error(tmp_path: Path) -> None:
    gate = StoreGate(tmp_path / "g", timeout_s=0.2)
    log: list[str] = []
    release = threading.Event()
    holder = hold_in_thread(gate, ["alice"], exclusive=True, log=log, name="stuck", release=release)
    wait_for(lambda: "stuck in" in log)
    started = time.monotonic()
    with pytest.raises(StoreError, match="gate stayed busy"), gate.held(None, exclusive=False):
        pass
    assert time.monotonic() - started < 2
    release.set()
    holder.join()
    with gate.held(None, exclusive=True):  # nothing left behind by the failed wait
        pass


def _hold_exclusive(path: str, holding: object, release: object) -> None:
    gate = StoreGate(path, timeout_s=5)
    with gate.held(["alice"], exclusive=True):
        holding.set()  # type: ignore[attr-defined]
        release.wait(5)  # type: ignore[attr-defined]


def test_another_process_holding_it_counts(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    holding, release = context.Event(), context.Event()
    path = str(tmp_path / "g")
    child = context.Process(target=_hold_exclusive, args=(path, holding, release))
    child.start()
    try:
        assert holding.wait(30)
        with pytest.raises(StoreError), StoreGate(path, timeout_s=0.1).held(None, exclusive=False):
            pass
        release.set()
        child.join(10)
        with StoreGate(path, timeout_s=1).held(None, exclusive=False):
            pass
    finally:
        release.set()
        child.join(10)
        if child.is_alive():
            child.kill()


def test_only_milvus_lite_stores_have_a_gate(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    assert StoreConfig(uri=str(db)).gate_path == db.with_name("memory.db.gates")
    assert StoreConfig(uri="http://milvus:19530").gate_path is None
    # The embedded server's socket: the gate the supervisor names, or none.
    assert StoreConfig(uri="unix:/tmp/m.sock").gate_path is None
    named = StoreConfig(uri="unix:/tmp/m.sock", gate_dir=str(tmp_path / "x"))
    assert named.gate_path == tmp_path / "x"


def test_filters_name_their_one_owner() -> None:
    assert build_filter(owner="alice").owner == "alice"
    assert build_filter(owner="alice", ids=["m1"], status=None).owner == "alice"
    assert build_filter(scope=Scope("alice"), owner="alice").owner == "alice"
    # A scope reads group and public rows of other owners; ids alone, anyone's.
    assert build_filter(scope=Scope("alice")).owner is None
    assert build_filter(ids=["m1"]).owner is None
