"""When ``scripts.bench_e2e`` starts measuring: only once every worker's corpus
cache has finished loading (the cached rows include the users' category nodes, so
reaching the seeded memory count is not enough)."""

from __future__ import annotations

from scripts import bench_e2e


def test_settled_when_every_worker_holds_the_same_rows_twice_in_a_row() -> None:
    settled = bench_e2e.corpora_settled
    assert settled([[12207.0, 12207.0], [12207.0, 12207.0]], 10_000)
    assert settled([[12207.0], [12207.0]], 10_000)


def test_reaching_the_memory_count_is_not_settled_while_rows_still_arrive() -> None:
    settled = bench_e2e.corpora_settled
    # The 2026-11-26 H200 runs started measuring here, with 10 % still loading.
    assert not settled([[10976.0], [11500.0]], 10_000)
    assert not settled([[10976.0]], 10_000)


def test_a_worker_behind_the_others_is_not_settled() -> None:
    settled = bench_e2e.corpora_settled
    assert not settled([[12207.0, 10976.0], [12207.0, 10976.0]], 10_000)


def test_below_the_seeded_count_is_not_settled() -> None:
    settled = bench_e2e.corpora_settled
    assert not settled([[900.0, 900.0], [900.0, 900.0]], 10_000)
    assert not settled([[], []], 10_000)
