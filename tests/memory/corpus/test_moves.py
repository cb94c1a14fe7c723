"""Where an update's rows came from, read once for every layer (:class:`Moves`):
each value it finds by the runs of consecutive rows equals the one a pass over
every row finds."""

from __future__ import annotations

import numpy as np
import pytest

from sidecar.memory.corpus import moves as moves_module
from sidecar.memory.corpus.delta import taken
from sidecar.memory.corpus.moves import Moves, new_positions


def _sources(rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Sources an update leaves (kept rows in order, a few removed, a few new), or
    any rows in any order, some repeated."""
    old_size = int(rng.integers(0, 300))
    if rng.random() < 0.7 and old_size:
        kept = np.sort(rng.choice(old_size, int(rng.integers(0, old_size + 1)), replace=False))
        sources = kept.astype(np.int64)
        for _ in range(int(rng.integers(0, 8))):
            sources = np.insert(sources, int(rng.integers(0, len(sources) + 1)), -1)
        return sources, old_size
    size = int(rng.integers(0, 200))
    return rng.integers(-1, max(old_size, 1), size=size).astype(np.int64), max(old_size, 1)


def test_where_old_rows_went_by_runs_equals_by_a_scatter() -> None:
    rng = np.random.default_rng(11)
    for _ in range(400):
        sources, old_size = _sources(rng)
        moves = Moves(sources, old_size)
        found = moves.new_of_old
        assert np.array_equal(found, new_positions(sources, old_size))
        assert found.dtype == np.int64


def test_rows_taken_by_runs_or_by_a_gather_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every row is written: a kept row's values, ``fill`` for a new one, whether
    the rows move by slices or (past ``MAX_RUNS`` runs) by a gather."""
    rng = np.random.default_rng(12)
    for max_runs in (moves_module.MAX_RUNS, 0):
        monkeypatch.setattr(moves_module, "MAX_RUNS", max_runs)
        for _ in range(200):
            sources, old_size = _sources(rng)
            values = rng.integers(0, 1000, size=(old_size, 2)).astype(np.int64)
            for given in (sources, Moves(sources, old_size)):
                got = taken(values, given, -7)
                want = np.where(sources[:, None] >= 0, values[np.maximum(sources, 0)], -7)
                assert np.array_equal(got, want)
