"""A short soak through the real Envoy (the long variant: ``scripts.soak``): 16
clients at a sustainable rate with facts and questions, half streamed. Every
request served, every turn accepted and written exactly as counted, the queue never
near its bound and drained at the end, no dead letters."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import soak

pytestmark = pytest.mark.e2e


def test_short_soak_serves_everything_and_writes_every_turn(tmp_path: Path) -> None:
    args = soak.parse_args(["--minutes", "0.35", "--rate", "30", "--sample-s", "2"])
    report = soak.run(args, tmp_path)
    assert report.errors == 0
    assert report.requests >= 300  # ~630 offered in 21 s
    assert report.turns_accepted == report.requests
    assert report.turns_written == report.turns_accepted
    assert report.turns_shed == 0
    assert report.dead_letters == 0
    assert report.drained_in_s is not None
    assert len(report.samples) >= 6
    assert report.queue_max < report.queue_limit
    assert all(sample.rss_mib > 0 for sample in report.samples)
    # The event loop's lag was sampled in every window (a timer every 0.1 s).
    assert all(sample.loop_worst_ms > 0 for sample in report.samples[1:])


def test_stalls_are_read_from_the_lag_histogram() -> None:
    inf = float("inf")
    before = {0.001: 5.0, 0.02: 9.0, 0.05: 10.0, 0.1: 10.0, inf: 10.0}
    after = {0.001: 15.0, 0.02: 21.0, 0.05: 24.0, 0.1: 25.0, inf: 25.0}
    assert soak.stalls(before, after) == (3.0, 100.0)  # 3 over 20 ms, all under 100
    assert soak.stalls(after, after) == (0.0, 0.0)  # nothing observed
    assert soak.stalls(before, {**after, inf: 26.0}) == (4.0, inf)  # one over 1 s
