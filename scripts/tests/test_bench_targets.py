"""The benchmark's verdict against the issue's targets (``scripts.bench_latency``):
each sidecar row is compared with the do-nothing row of the same shape, and a row of
several workers at concurrency also with the one-process do-nothing row."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from scripts import bench_latency


def row(module: ModuleType, target: str, conc: int, p50: float, p99: float, rps: float,
        ttfb: float | None = None) -> Any:  # fmt: skip
    return module.Result(
        target=target, concurrency=conc, stream=ttfb is not None, requests=400, errors=0,
        p50_ms=p50, p99_ms=p99, mean_ms=p50, rps=rps, ttfb_p50_ms=ttfb,
    )  # fmt: skip


def test_rows_are_checked_against_their_own_baseline() -> None:
    b = bench_latency
    results = [
        row(b, "envoy", 1, 0.8, 1.0, 1200),
        row(b, "envoy+noop", 1, 2.5, 3.5, 400),
        row(b, "envoy+noop", 16, 18.0, 27.0, 860),
        row(b, "envoy+noop", 1, 3.0, 4.5, 320, ttfb=3.0),
        row(b, "envoy+noop w4", 16, 9.0, 20.0, 1700),
        row(b, "envoy+sidecar@100k", 1, 11.5, 21.0, 83),
        row(b, "envoy+sidecar@100k", 16, 88.0, 158.0, 430),
        row(b, "envoy+sidecar@100k ro", 1, 3.5, 40.0, 250),
        row(b, "envoy+sidecar@100k", 1, 13.9, 20.0, 70, ttfb=3.5),
        row(b, "envoy+sidecar@10k w4 wp", 16, 40.0, 90.0, 680),
        row(b, "envoy+sidecar@10k w8", 16, 40.0, 90.0, 700),  # no w8 baseline: unchecked
    ]
    found = {
        (c.target, c.mode, c.concurrency, c.measure, c.baseline): (round(c.value, 3), c.met)
        for c in b.target_checks(results)
    }
    one, four = "envoy+noop", "envoy+noop w4"
    assert found == {
        ("envoy+sidecar@100k", "json", 1, "added_p50_ms", one): (9.0, False),
        ("envoy+sidecar@100k", "json", 1, "added_p99_ms", one): (17.5, True),
        ("envoy+sidecar@100k", "json", 16, "throughput_share", one): (0.5, True),
        ("envoy+sidecar@100k ro", "json", 1, "added_p50_ms", one): (1.0, True),
        ("envoy+sidecar@100k ro", "json", 1, "added_p99_ms", one): (36.5, False),
        ("envoy+sidecar@100k", "stream", 1, "added_p50_ms", one): (10.9, False),
        ("envoy+sidecar@100k", "stream", 1, "added_p99_ms", one): (15.5, True),
        ("envoy+sidecar@100k", "stream", 1, "added_ttfb_p50_ms", one): (0.5, True),
        # Several workers: their own shape, and the one-process processor beside it.
        ("envoy+sidecar@10k w4 wp", "json", 16, "throughput_share", four): (0.4, False),
        ("envoy+sidecar@10k w4 wp", "json", 16, "throughput_share", one): (0.791, True),
    }


def test_no_baseline_no_checks() -> None:
    b = bench_latency
    assert b.target_checks([row(b, "envoy+sidecar@10k", 1, 9.0, 12.0, 100)]) == []


def test_the_cpu_table_prints_each_group_and_the_rate_its_total_allows(capsys: Any) -> None:
    b = bench_latency
    measured = row(b, "envoy+sidecar@100k", 16, 88.0, 158.0, 190)
    measured.cpu_ms = {"client": 0.5, "envoy": 0.75, "mock": 0.75, "ext_proc": 8.0}
    b.print_cpu_table([row(b, "envoy", 1, 0.8, 1.0, 1200), measured], cores=2)
    lines = capsys.readouterr().out.splitlines()
    assert "2 cores" in lines[1]
    assert len(lines) == 5  # blank, title, header, rule, the one row with CPU figures
    assert lines[-1].split()[-6:] == ["0.50", "0.75", "0.75", "8.00", "10.00", "200"]
