#!/usr/bin/env python
"""End-to-end latency and throughput through the real Envoy, in one run.

Baselines (measured once): the mock LLM directly, Envoy alone, Envoy + a do-nothing
Python ext_proc. Then Envoy + this sidecar with retrieval over stores of each
requested size (default 10k and 100k memories, 1k per user; seeded through the
write path's bulk loader). Non-streaming and streaming (time to first byte), at
each concurrency. Queries vary (templates x topics), users are drawn from all
seeded users; every user's corpus is warmed first. Prints a table, writes JSON.

    .venv/bin/python -m scripts.bench_e2e --sizes 10000,100000 --json out/bench_e2e.json

``--workers 1,4`` runs the sidecar once per worker count (``server.workers``), and
the do-nothing baseline with as many processes behind the same Envoy cluster, so
each sidecar row has a baseline of its own shape (``w4`` in the name).

The sidecar's caches for questions asked again — query vectors
(``embedding.query_cache_entries``) and rankings (``retrieval.ranking_cache_ttl_s``)
— are off unless ``--repeat-caches on``: the 100 questions repeat per user over a
run, so with them on a share of the rows would skip the model and the ranking by
chance. ``--tool-rounds 4`` sends each question as four round trips of an agent's
tool loop (the same latest user message each time, a tool call and result appended
per round trip), the traffic they are for; each run prints their hits and misses.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from e2e.procstat import CpuMeter, wait_quiet
from e2e.stack import (
    PYTHON,
    ManagedProcess,
    Stack,
    http_get,
    merge_settings,
    parse_settings,
)
from scripts.bench_latency import (
    Result,
    check_not_bypassed,
    ext_proc_bypassed,
    noop_processors,
    print_cpu_table,
    print_table,
    print_target_checks,
    run_load,
    start_envoy,
    summarize,
    target_checks,
    wait_listening,
)
from scripts.benchlib import REPO, embedding_spec, write_report


def seeded_store(size: int, per_user: int, cache: Path | None, workdir: Path) -> Path:
    """A store file with ``size`` memories (copied from ``cache`` when present)."""
    target = workdir / f"memory-{size}.db"
    cached = cache / f"memory-{size}.db" if cache else None
    if cached is not None and cached.exists():
        shutil.copy(cached, target)
        return target
    print(f"seeding {size} memories ...", flush=True)
    subprocess.run(
        [PYTHON, "-m", "e2e.seed", "--uri", str(target), "--users", str(size // per_user),
         "--per-user", str(per_user)],
        check=True,
        cwd=REPO,
    )  # fmt: skip
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(target, cached)
    return target


def corpora_settled(polls: Sequence[Sequence[float]], size: int) -> bool:
    """Whether the workers' corpus caches (``polls``: each poll's rows per worker,
    oldest first) have finished loading: every worker holds the same rows, at least
    ``size``, and the last two polls agree. The rows include each user's category
    nodes as well as the ``size`` memories, so reaching ``size`` alone is not done
    (at 10k, ~11,000 of 12,207 rows)."""
    if len(polls) < 2 or list(polls[-1]) != list(polls[-2]):
        return False
    rows = polls[-1]
    return bool(rows) and min(rows) >= size and min(rows) == max(rows)


def wait_corpora_loaded(
    stack: Stack, size: int, warm: Callable[[int], None], timeout: float = 600.0
) -> None:
    """Until the corpus caches hold every seeded user (see :func:`corpora_settled`):
    the warm-up requests are served by the store while each user's corpus loads in
    the background (~0.25 s per 1,000 rows from milvus-lite, ~0.7 with a schema-1
    store, longer with several workers loading from one milvus-lite), and measuring
    before that ends measures the loads. Every worker caches the users it has
    served: warms again (users drawn at random may have been missed by a worker)
    when loading stalls."""
    deadline = time.monotonic() + timeout
    polls: list[list[float]] = []
    stalled = 0
    while time.monotonic() < deadline:
        polls.append(stack.sidecar_metric_per_worker("memory_sidecar_corpus_cache_rows"))
        if corpora_settled(polls, size):
            print(f"  corpora loaded: {min(polls[-1]):.0f} rows cached", flush=True)
            return
        stalled = stalled + 1 if len(polls) > 1 and polls[-1] == polls[-2] else 0
        if stalled >= 10:
            warm(len(polls))
            stalled = 0
        time.sleep(1.0)
    rows = polls[-1] if polls else []
    print(f"  warning: corpora still loading after {timeout:.0f}s: {rows}", flush=True)


def wait_writes_drained(stack: Stack, timeout: float = 300.0) -> None:
    """Until the write queue is empty: turns left from earlier requests would be
    written while the next run measures, and slow it down by work it did not cause."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stack.sidecar_metric("memory_sidecar_write_queue_depth") == 0:
            return
        time.sleep(0.5)
    print("  warning: the write queue did not drain before measuring", flush=True)


