#!/usr/bin/env python
"""Request latency through the real Envoy, side by side with baselines, in one run.

Targets (all on loopback, same machine, same mock LLM with zero model latency):

* ``direct``        the mock LLM itself
* ``envoy``         Envoy without any ext_proc filter
* ``envoy+noop``    Envoy + a do-nothing Python ext_proc (same gRPC loop, pass-through)
* ``envoy+sidecar`` Envoy + this sidecar: identity, embedding, retrieval over the
                    seeded store, injection, response capture and extraction queue

Prints p50/p99 latency and req/s per target and concurrency (plus time to first
byte for streaming) and writes JSON. Example::

    .venv/bin/python -m scripts.bench_latency --requests 400 --concurrency 1,16 \\
        --users 10 --per-user 1000 --json out/bench_latency.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

from e2e.seed import SUBJECTS, user_name
from e2e.stack import (
    PYTHON,
    ManagedProcess,
    Ports,
    Stack,
    free_port,
    free_port_run,
    http_get,
    wait_until,
)
from scripts.benchlib import REPO, percentile, write_report
from sidecar.config import config_from_mapping
from sidecar.envoy_config import render_yaml

TEMPLATES = [
    "What is my {}?",
    "Can you remind me about my {}?",
    "I forgot, what did I tell you about my {}?",
    "Do you remember my {} and why it matters?",
    "Tell me something about my {} please.",
]
#: Varied questions (templates x subjects): query embeddings are not repeats.
QUESTIONS = [template.format(subject) for template in TEMPLATES for subject in SUBJECTS]
#: Statements the mock LLM extracts a fact from (``--statements``): every one new.
STATEMENT_TEMPLATES = [
    "I went to the {place} with {name} on day {n}.",
    "I started learning {skill} after meeting {name}, note {n}.",
    "My neighbour {name} lent me a book about {skill} ({n}).",
    "I booked a trip to the {place} for week {n}.",
]
PLACES = ["lake", "old harbour", "botanical garden", "science museum", "night market"]
NAMES = ["Ana", "Bruno", "Chen", "Dara", "Emeka", "Farah"]
SKILLS = ["pottery", "sailing", "Portuguese", "chess openings", "bread baking"]


def statement(rng: random.Random, n: int) -> str:
    return rng.choice(STATEMENT_TEMPLATES).format(
        place=rng.choice(PLACES), name=rng.choice(NAMES), skill=rng.choice(SKILLS), n=n
    )


@dataclass
class Result:
    target: str
    concurrency: int
    stream: bool
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    rps: float
    ttfb_p50_ms: float | None = None
    ttfb_p99_ms: float | None = None
    #: CPU milliseconds per request, by process group (``client`` is the load
    #: generator), measured over the run and its warm-up.
    cpu_ms: dict[str, float] | None = None
    #: The slowest requests: [milliseconds, seconds into the run when it started],
    #: slowest first (to set beside what ran meanwhile: a flush, a full collection).
    slowest: list[list[float]] | None = None


def tool_loop_messages(question: str, rounds_done: int) -> list[dict[str, Any]]:
    """The conversation an agent sends on round trip ``rounds_done`` + 1 of a tool loop:
    the user's question, then one tool call and its result per earlier round trip —
    the latest user message is the same on every round trip."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": question},
    ]
    for n in range(rounds_done):
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "lookup", "arguments": f'{{"page": {n}}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": f"page {n}"})
    return messages


async def one_request(
    session: aiohttp.ClientSession,
    url: str,
    user: str,
    question: str,
    stream: bool,
    rounds_done: int = 0,
) -> tuple[float, float | None]:
    body = {
        "model": "mock-llm",
        "messages": tool_loop_messages(question, rounds_done),
        "stream": stream,
    }
    started = time.perf_counter()
    first: float | None = None
    async with session.post(url, json=body, headers={"x-user-id": user}) as response:
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
        async for _chunk in response.content.iter_any():
            if first is None:
                first = time.perf_counter() - started
    return time.perf_counter() - started, first


