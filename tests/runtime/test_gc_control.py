"""The garbage collector: each collection observed by generation while started; what
survives a full collection frozen (at most every ``gc_freeze_interval_s``) once the
process is the sidecar's own, and all of it unfrozen every ``gc_thaw_interval_s``."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from sidecar.config import ServerConfig
from sidecar.memory.corpus.corpus import Corpus
from sidecar.memory.corpus.features import FeatureMemo
from sidecar.memory.corpus.rows import TERM_IDS
from sidecar.memory.records.records import MemoryRecord, as_vector
from sidecar.metrics import Metrics
from sidecar.runtime.gc_control import GCControl

PAUSE = "memory_sidecar_gc_pause_seconds"
COLLECTED = "memory_sidecar_gc_collected_objects_total"
FROZEN = "memory_sidecar_gc_frozen_objects"


class Node:
    other: object = None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def thawed() -> Iterator[None]:
    """Whatever a test freezes is unfrozen again (the test process is not ours)."""
    before = gc.get_freeze_count()
    yield
    if gc.get_freeze_count() > before:
        gc.unfreeze()


def control(metrics: Metrics, clock: Clock, **server: float) -> GCControl:
    return GCControl(
        metrics.gc_pause, metrics.gc_collected, metrics.gc_frozen, ServerConfig(**server),
        clock=clock,
    )  # fmt: skip


def frozen(obj: object) -> bool:
    """Tracked, yet in no generation: in the permanent one."""
    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())


def observed(metrics: Metrics, generation: int) -> float:
    return metrics.value(f"{PAUSE}_count", {"generation": str(generation)})


def test_collections_are_observed_by_generation_until_stopped() -> None:
    metrics = Metrics()
    monitor = control(metrics, Clock())
    monitor.start()
    monitor.start()  # idempotent: one callback
    try:
        gc.collect(0)
        gc.collect(2)
        cycle: list[object] = []
        cycle.append(cycle)  # garbage only the collector can free
        del cycle
        gc.collect(2)
        assert observed(metrics, 0) >= 1
        assert observed(metrics, 2) >= 2  # (an automatic one may come too)
        assert metrics.value(f"{PAUSE}_sum", {"generation": "2"}) > 0
        assert metrics.value(COLLECTED, {"generation": "2"}) >= 1
    finally:
        monitor.stop()
    monitor.stop()  # idempotent
    full = observed(metrics, 2)
    gc.collect(2)
    assert observed(metrics, 2) == full


def test_nothing_is_frozen_unless_the_process_is_the_sidecars(thawed: None) -> None:
    metrics = Metrics()
    monitor = control(metrics, Clock())
    monitor.start()
    try:
        before = gc.get_freeze_count()
        gc.collect()
        assert gc.get_freeze_count() == before
    finally:
        monitor.stop()


def test_survivors_are_frozen_at_most_every_interval_and_thawed(thawed: None) -> None:
    metrics = Metrics()
    clock = Clock()
    monitor = control(metrics, clock, gc_freeze_interval_s=60, gc_thaw_interval_s=3600)
    monitor.start()
    gc.freeze()  # as serve() freezes its start-up objects
    monitor.freeze_survivors()
    try:
        # (Frozen objects are still freed when dropped: the count only falls meanwhile.)
        assert metrics.value(FROZEN) >= gc.get_freeze_count() > 0
        kept = [[i] for i in range(1000)]  # long-lived, tracked
        gc.collect()
        assert frozen(kept[0])
        assert frozen(kept[-1])
        assert metrics.value(FROZEN) >= gc.get_freeze_count() >= len(kept)

        more = [[i] for i in range(1000)]
        clock.now += 30  # within the interval: not frozen
        gc.collect()
        assert not frozen(more[0])
        clock.now += 30
        gc.collect()
        assert frozen(more[0])
        assert frozen(more[-1])

        clock.now += 3600  # thawed: the next full collection walks everything again
        gc.collect()
        assert gc.get_freeze_count() == 0
        assert metrics.value(FROZEN) == 0
        assert not frozen(kept[0])
        assert not frozen(more[0])
        gc.collect()  # and freezes what survived it
        assert frozen(kept[0])
        assert frozen(more[0])

        # A cycle frozen while alive is not freed when it dies; once thawed, the next
        # full collection frees it.
        node = Node()
        node.other = node
        alive = weakref.ref(node)
        clock.now += 60
        gc.collect()  # frozen
        del node
        gc.collect()
        assert alive() is not None
        clock.now += 3600
        gc.collect()  # thaws
        gc.collect()
        assert alive() is None
    finally:
        monitor.stop()


def test_a_corpus_keeps_no_token_lists() -> None:
    """A full collection walks every tracked object the process keeps, and a long
    turn's tokens took six times the memory of its term ids: the memo keeps a
    memory's document as term ids (an untracked array) and no tokens; a BM25 index
    keeps postings."""
    memo = FeatureMemo(10)
    rows = [
        MemoryRecord(id=f"m{i}", user_id="u", content=text, embedding=as_vector((1.0, 0.0)))
        for i, text in enumerate(["alpha beta", "gamma", "delta"])
    ]
    Corpus.build(rows, 2, memo=memo)
    gc.collect()
    kept = [memo.value(TERM_IDS, r, lambda _: pytest.fail("read again")) for r in rows]
    assert [len(ids) for ids in kept] == [2, 1, 1]
    assert not any(gc.is_tracked(ids) for ids in kept)
    for row in rows:
        values = memo.features(row).values
        assert not [v for v in values.values() if isinstance(v, tuple | list) and v]