def fact_decisions(stack: Stack) -> dict[str, float]:
    """The write path's fact decisions so far (add_*, noop_*, supersede_*, ...)."""
    out: dict[str, float] = {}
    for url in [*stack.sidecar_admin_urls, *stack.writer_metrics_urls]:
        _, body = http_get(f"{url}/metrics")
        for line in body.decode().splitlines():
            if line.startswith('memory_sidecar_facts_total{decision="'):
                head, _, value = line.rpartition(" ")
                decision = head.split('"')[1]
                out[decision] = out.get(decision, 0.0) + float(value)
    return out


#: Where a sidecar request's time goes: (label, histogram, labels) of its metrics.
#: Each is a mean per observation: a streamed response has a response_body message
#: per chunk.
BREAKDOWN = (
    ("request_headers", "memory_sidecar_phase_seconds", {"phase": "request_headers"}),
    ("request_body", "memory_sidecar_phase_seconds", {"phase": "request_body"}),
    ("response_headers", "memory_sidecar_phase_seconds", {"phase": "response_headers"}),
    ("response_body", "memory_sidecar_phase_seconds", {"phase": "response_body"}),
    ("embedding", "memory_sidecar_embed_seconds", None),
    ("retrieval", "memory_sidecar_retrieval_seconds", {"strategy": "default"}),
    ("journal_append", "memory_sidecar_journal_seconds", {"operation": "append"}),
    # A full garbage collection holds every request in flight (sidecar/runtime/gc_control.py).
    ("gc_full_pause", "memory_sidecar_gc_pause_seconds", {"generation": "2"}),
)


def histogram_totals(stack: Stack) -> dict[str, tuple[float, float]]:
    """(sum, count) of each :data:`BREAKDOWN` histogram, summed over the workers."""
    return {
        label: (stack.sidecar_metric(f"{name}_sum", labels),
                stack.sidecar_metric(f"{name}_count", labels))
        for label, name, labels in BREAKDOWN
    }  # fmt: skip


def gc_collected(stack: Stack) -> float:
    """Objects the workers' garbage collectors freed so far (every generation): the
    processes that serve requests, as the full-collection count beside it."""
    name = "memory_sidecar_gc_collected_objects_total"
    return sum(stack.sidecar_metric(name, {"generation": str(g)}) for g in range(3))


#: The caches for questions asked again, by the name printed for them.
REPEAT_CACHES = {
    "query-vector": "memory_sidecar_query_vector_cache_lookups_total",
    "ranking": "memory_sidecar_ranking_cache_lookups_total",
}


def repeat_cache_lookups(stack: Stack) -> dict[str, tuple[float, float]]:
    """(hits, misses) of each of the sidecar's repeat caches so far, over the workers."""
    return {
        label: (stack.sidecar_metric(name, {"outcome": "hit"}),
                stack.sidecar_metric(name, {"outcome": "miss"}))
        for label, name in REPEAT_CACHES.items()
    }  # fmt: skip


def breakdown_ms(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, float]:
    """Mean milliseconds per observation between two :func:`histogram_totals`."""
    means = {}
    for label, (total, count) in after.items():
        n = count - before[label][1]
        if n > 0:
            means[label] = 1000 * (total - before[label][0]) / n
    return means


