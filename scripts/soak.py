#!/usr/bin/env python
"""Soak: a bounded run through the real Envoy at the target concurrency, on loopback.

Starts mock LLM + sidecar + Envoy on a fresh store and runs ``--concurrency``
clients for ``--minutes``, together offering ``--rate`` requests per second (0: as
fast as they can, an overload test), with a mix of turns that state facts (so the
write queue, extraction, dedup and the store work the whole time) and questions (so
retrieval and injection do), half of them streamed. The mock LLM answers at once
(a real model takes seconds per turn, so real traffic at this concurrency offers far
fewer turns per second than this run). Every ``--sample-s`` seconds it samples the
sidecar's resident memory (its process tree: the milvus-lite server is a child) and
the write-queue depth from ``/metrics``. After the load stops it waits for the queue
to drain.

Verdict (exit 1 when any fails):

* no client errors;
* resident memory flat: the mean of the last third of samples is at most
  ``--rss-growth`` (fraction) above the mean of the middle third (the first third
  is warm-up: model load, corpus caches filling);
* no store call failed (a gate wait past ``store.timeout_s`` included);
* queue bounded: at a sustainable ``--rate`` the depth stays below the configured
  ``max_pending``, no turn is shed or dead-lettered, and it drains to zero within
  ``--drain-s`` after the load stops. In overload (``--rate 0``) shedding is the
  designed behaviour: it must be counted, every request must be accounted for as
  written or shed, and the queue must still drain.

    .venv/bin/python -m scripts.soak --minutes 5 --json out/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from e2e.procstat import cpu_seconds, process_tree, rss_bytes
from e2e.seed import SUBJECTS, VALUES
from e2e.stack import Stack, http_get, parse_settings
from scripts.benchlib import write_report


@dataclass
class Sample:
    elapsed_s: float
    rss_mib: float
    #: Of which the sidecar process itself (the rest: its children, e.g. milvus-lite).
    sidecar_rss_mib: float
    queue_depth: float
    #: Request latency p99 over the window since the previous sample.
    window_p99_ms: float
    #: CPU seconds used in that window by the sidecar process and by its children.
    sidecar_cpu_s: float
    children_cpu_s: float
    requests: int
    errors: int
    #: Event-loop stalls in the window: timers run over 20 ms late, and the bucket
    #: bound the worst one stayed under (``event_loop_lag_seconds``; workers summed).
    loop_stalls: float = 0.0
    loop_worst_ms: float = 0.0


@dataclass
class SoakReport:
    minutes: float
    concurrency: int
    users: int
    facts: str
    requests: int = 0
    errors: int = 0
    rps: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    rss_middle_mib: float = 0.0
    rss_last_mib: float = 0.0
    rss_growth: float = 0.0
    queue_max: float = 0.0
    queue_limit: int = 0
    drained_in_s: float | None = None
    turns_accepted: float = 0.0
    turns_written: float = 0.0
    turns_shed: float = 0.0
    dead_letters: float = 0.0
    loop_stalls: float = 0.0
    loop_worst_ms: float = 0.0
    store_errors: float = 0.0
    #: Store calls that waited for the milvus-lite gate, and their summed wait, by
    #: what waited: reads (for an upsert) and upserts (for reads).
    gate_waits: dict[str, float] = field(default_factory=dict)
    gate_wait_s: dict[str, float] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)


def turn(rng: random.Random, users: int, changing: bool) -> tuple[str, str, bool]:
    """(user, message, stream). Stable facts: a user always states the same value for
    a subject, so once each fact is stored the store stops growing (duplicates are
    no-ops) and resident memory must level off. Changing facts: every statement may
    supersede the last, so the store (and the caches of it) grow with the run."""
    index = rng.randrange(users)
    user = f"soak-user-{index:03d}"
    subject_index = rng.randrange(len(SUBJECTS))
    subject = SUBJECTS[subject_index]
    if changing:
        value = rng.choice(VALUES)
    else:
        value = VALUES[(index * 7 + subject_index * 13) % len(VALUES)]
    if rng.random() < 0.5:
        text = f"My {subject} is {value}."
    else:
        text = f"What do you remember about my {subject}?"
    return user, text, rng.random() < 0.5


async def one_request(
    session: aiohttp.ClientSession, url: str, user: str, text: str, stream: bool
) -> float:
    body = {
        "model": "mock-llm",
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
    }
    started = time.perf_counter()
    async with session.post(url, json=body, headers={"x-user-id": user}) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
        async for _chunk in response.content.iter_any():
            pass
    return time.perf_counter() - started


LAG_BUCKET = re.compile(r'^memory_sidecar_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)$')
#: A timer run later than this is counted as a stall.
STALL_S = 0.02


def loop_lag_buckets(stack: Stack) -> dict[float, float]:
    """The sidecar's event-loop lag histogram: cumulative count per bucket bound,
    summed over the workers."""
    buckets: dict[float, float] = {}
    for url in stack.sidecar_admin_urls:
        _, body = http_get(f"{url}/metrics")
        for line in body.decode().splitlines():
            match = LAG_BUCKET.match(line)
            if match:
                bound = float(match[1])
                buckets[bound] = buckets.get(bound, 0.0) + float(match[2])
    return buckets


def stalls(before: dict[float, float], after: dict[float, float]) -> tuple[float, float]:
    """Between two :func:`loop_lag_buckets`: timers run over :data:`STALL_S` late,
    and the smallest bound every one stayed under (ms; inf when over the largest)."""
    delta = {bound: after[bound] - before.get(bound, 0.0) for bound in after}
    total = delta.get(float("inf"), 0.0)
    over = total - delta.get(STALL_S, total)
    worst = min((bound for bound, count in delta.items() if count >= total), default=0.0)
    return over, worst * 1000 if total else 0.0


async def drive(stack: Stack, args: argparse.Namespace, report: SoakReport) -> list[float]:
    url = f"{stack.base_url}/chat/completions"
    deadline = time.monotonic() + args.minutes * 60
    latencies: list[float] = []
    sidecar_pid = stack.sidecar.process.pid if stack.sidecar.process else 0
    started = time.monotonic()

    interval = args.concurrency / args.rate if args.rate > 0 else 0.0

    async def client(index: int) -> None:
        rng = random.Random(index)
        next_at = started + interval * index / args.concurrency
        while time.monotonic() < deadline:
            if interval:
                next_at += interval
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            user, text, stream = turn(rng, args.users, args.facts == "changing")
            try:
                latencies.append(await one_request(session, url, user, text, stream))
                report.requests += 1
            except (aiohttp.ClientError, RuntimeError, TimeoutError):
                report.errors += 1

    async def sampler() -> None:
        seen, cpu_own, cpu_children = 0, 0.0, 0.0
        lag = await asyncio.to_thread(loop_lag_buckets, stack)
        while time.monotonic() < deadline:
            own = rss_bytes(sidecar_pid)
            members = process_tree(sidecar_pid)
            tree = sum(rss_bytes(pid) for pid in members)
            now_own = cpu_seconds(sidecar_pid)
            now_children = sum(cpu_seconds(pid) for pid in members[1:])
            window, seen = latencies[seen:], len(latencies)
            lag_before, lag = lag, await asyncio.to_thread(loop_lag_buckets, stack)
            loop_stalls, loop_worst_ms = stalls(lag_before, lag)
            report.samples.append(
                Sample(
                    elapsed_s=round(time.monotonic() - started, 1),
                    rss_mib=round(tree / 2**20, 1),
                    sidecar_rss_mib=round(own / 2**20, 1),
                    queue_depth=await asyncio.to_thread(
                        stack.sidecar_metric, "memory_sidecar_write_queue_depth"
                    ),
                    requests=report.requests,
                    errors=report.errors,
                    window_p99_ms=round(percentile(window, 99) * 1000, 1),
                    sidecar_cpu_s=round(now_own - cpu_own, 2),
                    children_cpu_s=round(now_children - cpu_children, 2),
                    loop_stalls=loop_stalls,
                    loop_worst_ms=loop_worst_ms,
                )
            )
            cpu_own, cpu_children = now_own, now_children
            sample = report.samples[-1]
            print(
                f"  t={sample.elapsed_s:>6.0f}s rss={sample.rss_mib:>7.1f} MiB "
                f"(sidecar {sample.sidecar_rss_mib:>7.1f}) "
                f"queue={sample.queue_depth:>5.0f} requests={sample.requests} "
                f"errors={sample.errors} p99={sample.window_p99_ms:>6.1f}ms "
                f"cpu sidecar={sample.sidecar_cpu_s:.1f}s children={sample.children_cpu_s:.1f}s "
                f"loop stalls={sample.loop_stalls:.0f} (worst <{sample.loop_worst_ms:.0f}ms)",
                flush=True,
            )
            await asyncio.sleep(args.sample_s)

    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(sampler(), *(client(i) for i in range(args.concurrency)))
    report.rps = round(report.requests / (time.monotonic() - started), 1)
    return latencies


def wait_drained(stack: Stack, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if stack.sidecar_metric("memory_sidecar_write_queue_depth") == 0:
            return round(time.monotonic() - started, 1)
        time.sleep(0.5)
    return None


def judge(report: SoakReport, args: argparse.Namespace) -> None:
    rss = [s.rss_mib for s in report.samples]
    third = max(1, len(rss) // 3)
    middle, last = rss[third : 2 * third] or rss, rss[-third:]
    report.rss_middle_mib = round(statistics.fmean(middle), 1)
    report.rss_last_mib = round(statistics.fmean(last), 1)
    report.rss_growth = round(report.rss_last_mib / report.rss_middle_mib - 1, 3)
    report.queue_max = max((s.queue_depth for s in report.samples), default=0.0)
    report.loop_stalls = sum(s.loop_stalls for s in report.samples)
    report.loop_worst_ms = max((s.loop_worst_ms for s in report.samples), default=0.0)
    if report.errors:
        report.failures.append(f"{report.errors} client errors")
    if report.requests == 0:
        report.failures.append("no request completed")
    if len(rss) < 6:
        report.failures.append(f"only {len(rss)} samples: run longer or sample more often")
    elif report.rss_growth > args.rss_growth:
        report.failures.append(
            f"resident memory grew {report.rss_growth:.1%} (middle third -> last third), "
            f"above {args.rss_growth:.0%}"
        )
    if report.drained_in_s is None:
        report.failures.append(f"queue not drained {args.drain_s:.0f}s after the load")
    if report.dead_letters:
        report.failures.append(f"{report.dead_letters:.0f} dead letters")
    if report.store_errors:
        report.failures.append(f"{report.store_errors:.0f} store calls failed")
    if args.rate > 0:
        if report.queue_max >= report.queue_limit:
            report.failures.append(f"queue reached its limit ({report.queue_limit})")
        if report.turns_shed:
            report.failures.append(f"{report.turns_shed:.0f} turns shed at a sustainable rate")
    elif report.drained_in_s is not None:
        # Overload: every completed request is a turn either written or shed.
        unaccounted = report.requests - report.turns_accepted - report.turns_shed
        if unaccounted:
            report.failures.append(f"{unaccounted:.0f} turns neither written nor counted shed")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else 0.0


def settings(values: list[str]) -> dict[str, Any]:
    try:
        return parse_settings(values)
    except ValueError as exc:
        raise SystemExit(f"--set: {exc}") from None


def run(args: argparse.Namespace, workdir: Path | None = None) -> SoakReport:
    report = SoakReport(
        minutes=args.minutes, concurrency=args.concurrency, users=args.users, facts=args.facts
    )
    workdir = workdir or Path(tempfile.mkdtemp(prefix="soak-"))
    stack = Stack(workdir, config_overrides=settings(args.set))
    report.queue_limit = int(stack.config.get("write_queue", {}).get("max_pending", 10_000))
    with stack:
        latencies = asyncio.run(drive(stack, args, report))
        report.p50_ms = round(percentile(latencies, 50) * 1000, 2)
        report.p99_ms = round(percentile(latencies, 99) * 1000, 2)
        report.drained_in_s = wait_drained(stack, args.drain_s)
        report.turns_accepted = stack.sidecar_metric(
            "memory_sidecar_turns_total", {"outcome": "accepted"}
        )
        report.turns_written = sum(  # by the workers, or their writer processes
            metric("memory_sidecar_turns_total", {"outcome": "written"})
            for metric in (stack.sidecar_metric, stack.writer_metric)
        )
        report.turns_shed = stack.sidecar_metric("memory_sidecar_turns_total", {"outcome": "shed"})
        report.dead_letters = stack.sidecar_metric("memory_sidecar_write_queue_dead_letters")
        report.store_errors = stack.metric_total("memory_sidecar_store_errors_total")
        for mode in ("read", "upsert"):
            waits = "memory_sidecar_store_gate_wait_seconds"
            report.gate_waits[mode] = stack.metric_total(f"{waits}_count", {"mode": mode})
            report.gate_wait_s[mode] = round(stack.metric_total(f"{waits}_sum", {"mode": mode}), 3)
    judge(report, args)
    return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rate", type=float, default=40.0, help="req/s offered; 0: no limit")
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--facts", choices=["stable", "changing"], default="stable")
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--rss-growth", type=float, default=0.10)
    parser.add_argument("--drain-s", type=float, default=120.0)
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="sidecar config override, e.g. cache.ttl_s=5 (repeatable)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    print()
    print(
        f"{report.requests} requests in {report.minutes:g} min at c={report.concurrency} "
        f"({report.rps} req/s, p50 {report.p50_ms} ms, p99 {report.p99_ms} ms), "
        f"{report.errors} errors"
    )
    print(
        f"resident memory: middle third {report.rss_middle_mib} MiB, last third "
        f"{report.rss_last_mib} MiB ({report.rss_growth:+.1%})"
    )
    print(
        f"write queue: max depth {report.queue_max:.0f} of {report.queue_limit}, drained in "
        f"{report.drained_in_s}s; {report.turns_accepted:.0f} turns accepted, "
        f"{report.turns_written:.0f} written, "
        f"{report.turns_shed:.0f} shed, {report.dead_letters:.0f} dead letters"
    )
    print(
        f"store: {report.store_errors:.0f} failed calls; waited for the milvus-lite gate: "
        + ", ".join(
            f"{report.gate_waits[mode]:.0f} {mode}s ({report.gate_wait_s[mode]:g} s in all)"
            for mode in report.gate_waits
        )
    )
    print(
        f"event loop: {report.loop_stalls:.0f} timers run over {STALL_S * 1000:.0f} ms late, "
        f"the worst under {report.loop_worst_ms:.0f} ms"
    )
    write_report(args.json, asdict(report))
    for failure in report.failures:
        print(f"FAIL: {failure}")
    print("PASS" if not report.failures else "FAILED")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