async def run_load(
    url: str,
    *,
    requests: int,
    concurrency: int,
    stream: bool,
    users: int,
    warmup: int,
    seed: int,
    statements: float = 0.0,
    tool_rounds: int = 1,
    run: int = 0,
) -> tuple[list[float], list[float], int, float, list[float]]:
    """The latencies, times to first byte, errors, wall time and each latency's start
    (seconds into the run). ``statements``: the share of requests that state a new fact
    (the rest ask). ``tool_rounds`` > 1: each planned message is sent as that many round
    trips of an agent's tool loop (one after another; ``requests`` counts round trips,
    rounded up to whole loops), and each loop's question is its own (numbered with
    ``run``, which callers vary per run: a loop's first round trip is never a repeat of
    an earlier run's)."""
    rng = random.Random(seed)
    plan = [
        (
            user_name(rng.randrange(users)),
            statement(rng, seed * 1_000_000 + i)
            if rng.random() < statements
            else rng.choice(QUESTIONS),
        )
        for i in range(-(-requests // tool_rounds))
    ]
    warm = list(plan)
    if tool_rounds > 1:  # same length in every run: the same tokens to embed
        plan = [(user, f"{text} (task {run:03d}-{i:05d})") for i, (user, text) in enumerate(plan)]
    latencies: list[float] = []
    ttfbs: list[float] = []
    starts: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        for i in range(warmup):
            user, question = warm[i % len(warm)]
            await one_request(session, url, user, question, stream)
        queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        for item in plan:
            queue.put_nowait(item)

        async def worker() -> None:
            nonlocal errors
            while True:
                try:
                    user, question = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                for rounds_done in range(tool_rounds):
                    began = time.perf_counter() - started
                    try:
                        total, first = await one_request(
                            session, url, user, question, stream, rounds_done
                        )
                    except (aiohttp.ClientError, RuntimeError, TimeoutError):
                        errors += 1
                        break
                    latencies.append(total)
                    starts.append(began)
                    if first is not None:
                        ttfbs.append(first)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return latencies, ttfbs, errors, wall, starts


def summarize(
    target: str,
    concurrency: int,
    stream: bool,
    data: tuple[list[float], list[float], int, float, list[float]],
) -> Result:
    latencies, ttfbs, errors, wall, starts = data
    ms = [x * 1000 for x in latencies]
    result = Result(
        target=target,
        concurrency=concurrency,
        stream=stream,
        requests=len(latencies),
        errors=errors,
        p50_ms=round(percentile(ms, 50), 2),
        p99_ms=round(percentile(ms, 99), 2),
        mean_ms=round(statistics.fmean(ms), 2) if ms else float("nan"),
        rps=round(len(latencies) / wall, 1) if wall > 0 else 0.0,
        slowest=[
            [round(1000 * total, 2), round(at, 2)]
            for total, at in sorted(zip(latencies, starts, strict=True), reverse=True)[:5]
        ],
    )
    if stream and ttfbs:
        first_ms = [x * 1000 for x in ttfbs]
        result.ttfb_p50_ms = round(percentile(first_ms, 50), 2)
        result.ttfb_p99_ms = round(percentile(first_ms, 99), 2)
    return result


def wait_listening(ports: range, timeout: float = 60.0) -> None:
    """Until every port in ``ports`` accepts TCP connections on loopback. Envoy's
    ext_proc filter fails open (``failure_mode_allow``) while its processor is not
    listening yet, so a baseline measured before that measures Envoy alone."""

    def accepts(port: int) -> bool:
        socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        return True

    for port in ports:
        wait_until(partial(accepts, port), timeout, f"ext_proc processor on {port}")


def ext_proc_bypassed(admin_port: int) -> int:
    """Requests Envoy let through without its ext_proc processor (failure mode)."""
    status, body = http_get(
        f"http://127.0.0.1:{admin_port}/stats?filter=ext_proc.failure_mode_allowed"
    )
    if status != 200:
        raise RuntimeError(f"Envoy admin /stats answered {status}")
    return sum(
        int(value)
        for line in body.decode().splitlines()
        if (value := line.rpartition(": ")[2]).isdigit()
    )


def check_not_bypassed(name: str, admin_port: int) -> None:
    """Fail the run when some of ``name``'s requests skipped its processor."""
    bypassed = ext_proc_bypassed(admin_port)
    if bypassed:
        raise RuntimeError(f"{name}: {bypassed} requests bypassed the ext_proc processor")


def noop_processor(workdir: Path) -> tuple[ManagedProcess, int]:
    """The do-nothing ext_proc baseline (not started) and its port."""
    processes, port = noop_processors(workdir, 1)
    return processes[0], port


def noop_processors(workdir: Path, count: int) -> tuple[list[ManagedProcess], int]:
    """``count`` do-nothing ext_proc processes (not started) on consecutive ports,
    the baseline for ``server.workers: count``; the first port."""
    port = free_port_run(count)
    processes = [
        ManagedProcess(
            f"noop-extproc-{i}",
            [PYTHON, "-m", "e2e.noop_extproc", "--port", str(port + i)],
            workdir / f"noop-{port + i}.log",
        )
        for i in range(count)
    ]
    return processes, port


def start_envoy(
    stack: Stack, name: str, sidecar_port: int | None, workdir: Path, *, workers: int = 1
) -> tuple[ManagedProcess, int, int]:
    """An extra Envoy: without ext_proc (None) or in front of another ext_proc port
    (``workers`` of them on consecutive ports); the process, its port and its admin
    port."""
    port, admin = free_port(), free_port()
    document = dict(stack.config)
    if workers > 1:
        document["server"] = {**stack.config["server"], "workers": workers}
    document["envoy"] = {
        **stack.config["envoy"],
        "listen_port": port,
        "admin_port": admin,
        "sidecar_port": sidecar_port or stack.ports.sidecar,
    }
    config = config_from_mapping(document, env={})
    path = workdir / f"envoy-{name}.yaml"
    path.write_text(render_yaml(config, stack.mock_url, with_ext_proc=sidecar_port is not None))
    process = ManagedProcess(
        f"envoy-{name}",
        [
            str(Path(PYTHON).parent / "envoy"),
            "-c",
            str(path),
            "--disable-hot-restart",
            "--log-level",
            "error",
        ],
        workdir / f"envoy-{name}.log",
    ).start()
    try:
        wait_until(
            lambda: http_get(f"http://127.0.0.1:{admin}/ready")[0] == 200, 30, f"envoy-{name}"
        )
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}:\n{process.tail()}") from None
    return process, port, admin


#: The issue's targets, over a do-nothing processor (:func:`target_checks`).
TARGET_ADDED_P50_MS = 8.0
TARGET_ADDED_P99_MS = 30.0
TARGET_THROUGHPUT_SHARE = 0.5
TARGET_ADDED_TTFB_MS = 1.0


@dataclass(frozen=True, slots=True)
class TargetCheck:
    """One sidecar row against a do-nothing baseline row (``baseline``)."""

    target: str
    mode: str
    concurrency: int
    measure: str  # added_p50_ms, added_p99_ms, throughput_share, added_ttfb_p50_ms
    value: float
    limit: float
    met: bool
    baseline: str


def _baseline_name(target: str) -> str | None:
    """``envoy+sidecar@100k w4 ro`` -> ``envoy+noop w4``; None for other rows."""
    if not target.startswith("envoy+sidecar@"):
        return None
    words = target.split()
    workers = next((w for w in words[1:] if w.startswith("w") and w[1:].isdigit()), None)
    return "envoy+noop" + (f" {workers}" if workers else "")


ONE_PROCESS_BASELINE = "envoy+noop"


def target_checks(results: list[Result]) -> list[TargetCheck]:
    """Every sidecar row against the targets: added p50 and p99 and the streaming
    first byte at concurrency 1; at higher concurrency, its share of the baseline's
    req/s. A row of several workers is held to the do-nothing processor of the same
    shape and, where the run measured it, to the one-process do-nothing processor too
    (the baseline the issue names)."""
    rows = {(r.target, r.stream, r.concurrency): r for r in results}
    checks: list[TargetCheck] = []
    for r in results:
        name = _baseline_name(r.target)
        base = rows.get((name, r.stream, r.concurrency)) if name else None
        if name is None or base is None:
            continue
        mode = "stream" if r.stream else "json"
        # (measure, value, limit, whether the value must stay at or below the limit, baseline)
        measures: list[tuple[str, float, float, bool, str]] = []
        if r.concurrency == 1:
            added_p50 = r.p50_ms - base.p50_ms
            measures.append(("added_p50_ms", added_p50, TARGET_ADDED_P50_MS, True, name))
            added_p99 = r.p99_ms - base.p99_ms
            measures.append(("added_p99_ms", added_p99, TARGET_ADDED_P99_MS, True, name))
            if r.ttfb_p50_ms is not None and base.ttfb_p50_ms is not None:
                added = r.ttfb_p50_ms - base.ttfb_p50_ms
                measures.append(("added_ttfb_p50_ms", added, TARGET_ADDED_TTFB_MS, True, name))
        else:
            bases = [(name, base)]
            single = rows.get((ONE_PROCESS_BASELINE, r.stream, r.concurrency))
            if name != ONE_PROCESS_BASELINE and single is not None:
                bases.append((ONE_PROCESS_BASELINE, single))
            for base_name, b in bases:
                share = r.rps / b.rps if b.rps else 0.0
                measures.append(
                    ("throughput_share", share, TARGET_THROUGHPUT_SHARE, False, base_name)
                )
        for measure, value, limit, at_most, base_name in measures:
            met = value <= limit if at_most else value >= limit
            checks.append(
                TargetCheck(r.target, mode, r.concurrency, measure, value, limit, met, base_name)
            )
    return checks


def print_target_checks(checks: list[TargetCheck]) -> None:
    if not checks:
        return
    print("\nagainst the targets (over the do-nothing processor named last):")
    for c in checks:
        sign = "<=" if c.measure != "throughput_share" else ">="
        print(
            f"  {c.target:<24} {c.mode:<6} c={c.concurrency:<3} {c.measure:<18} "
            f"{c.value:>8.2f} {sign} {c.limit:<5g} {'met' if c.met else 'NOT met':<8} "
            f"vs {c.baseline}"
        )


def print_table(results: list[Result]) -> None:
    header = f"{'target':<15} {'mode':<7} {'conc':>4} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8}"
    header += f" {'ttfb p50':>9} {'errors':>6}"
    print(header)
    print("-" * len(header))
    for r in results:
        ttfb = f"{r.ttfb_p50_ms:.2f}" if r.ttfb_p50_ms is not None else "-"
        mode = "stream" if r.stream else "json"
        print(
            f"{r.target:<15} {mode:<7} {r.concurrency:>4} {r.p50_ms:>8.2f} {r.p99_ms:>8.2f} "
            f"{r.rps:>8.1f} {ttfb:>9} {r.errors:>6}"
        )


#: The columns of :func:`print_cpu_table`, in order.
CPU_GROUPS = ("client", "envoy", "mock", "ext_proc")


def print_cpu_table(results: list[Result], cores: int) -> None:
    """CPU milliseconds per request of each process group, their total, and the rate
    that total allows on ``cores`` cores (what a concurrency-16 run approaches when
    the processes, not waits, are the limit)."""
    rows = [r for r in results if r.cpu_ms]
    if not rows:
        return
    header = f"{'target':<24} {'mode':<7} {'conc':>4}"
    header += "".join(f" {group:>9}" for group in CPU_GROUPS)
    header += f" {'total':>7} {'ceiling req/s':>13}"
    print(f"\nCPU per request (ms; all processes on this machine's {cores} cores):")
    print(header)
    print("-" * len(header))
    for r in rows:
        assert r.cpu_ms is not None
        total = sum(r.cpu_ms.values())
        cells = "".join(
            f" {r.cpu_ms[g]:>9.2f}" if g in r.cpu_ms else f" {'-':>9}" for g in CPU_GROUPS
        )
        ceiling = f"{cores * 1000 / total:.0f}" if total > 0 else "-"
        mode = "stream" if r.stream else "json"
        print(f"{r.target:<24} {mode:<7} {r.concurrency:>4}{cells} {total:>7.2f} {ceiling:>13}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=400, help="per target and concurrency")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--per-user", type=int, default=1000)
    parser.add_argument("--no-stream", action="store_true", help="skip the streaming runs")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",")]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-latency-"))
    workdir.mkdir(parents=True, exist_ok=True)

    ports = Ports()
    stack = Stack(workdir, ports=ports)
    print(f"seeding {args.users * args.per_user} memories ...", flush=True)
    subprocess.run(
        [
            PYTHON,
            "-m",
            "e2e.seed",
            "--uri",
            str(workdir / "memory.db"),
            "--users",
            str(args.users),
            "--per-user",
            str(args.per_user),
        ],
        check=True,
        cwd=REPO,
    )
    noop, noop_port = noop_processor(workdir)
    extra: list[ManagedProcess] = []
    results: list[Result] = []
    try:
        stack.start()
        noop.start()
        bare, bare_port, _ = start_envoy(stack, "bare", None, workdir)
        noop_envoy, noop_envoy_port, noop_admin = start_envoy(stack, "noop", noop_port, workdir)
        extra += [bare, noop_envoy]
        wait_listening(range(noop_port, noop_port + 1))
        targets = {
            "direct": f"{stack.mock_url}/v1/chat/completions",
            "envoy": f"http://127.0.0.1:{bare_port}/v1/chat/completions",
            "envoy+noop": f"http://127.0.0.1:{noop_envoy_port}/v1/chat/completions",
            "envoy+sidecar": f"{stack.base_url}/chat/completions",
        }
        modes = [False] if args.no_stream else [False, True]
        for stream in modes:
            for concurrency in levels:
                for name, url in targets.items():
                    data = asyncio.run(
                        run_load(
                            url,
                            requests=args.requests,
                            concurrency=concurrency,
                            stream=stream,
                            users=args.users,
                            warmup=args.warmup,
                            seed=concurrency,
                        )
                    )
                    results.append(summarize(name, concurrency, stream, data))
                    r = results[-1]
                    print(
                        f"  {name:<15} stream={stream!s:<5} c={concurrency:<3} "
                        f"p50={r.p50_ms:.2f}ms p99={r.p99_ms:.2f}ms {r.rps:.0f} req/s",
                        flush=True,
                    )
        check_not_bypassed("envoy+noop", noop_admin)
        injected = stack.sidecar_metric("memory_sidecar_injected_memories_sum")
        count = stack.sidecar_metric("memory_sidecar_injected_memories_count")
    finally:
        for process in extra:
            process.stop()
        noop.stop()
        stack.stop()

    print()
    print_table(results)
    mean_injected = injected / count if count else 0.0
    print(
        f"\nmemories in store: {args.users * args.per_user} ({args.per_user}/user); "
        f"mean injected per request: {mean_injected:.2f}"
    )
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "store_memories": args.users * args.per_user,
        "per_user": args.per_user,
        "mean_injected": round(mean_injected, 2),
        "results": [asdict(r) for r in results],
    }
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