def measure(
    name: str,
    url: str,
    args: argparse.Namespace,
    users: int,
    results: list[Result],
    settle: Callable[[], None] | None = None,
    stack: Stack | None = None,
    breakdowns: dict[str, dict[str, float]] | None = None,
    cpu: Mapping[str, Sequence[ManagedProcess]] | None = None,
) -> None:
    """One run per mode and concurrency; ``settle`` runs before each, and after it
    when ``cpu`` is given, so that the CPU measured includes the writes the run left
    queued. With ``cpu`` a run also waits until those processes are idle first, so
    no background work left from warming or the run before is counted. With
    ``stack``, the sidecar's mean request-body phase, embedding and retrieval times
    of each run are printed and kept in ``breakdowns``. ``cpu``: process groups
    (their process trees) whose CPU time per request each run records, with the load
    generator's own as ``client``."""
    for stream in [False] if args.no_stream else [False, True]:
        for concurrency in [int(c) for c in args.concurrency.split(",")]:
            if settle is not None:
                settle()
            roots = [pid for group in (cpu or {}).values() for pid in pids(group)]
            if roots and not wait_quiet(roots):
                print("  warning: the processes were still busy before measuring", flush=True)
            before = histogram_totals(stack) if stack is not None else None
            lookups = repeat_cache_lookups(stack) if stack is not None else None
            collected_before = gc_collected(stack) if stack is not None else 0.0
            meter = CpuMeter({label: pids(group) for label, group in (cpu or {}).items()})
            meter.start()
            data = asyncio.run(
                run_load(
                    url,
                    requests=args.requests,
                    concurrency=concurrency,
                    stream=stream,
                    users=users,
                    warmup=args.warmup,
                    seed=concurrency,
                    statements=args.statements,
                    tool_rounds=args.tool_rounds,
                    run=len(results),
                )
            )
            if cpu is not None and settle is not None:
                settle()
            spent = meter.stop()
            result = summarize(name, concurrency, stream, data)
            if cpu is not None:
                served = len(data[0]) + args.warmup
                result.cpu_ms = {k: round(1000 * v / served, 3) for k, v in spent.items()}
            results.append(result)
            print(
                f"  {name:<20} stream={stream!s:<5} c={concurrency:<3} p50={result.p50_ms:.2f}ms "
                f"p99={result.p99_ms:.2f}ms {result.rps:.0f} req/s",
                flush=True,
            )
            if result.slowest:
                print("    slowest: " + ", ".join(
                    f"{ms:.1f} ms at {at:.1f} s" for ms, at in result.slowest
                ))  # fmt: skip
            if result.cpu_ms:
                print("    cpu ms/request: " + ", ".join(
                    f"{k} {v:.2f}" for k, v in result.cpu_ms.items()
                ))  # fmt: skip
            if stack is not None and before is not None:
                totals = histogram_totals(stack)
                means = breakdown_ms(before, totals)
                print("    sidecar means: " + ", ".join(f"{k} {v:.2f}ms" for k, v in means.items()))
                full_gcs = totals["gc_full_pause"][1] - before["gc_full_pause"][1]
                # Per request served, warm-up included (the counters count those too).
                cycles = (gc_collected(stack) - collected_before) / (len(data[0]) + args.warmup)
                print(f"    garbage collector: {full_gcs:.0f} full collections, "
                      f"{cycles:.1f} objects in cycles freed per request")  # fmt: skip
                means["gc_full_pauses"] = full_gcs
                means["gc_cycle_objects_per_request"] = cycles
                if lookups is not None:
                    for label, (hits, misses) in repeat_cache_lookups(stack).items():
                        hits, misses = hits - lookups[label][0], misses - lookups[label][1]
                        means[f"{label}_cache_hits"] = hits
                        means[f"{label}_cache_misses"] = misses
                        print(f"    {label} cache: {hits:.0f} hits, {misses:.0f} misses")
                if breakdowns is not None:
                    breakdowns[f"{name} stream={stream} c={concurrency}"] = means


def pids(processes: Sequence[ManagedProcess]) -> list[int]:
    """The process ids of ``processes`` that have been started."""
    return [p.process.pid for p in processes if p.process is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--per-user", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--no-stream", action="store_true")
    parser.add_argument("--store-cache", type=Path, help="reuse seeded stores from here")
    parser.add_argument(
        "--readonly",
        action="store_true",
        help="also measure each store on the read-only route (retrieval and injection, "
        "no extraction or write): the request path without the write path beside it",
    )
    parser.add_argument(
        "--statements",
        type=float,
        default=0.0,
        help="share of requests that state a new fact (extracted and stored by the "
        "write path while the load runs); the rest ask questions (default 0)",
    )
    parser.add_argument(
        "--workers",
        default="1",
        help="sidecar processes (server.workers), comma-separated: one run each, and a"
        " do-nothing baseline with as many processes",
    )
    parser.add_argument("--lanes", type=int, help="embedding.lanes of the sidecar")
    parser.add_argument(
        "--embedding",
        help="embedding backend of the sidecar, BACKEND[@DEVICE[/DTYPE]]: onnx-int8 (the "
        "default), torch@cuda, torch@cuda/float16 (the seeded stores keep the default's "
        "vectors)",
    )
    parser.add_argument(
        "--shared-encoder",
        choices=("auto", "on", "off"),
        help="embedding.shared: one encoder process for all workers (default: auto, on a"
        " GPU device)",
    )
    parser.add_argument(
        "--write-process",
        default="off",
        help="write_queue.own_process, comma-separated (off, on, or off,on): one sidecar"
        " run each; 'on' rows are labelled 'wp'",
    )
    parser.add_argument(
        "--repeat-caches",
        choices=("off", "on"),
        default="off",
        help="the sidecar's query-vector and ranking caches: off (the default: every"
        " request runs the model and ranks) or on (the product's defaults)",
    )
    parser.add_argument(
        "--tool-rounds",
        type=int,
        default=1,
        help="round trips per question, as in an agent's tool loop (default 1)",
    )
    parser.add_argument(
        "--model-ms",
        type=float,
        default=0.0,
        help="the mock model's time per answer, for every target (default 0: the"
        " adversarial case, where the previous turn's write overlaps the next request"
        " instead of the model's time)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="sidecar config override for every sidecar run, e.g. llm.transport=httpx"
        " (repeatable; applied after the flags above)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        settings = parse_settings(args.set)
    except ValueError as exc:
        parser.error(str(exc))
    sizes = [int(s) for s in args.sizes.split(",")]
    worker_counts = [int(w) for w in args.workers.split(",")]
    write_processes = [w.strip() == "on" for w in args.write_process.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    results: list[Result] = []
    breakdowns: dict[str, dict[str, float]] = {}
    report: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "per_user": args.per_user,
        "embedding": args.embedding or "onnx-int8",
        "shared_encoder": args.shared_encoder or "auto",
        "sizes": sizes,
    }
    try:
        stores = {
            size: seeded_store(size, args.per_user, args.store_cache, workdir) for size in sizes
        }
        # Baselines: mock, Envoy alone, Envoy + do-nothing ext_proc.
        mock_args = ("--latency-ms", str(args.model_ms)) if args.model_ms else ()
        base = Stack(workdir / "base", with_sidecar=False, mock_args=mock_args)
        extra: list[ManagedProcess] = []
        try:
            base.start()
            bare, bare_port, _ = start_envoy(base, "bare", None, workdir)
            extra.append(bare)
            mock = [base.mock]
            measure("direct", f"{base.mock_url}/v1/chat/completions", args, 10, results,
                    cpu={"mock": mock})  # fmt: skip
            measure("envoy", f"http://127.0.0.1:{bare_port}/v1/chat/completions", args, 10,
                    results, cpu={"envoy": [bare], "mock": mock})  # fmt: skip
            for workers in worker_counts:
                noops, noop_port = noop_processors(workdir, workers)
                extra += [noop.start() for noop in noops]
                noop_envoy, noop_envoy_port, noop_admin = start_envoy(
                    base, f"noop-w{workers}", noop_port, workdir, workers=workers
                )
                extra.append(noop_envoy)
                wait_listening(range(noop_port, noop_port + workers))
                name = "envoy+noop" + (f" w{workers}" if workers > 1 else "")
                url = f"http://127.0.0.1:{noop_envoy_port}/v1/chat/completions"
                measure(name, url, args, 10, results,
                        cpu={"envoy": [noop_envoy], "mock": mock, "ext_proc": noops})  # fmt: skip
                check_not_bypassed(name, noop_admin)
                for process in extra[1:]:
                    process.stop()
                del extra[1:]
        finally:
            for process in extra:
                process.stop()
            base.stop()
        runs = [(s, w, wp) for s in sizes for w in worker_counts for wp in write_processes]
        for run, (size, workers, own_process) in enumerate(runs):
            users = size // args.per_user
            label = f"{size // 1000}k" + (f" w{workers}" if workers > 1 else "")
            label += " wp" if own_process else ""
            stack_dir = workdir / f"sidecar-{run}"  # the same shape may run twice
            stack_dir.mkdir()
            shutil.copy(stores[size], stack_dir / "memory.db")
            overrides: dict[str, Any] = {
                "server": {"workers": workers},
                "write_queue": {"own_process": own_process},
            }
            embedding: dict[str, Any] = {}
            if args.repeat_caches == "off":
                embedding["query_cache_entries"] = 0
                overrides["defaults"] = {"retrieval": {"ranking_cache_ttl_s": 0}}
            if args.lanes:
                embedding["lanes"] = args.lanes
            if args.embedding:
                embedding |= embedding_spec(args.embedding)
            if args.shared_encoder:
                embedding["shared"] = args.shared_encoder
            overrides["embedding"] = embedding
            merge_settings(overrides, settings)
            stack = Stack(stack_dir, config_overrides=overrides, mock_args=mock_args)
            try:
                stack.start()

                # Warm every user's corpus (the first request of a scope is served by
                # the store while its corpus loads in the background) on the read-only
                # route: warming leaves no turns for the write path to catch up on.
                readonly = stack.route_url("/readonly/v1/chat/completions")

                def warm(seed: int, url: str = readonly, users: int = users) -> None:
                    asyncio.run(
                        run_load(url, requests=users * 10, concurrency=4, stream=False,
                                 users=users, warmup=0, seed=seed)
                    )  # fmt: skip

                warm(99)
                wait_corpora_loaded(stack, size, warm)
                drained = partial(wait_writes_drained, stack)
                groups = {"envoy": [stack.envoy], "mock": [stack.mock], "ext_proc": [stack.sidecar]}
                measure(f"envoy+sidecar@{label}", f"{stack.base_url}/chat/completions",
                        args, users, results, drained, stack, breakdowns, groups)  # fmt: skip
                if args.readonly:
                    measure(f"envoy+sidecar@{label} ro", readonly, args, users,
                            results, drained, stack, breakdowns, groups)  # fmt: skip
                key = label.replace(" ", "_")
                report[f"mean_injected_{key}"] = stack.sidecar_metric(
                    "memory_sidecar_injected_memories_sum"
                ) / max(1.0, stack.sidecar_metric("memory_sidecar_injected_memories_count"))
                report[f"cold_fallbacks_{key}"] = stack.sidecar_metric(
                    "memory_sidecar_cold_corpus_fallbacks_total"
                )
                report[f"facts_{key}"] = fact_decisions(stack)
                report[f"write_queue_depth_{key}"] = stack.sidecar_metric(
                    "memory_sidecar_write_queue_depth"
                )
                # Requests Envoy let through without the sidecar (its ext_proc
                # failure mode: a message timeout, a lost stream) ran without memory.
                report[f"bypassed_{key}"] = bypassed = ext_proc_bypassed(stack.ports.envoy_admin)
                if bypassed:
                    print(f"  {label}: {bypassed} requests bypassed the sidecar", flush=True)
                report[f"turns_written_{key}"] = sum(
                    metric("memory_sidecar_turns_total", {"outcome": "written"})
                    for metric in (stack.sidecar_metric, stack.writer_metric)
                )
            finally:
                stack.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print()
    print_table(results)
    print_cpu_table(results, os.cpu_count() or 1)
    checks = target_checks(results)
    print_target_checks(checks)
    report["targets"] = [asdict(c) for c in checks]
    report["model_ms"] = args.model_ms
    report["statements"] = args.statements
    report["repeat_caches"] = args.repeat_caches
    report["tool_rounds"] = args.tool_rounds
    report["settings"] = args.set
    report["results"] = [asdict(r) for r in results]
    report["sidecar_means_ms"] = breakdowns
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
